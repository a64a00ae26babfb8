"""One stage's numbers for one batch (`StagePlan`): the product of its geometric matrices, the
output sizes, its colour ops' parameters folded into one colour map per sample, and the source
region each sample needs, so that decoders decode only that region, at a reduced DCT scale when
it shrinks. Planning runs on the host, in numpy (planner.c where it is built, plan.fast)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from .. import native
from ..kernels.deform import Deformation
from ..kernels.spec import PointwiseSpec, WarpSpec, is_affine, stretch_at
from ..ops.color import apply_to_mean, compose, identity
from ..ops.kinds import ColorOp, Params
from ..ops.matrices import host
from . import fast
from .deform import Elastic
from .output import Form

__all__ = ["StagePlan"]

EPS = 1e-6


class Filter(Protocol):
    """What a plan reads of its stage (plan.stages.Stage): the resampling filter's settings."""

    interpolation: str
    border: str
    fill: tuple[float, float, float]


@dataclass
class StagePlan:
    """One stage's numbers for one batch, as numpy arrays (planning runs on the host)."""

    stage: Filter  # its Stage
    matrix: np.ndarray  # float64 [N, 3, 3] input -> output
    in_sizes: np.ndarray  # float64 [N, 2]
    out_sizes: np.ndarray  # float64 [N, 2]
    color_params: list[tuple[ColorOp, Params]]
    # the stage's displacement field (plan.deform), or None: then the matrices are the whole map
    elastic: Elastic | None = None

    @property
    def needs_means(self) -> bool:
        return any(op.needs_mean for op, _ in self.color_params)

    def __getitem__(self, rows: slice) -> StagePlan:
        """The plan of a run of its samples (what was computed once, the inverse, is sliced too):
        batches planned together are split with it."""
        n = self.matrix.shape[0]
        cut = lambda v: v[rows] if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == n else v
        part = StagePlan(self.stage, self.matrix[rows], self.in_sizes[rows], self.out_sizes[rows],
                         [(op, {k: cut(v) for k, v in params.items()}) for op, params in self.color_params],
                         None if self.elastic is None else self.elastic[rows])
        if "_inverse" in self.__dict__:
            part.__dict__["_inverse"] = self.__dict__["_inverse"][rows]
        return part

    def uniform_size(self) -> tuple[int, int] | None:
        """The common output (h, w), or None when samples differ."""
        if self.out_sizes.shape[0] == 0:
            return None
        s = np.round(self.out_sizes)
        if (s == s[0]).all():
            return (int(s[0, 0]), int(s[0, 1]))
        return None

    def inverse(self) -> np.ndarray:
        """float64 [N, 3, 3] output -> input; computed once (regions and warp_spec both need it)."""
        cached = self.__dict__.get("_inverse")
        if cached is None:
            m = self.matrix
            if is_affine(m):  # in closed form: a quarter of LAPACK's time for [N, 3, 3]
                a, b, tx, c, d, ty = m[:, 0, 0], m[:, 0, 1], m[:, 0, 2], m[:, 1, 0], m[:, 1, 1], m[:, 1, 2]
                det = a * d - b * c
                inv = np.zeros_like(m)
                with np.errstate(divide="ignore", invalid="ignore"):  # singular ones are named below
                    inv[:, 0, 0], inv[:, 0, 1], inv[:, 0, 2] = d / det, -b / det, (b * ty - d * tx) / det
                    inv[:, 1, 0], inv[:, 1, 1], inv[:, 1, 2] = -c / det, a / det, (c * tx - a * ty) / det
                inv[:, 2, 2] = 1.0
            elif len(m):
                try:
                    inv = np.linalg.inv(m)
                except np.linalg.LinAlgError:  # a singular matrix: name the one nearest to it
                    inv = np.zeros_like(m)
                    inv[int(np.argmin(np.abs(np.linalg.det(m))))] = np.nan
            else:
                inv = m.copy()
            bad = ~np.isfinite(inv.reshape(len(m), 9)).all(1)
            if bad.any():
                raise ValueError(f"the geometric ops map sample {int(bad.argmax())} (its place in the batch) onto "
                                 "a line or a point: its matrix has no inverse (a zero scale, or a Warp's "
                                 "singular matrix)")
            cached = inv
            self.__dict__["_inverse"] = cached
        return cached

    def regions(self) -> np.ndarray:
        """int64 [N, 4] (y0, x0, y1, x1): the source pixels each output needs.

        The bounding box of the output rectangle mapped back into the source, rounded outwards,
        clipped to the image, and at least one pixel. With border "reflect" or "wrap" an axis
        whose footprint leaves the image takes the whole axis (mirrored and wrapped reads come
        from elsewhere in the image).
        """
        n = self.matrix.shape[0]
        if n == 0:
            return np.zeros((0, 4), dtype=np.int64)
        if self.elastic is not None:  # deformed samples reach further (plan.deform)
            plain = self._matrix_regions()
            bent = self.elastic.regions(self.inverse(), self.out_sizes, self.in_sizes,
                                        self.stage.border in ("reflect", "wrap"))
            return np.where(self.deformation().active()[:, None], bent, plain)
        return self._matrix_regions()

    def _matrix_regions(self) -> np.ndarray:
        """regions() of the matrices alone."""
        lib = native.library()
        if lib is not None and "_inverse" not in self.__dict__:
            found = self._regions_native(lib)
            if found is not None:
                return found
        inv = self.inverse()
        h, w = self.out_sizes[:, 0:1], self.out_sizes[:, 1:2]
        # the two source axes side by side, [N, 2] in (x, y) order
        if is_affine(inv):
            # the extremes of a x + b y + c over the corners: each term at its own extreme
            # (the same sums as at the extreme corner, so the same bits)
            ax, by = inv[:, :2, 0] * w, inv[:, :2, 1] * h
            lo = np.minimum(ax, 0.0) + np.minimum(by, 0.0) + inv[:, :2, 2]
            hi = np.maximum(ax, 0.0) + np.maximum(by, 0.0) + inv[:, :2, 2]
        else:
            zero = np.zeros_like(h)
            xs = np.concatenate([zero, w, zero, w, w / 2, w / 2, zero, w], 1)  # [N, 8] edge points
            ys = np.concatenate([zero, zero, h, h, zero, h, h / 2, h / 2], 1)
            pz = inv[:, 2, 0:1] * xs + inv[:, 2, 1:2] * ys + inv[:, 2, 2:3]
            uv = (inv[:, :2, 0:1] * xs[:, None] + inv[:, :2, 1:2] * ys[:, None] + inv[:, :2, 2:3]) / pz[:, None]
            lo, hi = uv.min(2), uv.max(2)
        size = self.in_sizes[:, ::-1]  # (w, h)
        a0 = np.floor(lo + EPS)
        a1 = np.ceil(hi - EPS)
        if self.stage.border in ("reflect", "wrap"):
            out = (a0 < 0) | (a1 > size)
            a0, a1 = np.where(out, 0.0, a0), np.where(out, size, a1)
        a0 = np.minimum(np.maximum(a0, 0), size - 1)
        a1 = np.maximum(np.minimum(a1, size), a0 + 1)
        return np.concatenate([a0[:, ::-1], a1[:, ::-1]], 1).astype(np.int64)

    def _regions_native(self, lib: Any) -> np.ndarray | None:
        """regions() and the inverse it needs from planner.c for affine plans (the same numbers),
        or None for numpy to take a perspective batch."""
        n = self.matrix.shape[0]
        m = np.ascontiguousarray(self.matrix, dtype=np.float64)
        outs = np.ascontiguousarray(self.out_sizes, dtype=np.float64)
        ins = np.ascontiguousarray(self.in_sizes, dtype=np.float64)
        inv, regions = np.empty((n, 3, 3)), np.empty((n, 4), dtype=np.int64)
        wide = int(self.stage.border in ("reflect", "wrap"))
        status = lib.pp_affine_regions(native.address(m), native.address(outs), native.address(ins), n, wide, EPS,
                                       native.address(inv), native.address(regions))
        if 0 <= status < n:
            return None
        if status >= n:
            self.inverse()  # numpy's path names the sample whose matrix has no inverse
            raise AssertionError("planner.c found a singular matrix that numpy inverts")  # pragma: no cover
        self.__dict__["_inverse"] = inv
        return regions

    def shrink(self) -> np.ndarray:
        """float64 [N, 2] (y, x): the smallest shrink factor over the output (>= 0); a decoder
        may reduce the source by up to this factor without losing output detail."""
        h, w = self.out_sizes[:, 0:1], self.out_sizes[:, 1:2]
        x = np.concatenate([0.0 * w, w, 0.0 * w, w], 1)  # the four corners, [N, 4]
        y = np.concatenate([0.0 * h, 0.0 * h, h, h], 1)
        sy, sx = stretch_at(self.inverse(), x, y)
        found = np.stack([sy.min(1), sx.min(1)], 1)
        if self.elastic is not None:  # a field of slope g shrinks by at most 1 - g more
            found = found * np.maximum(1.0 - self.elastic.slope(), 0.0)[:, None]
        return found

    def min_decode_size(self, regions: np.ndarray) -> np.ndarray:
        """int64 [N, 2]: how small a decoder may make each region (DCT scaling) without going
        below the output's resolution: the region divided by the shrink factor."""
        s = np.maximum(self.shrink(), 1.0)
        hw = (regions[:, 2:] - regions[:, :2]).astype(np.float64)
        return np.ceil(hw / s - EPS).astype(np.int64)

    def warp_spec(self, out_size: tuple[int, int], regions: np.ndarray, origin: np.ndarray | None = None,
                  scale: np.ndarray | None = None, antialias: bool = True) -> WarpSpec:
        """The warp for sources stored from `origin` (default 0) at DCT `scale` (default 1).

        scale: float64 [N] factors (1, 1/2, 1/4, 1/8) by which each image was reduced.
        regions, origin: in full-resolution pixels; origin is rescaled here as the decoder did
        (floor), clip = the stored pixels for decoded regions.
        """
        n = self.matrix.shape[0]
        inv = self.inverse()
        img = np.round(self.in_sizes).astype(np.int64)
        clip = np.asarray(regions, dtype=np.int64)
        org = np.zeros((n, 2), dtype=np.int64) if origin is None else np.asarray(origin, dtype=np.int64)
        if scale is not None:
            sc = np.asarray(scale, dtype=np.float64).reshape(n, 1)
            inv = inv * np.concatenate([sc, sc, np.ones_like(sc)], 1)[:, :, None]  # diag(s, s, 1) @ inv
            img = np.ceil(img * sc - EPS).astype(np.int64)
            clip = np.concatenate([np.floor(clip[:, :2] * sc + EPS), np.ceil(clip[:, 2:] * sc - EPS)], 1).astype(np.int64)
            clip = np.minimum(clip, np.tile(img, 2))
            org = np.floor(org * sc + EPS).astype(np.int64)
        deform = None if self.elastic is None else self.elastic.deformation(self.inverse(), scale)
        return WarpSpec(inv, img, org, clip, out_size, self.stage.interpolation, self.stage.border,
                        self.stage.fill, antialias, deform)

    def deformation(self) -> Deformation:
        """The warp's Deformation in image pixels (the plan must have a field)."""
        assert self.elastic is not None
        cached = self.__dict__.get("_deformation")
        if cached is None:
            cached = self.__dict__["_deformation"] = self.elastic.deformation(self.inverse())
        return cached

    def color_matrix(self, means: Any) -> torch.Tensor | None:
        """Fold the colour ops into float64 [N, 3, 4] (None when there are none).

        means: the warped images' mean colours [N, 3] (a tensor or numpy), or None; or
        [K, N, 3], K candidate mean colours per sample folded in one evaluation, giving
        [K, N, 3, 4]: the GPU path needs the chain at four mean colours per batch (see
        ColorOp.stacked_means). A tensor, for the pointwise pass."""
        if not self.color_params:
            return None
        n = self.matrix.shape[0]
        return torch.from_numpy(_fold_colors(self.color_params, None if means is None else host(means), n))

    def pointwise(self, means: Any, form: Form) -> PointwiseSpec:
        """The pointwise pass's spec: the colour maps folded at `means` (see color_matrix), then
        what `form` says the pass writes."""
        return PointwiseSpec(self.color_matrix(means), form.mean, form.std, form.dtype, form.layout, form.channels)


def _tile(value: object, k: int, n: int) -> object:
    """A per-sample parameter (an array with N rows) repeated k times along its rows."""
    if isinstance(value, np.ndarray) and value.ndim and value.shape[0] == n:
        return np.tile(value, (k,) + (1,) * (value.ndim - 1))
    return value


def _color_of(op: ColorOp, params: Params, mean: np.ndarray | None, n: int) -> np.ndarray:
    """op's colour maps: [N, 3, 4], or [K, N, 3, 4] for means [K, N, 3] (ops without
    `stacked_means` see their parameters tiled K times)."""
    if not op.needs_mean:
        mean = None
    if mean is not None and mean.ndim == 3 and not op.stacked_means:
        k = mean.shape[0]
        tiled = {name: _tile(v, k, n) for name, v in params.items()}
        m = host(fast.color(op, tiled, mean.reshape(k * n, 3))).reshape(k, n, 3, 4)
    else:
        m = host(fast.color(op, params, mean))
    return m


def _fold_colors(color_params: list[tuple[ColorOp, Params]], means: np.ndarray | None, n: int) -> np.ndarray:
    """The chain folded into [N, 3, 4] (or [K, N, 3, 4] for means [K, N, 3])."""
    mean = np.zeros((n, 3)) if means is None else means
    total = identity(n)
    for k, (op, params) in enumerate(color_params):
        m = _color_of(op, params, mean, n)
        # the first map after the identity is itself; the last one's output mean is not needed
        total = m.copy() if k == 0 else compose(m, total)
        if k + 1 < len(color_params):
            mean = apply_to_mean(m, mean)
    if mean.ndim == 3 and total.ndim == 3:  # no op used the means
        total = np.broadcast_to(total, (mean.shape[0], *total.shape))
    return np.ascontiguousarray(total)
