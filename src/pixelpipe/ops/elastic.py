"""ElasticTransform: a smooth random displacement of every pixel, from a coarse per-sample grid
of displacements interpolated in the warp.

It is the one 2-D geometric op that is not a matrix: its matrix is the identity, and the stage
hands the warp its field with the matrices before and after it (kernels.deform.Deformation),
so the image is still resampled once. Boxes, keypoints and masks follow the same field
(plan.deform says how).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..data.random import Draws
from .checks import BORDERS, INTERPOLATIONS, check_choice, check_fill, check_prob
from .kinds import GeometryOp, Op, Params

__all__ = ["ElasticTransform"]

MAX_CELLS = 64  # cells of the coarse grid per axis at most (65 nodes)
_MARGIN = 4  # noise nodes beyond the grid on each side: the radius of the 1-cell Gaussian
_STRIDE = 1 << 8  # element number of noise node (i, j): (i + _MARGIN) * _STRIDE + (j + _MARGIN)


def _pair(name: str, value: Any, lo: float, hi: float, low_open: bool = False) -> tuple[float, float]:
    """(x, y) from one number or a pair, each within [lo, hi] ((lo, hi] with low_open)."""
    v = (value, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    try:
        x, y = (float(a) for a in v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an (x, y) pair, got {value!r}") from None
    for a in (x, y):
        if math.isnan(a) or a < lo or a > hi or (low_open and a == lo):
            raise ValueError(f"{name} must lie within {'(' if low_open else '['}{lo}, {hi}], got {value!r}")
    return x, y


def _kernel(sigma: float) -> np.ndarray:
    """torchvision's Gaussian blur kernel for sigma: int(8 sigma + 1) taps, made odd, summing to 1."""
    k = int(8 * sigma + 1)
    k += 1 - k % 2
    x = np.arange(k) - (k - 1) / 2
    w = np.exp(-0.5 * (x / sigma) ** 2)
    return w / w.sum()


_CELL = _kernel(1.0)  # the blur on the coarse grid: one cell, 9 taps (radius _MARGIN)


class ElasticTransform(GeometryOp):
    """Displace the pixels by a smooth random field, with probability p (torchvision's
    ElasticTransform; albumentations' ElasticTransform and GridDistortion).

    Args:
        alpha: strength, as torchvision's: the displacement in pixels is alpha / 2 times a
            Gaussian-smoothed uniform noise in (-1, 1) (one number, or (x, y)).
        sigma: the smoothing's standard deviation in pixels, as torchvision's (one number, or
            (x, y); > 0).
        p: probability that a sample is deformed (the others get a zero field).
        control_points: instead of alpha and sigma, a grid of control points per axis (one
            number, or (rows, columns); >= 2), the first and last on the image's edges, each
            moved by a displacement uniform in (-max_displacement, max_displacement) pixels.
        max_displacement: the control points' largest displacement in pixels (one number or
            (x, y)); needs control_points.
        interpolation, border, fill: the warp's filter settings (see GeometryOp).

    With alpha and sigma the smoothed noise is drawn on a coarse grid of nodes `sigma` pixels
    apart (at most 64 cells per axis; larger images get a wider spacing, and a smoother field)
    and blurred there by one cell, scaled so that its standard deviation is that of
    torchvision's per-pixel noise blurred by sigma: the same statistics, from about sigma^2
    times fewer random numbers. Between nodes the warp interpolates the field bilinearly. The
    field's nodes are placed on the image as this op receives it (the ops before it in its
    stage apply first, those after it to the deformed image). torchvision divides its x
    displacement by the height and its y displacement by the width, so on images that are not
    square its displacements differ from these by W/H along x and H/W along y; on square
    images they agree.

    Example:
        >>> import torch, pixelpipe as pp
        >>> t = pp.Compose([pp.ElasticTransform(alpha=50.0, sigma=5.0)])
        >>> t([torch.zeros(32, 32, 3, dtype=torch.uint8)]).shape
        torch.Size([1, 3, 32, 32])
    """

    deformation = True
    draws = 3

    def __init__(self, alpha: float | tuple[float, float] = 50.0, sigma: float | tuple[float, float] = 5.0,
                 p: float = 1.0, *, control_points: int | tuple[int, int] | None = None,
                 max_displacement: float | tuple[float, float] | None = None, interpolation: str | None = None,
                 border: str | None = None, fill: Any = None) -> None:
        self.p = check_prob("p", p)
        if control_points is None:
            if max_displacement is not None:
                raise ValueError("max_displacement is the control points' displacement: give control_points with it "
                                 "(or alpha and sigma without either)")
            self.alpha = _pair("alpha", alpha, 0.0, 1e6)
            self.sigma = _pair("sigma", sigma, 0.0, 1e4, low_open=True)
            self.control_points = None
            self.max_displacement = None
        else:
            cp = (control_points, control_points) if isinstance(control_points, int) else tuple(control_points)
            if len(cp) != 2 or any(isinstance(c, bool) or not isinstance(c, int) or not 2 <= c <= MAX_CELLS + 1
                                   for c in cp):
                raise ValueError(f"control_points must be an int or (rows, columns) in [2, {MAX_CELLS + 1}], "
                                 f"got {control_points!r}")
            if max_displacement is None:
                raise ValueError("control_points needs max_displacement (pixels)")
            self.control_points = cp
            self.max_displacement = _pair("max_displacement", max_displacement, 0.0, 1e6)
            self.alpha = self.sigma = None
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.border = check_choice("border", border, BORDERS)
        self.fill = check_fill(fill)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def _grid(self, sizes: np.ndarray) -> np.ndarray:
        """float64 [N, 4] (sy, sx, ch, cw): node spacing (pixels) and node counts per sample."""
        h, w = sizes[:, 0], sizes[:, 1]
        if self.control_points is not None:
            ch, cw = (np.full(len(sizes), float(c)) for c in self.control_points)
            return np.stack([np.maximum(h, 1.0) / (ch - 1), np.maximum(w, 1.0) / (cw - 1), ch, cw], 1)
        sx, sy = self.sigma
        spacing_y = np.maximum(sy, h / MAX_CELLS)
        spacing_x = np.maximum(sx, w / MAX_CELLS)
        ch = np.maximum(np.ceil(h / spacing_y - 1e-9), 1.0) + 1
        cw = np.maximum(np.ceil(w / spacing_x - 1e-9), 1.0) + 1
        return np.stack([spacing_y, spacing_x, ch, cw], 1)

    def _noise(self, draws: Draws, draw: int, gh: int, gw: int, margin: int) -> np.ndarray:
        """float64 [N, gh + 2 margin, gw + 2 margin]: uniform (-1, 1) at nodes (i, j), i from
        -margin, each a function of its sample and (i, j) alone (not of the grid's size)."""
        i = np.arange(-margin, gh + margin)
        j = np.arange(-margin, gw + margin)
        elements = ((i[:, None] + _MARGIN) * _STRIDE + (j[None, :] + _MARGIN)).reshape(-1)
        u = draws.field_elements_np(draw, elements).astype(np.float64)
        return 2.0 * u.reshape(-1, len(i), len(j)) - 1.0

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        n = len(sizes)
        grid = self._grid(sizes)
        gh = int(grid[:, 2].max()) if n else 2
        gw = int(grid[:, 3].max()) if n else 2
        on = draws.bernoulli_np(0, self.p)
        if not on.any():  # no sample deformed: no noise to draw
            return {"field": np.zeros((n, 2, gh, gw), dtype=np.float32), "grid": grid}
        if self.control_points is not None:
            mx, my = self.max_displacement
            dx = self._noise(draws, 1, gh, gw, 0) * mx
            dy = self._noise(draws, 2, gh, gw, 0) * my
        else:
            # torchvision's blurred noise has variance (1/3) sum(w_x^2) sum(w_y^2) for its kernels
            # at sigma; ours, blurred by one cell, (1/3) sum(c^2)^2: scaled to the former
            scale = math.sqrt(float((_kernel(self.sigma[0]) ** 2).sum() * (_kernel(self.sigma[1]) ** 2).sum())
                              / float((_CELL ** 2).sum()) ** 2)
            ax, ay = self.alpha
            dx = _blur(self._noise(draws, 1, gh, gw, _MARGIN)) * (scale * ax / 2)
            dy = _blur(self._noise(draws, 2, gh, gw, _MARGIN)) * (scale * ay / 2)
        field = np.stack([dx, dy], 1)
        own = (np.arange(gh)[None, :, None] < grid[:, 2, None, None]) & (np.arange(gw)[None, None, :] < grid[:, 3, None, None])
        field = np.where((own & on[:, None, None])[:, None], field, 0.0).astype(np.float32)
        return {"field": field, "grid": grid}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = np.zeros((len(sizes), 3, 3))
        m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
        return m, sizes


def _blur(noise: np.ndarray) -> np.ndarray:
    """[N, A + 2 _MARGIN, B + 2 _MARGIN] -> [N, A, B]: the 1-cell Gaussian, separable, valid."""
    r = _MARGIN
    a, b = noise.shape[1] - 2 * r, noise.shape[2] - 2 * r
    rows = sum(_CELL[k] * noise[:, k : k + a, :] for k in range(2 * r + 1))
    return sum(_CELL[k] * rows[:, :, k : k + b] for k in range(2 * r + 1))
