"""Argument checks every op shares: a bad argument fails at construction, naming it and the
allowed range."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["BORDERS", "INTERPOLATIONS", "check_choice", "check_fill", "check_finite", "check_prob", "check_range",
           "check_size", "one_or_pair"]

INTERPOLATIONS = ("nearest", "bilinear", "bicubic")
BORDERS = ("constant", "reflect", "replicate", "wrap")


def one_or_pair(value: tuple[Any, Any]) -> Any:
    """A (low, high) range as an op's repr shows it: one value where low == high."""
    return value[0] if value[0] == value[1] else value


def check_prob(name: str, p: float) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"{name} must be a probability in [0, 1], got {p}")
    return p


def check_finite(name: str, value: Any) -> float:
    """value as a float, refusing NaN and infinities (they would make every output pixel NaN)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


def check_choice(name: str, value: str | None, allowed: Sequence[str], optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def check_range(name: str, value: Any, lo: float = -math.inf, hi: float = math.inf,
                symmetric_from: float | None = None) -> tuple[float, float]:
    """A (low, high) pair within [lo, hi], low <= high. A single number v means
    (symmetric_from - v, symmetric_from + v) when symmetric_from is given (then v >= 0)."""
    if isinstance(value, (int, float)):
        if symmetric_from is None:
            raise ValueError(f"{name} must be a (low, high) pair, got {value!r}")
        if math.isnan(value):
            raise ValueError(f"{name} must be a number, got nan")
        if value < 0:
            raise ValueError(f"{name} must be >= 0 when given as one number, got {value}")
        value = (symmetric_from - value, symmetric_from + value)
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or a (low, high) pair, got {value!r}") from None
    if math.isnan(low) or math.isnan(high):
        raise ValueError(f"{name} must be numbers, got ({low}, {high})")
    if not low <= high:
        raise ValueError(f"{name} range is out of order: ({low}, {high}); low must be <= high")
    if low < lo or high > hi:
        raise ValueError(f"{name} must lie within [{lo}, {hi}], got ({low}, {high})")
    return (low, high)


def check_size(name: str, size: Any, allow_fraction: bool = False) -> tuple[float, float]:
    """(height, width) from an int/float or a pair. Ints are pixels (> 0); floats in (0, 1] are
    fractions of each image's own size when allow_fraction."""
    if isinstance(size, (int, float)):
        size = (size, size)
    try:
        h, w = size
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or a (height, width) pair, got {size!r}") from None
    out = []
    for v in (h, w):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise ValueError(f"{name} entries must be numbers, got {v!r}")
        if isinstance(v, int):
            if v <= 0:
                raise ValueError(f"{name} must be positive pixels, got {v}")
        elif not allow_fraction:
            if v <= 0 or v != int(v):
                raise ValueError(f"{name} must be positive whole pixels, got {v}")
            v = int(v)
        elif not 0.0 < v <= 1.0:
            raise ValueError(f"{name}: a float is a fraction of the image size and must be in (0, 1], got {v}")
        out.append(v)
    return (out[0], out[1])


def check_fill(fill: Any) -> tuple[float, ...] | None:
    if fill is None:
        return None
    if isinstance(fill, (int, float)):
        fill = (fill,) * 3
    fill = tuple(float(v) for v in fill)
    if len(fill) == 1:
        fill = fill * 3
    if len(fill) != 3 or any(not 0.0 <= v <= 255.0 for v in fill):
        raise ValueError(f"fill must be one value or 3 values in [0, 255], got {fill}")
    return fill
