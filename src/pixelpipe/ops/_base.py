"""The flat op protocol and the argument checks every op shares.

An op never touches pixels. It *samples* per-sample parameters from a `Draws` and states its
contribution: a geometric op a forward 3x3 matrix (input pixel coordinates -> output pixel
coordinates) plus the output size; a colour op a 3x4 affine colour matrix; a Lambda a function
on the whole tensor. Parameters, sizes and matrices are numpy float64 arrays with one row per
sample: planning runs on the host once per batch, on a few hundred numbers, where each torch
call on the CPU costs more than the arithmetic (a millisecond per batch on a 16-core GPU host);
torch is for pixels (`Warp` hands a user's function tensors). The planner (pixelpipe.plan)
folds these into one warp and one pointwise pass. Coordinates are continuous: pixel (row i,
column j) covers [j, j+1) x [i, i+1), its centre is (j + 0.5, i + 0.5); matrices act on column
vectors (x, y, 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import native
from ..data.random import Draws

INTERPOLATIONS = ("nearest", "bilinear", "bicubic")
BORDERS = ("constant", "reflect", "replicate", "wrap")

Params = dict[str, np.ndarray]


class Op:
    """Base of every op. `kind` is "geometry", "color" or "tensor"."""

    kind: str = "op"
    # how many leading draws (0..draws-1) sample() uses: a stage hashes them for all its ops in
    # one evaluation (`random.op_blocks`); draws beyond are hashed when asked for
    draws: int = 0
    # True: the op's C path (pixelpipe.native) hashes its own draws from the batch's prefix
    native_draws: bool = False

    def block_draws(self) -> int:
        """How many leading draws the stage hashes for this op up front: `draws`, or 0 when the
        op's C path runs and hashes its own (`native_draws`)."""
        return 0 if self.native_draws and native.library() is not None else self.draws

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        """Draw this op's per-sample parameters. sizes: float64 [N, 2] (height, width)."""
        return {}

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._fields().items())
        return f"{type(self).__name__}({args})"


class GeometryOp(Op):
    """A geometric op: a per-sample forward matrix and output size.

    `interpolation`, `border` and `fill` left as None take the stage's values (bilinear,
    "constant", 0); ops with different explicit values are resampled in separate passes.
    """

    kind = "geometry"
    interpolation: str | None = None
    border: str | None = None
    fill: tuple[float, ...] | None = None

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (matrix float64 [N, 3, 3], output sizes float64 [N, 2] of (height, width))."""
        raise NotImplementedError

    def plan(self, draws: Draws, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """transform(sample(draws, sizes), sizes): what a stage asks of a geometric op per batch.
        Ops with a path in the C planner (pixelpipe.native) do both in one call there."""
        return self.transform(self.sample(draws, sizes), sizes)


class ColorOp(Op):
    """A colour op: a per-sample affine colour transform on RGB in 0..255 units."""

    kind = "color"

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        """Return float64 [N, 3, 4]: out = A @ rgb + b. `means` ([N, 3], the per-sample mean
        colour of the image entering this op) is given to ops with `needs_mean = True`."""
        raise NotImplementedError

    needs_mean: bool = False
    # True: color() also takes means [K, N, 3] (K mean colours per sample) and returns
    # [K, N, 3, 4]; otherwise the planner tiles the parameters K times and calls it on K * N rows
    stacked_means: bool = False


# ----------------------------------------------------------------------------- argument checks
def check_prob(name: str, p: float) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"{name} must be a probability in [0, 1], got {p}")
    return p


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
        if value < 0:
            raise ValueError(f"{name} must be >= 0 when given as one number, got {value}")
        value = (symmetric_from - value, symmetric_from + value)
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or a (low, high) pair, got {value!r}") from None
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
        if isinstance(v, bool) or not isinstance(v, (int, float)):
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


# ----------------------------------------------------------------------------- matrix helpers
def affine(n: int, a: Any = 1.0, b: Any = 0.0, tx: Any = 0.0, c: Any = 0.0, d: Any = 1.0,
           ty: Any = 0.0) -> np.ndarray:
    """float64 [N, 3, 3] matrices [[a, b, tx], [c, d, ty], [0, 0, 1]] from per-sample numpy
    arrays [N] or numbers."""
    m = np.zeros((n, 3, 3))
    m[:, 0, 0], m[:, 0, 1], m[:, 0, 2] = a, b, tx
    m[:, 1, 0], m[:, 1, 1], m[:, 1, 2] = c, d, ty
    m[:, 2, 2] = 1.0
    return m


def host(t: Any) -> np.ndarray:
    """Per-sample values as a float64 numpy array: a tensor (any device) or an array (no copy
    when it is float64 already)."""
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().to(torch.float64).numpy()
    return np.asarray(t, dtype=np.float64)
