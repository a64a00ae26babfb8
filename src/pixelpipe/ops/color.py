"""Colour ops as per-sample affine colour matrices: ColorJitter, RandomGrayscale, Normalize.

Every colour op is an affine map of RGB (in 0..255 units), so a chain of them folds into one
3x4 matrix per sample, applied in the single pointwise pass. Definitions follow torchvision:
- brightness b: x * b;
- contrast c: c * x + (1 - c) * mean grey of the image entering the op;
- saturation s: s * x + (1 - s) * grey(x), grey = 0.299 R + 0.587 G + 0.114 B;
- hue h (in [-0.5, 0.5] turns): torchvision shifts H in HSV, which is not affine. We rotate the
  chroma plane of YIQ by 2*pi*h about the grey axis instead: grey levels are kept exactly and
  saturated colours move round the hue circle; the difference to torchvision is measured in
  docs/design.md.
Two differences from torchvision come from fusing: values are clamped to [0, 255] once after
the whole chain rather than after each op, and contrast's mean is that of the warped output
image (colour ops run after the geometry of their stage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from .checks import check_finite, check_prob, check_range
from .kinds import AppliedWithP, ColorOp, Op, Params

__all__ = ["ColorJitter", "RandomGrayscale", "Normalize"]

GREY = torch.tensor([0.299, 0.587, 0.114], dtype=torch.float64)
_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], dtype=torch.float64)
_YIQ_INV = torch.linalg.inv(_YIQ)


def identity(n: int) -> np.ndarray:
    """[N, 3, 4] identity colour maps (numpy float64)."""
    m = np.zeros((n, 3, 4))
    m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
    return m


def compose(second: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The affine maps `second after first`, [..., 3, 4] numpy (leading axes broadcast)."""
    out = second[..., :3] @ first
    out[..., 3] += second[..., 3]
    return out


def apply_to_mean(m: np.ndarray, means: np.ndarray) -> np.ndarray:
    """Mean colours [..., 3] after affine maps [..., 3, 4] (exact: the maps are affine)."""
    return (m[..., :3] @ means[..., None])[..., 0] + m[..., 3]


# the hue rotation in closed form: YIQ^-1 @ R(a) @ YIQ, with R turning the I-Q plane (so that a
# positive shift moves hues the way HSV's H + h does), is _HUE[0] + cos(a) _HUE[1] + sin(a) _HUE[2]
_HUE = np.stack([(_YIQ_INV @ torch.diag(torch.tensor(d, dtype=torch.float64)) @ _YIQ).numpy()
                 for d in ((1.0, 0.0, 0.0), (0.0, 1.0, 1.0))]
                + [(_YIQ_INV @ torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]],
                                            dtype=torch.float64) @ _YIQ).numpy()])
_GREY_NP = GREY.numpy()
# the hue basis and grey weights as C-contiguous arrays, for planner.c (pixelpipe.plan.fast)
HUE_BASIS, GREY_WEIGHTS = np.ascontiguousarray(_HUE), np.ascontiguousarray(_GREY_NP)
_EYE = np.eye(3)


def _grey_blend(s: np.ndarray) -> np.ndarray:
    """[N, 3, 3]: x -> s * x + (1 - s) * grey(x), per sample."""
    return (1 - s)[:, None, None] * _GREY_NP + s[:, None, None] * _EYE


def _factor_range(name: str, value: float | Sequence[float]) -> tuple[float, float] | None:
    if isinstance(value, (int, float)):
        value = check_finite(name, value)
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        if value == 0:
            return None
        return (max(0.0, 1.0 - value), 1.0 + value)
    lo, hi = check_range(name, value, 0.0)
    return None if lo == hi == 1.0 else (lo, hi)


class ColorJitter(ColorOp):
    """Random brightness, contrast, saturation and hue (the order of the four does not matter
    with pixelpipe's one clamp after the chain; see color()).

    Args:
        brightness, contrast, saturation: f -> factor uniform in (max(0, 1 - f), 1 + f), or a
            (low, high) range of factors (>= 0).
        hue: h in [0, 0.5] -> shift uniform in (-h, h) turns, or a range within [-0.5, 0.5].
        p: probability that a sample is jittered at all.
    """

    def __init__(self, brightness: float | Sequence[float] = 0, contrast: float | Sequence[float] = 0,
                 saturation: float | Sequence[float] = 0, hue: float | Sequence[float] = 0, p: float = 1.0) -> None:
        self.brightness = _factor_range("brightness", brightness)
        self.contrast = _factor_range("contrast", contrast)
        self.saturation = _factor_range("saturation", saturation)
        if isinstance(hue, (int, float)):
            if not 0 <= check_finite("hue", hue) <= 0.5:
                raise ValueError(f"hue must be in [0, 0.5], got {hue}")
            self.hue = None if hue == 0 else (-float(hue), float(hue))
        else:
            self.hue = check_range("hue", hue, -0.5, 0.5)
        self.p = check_prob("p", p)

    @property
    def needs_mean(self) -> bool:  # type: ignore[override]
        return self.contrast is not None

    def _fields(self) -> dict[str, Any]:
        return {"brightness": self.brightness or 0, "contrast": self.contrast or 0,
                "saturation": self.saturation or 0, "hue": self.hue or 0, "p": self.p}

    stacked_means = True  # color() takes means [K, N, 3] too: the chain at K mean colours at once
    draws = 5
    PARAMS = ("brightness", "contrast", "saturation", "hue")

    def eval_form(self, style: str) -> list[Op]:
        return []

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """float64 [4, 2] factor ranges and int64 [4] whether each is drawn (planner.c's form)."""
        ranges = np.array([getattr(self, k) or (0.0, 0.0) for k in self.PARAMS], dtype=np.float64)
        return ranges, np.array([getattr(self, k) is not None for k in self.PARAMS], dtype=np.int64)

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        n = len(draws)
        on = draws.bernoulli_np(0, self.p)
        factors = {}
        for k, name in enumerate(("brightness", "contrast", "saturation", "hue")):
            rng = getattr(self, name)
            base = 0.0 if name == "hue" else 1.0
            f = draws.uniform_np(1 + k, *rng).astype(np.float64) if rng is not None else np.full(n, base)
            factors[name] = np.where(on, f, base)
        return factors

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        """[N, 3, 4], or [K, N, 3, 4] for means [K, N, 3].

        With one clamp after the whole chain the four steps commute, so no order is drawn:
        brightness and contrast scale by b and c; saturation and the hue rotation act on the
        I-Q plane of YIQ only (they keep Y, the grey level, and map the grey axis onto
        itself), where they commute; contrast's offset (1 - c) * grey(mean entering it) lies
        on the grey axis, which saturation and hue keep, and is scaled by b whether
        brightness comes before contrast (through the mean) or after. So the chain is
        x -> b c S(s) H(h) x + b (1 - c) grey(mean) (1, 1, 1), whatever the order.
        """
        # numpy, closed form: a dozen small ops per batch on the planning thread
        b, c, s, h = (params[k] for k in ("brightness", "contrast", "saturation", "hue"))
        n = b.shape[0]
        stacked = means is not None and means.ndim == 3
        mu = np.zeros((1, n, 3)) if means is None else means
        mu = mu if stacked else mu.reshape(1, n, 3)
        a = 2 * math.pi * h
        # S(s) H(h) = YIQ^-1 diag(1, s, s) R(a) YIQ, and b c scales it
        scale = (b * c)[:, None, None]
        linear = scale * (_HUE[0] + (s * np.cos(a))[:, None, None] * _HUE[1] + (s * np.sin(a))[:, None, None] * _HUE[2])
        out = np.empty((mu.shape[0], n, 3, 4))
        out[..., :3] = linear
        # the grey of the means written out, not `mu @ _GREY_NP`: a matmul may round through BLAS,
        # which planner.c could not repeat bit for bit
        grey = (mu[..., 0] * _GREY_NP[0] + mu[..., 1] * _GREY_NP[1]) + mu[..., 2] * _GREY_NP[2]
        out[..., 3] = (b * (1 - c) * grey)[..., None]
        return out if stacked else out[0]


class RandomGrayscale(AppliedWithP, ColorOp):
    """Turn a sample grey (all three channels = 0.299 R + 0.587 G + 0.114 B) with probability p."""

    flag = "grey"

    def __init__(self, p: float = 0.1) -> None:
        super().__init__(p)

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        keep = np.where(params["grey"], 0.0, 1.0)
        m = np.zeros((keep.shape[0], 3, 4))
        m[:, :, :3] = _grey_blend(keep)
        return m


class Normalize(Op):
    """(x - mean) / std per channel, with x in [0, 1] (torchvision's convention), at the end of
    the pointwise pass. Needs a float output dtype."""

    kind = "normalize"
    deterministic = True

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        mean = tuple(check_finite("mean", v) for v in mean)
        std = tuple(check_finite("std", v) for v in std)
        if len(mean) not in (1, 3) or len(std) != len(mean):
            raise ValueError(f"mean and std need 1 or 3 values each and the same count, got {mean}, {std}")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be positive, got {std}")
        self.mean, self.std = mean, std
