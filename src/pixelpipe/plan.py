"""The planner: folds a list of ops into stages and, per batch, into per-sample numbers.

A *stage* is a run of geometric and colour ops (and at most one Normalize) executed as one
resampling pass and one pointwise pass. Stages are split where fusion is impossible: at a
Lambda, and where two geometric ops ask for different interpolation, border or fill.

Per batch, `Stage.sample` turns the stage into a `StagePlan`: the product of the geometric
matrices, the output size, the colour ops' parameters, and the source region each sample
needs, so that decoders can decode only that region, at a reduced DCT scale when it shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .kernels.spec import WarpSpec, is_affine
from .ops._base import ColorOp, GeometryOp, Op, Params
from .ops.color import Normalize, apply_to_mean, compose, identity
from .ops.tensor import Lambda
from .random import Draws, prefix

_EPS = 1e-6


@dataclass
class Stage:
    """Ops fused into one warp + one pointwise pass. `ops` holds (position, op) pairs."""

    ops: list[tuple[int, Op]] = field(default_factory=list)
    interpolation: str = "bilinear"
    border: str = "constant"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    normalize: Normalize | None = None

    @property
    def geometry(self) -> list[tuple[int, GeometryOp]]:
        return [(i, op) for i, op in self.ops if isinstance(op, GeometryOp)]

    @property
    def colors(self) -> list[tuple[int, ColorOp]]:
        return [(i, op) for i, op in self.ops if isinstance(op, ColorOp)]

    def describe(self) -> str:
        geo = ", ".join(type(op).__name__ for _, op in self.geometry) or "none"
        col = ", ".join(type(op).__name__ for _, op in self.colors) or "none"
        norm = "normalize" if self.normalize else "no normalize"
        return (f"warp[{geo}] ({self.interpolation}, border={self.border}) -> "
                f"pointwise[{col}; clamp; {norm}]")

    def sample(self, seed: int, epoch: int, indices: torch.Tensor, sizes: torch.Tensor) -> StagePlan:
        """Draw every op's parameters and fold them. sizes: float64 [N, 2] input (h, w)."""
        n = sizes.shape[0]
        matrix = np.tile(np.eye(3), (n, 1, 1))  # numpy: cheaper per product than torch
        cur = sizes.to(torch.float64)
        shared = prefix(seed, epoch, indices)
        color_params: list[tuple[ColorOp, Params]] = []
        for pos, op in self.ops:
            draws = Draws(seed, epoch, indices, pos, shared)
            if isinstance(op, GeometryOp):
                params = op.sample(draws, cur)
                m, out = op.transform(params, cur)
                matrix = m.detach().cpu().to(torch.float64).numpy() @ matrix
                cur = out
            elif isinstance(op, ColorOp):
                color_params.append((op, op.sample(draws, cur)))
        return StagePlan(self, torch.from_numpy(matrix), sizes.to(torch.float64), cur, color_params)


@dataclass
class StagePlan:
    """One stage's numbers for one batch."""

    stage: Stage
    matrix: torch.Tensor  # float64 [N, 3, 3] input -> output
    in_sizes: torch.Tensor  # float64 [N, 2]
    out_sizes: torch.Tensor  # float64 [N, 2]
    color_params: list[tuple[ColorOp, Params]]

    @property
    def needs_means(self) -> bool:
        return any(op.needs_mean for op, _ in self.color_params)

    def uniform_size(self) -> tuple[int, int] | None:
        """The common output (h, w), or None when samples differ."""
        if self.out_sizes.shape[0] == 0:
            return None
        s = np.round(self.out_sizes.detach().cpu().numpy())
        if (s == s[0]).all():
            return (int(s[0, 0]), int(s[0, 1]))
        return None

    def inverse(self) -> torch.Tensor:
        """float64 [N, 3, 3] output -> input; computed once (regions and warp_spec both need it)."""
        cached = self.__dict__.get("_inverse")
        if cached is None:
            m = self.matrix.detach().cpu().numpy()
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
                    inv = torch.linalg.inv(self.matrix.detach().cpu()).numpy()
                except RuntimeError:  # a singular matrix: name the one nearest to it
                    inv = np.zeros_like(m)
                    inv[int(np.argmin(np.abs(np.linalg.det(m))))] = np.nan
            else:
                inv = m.copy()
            bad = ~np.isfinite(inv.reshape(len(m), 9)).all(1)
            if bad.any():
                raise ValueError(f"the geometric ops map sample {int(bad.argmax())} (its place in the batch) onto "
                                 "a line or a point: its matrix has no inverse (a zero scale, or a Warp's "
                                 "singular matrix)")
            cached = torch.from_numpy(inv)
            self.__dict__["_inverse"] = cached
        return cached

    def regions(self) -> torch.Tensor:
        """int64 [N, 4] (y0, x0, y1, x1): the source pixels each output needs.

        The bounding box of the output rectangle mapped back into the source, rounded outwards,
        clipped to the image, and at least one pixel. With border "reflect" or "wrap" an axis
        whose footprint leaves the image takes the whole axis (mirrored and wrapped reads come
        from elsewhere in the image).
        """
        n = self.matrix.shape[0]
        if n == 0:
            return torch.zeros(0, 4, dtype=torch.int64)
        # numpy: a dozen small ops per batch on the planning thread, where torch's per-op
        # overhead cost more than the arithmetic
        inv = self.inverse().detach().cpu().numpy()
        h, w = self.out_sizes[:, 0].detach().numpy(), self.out_sizes[:, 1].detach().numpy()
        if is_affine(inv):
            # the extremes of a x + b y + c over the corners: each term at its own extreme
            # (the same sums as at the extreme corner, so the same bits)
            ext = []
            for r in range(2):
                ax, by = inv[:, r, 0] * w, inv[:, r, 1] * h
                ext.append((np.minimum(ax, 0.0) + np.minimum(by, 0.0) + inv[:, r, 2],
                            np.maximum(ax, 0.0) + np.maximum(by, 0.0) + inv[:, r, 2]))
            (umin, umax), (vmin, vmax) = ext
        else:
            zero = np.zeros_like(h)
            xs = np.stack([zero, w, zero, w, w / 2, w / 2, zero, w], 1)  # [N, 8] edge points
            ys = np.stack([zero, zero, h, h, zero, h, h / 2, h / 2], 1)
            pz = inv[:, 2, 0:1] * xs + inv[:, 2, 1:2] * ys + inv[:, 2, 2:3]
            u, v = ((inv[:, r, 0:1] * xs + inv[:, r, 1:2] * ys + inv[:, r, 2:3]) / pz for r in range(2))
            umin, umax, vmin, vmax = u.min(1), u.max(1), v.min(1), v.max(1)
        H, W = self.in_sizes[:, 0].detach().numpy(), self.in_sizes[:, 1].detach().numpy()
        y0 = np.floor(vmin + _EPS)
        y1 = np.ceil(vmax - _EPS)
        x0 = np.floor(umin + _EPS)
        x1 = np.ceil(umax - _EPS)
        if self.stage.border in ("reflect", "wrap"):
            outy = (y0 < 0) | (y1 > H)
            outx = (x0 < 0) | (x1 > W)
            y0, y1 = np.where(outy, 0.0, y0), np.where(outy, H, y1)
            x0, x1 = np.where(outx, 0.0, x0), np.where(outx, W, x1)
        y0 = np.minimum(np.maximum(y0, 0), H - 1)
        x0 = np.minimum(np.maximum(x0, 0), W - 1)
        y1 = np.maximum(np.minimum(y1, H), y0 + 1)
        x1 = np.maximum(np.minimum(x1, W), x0 + 1)
        return torch.from_numpy(np.stack([y0, x0, y1, x1], 1)).to(torch.int64)

    def shrink(self) -> torch.Tensor:
        """float64 [N, 2] (y, x): the smallest shrink factor over the output (>= 0); a decoder
        may reduce the source by up to this factor without losing output detail."""
        inv = self.inverse()
        h, w = self.out_sizes[:, 0], self.out_sizes[:, 1]
        sy, sx = [], []
        for fx, fy in ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)):
            x, y = fx * w, fy * h
            pz = inv[:, 2, 0] * x + inv[:, 2, 1] * y + inv[:, 2, 2]
            u = (inv[:, 0, 0] * x + inv[:, 0, 1] * y + inv[:, 0, 2]) / pz
            v = (inv[:, 1, 0] * x + inv[:, 1, 1] * y + inv[:, 1, 2]) / pz
            sx.append(torch.hypot((inv[:, 0, 0] - u * inv[:, 2, 0]) / pz, (inv[:, 0, 1] - u * inv[:, 2, 1]) / pz))
            sy.append(torch.hypot((inv[:, 1, 0] - v * inv[:, 2, 0]) / pz, (inv[:, 1, 1] - v * inv[:, 2, 1]) / pz))
        return torch.stack([torch.stack(sy, 1).min(1).values, torch.stack(sx, 1).min(1).values], 1)

    def min_decode_size(self, regions: torch.Tensor) -> torch.Tensor:
        """int64 [N, 2]: how small a decoder may make each region (DCT scaling) without going
        below the output's resolution: the region divided by the shrink factor."""
        s = self.shrink().clamp_min(1.0)
        hw = (regions[:, 2:] - regions[:, :2]).to(torch.float64)
        return torch.ceil(hw / s - _EPS).to(torch.int64)

    def warp_spec(self, out_size: tuple[int, int], regions: torch.Tensor, origin: torch.Tensor | None = None,
                  scale: torch.Tensor | None = None, antialias: bool = True) -> WarpSpec:
        """The warp for sources stored from `origin` (default 0) at DCT `scale` (default 1).

        scale: float64 [N] factors (1, 1/2, 1/4, 1/8) by which each image was reduced.
        regions, origin: in full-resolution pixels; origin is rescaled here as the decoder did
        (floor), clip = the stored pixels for decoded regions.
        """
        n = self.matrix.shape[0]
        inv = self.inverse()
        img = torch.round(self.in_sizes).to(torch.int64)
        clip = regions.clone()
        org = torch.zeros(n, 2, dtype=torch.int64) if origin is None else origin.clone()
        if scale is not None:
            s = scale.to(torch.float64)
            inv = torch.diag_embed(torch.stack([s, s, torch.ones_like(s)], 1)) @ inv
            img = torch.ceil(img * s.view(n, 1) - _EPS).to(torch.int64)
            sc = s.view(n, 1)
            clip = torch.cat([torch.floor(regions[:, :2] * sc + _EPS), torch.ceil(regions[:, 2:] * sc - _EPS)], 1).to(torch.int64)
            clip = torch.minimum(clip, img.repeat(1, 2))
            org = torch.floor(org * sc + _EPS).to(torch.int64)
        return WarpSpec(inv, img, org, clip, out_size, self.stage.interpolation, self.stage.border,
                        self.stage.fill, antialias)

    def color_matrix(self, means: torch.Tensor | None) -> torch.Tensor | None:
        """Fold the colour ops into float64 [N, 3, 4] (None when there are none).

        means: the warped images' mean colours [N, 3], or None; or [K, N, 3], K candidate mean
        colours per sample folded in one evaluation, giving [K, N, 3, 4]: the GPU path needs
        the chain at four mean colours per batch (see ColorOp.stacked_means)."""
        if not self.color_params:
            return None
        n = self.matrix.shape[0]
        return torch.from_numpy(_fold_colors(self.color_params, means, n))


def _tile(value: object, k: int, n: int) -> object:
    """A per-sample parameter (a tensor with N rows) repeated k times along its rows."""
    if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == n:
        return value.repeat(k, *([1] * (value.dim() - 1)))
    return value


def _color_of(op: ColorOp, params: Params, mean: np.ndarray | None, n: int) -> np.ndarray:
    """op's colour maps as numpy: [N, 3, 4], or [K, N, 3, 4] for means [K, N, 3] (ops without
    `stacked_means` see their parameters tiled K times)."""
    if not op.needs_mean:
        mean = None
    if mean is not None and mean.ndim == 3 and not op.stacked_means:
        k = mean.shape[0]
        tiled = {name: _tile(v, k, n) for name, v in params.items()}
        m = op.color(tiled, torch.from_numpy(mean.reshape(k * n, 3))).reshape(k, n, 3, 4)
    else:
        m = op.color(params, None if mean is None else torch.from_numpy(mean))
    return m.detach().cpu().to(torch.float64).numpy()


def _fold_colors(color_params: list[tuple[ColorOp, Params]], means: torch.Tensor | None, n: int) -> np.ndarray:
    """The chain folded into [N, 3, 4] (or [K, N, 3, 4] for means [K, N, 3]), in numpy."""
    mean = np.zeros((n, 3)) if means is None else means.detach().cpu().to(torch.float64).numpy()
    total = identity(n)
    for op, params in color_params:
        m = _color_of(op, params, mean, n)
        total = compose(m, total)
        mean = apply_to_mean(m, mean)
    if mean.ndim == 3 and total.ndim == 3:  # no op used the means
        total = np.broadcast_to(total, (mean.shape[0], *total.shape))
    return np.ascontiguousarray(total)


@dataclass
class TensorStage:
    """A Lambda run on the whole batch tensor."""

    position: int
    op: Lambda

    def describe(self) -> str:
        return f"tensor[{self.op.name}]"


def _resolve(stage: Stage, op: GeometryOp) -> bool:
    """Fold op's explicit filter settings into the stage; False if they conflict."""
    for attr in ("interpolation", "border", "fill"):
        val = getattr(op, attr, None)
        if val is None:
            continue
        if attr in stage._explicit and stage._explicit[attr] != val:  # type: ignore[attr-defined]
            return False
    for attr in ("interpolation", "border", "fill"):
        val = getattr(op, attr, None)
        if val is not None:
            stage._explicit[attr] = val  # type: ignore[attr-defined]
            setattr(stage, attr, val)
    return True


def build_stages(ops: list[Op]) -> list[Stage | TensorStage]:
    """Split the op list into fused stages (see the module docstring)."""
    stages: list[Stage | TensorStage] = []
    current: Stage | None = None
    normalized = False

    def fresh() -> Stage:
        s = Stage()
        s._explicit = {}  # type: ignore[attr-defined]
        return s

    for pos, op in enumerate(ops):
        if isinstance(op, Lambda):
            if current is not None:
                stages.append(current)
                current = None
            if not any(isinstance(s, Stage) for s in stages):
                stages.append(fresh())  # a Lambda gets a tensor: convert the images first
            stages.append(TensorStage(pos, op))
            continue
        if normalized:
            raise ValueError(f"op {pos} ({type(op).__name__}) comes after Normalize; only Lambda may follow "
                             "Normalize (colour and geometric ops work on pixel values)")
        if current is None:
            current = fresh()
        if isinstance(op, GeometryOp):
            if not _resolve(current, op):
                stages.append(current)
                current = fresh()
                _resolve(current, op)
            current.ops.append((pos, op))
        elif isinstance(op, ColorOp):
            current.ops.append((pos, op))
        elif isinstance(op, Normalize):
            current.normalize = op
            normalized = True
        else:
            raise TypeError(f"op {pos}: {op!r} is not a pixelpipe op")
    if current is not None:
        stages.append(current)
    if not any(isinstance(s, Stage) for s in stages):
        stages.insert(0, fresh())  # a plain conversion to a tensor still needs one pass
    return stages
