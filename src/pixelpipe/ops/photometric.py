"""Photometric ops that are affine maps of the colour: RandomInvert, ChannelShuffle, RGBShift.

Each is a colour op: it folds into the colour matrix of its stage and costs nothing in the
pointwise pass. The non-affine ones (posterize, solarize, equalize, ...) are pixel ops, in
pixelpipe.ops.levels."""

from __future__ import annotations

import numpy as np

from ..data.random import Draws
from .checks import check_prob, check_range
from .kinds import AppliedWithP, ColorOp, Op, Params

__all__ = ["ChannelShuffle", "RGBShift", "RandomInvert"]


class RandomInvert(AppliedWithP, ColorOp):
    """Invert the colours of each image (x -> 255 - x, as Pillow's ImageOps.invert and
    torchvision's RandomInvert) with probability p. A colour op: it folds into the pointwise
    pass with the other colour ops, at no cost of its own.

    Example: ``RandomInvert(0.2)``.
    """

    flag = "invert"

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        sign = np.where(params["invert"], -1.0, 1.0)
        m = np.zeros((sign.shape[0], 3, 4))
        m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = sign
        m[:, :, 3] = np.where(params["invert"], 255.0, 0.0)[:, None]
        return m


# the 6 orders of (R, G, B); order k takes output channel i from input channel _ORDERS[k][i]
_ORDERS = np.array([(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])


class ChannelShuffle(ColorOp):
    """Reorder the colour channels of each image, one of the 6 orders of (R, G, B) drawn
    uniformly per image (the identity among them, as albumentations' ChannelShuffle), with
    probability p. A permutation matrix: it folds into the colour matrix.

    Example: ``ChannelShuffle(p=0.2)``.
    """

    draws = 2

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        order = draws.choice_np(1, 6)
        return {"order": np.where(draws.bernoulli_np(0, self.p), order, 0)}

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        src = _ORDERS[params["order"]]  # [N, 3]
        m = np.zeros((src.shape[0], 3, 4))
        rows = np.arange(src.shape[0])[:, None]
        m[rows, np.arange(3)[None, :], src] = 1.0
        return m


class RGBShift(ColorOp):
    """Add a per-image offset to each colour channel (albumentations' RGBShift), with
    probability p. An offset per channel: it folds into the colour matrix.

    Args:
        r_shift, g_shift, b_shift: in grey levels (0..255 units); a number v draws the
            channel's offset uniform in (-v, v), a (low, high) pair in that range.
        p: probability that an image is shifted.

    Values are clamped to [0, 255] once, after the stage's colour ops. Example:
    ``RGBShift(20, 20, 20, p=0.5)``.
    """

    draws = 4

    def __init__(self, r_shift: float | tuple[float, float] = 20, g_shift: float | tuple[float, float] = 20,
                 b_shift: float | tuple[float, float] = 20, p: float = 0.5) -> None:
        self.r_shift = check_range("r_shift", r_shift, -255.0, 255.0, symmetric_from=0.0)
        self.g_shift = check_range("g_shift", g_shift, -255.0, 255.0, symmetric_from=0.0)
        self.b_shift = check_range("b_shift", b_shift, -255.0, 255.0, symmetric_from=0.0)
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        on = draws.bernoulli_np(0, self.p)
        shift = np.stack([draws.uniform_np(1 + k, *r).astype(np.float64)
                          for k, r in enumerate((self.r_shift, self.g_shift, self.b_shift))], 1)
        return {"shift": np.where(on[:, None], shift, 0.0)}

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        shift = params["shift"]
        m = np.zeros((shift.shape[0], 3, 4))
        m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
        m[:, :, 3] = shift
        return m
