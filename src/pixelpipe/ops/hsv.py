"""RandomHSV: hue, saturation and value jitter in true HSV, a pixel op (HSV is not an affine
map of RGB, so it cannot fold into the colour matrix as ColorJitter does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from .checks import check_finite, check_prob, check_range
from .kinds import Op, Params, PixelOp
from .pixelwise import column

__all__ = ["RandomHSV", "hsv_to_rgb", "rgb_to_hsv"]


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """[N, 3, H, W] RGB in [0, 1] -> HSV in [0, 1] (hue in turns), as torchvision's _rgb2hsv
    and Python's colorsys: grey pixels get hue 0 and saturation 0."""
    r, g, b = x.unbind(1)
    maxc, minc = x.amax(1), x.amin(1)
    span = maxc - minc
    grey = span == 0
    one = torch.ones_like(maxc)
    s = span / torch.where(maxc == 0, one, maxc)
    d = torch.where(grey, one, span)
    rc, gc, bc = (maxc - r) / d, (maxc - g) / d, (maxc - b) / d
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(grey, torch.zeros_like(h), torch.remainder(h / 6.0, 1.0))
    return torch.stack([h, s, maxc], 1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """[N, 3, H, W] HSV in [0, 1] -> RGB: channel c = v - v s clamp(min(k, 4 - k), 0, 1),
    k = (n + 6 h) mod 6 with n = 5, 3, 1 for R, G, B (the sector formula of torchvision's
    _hsv2rgb and colorsys, written without a branch per sector)."""
    h, s, v = x.unbind(1)
    out = []
    for n in (5.0, 3.0, 1.0):
        k = torch.remainder(n + 6.0 * h, 6.0)
        out.append(v - v * s * torch.minimum(k, 4.0 - k).clamp(0.0, 1.0))
    return torch.stack(out, 1)


def _factors(name: str, value: float | Sequence[float]) -> tuple[float, float]:
    if isinstance(value, (int, float)):
        f = check_finite(name, value)
        if f < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        return (max(0.0, 1.0 - f), 1.0 + f)
    return check_range(name, value, 0.0)


class RandomHSV(PixelOp):
    """Jitter hue, saturation and value in HSV, per image, with probability p.

    Args:
        hue: shift of the hue in turns: h in [0, 0.5] draws uniform in (-h, h), or a (low,
            high) range within [-0.5, 0.5].
        saturation: factor on S: f draws uniform in (max(0, 1 - f), 1 + f), or a (low, high)
            range (>= 0); S is clamped to [0, 1].
        value: factor on V (the largest channel), as saturation; V is clamped to [0, 1].
        p: probability that an image is changed.

    Each pixel goes RGB -> HSV -> RGB (torchvision's adjust_hue conversion): H + shift
    modulo 1, S * saturation, V * value. With saturation and value at 1 it is torchvision's
    adjust_hue (tested against colorsys). How it differs from ColorJitter: ColorJitter is an
    affine colour map folded into the pointwise pass for free; its hue turns the chroma plane
    of YIQ (keeping the grey level) and its saturation blends with the grey image, where HSV's
    hue shift keeps the largest channel and HSV's saturation scales toward it, not toward
    grey. RandomHSV costs a pass over the image of its own (a pixel op); use it where HSV's
    definition matters (albumentations' HueSaturationValue, DALI's hsv, YOLO's HSV jitter,
    whose gains are factors like these). Keep it before Normalize: it expects values in
    [0, 1] and three channels (a grey output has no hue: the op leaves it as it is).

    Example (YOLOv5's hsv_h=0.015, hsv_s=0.7, hsv_v=0.4): ``RandomHSV(0.015, 0.7, 0.4, p=1.0)``.
    """

    draws = 4

    def __init__(self, hue: float | Sequence[float] = 0.0, saturation: float | Sequence[float] = 0.0,
                 value: float | Sequence[float] = 0.0, p: float = 0.5) -> None:
        if isinstance(hue, (int, float)):
            h = check_finite("hue", hue)
            if not 0.0 <= h <= 0.5:
                raise ValueError(f"hue must be in [0, 0.5] turns, got {hue}")
            self.hue = (-h, h)
        else:
            self.hue = check_range("hue", hue, -0.5, 0.5)
        self.saturation = _factors("saturation", saturation)
        self.value = _factors("value", value)
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        on = draws.bernoulli_np(0, self.p)
        keep = lambda v, base: np.where(on, v.astype(np.float64), base)
        return {"hue": keep(draws.uniform_np(1, *self.hue), 0.0),
                "saturation": keep(draws.uniform_np(2, *self.saturation), 1.0),
                "value": keep(draws.uniform_np(3, *self.value), 1.0), "on": on}

    def _fields(self) -> dict[str, Any]:
        return {"hue": self.hue, "saturation": self.saturation, "value": self.value, "p": self.p}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        if x.shape[0] == 0 or x.shape[1] != 3:
            return x
        hsv = rgb_to_hsv(x.clamp(0.0, 1.0))
        h = torch.remainder(hsv[:, 0:1] + column(params["hue"], x), 1.0)
        s = (hsv[:, 1:2] * column(params["saturation"], x)).clamp_(0.0, 1.0)
        v = (hsv[:, 2:3] * column(params["value"], x)).clamp_(0.0, 1.0)
        out = hsv_to_rgb(torch.cat([h, s, v], 1))
        return torch.where(column(params["on"], x), out, x)
