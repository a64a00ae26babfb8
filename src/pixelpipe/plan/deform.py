"""A stage's displacement field (ops.elastic.ElasticTransform) as the plan holds it, and what
it changes in planning: the warp's Deformation, the source regions, the decoders' shrink
bound and how the targets move.

The stage's matrices split at the deforming op: `before` (image -> frame, the ops before it)
and after = matrix @ before^-1 (frame -> output). The warp reads output point p from
outer(y + d(y)), y = inner(p), with inner = before @ matrix^-1 and outer = before^-1
(kernels.deform). The targets go the other way: z = before(x), then the frame point y with
y + d(y) = z (fixed-point steps, kernels.deform.move_points), then after(y). A box becomes the
box enclosing its outline moved at EDGE_POINTS points per edge: the field bends the edges, so
the corners alone could miss a bulge (the box is exact up to the field's bending between
those points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.targets import Targets
from ..kernels.deform import Deformation, move_points
from ..kernels.spec import is_affine

__all__ = ["EDGE_POINTS", "Elastic"]

EDGE_POINTS = 9  # points per box edge moved through a field (corners included)
EPS = 1e-6


@dataclass
class Elastic:
    """The deforming op's draws in one stage's plan.

    Attributes:
        before: float64 [N, 3, 3], image -> frame (the stage's matrices before the op).
        field: float32 [N, 2, Gh, Gw], (dx, dy) frame pixels per node.
        grid: float64 [N, 4] (sy, sx, ch, cw) (kernels.deform.Deformation).
    """

    before: np.ndarray
    field: np.ndarray
    grid: np.ndarray

    def __getitem__(self, rows: Any) -> Elastic:
        return Elastic(self.before[rows], self.field[rows], self.grid[rows])

    def reach(self) -> np.ndarray:
        """float64 [N, 2] (x, y): the largest displacement of each sample along each axis (the
        bilinear field never exceeds its nodes)."""
        n = len(self.before)
        return np.abs(self.field.reshape(n, 2, -1)).max(2, initial=0.0).astype(np.float64)

    def deformation(self, inverse: np.ndarray, scale: np.ndarray | None = None) -> Deformation:
        """The warp's Deformation for a stage of inverse matrices [N, 3, 3] (output -> image);
        `scale` [N] when the decoder reduced each image by it (outer then lands in its pixels)."""
        outer = np.linalg.inv(self.before)
        if scale is not None:
            sc = np.asarray(scale, dtype=np.float64).reshape(-1, 1, 1)
            outer = outer * np.concatenate([sc, sc, np.ones_like(sc)], 1)  # diag(s, s, 1) @ outer
        return Deformation(self.before @ inverse, outer, self.field, self.grid)

    def regions(self, inverse: np.ndarray, out_sizes: np.ndarray, in_sizes: np.ndarray, wide: bool) -> np.ndarray:
        """int64 [N, 4] (y0, x0, y1, x1): the image pixels each output may read. The output
        rectangle taken into the frame (its bounding box), widened by the sample's reach,
        taken into the image (bounding box of that box's corners and edge midpoints), rounded
        outwards and clipped as StagePlan.regions does; `wide` (reflect, wrap borders): an axis
        whose box leaves the image takes all of it."""
        inner = self.before @ inverse
        lo, hi = _box(inner, np.zeros_like(out_sizes), out_sizes[:, ::-1])
        r = self.reach()
        lo, hi = _box(np.linalg.inv(self.before), lo - r, hi + r)
        size = in_sizes[:, ::-1]  # (w, h)
        a0, a1 = np.floor(lo + EPS), np.ceil(hi - EPS)
        if wide:
            out = (a0 < 0) | (a1 > size)
            a0, a1 = np.where(out, 0.0, a0), np.where(out, size, a1)
        a0 = np.minimum(np.maximum(a0, 0), size - 1)
        a1 = np.maximum(np.minimum(a1, size), a0 + 1)
        return np.concatenate([a0[:, ::-1], a1[:, ::-1]], 1).astype(np.int64)

    def slope(self) -> np.ndarray:
        """float64 [N]: a bound on the field's slope (frame pixels of displacement per frame
        pixel): the largest difference between neighbouring nodes over their spacing, summed
        over both axes of the displacement and of the frame."""
        f = self.field.astype(np.float64)
        gx = np.abs(np.diff(f, axis=3)).reshape(len(f), -1).max(1, initial=0.0) / self.grid[:, 1]
        gy = np.abs(np.diff(f, axis=2)).reshape(len(f), -1).max(1, initial=0.0) / self.grid[:, 0]
        return gx + gy

    def move(self, targets: Targets, matrix: np.ndarray, out_sizes: np.ndarray) -> Targets:
        """Boxes and keypoints through the deformation (see the module docstring)."""
        after = matrix @ np.linalg.inv(self.before)
        fn = lambda p, s: move_points(self.before, after, self.field, self.grid, p, s)
        boxes, points = targets.boxes, targets.keypoints
        return Targets(None if boxes is None else boxes.moved_by(fn, out_sizes, EDGE_POINTS),
                       None if points is None else points.moved_by(fn, out_sizes), targets.masks)


def _box(m: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) [N, 2] (x, y): the bounding box of boxes [lo, hi] ([N, 2] (x, y)) through the
    homographies m [N, 3, 3]: their corners suffice without perspective; with it the edge
    midpoints are taken too (as StagePlan.regions does)."""
    x0, y0, x1, y1 = lo[:, 0:1], lo[:, 1:2], hi[:, 0:1], hi[:, 1:2]
    xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
    if is_affine(m):
        xs, ys = np.concatenate([x0, x1, x0, x1], 1), np.concatenate([y0, y0, y1, y1], 1)
    else:
        xs = np.concatenate([x0, x1, x0, x1, xm, xm, x0, x1], 1)
        ys = np.concatenate([y0, y0, y1, y1, y0, y1, ym, ym], 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pz = m[:, 2, 0:1] * xs + m[:, 2, 1:2] * ys + m[:, 2, 2:3]
        u = (m[:, 0, 0:1] * xs + m[:, 0, 1:2] * ys + m[:, 0, 2:3]) / pz
        v = (m[:, 1, 0:1] * xs + m[:, 1, 1:2] * ys + m[:, 1, 2:3]) / pz
    return np.stack([u.min(1), v.min(1)], 1), np.stack([u.max(1), v.max(1)], 1)
