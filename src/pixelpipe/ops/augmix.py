"""AugMix (Hendrycks et al. 2020; torchvision's AugMix), a pixel op.

AugMix blends an image with several chains of operations applied to it, each chain with its
own shears, translations and rotations: that is several warps of one sample, which no single
matrix describes, so AugMix cannot fold into the stage's warp as the other policies do. It runs
on the warped image as a pixel op; its geometric operations resample that image with a
bilinear per-sample affine warp (torch's affine_grid and grid_sample, black outside), as
torchvision's AugMix does (bilinear by default), and boxes cannot follow (AugMix is for
classification, as in torchvision).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.random import Draws
from ..data.transfer import to_device
from .augment_space import AUGMIX_COLOUR, AUGMIX_SPACE, GeometricPrimitive, primitive
from .checks import check_prob
from .kinds import Op, Params, PixelOp
from .mixing import _BETA_DRAWS, _TRIES, _gamma_np, beta_np
from .structure import inner_draws

__all__ = ["AugMix", "affine_warp"]

_GAMMA_DRAWS = 3 * _TRIES + 1  # the uniforms of one Gamma variate (mixing._gamma_np)
_MAX_DEPTH = 3  # torchvision's random depth is 1..3


def affine_warp(x: torch.Tensor, matrices: np.ndarray) -> torch.Tensor:
    """x [N, C, H, W] resampled bilinearly by per-sample forward matrices (float64 [N, 3, 3],
    input pixel coordinates -> output, pixelpipe's convention), black outside the image."""
    n, _, h, w = x.shape
    scale = np.array([[2.0 / w, 0.0, -1.0], [0.0, 2.0 / h, -1.0], [0.0, 0.0, 1.0]])
    # affine_grid's theta maps output to input in [-1, 1] coordinates (align_corners=False:
    # pixel centres at (2 j + 1) / w - 1, the continuous coordinate x at 2 x / w - 1)
    theta = scale @ np.linalg.inv(matrices) @ np.linalg.inv(scale)
    t = to_device(np.ascontiguousarray(theta[:, :2].astype(np.float32)), x.device)
    grid = F.affine_grid(t.to(x.dtype), [n, x.shape[1], h, w], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class AugMix(PixelOp):
    """AugMix: per sample, `mixture_width` chains of 1 to 3 operations (or `chain_depth`), each
    operation chosen uniformly among AugMix's (ShearX, ShearY, TranslateX, TranslateY, Rotate,
    Posterize, Solarize, AutoContrast, Equalize, and with all_ops Brightness, Color, Contrast,
    Sharpness) at a magnitude bin uniform in 0..severity-1 of 10, signed ones negated with
    probability 1/2; the image becomes m x + (1 - m) sum_c w_c chain_c(x), m ~ Beta(alpha,
    alpha) and w ~ Dirichlet(alpha, ..., alpha), drawn per sample (torchvision's AugMix), with
    probability p.

    Args:
        severity: 1..10, the highest magnitude bin plus one.
        mixture_width: chains per sample.
        chain_depth: operations per chain; -1 draws 1..3 per chain and sample.
        alpha: the Beta and Dirichlet parameter.
        all_ops: include the colour operations (torchvision's default).
        p: probability that a sample is mixed.

    A pixel op: it runs after the stage's warp, its chains' geometry by a bilinear warp of the
    float image (see the module docstring). Keep it before Normalize. Example:
    ``[RandomResizedCrop(224), RandomFlip(), AugMix(), Normalize(...)]``.
    """

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1, alpha: float = 1.0,
                 all_ops: bool = True, p: float = 1.0) -> None:
        whole = lambda v: isinstance(v, int) and not isinstance(v, bool)
        if not whole(severity) or not 1 <= severity <= 10:
            raise ValueError(f"severity must be a whole number in [1, 10], got {severity!r}")
        if not whole(mixture_width) or mixture_width < 1:
            raise ValueError(f"mixture_width must be a whole number >= 1, got {mixture_width!r}")
        if not whole(chain_depth) or chain_depth == 0 or chain_depth < -1:
            raise ValueError(f"chain_depth must be -1 (drawn in 1..3) or a whole number >= 1, got {chain_depth!r}")
        alpha = float(alpha)
        if not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
        self.severity, self.mixture_width, self.chain_depth, self.alpha = severity, mixture_width, chain_depth, alpha
        self.all_ops = bool(all_ops)
        self.p = check_prob("p", p)
        spaces = [s for name, s in AUGMIX_SPACE.items() if self.all_ops or name not in AUGMIX_COLOUR]
        self._ops = [primitive(s, 10, None, span=severity) for s in spaces]
        depth = chain_depth if chain_depth > 0 else _MAX_DEPTH
        self._depth = depth
        self._first_gamma = 1 + _BETA_DRAWS
        self._first_depth = self._first_gamma + mixture_width * _GAMMA_DRAWS
        self._first_choice = self._first_depth + mixture_width
        self.draws = self._first_choice + mixture_width * depth

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "draws"}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        n, k, width = len(sizes), len(self._ops), self.mixture_width
        m = beta_np(draws, 1, self.alpha)  # the original image's weight
        u = draws.uniforms_np(range(self._first_gamma, self._first_depth)).reshape(n, width, _GAMMA_DRAWS)
        g = np.stack([_gamma_np(u[:, c], self.alpha) for c in range(width)], 1)
        w = g / np.maximum(g.sum(1, keepdims=True), 1e-300) * (1.0 - m)[:, None]
        if self.chain_depth > 0:
            depth = np.full((n, width), self.chain_depth)
        else:
            depth = 1 + np.minimum(np.floor(draws.uniforms_np(range(self._first_depth, self._first_choice)) * 3), 2)
        pick = draws.uniforms_np(range(self._first_choice, self.draws)).reshape(n, width, self._depth)
        op = np.minimum(np.floor(pick * k), k - 1).astype(np.int64)
        steps = np.arange(self._depth)[None, None, :] < depth[:, :, None]
        return {"on": draws.bernoulli_np(0, self.p), "m": m, "w": w, "ops": np.where(steps, op, -1)}

    def entry(self, chain: int, step: int, k: int) -> int:
        """The stream of operation k at (chain, step): its bin and sign are its own."""
        return (chain * self._depth + step) * len(self._ops) + k

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        n = x.shape[0]
        rows_on = np.flatnonzero(params["on"])
        if len(rows_on) == 0:
            return x
        pick_on = to_device(rows_on, x.device)
        base = x[pick_on]
        sizes = np.tile(np.array(x.shape[2:], dtype=np.float64), (n, 1))
        col = lambda v: to_device(np.ascontiguousarray(v[rows_on], dtype=np.float32), x.device).view(-1, 1, 1, 1)
        mix = base * col(params["m"])
        for c in range(self.mixture_width):
            aug = base.clone()  # each operation writes its rows into the chain's own copy
            for d in range(self._depth):
                choice = params["ops"][rows_on, c, d]
                for k in np.unique(choice[choice >= 0]).tolist():
                    rows = np.flatnonzero(choice == k)
                    sub = inner_draws(draws, self.entry(c, d, k), rows_on[rows])
                    op = self._ops[k]
                    own = op.sample(sub, sizes[rows])
                    pick = to_device(rows, x.device)
                    part = aug[pick]
                    if isinstance(op, GeometricPrimitive):
                        y = affine_warp(part, op.transform(own, sizes[rows])[0])
                    else:
                        y = op.apply(part, own, sub)  # type: ignore[union-attr]
                    aug.index_copy_(0, pick, y.to(aug.dtype))
            mix = mix + col(params["w"][:, c]) * aug
        return x.index_copy(0, pick_on, mix.clamp_(0.0, 1.0))
