"""A 2-D displacement field inside the warp: the one place where the map from output to input
is not a matrix (ops.elastic.ElasticTransform).

Output point p reads image point outer(y + d(y)), y = inner(p): `inner` (the inverse of the
stage's matrices after the deformation) takes p into the *frame* (the image as the ops before
the deformation left it), d is the coarse field interpolated bilinearly at y, and `outer` (the
inverse of the matrices before it) takes the displaced point into the image. Both are 3x3
homographies applied with perspective division. Node (k, l) of a sample's field sits at frame
point (x, y) = (l * sx, k * sy); beyond its last node the field holds the edge value (the
field is clamped, not extrapolated). Fields of one batch share one array, [N, 2, Gh, Gw]; a
sample's own nodes are its first ch x cw (the rest is padding, never read).

`displaced` is the plain-torch evaluation every implementation follows (the reference image
warp, the mask warp; the Triton kernel computes the same in float32); `move_points` is the
forward map the targets take, which inverts the displacement approximately (see there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["DEFORM_COLS", "Deformation", "displaced", "field_at", "move_points"]

DEFORM_COLS = 22  # a sample's row for kernels: inner (9), outer (9), sy, sx, ch, cw
# fixed-point steps move_points takes to invert y + d(y) = z
INVERT_STEPS = 8


@dataclass
class Deformation:
    """One stage's displacement fields, per sample (see the module docstring).

    Attributes:
        inner: float64 [N, 3, 3], output -> frame coordinates.
        outer: float64 [N, 3, 3], frame -> image coordinates.
        field: float32 [N, 2, Gh, Gw], (dx, dy) in frame pixels at each node.
        grid: float64 [N, 4] (sy, sx, ch, cw): node spacing in frame pixels and node counts
            (each count >= 2, at most Gh and Gw).
    """

    inner: np.ndarray
    outer: np.ndarray
    field: np.ndarray
    grid: np.ndarray

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, rows: Any) -> Deformation:
        return Deformation(self.inner[rows], self.outer[rows], self.field[rows], self.grid[rows])

    def active(self) -> np.ndarray:
        """bool [N]: the samples whose field is not zero everywhere (the others read exactly
        outer @ inner, the matrix part)."""
        return np.abs(self.field.reshape(len(self), -1)).max(1, initial=0.0) > 0

    def rows(self) -> np.ndarray:
        """float64 [N, DEFORM_COLS]: inner, outer (row-major), sy, sx, ch, cw per sample."""
        n = len(self)
        return np.ascontiguousarray(np.concatenate([self.inner.reshape(n, 9), self.outer.reshape(n, 9), self.grid], 1))


def field_at(field: torch.Tensor, grid: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
             sample: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dy), each shaped as x: the fields [N, 2, Gh, Gw] interpolated bilinearly at frame
    points (x, y), nodes per grid [N, 4] (sy, sx, ch, cw) as the module docstring places them.
    x, y: [N, ...] (row n of sample n), or any shape with `sample` (int64, the same shape)
    naming each point's sample. Computed in x's dtype."""
    n, gw = field.shape[0], field.shape[3]
    if sample is None:
        sample = torch.arange(n, device=x.device).view(n, *([1] * (x.dim() - 1))).expand(x.shape)
    x, y = x.nan_to_num(0.0), y.nan_to_num(0.0)  # (a perspective's horizon: its point stays NaN)
    g = grid.to(x.dtype)[sample]  # [..., 4]
    sy, sx, ch, cw = g.unbind(-1)
    tx = torch.minimum((x / sx).clamp_min(0.0), cw - 1)
    ty = torch.minimum((y / sy).clamp_min(0.0), ch - 1)
    jx = torch.minimum(tx.floor(), cw - 2)
    jy = torch.minimum(ty.floor(), ch - 2)
    ax, ay = tx - jx, ty - jy
    j0, i0 = jx.to(torch.int64), jy.to(torch.int64)
    flat = field.reshape(n, 2, -1)
    out = []
    for c in range(2):
        at = lambda i, j, c=c: flat[sample, c, i * gw + j].to(x.dtype)
        top = at(i0, j0) * (1 - ax) + at(i0, j0 + 1) * ax
        bottom = at(i0 + 1, j0) * (1 - ax) + at(i0 + 1, j0 + 1) * ax
        out.append(top * (1 - ay) + bottom * ay)
    return out[0], out[1]


def _apply(m: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Homographies m [N, 3, 3] on points (x, y) [N, ...] (perspective division included)."""
    n = m.shape[0]
    e = m.reshape(n, 9, *([1] * (x.dim() - 1)))
    pz = e[:, 6] * x + e[:, 7] * y + e[:, 8]
    return (e[:, 0] * x + e[:, 1] * y + e[:, 2]) / pz, (e[:, 3] * x + e[:, 4] * y + e[:, 5]) / pz


def displaced(deform: Deformation, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(u, v) image coordinates of output points (x, y) (float64, [N, ...] or broadcastable to
    it) through the deformation: outer(y + d(y)), y = inner(p)."""
    dev = x.device
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)
    fx, fy = _apply(t(deform.inner), x, y)
    dx, dy = field_at(t(deform.field), t(deform.grid), fx, fy)
    fx = fx + dx
    fy = fy + dy
    return _apply(t(deform.outer), fx, fy)


def move_points(before: np.ndarray, after: np.ndarray, field: np.ndarray, grid: np.ndarray,
                points: np.ndarray, sample: np.ndarray) -> np.ndarray:
    """The forward map of image points [K, 2] (x, y) of samples `sample` [K]: float64 [K, 2]
    output points. z = before(x) in the frame; the frame point y whose displaced point
    y + d(y) is z, found by fixed-point steps y <- z - d(y) from y = z (INVERT_STEPS of them;
    they converge where the field's slope is below 1, which a smooth field keeps); then
    after(y). `before`, `after`: [N, 3, 3] (image -> frame, frame -> output)."""
    if not len(points):
        return np.zeros((0, 2))
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))
    s = torch.from_numpy(np.asarray(sample, dtype=np.int64))
    x, y = t(points[:, 0]), t(points[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        zx, zy = _apply(t(before)[s], x, y)
        f = torch.from_numpy(np.ascontiguousarray(field))
        yx, yy = zx, zy
        for _ in range(INVERT_STEPS):
            dx, dy = field_at(f, t(grid), yx.nan_to_num(0.0), yy.nan_to_num(0.0), s)
            yx, yy = zx - dx, zy - dy
        u, v = _apply(t(after)[s], yx, yy)
    return torch.stack([u, v], 1).numpy()
