"""Photometric ops that are not affine maps of the colour, so pixel ops: RandomPosterize,
RandomSolarize, RandomAutocontrast, RandomEqualize, RandomGamma.

Each follows Pillow's ImageOps (and torchvision's v2 functional of the same name) on the
image's grey levels. The ops get the warped image as floats in [0, 1]; posterize and equalize
work on the grey levels round(255 x) that image stands for, so an image that came in as uint8
and was not resampled gets exactly Pillow's uint8 result. Keep them before Normalize: they
expect values in [0, 1].
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from .checks import check_prob, check_range, one_or_pair
from .kinds import AppliedWithP, Op, Params, PixelOp
from .levels_cpu import equalize_cpu, fast, posterize_cpu, solarize_cpu
from .pixelwise import column, grey_levels, where_on

__all__ = ["RandomAutocontrast", "RandomEqualize", "RandomGamma", "RandomPosterize", "RandomSolarize", "autocontrast",
           "equalize", "equalize_reference", "posterize", "posterize_mask", "posterize_masked", "posterize_reference",
           "solarize", "solarize_above", "solarize_levels", "solarize_reference"]


def _pair(name: str, value: Any, lo: float, hi: float) -> tuple[float, float]:
    """A number v as (v, v), or a (low, high) pair, within [lo, hi]."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value, value)
    return check_range(name, value, lo, hi)


class RandomPosterize(PixelOp):
    """Keep the `bits` highest bits of each channel's grey level (Pillow's ImageOps.posterize,
    torchvision's RandomPosterize on uint8 images) with probability p.

    Args:
        bits: bits kept, 0..8; a (low, high) pair draws a whole number per image, uniform in
            low..high inclusive (albumentations' num_bits range).
        p: probability that an image is posterized.

    The image's grey levels round(255 x) are masked, so a uint8 image that was not resampled
    gets exactly Pillow's result (tested). Example: ``RandomPosterize(4, p=0.3)``.
    """

    draws = 2

    def __init__(self, bits: int | tuple[int, int], p: float = 0.5) -> None:
        lo, hi = _pair("bits", bits, 0, 8)
        if lo != int(lo) or hi != int(hi):
            raise ValueError(f"bits must be whole numbers in [0, 8], got {bits!r}")
        self.bits = (int(lo), int(hi))
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"bits": one_or_pair(self.bits), "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 and self.bits[0] == self.bits[1] else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        lo, hi = self.bits
        bits = np.minimum(lo + np.floor(draws.uniform_np(1) * (hi - lo + 1)), hi).astype(np.int64)
        return {"bits": bits, "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        return where_on(params["on"], posterize(x, params["bits"]), x)


class RandomSolarize(PixelOp):
    """Invert every value at or above a threshold: x -> 1 - x where x >= threshold (Pillow's
    ImageOps.solarize, torchvision's RandomSolarize), with probability p.

    Args:
        threshold: in [0, 1] image units (x / 255 of a uint8 image: Pillow's 128 is 128 / 255);
            a (low, high) pair draws one threshold per image, uniform in that range.
        p: probability that an image is solarized.

    A value within a thousandth of a grey level of the threshold counts as reaching it, so a
    uint8 level equal to the threshold is inverted, as Pillow does, whatever the float
    rounding of the two. Example: ``RandomSolarize(0.5, p=0.2)`` (SimCLR / BYOL).
    """

    draws = 2

    def __init__(self, threshold: float | tuple[float, float], p: float = 0.5) -> None:
        if isinstance(threshold, (int, float)) and threshold > 1:
            raise ValueError(f"threshold must be in [0, 1] image units (x / 255), got {threshold}: "
                             f"for Pillow's {threshold} on uint8 images give {threshold}/255")
        self.threshold = _pair("threshold", threshold, 0.0, 1.0)
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"threshold": one_or_pair(self.threshold), "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 and self.threshold[0] == self.threshold[1] else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        threshold = draws.uniform_np(1, *self.threshold).astype(np.float64)
        return {"threshold": threshold, "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        return solarize(x, params["threshold"], params["on"])


class RandomAutocontrast(AppliedWithP, PixelOp):
    """Stretch each channel of each image to the full range: (x - min) / (max - min), min and
    max of that channel over the image (torchvision's autocontrast on float images; Pillow's
    ImageOps.autocontrast with cutoff 0), with probability p. A channel of one value is kept.

    The minimum and maximum are of the image this op gets: the stage's output, filled borders
    included. Pillow maps through a table of truncated values where this op keeps the exact
    ratio, so a uint8 output differs from Pillow's by at most one grey level (tested).

    Example: ``RandomAutocontrast(p=0.3)``.
    """

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        return where_on(params["on"], autocontrast(x), x)


class RandomEqualize(AppliedWithP, PixelOp):
    """Equalize the histogram of each channel of each image (Pillow's ImageOps.equalize,
    torchvision's RandomEqualize), with probability p.

    Per image and channel: the histogram of the grey levels round(255 x) (256 bins), and the
    table level i -> (step // 2 + number of values below i) // step, step = (number of values
    - count of the highest level present) // 255; a channel where step is 0 is kept. Exactly
    Pillow's result on uint8 images that were not resampled (tested). On a GPU the histograms
    are one reduction over the batch, the tables one gather; on the CPU numpy counts and looks
    up each channel (levels_cpu: the same numbers, faster there).

    Example: ``RandomEqualize(p=0.2)``.
    """

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        if x.numel() == 0:
            return x
        return where_on(params["on"], equalize(x), x)


class RandomGamma(PixelOp):
    """Gamma correction: gain * x ** gamma, clamped to [0, 1] (torchvision's adjust_gamma on
    float images), gamma drawn per image, with probability p.

    Args:
        gamma: a (low, high) range of exponents (> 0), drawn uniform per image (albumentations'
            RandomGamma(gamma_limit=(80, 120)) is (0.8, 1.2)); one number is a fixed gamma.
        gain: the factor after the power (torchvision's gain).
        p: probability that an image is corrected.

    Example: ``RandomGamma((0.7, 1.5), p=0.5)``.
    """

    draws = 2

    def __init__(self, gamma: float | tuple[float, float] = (0.8, 1.2), gain: float = 1.0, p: float = 0.5) -> None:
        self.gamma = _pair("gamma", gamma, 0.0, math.inf)
        if self.gamma[0] <= 0:
            raise ValueError(f"gamma must be > 0, got {gamma!r}")
        self.gain = float(gain)
        if not math.isfinite(self.gain) or self.gain < 0:
            raise ValueError(f"gain must be a finite number >= 0, got {gain}")
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"gamma": one_or_pair(self.gamma), "gain": self.gain, "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 and self.gamma[0] == self.gamma[1] else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        gamma = draws.uniform_np(1, *self.gamma).astype(np.float64)
        return {"gamma": gamma, "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        out = x.clamp(min=0.0).pow(column(params["gamma"], x))
        if self.gain != 1.0:
            out = out * self.gain
        return where_on(params["on"], out.clamp_(0.0, 1.0), x)


# ------------------------------------------------------------------ the operations, on [N, C, H, W]
# Each runs its CPU form (levels_cpu, the same numbers in fewer and cheaper torch calls) on a
# float32 CPU tensor and its reference, the twin, on any other.
def posterize(x: torch.Tensor, bits: np.ndarray) -> torch.Tensor:
    """The grey levels round(255 x) of each sample with only its `bits` (numpy int [N], 0..8)
    highest bits kept, / 255."""
    return posterize_cpu(x, bits) if fast(x) else posterize_reference(x, bits)


def posterize_reference(x: torch.Tensor, bits: np.ndarray) -> torch.Tensor:
    return posterize_masked(x, column(posterize_mask(bits), x, torch.int32))


def posterize_mask(bits: np.ndarray) -> np.ndarray:
    """int64 [N]: the mask of the `bits` highest bits of a grey level (bits = 0 keeps nothing,
    8 everything)."""
    return (0xFF << (8 - np.asarray(bits, dtype=np.int64))) & 0xFF


def posterize_masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The grey levels of x and'ed with `mask` (int32 [N, 1, 1, 1] on x's device), / 255."""
    # int32 levels: the same numbers as int64 in half the bytes per pass
    return (grey_levels(x, torch.int32) & mask).to(x.dtype) * (1.0 / 255.0)


def solarize(x: torch.Tensor, threshold: np.ndarray, on: np.ndarray) -> torch.Tensor:
    """1 - x where x >= threshold (numpy [N], image units, with RandomSolarize's thousandth of a
    grey level of slack) in the samples whose flag `on` is set, x elsewhere."""
    at = solarize_levels(threshold)
    return solarize_cpu(x, at, on) if fast(x) else solarize_reference(x, at, on)


def solarize_levels(threshold: np.ndarray) -> np.ndarray:
    """float64 [N]: thresholds in image units as the grey levels solarize compares with, less
    RandomSolarize's thousandth of a level of slack."""
    return np.asarray(threshold, dtype=np.float64) * 255.0 - 1e-3


def solarize_reference(x: torch.Tensor, at: np.ndarray, on: np.ndarray) -> torch.Tensor:
    on = np.asarray(on, dtype=bool)
    if on.all():
        return solarize_above(x, column(at, x))
    flip = (x * 255.0 >= column(at, x)) & column(on, x)
    return torch.where(flip, 1.0 - x, x)


def solarize_above(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """1 - x where x * 255 >= at (x's dtype, [N, 1, 1, 1] on x's device), x elsewhere."""
    return torch.where(x * 255.0 >= at, 1.0 - x, x)


def autocontrast(x: torch.Tensor) -> torch.Tensor:
    """Each channel stretched to [0, 1] by its minimum and maximum; a channel of one value kept.
    One form for every device: its passes are plain arithmetic."""
    n, c, h, w = x.shape
    lo, hi = (v.view(n, c, 1, 1) for v in x.reshape(n, c, h * w).aminmax(dim=-1))  # one pass for both
    flat = hi <= lo  # a channel of one value: kept (x - 0) / 1
    span = torch.where(flat, 1.0, hi - lo)
    # (x - lo) / span, the quotient divided in place: max -> exactly 1
    return torch.sub(x, torch.where(flat, 0.0, lo)).div_(span).clamp_(0.0, 1.0)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Every channel of every sample equalized (RandomEqualize's rule)."""
    return equalize_cpu(x) if fast(x) else equalize_reference(x)


def equalize_reference(x: torch.Tensor) -> torch.Tensor:
    n, c = x.shape[:2]
    levels = grey_levels(x).view(n * c, -1)  # [NC, HW]
    # scatter_add_, not bincount: CUDA's bincount reads the largest value back to the host
    ones = torch.ones(1, 1, dtype=torch.int64, device=x.device).expand_as(levels)  # no tensor of ones
    hist = torch.zeros(n * c, 256, dtype=torch.int64, device=x.device).scatter_add_(1, levels, ones)
    present = hist > 0
    top = 255 - present.flip(1).to(torch.int8).argmax(1, keepdim=True)  # highest level present
    total = levels.shape[1]
    step = (total - hist.gather(1, top)) // 255  # [NC, 1]
    below = hist.cumsum(1) - hist  # values below each level
    table = ((step // 2 + below) // step.clamp_min(1)).clamp_(max=255)
    keep = step == 0
    table = torch.where(keep, torch.arange(256, device=x.device).view(1, 256), table)
    # the table's 256 values made float once, then gathered: the same numbers as gathering the
    # levels and converting each value
    return (table.to(x.dtype) * (1.0 / 255.0)).gather(1, levels).view_as(x)
