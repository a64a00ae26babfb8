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

import torch

from ..random import Draws
from ._base import ColorOp, Op, Params, check_prob, check_range

__all__ = ["ColorJitter", "RandomGrayscale", "Normalize"]

GREY = torch.tensor([0.299, 0.587, 0.114], dtype=torch.float64)
_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], dtype=torch.float64)
_YIQ_INV = torch.linalg.inv(_YIQ)


def identity(n: int) -> torch.Tensor:
    m = torch.zeros(n, 3, 4, dtype=torch.float64)
    m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
    return m


def compose(second: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """The affine map `second after first`, both [N, 3, 4]."""
    a = second[:, :, :3] @ first[:, :, :3]
    b = second[:, :, :3] @ first[:, :, 3:] + second[:, :, 3:]
    return torch.cat([a, b], 2)


def apply_to_mean(m: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """Mean colour after an affine map (exact: the map is affine)."""
    return (m[:, :, :3] @ means.unsqueeze(-1)).squeeze(-1) + m[:, :, 3]


def _blend_with_grey_matrix(s: torch.Tensor) -> torch.Tensor:
    """s * x + (1 - s) * grey(x)."""
    n = s.shape[0]
    m = torch.zeros(n, 3, 4, dtype=torch.float64)
    m[:, :, :3] = (1 - s).view(n, 1, 1) * GREY.view(1, 1, 3) + s.view(n, 1, 1) * torch.eye(3, dtype=torch.float64)
    return m


# the hue rotation in closed form: YIQ^-1 @ R(a) @ YIQ, with R turning the I-Q plane, is
# _HUE[0] + cos(a) _HUE[1] + sin(a) _HUE[2]
_HUE = torch.stack([_YIQ_INV @ torch.diag(torch.tensor(d, dtype=torch.float64)) @ _YIQ
                    for d in ((1.0, 0.0, 0.0), (0.0, 1.0, 1.0))]
                   + [_YIQ_INV @ torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]],
                                              dtype=torch.float64) @ _YIQ])


def _hue_linear(h: torch.Tensor) -> torch.Tensor:
    """[N, 3, 3]: the hue shift by h turns (the I-Q plane turned so that a positive shift
    moves hues the way HSV's H + h does)."""
    a = (2 * math.pi * h).view(-1, 1, 1)
    return _HUE[0] + torch.cos(a) * _HUE[1] + torch.sin(a) * _HUE[2]


def _hue_matrix(h: torch.Tensor) -> torch.Tensor:
    m = torch.zeros(h.shape[0], 3, 4, dtype=torch.float64)
    m[:, :, :3] = _hue_linear(h)
    return m


def _factor_range(name: str, value: float | Sequence[float]) -> tuple[float, float] | None:
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        if value == 0:
            return None
        return (max(0.0, 1.0 - value), 1.0 + value)
    lo, hi = check_range(name, value, 0.0)
    return None if lo == hi == 1.0 else (lo, hi)


class ColorJitter(ColorOp):
    """Random brightness, contrast, saturation and hue, in a random order per sample.

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
            if not 0 <= hue <= 0.5:
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

    def sample(self, draws: Draws, sizes: torch.Tensor) -> Params:
        n = len(draws)
        on = draws.bernoulli(0, self.p)
        factors = {}
        for k, name in enumerate(("brightness", "contrast", "saturation", "hue")):
            rng = getattr(self, name)
            base = 0.0 if name == "hue" else 1.0
            f = torch.full((n,), base, dtype=torch.float64) if rng is None else draws.uniform(1 + k, *rng).to(torch.float64)
            factors[name] = torch.where(on, f, torch.full_like(f, base))
        # a random order per sample: sort 4 uniform keys
        keys = draws.uniforms(range(5, 9))
        factors["order"] = keys.argsort(1)
        return factors

    def color(self, params: Params, means: torch.Tensor | None) -> torch.Tensor:
        n = params["brightness"].shape[0]
        eye = torch.eye(3, dtype=torch.float64)
        b, c, s = (params[k].view(n, 1, 1) for k in ("brightness", "contrast", "saturation"))
        # the linear parts of the four steps, [N, 4, 3, 3]; only contrast adds an offset,
        # (1 - c) * the grey level of the mean colour entering it
        linear = torch.stack([eye * b, eye * c, (1 - s) * GREY.view(1, 1, 3) + s * eye,
                              _hue_linear(params["hue"])], 1)
        mean = means.to(torch.float64) if means is not None else torch.zeros(n, 3, dtype=torch.float64)
        # [A | t | running mean]: every step maps the three the same way, x -> S x + offset
        state = torch.cat([eye.expand(n, 3, 3), torch.zeros(n, 3, 1, dtype=torch.float64), mean.view(n, 3, 1)], 2)
        rows = torch.arange(n)
        keep = (1 - params["contrast"]).view(n, 1)
        for pos in range(4):
            which = params["order"][:, pos]
            offset = torch.where((which == 1).view(n, 1), keep * (state[:, :, 4] @ GREY).view(n, 1), 0.0)
            state = linear[rows, which] @ state
            state[:, :, 3:] += offset.view(n, 1, 1)
        return state[:, :, :4].contiguous()


class RandomGrayscale(ColorOp):
    """Turn a sample grey (all three channels = 0.299 R + 0.587 G + 0.114 B) with probability p."""

    def __init__(self, p: float = 0.1) -> None:
        self.p = check_prob("p", p)

    def sample(self, draws: Draws, sizes: torch.Tensor) -> Params:
        return {"grey": draws.bernoulli(0, self.p)}

    def color(self, params: Params, means: torch.Tensor | None) -> torch.Tensor:
        g = params["grey"]
        s = torch.where(g, 0.0, 1.0).to(torch.float64)
        return _blend_with_grey_matrix(s)


class Normalize(Op):
    """(x - mean) / std per channel, with x in [0, 1] (torchvision's convention), at the end of
    the pointwise pass. Needs a float output dtype."""

    kind = "normalize"

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
        if len(mean) not in (1, 3) or len(std) != len(mean):
            raise ValueError(f"mean and std need 1 or 3 values each and the same count, got {mean}, {std}")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be positive, got {std}")
        self.mean, self.std = mean, std
