"""Photometric ops that are affine maps of the colour: RandomInvert."""

from __future__ import annotations

import numpy as np

from ..data.random import Draws
from .checks import check_prob
from .kinds import ColorOp, Op, Params

__all__ = ["RandomInvert"]


class RandomInvert(ColorOp):
    """Invert the colours of each image (x -> 255 - x, as Pillow's ImageOps.invert and
    torchvision's RandomInvert) with probability p. A colour op: it folds into the pointwise
    pass with the other colour ops, at no cost of its own.

    Example: ``RandomInvert(0.2)``.
    """

    draws = 1

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        """Inverted with probability 1 is no random choice: kept."""
        return [self] if self.p == 1.0 else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        return {"invert": draws.bernoulli_np(0, self.p)}

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        sign = np.where(params["invert"], -1.0, 1.0)
        m = np.zeros((sign.shape[0], 3, 4))
        m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = sign
        m[:, :, 3] = np.where(params["invert"], 255.0, 0.0)[:, None]
        return m
