"""The one door to native planning: the C planner's paths for the built-in ops, found by the
op's type.

A batch's planning is a few hundred numpy calls on arrays of a few hundred numbers, so it costs
numpy's per-call overhead, not arithmetic: on a 16-core H100 host a Compose call of the rn50
pipeline spent about 1.3 ms of its 1.7 ms of host time planning while its kernels take 0.63 ms.
planner.c (pixelpipe.native) does the hashing of every draw, RandomResizedCrop's window,
RandomFlip's and RandomAffine's matrices, ColorJitter's parameters and colour maps in one call
each; detection.c RandomIoUCrop's trials and the boxes moved through a stage's matrices (in
numpy, most of the ssd pipeline's planning). Each path here gives the same bits as the op's own
numpy code, which stays the reference and runs wherever `native.library()` (for detection.c,
`native.detection()`) is None (see pixelpipe.native).

Ops never import this module: the planner asks it for an op's fast path by the op's exact
type (a subclass that changes what an op does gets no C path by accident), and falls back to
the op's own `sample`, `transform` and `color`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import native
from ..data.random import Draws
from ..data.targets import Boxes, Targets
from ..ops.color import GREY_WEIGHTS, HUE_BASIS, ColorJitter
from ..ops.crop import RandomResizedCrop
from ..ops.detection import RandomIoUCrop
from ..ops.geometry import RandomAffine, RandomFlip
from ..ops.kinds import ColorOp, GeometryOp, Op, Params

__all__ = ["block_draws", "color", "move_targets", "plan_geometry", "plan_seeing", "sample"]


# ----------------------------------------------------------------------------- draws
def block_draws(op: Op) -> int:
    """How many leading draws a stage hashes for `op` up front: the op's `draws`, or 0 when
    its C path runs and hashes its own (planner.c hashes only the tries a crop window takes:
    1.3 of 10 on ImageNet-like sizes)."""
    return 0 if type(op) in _OWN_DRAWS and native.library() is not None else op.draws


# ----------------------------------------------------------------------------- per op
def plan_geometry(op: GeometryOp, draws: Draws, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """op.transform(op.sample(draws, sizes), sizes), from planner.c where the op has a path there."""
    fast = _PLAN.get(type(op))
    lib = native.library() if fast is not None else None
    if lib is None:
        params = sample(op, draws, sizes)
        return op.transform(params, sizes)
    return fast(lib, op, draws, sizes)


def plan_seeing(op: GeometryOp, draws: Draws, sizes: np.ndarray,
                targets: Targets | None) -> tuple[np.ndarray, np.ndarray]:
    """op.transform(op.sample(draws, sizes, targets), sizes) for an op with `needs_targets`,
    from detection.c where the op has a path there."""
    lib = native.detection() if type(op) is RandomIoUCrop else None
    if lib is None:
        return op.transform(op.sample(draws, sizes, targets), sizes)  # type: ignore[call-arg]
    return op.transform(_iou_crop_sample(lib, op, draws, sizes, targets), sizes)  # type: ignore[arg-type]


def move_targets(targets: Targets, matrix: np.ndarray, out_sizes: np.ndarray) -> Targets:
    """targets.moved(matrix, out_sizes), the boxes from detection.c where it is built."""
    b = targets.boxes
    lib = native.detection() if b is not None else None
    if lib is None or b is None:
        return targets.moved(matrix, out_sizes)
    data, counts = np.ascontiguousarray(b.data, dtype=np.float64), np.ascontiguousarray(b.counts, dtype=np.int64)
    m = np.ascontiguousarray(matrix, dtype=np.float64)
    hw = np.ascontiguousarray(out_sizes, dtype=np.float64)
    visible = np.ascontiguousarray(b.visible, dtype=np.float64)
    if m.shape != (len(counts), 3, 3) or hw.shape != (len(counts), 2) or data.shape != (int(counts.sum()), 4):
        raise ValueError(f"move_targets: matrices {m.shape} and sizes {hw.shape} for {len(counts)} samples, boxes "
                         f"{data.shape} for {int(counts.sum())} rows")
    out, seen = np.empty_like(data), np.empty(len(data))
    if len(data):
        lib.pp_move_boxes(native.address(data), native.address(counts), len(counts), native.address(m),
                          native.address(hw), native.address(visible), native.address(out), native.address(seen))
    keypoints = None if targets.keypoints is None else targets.keypoints.moved(matrix, out_sizes)
    return Targets(Boxes(out, b.counts, b.labels, seen), keypoints, targets.masks)


def sample(op: Op, draws: Draws, sizes: np.ndarray) -> Params:
    """op.sample(draws, sizes), from planner.c where the op has a path there."""
    fast = _SAMPLE.get(type(op))
    lib = native.library() if fast is not None else None
    if lib is None:
        return op.sample(draws, sizes)
    return fast(lib, op, draws, sizes)


def color(op: ColorOp, params: Params, means: np.ndarray | None) -> np.ndarray:
    """op.color(params, means), from planner.c where the op has a path there."""
    fast = _COLOR.get(type(op))
    lib = native.library() if fast is not None else None
    n = next(iter(params.values())).shape[0] if params else 0
    if lib is None or n == 0:
        return op.color(params, means)
    return fast(lib, op, params, means)


def _flip_plan(lib: Any, op: RandomFlip, draws: Draws, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hw = np.ascontiguousarray(sizes, dtype=np.float64)
    m = np.empty((len(hw), 3, 3))
    lib.pp_random_flip(native.address(draws.prefix_np()), draws.op, native.address(hw), len(hw),
                       op.horizontal, op.vertical, native.address(m))
    return m, sizes


def _affine_params(lib: Any, op: RandomAffine, draws: Draws, sizes: np.ndarray) -> np.ndarray:
    """[N, 6]: angle, tx, ty, scale, shear x, shear y."""
    hw = np.ascontiguousarray(sizes, dtype=np.float64)
    ranges = np.array([*op.degrees, *(op.translate or (0.0, 0.0)), *(op.scale or (1.0, 1.0)),
                       *(op.shear or (0.0,) * 4)], dtype=np.float64)
    has = (op.translate is not None) | (op.scale is not None) << 1 | (op.shear is not None) << 2
    out = np.empty((len(hw), 6))
    lib.pp_random_affine(native.address(draws.prefix_np()), draws.op, native.address(hw), len(hw), op.p,
                         native.address(ranges), has, native.address(out))
    return out


def _affine_sample(lib: Any, op: RandomAffine, draws: Draws, sizes: np.ndarray) -> Params:
    columns = _affine_params(lib, op, draws, sizes).T.copy()  # contiguous, as numpy's are
    return dict(zip(RandomAffine.PARAMS, columns))


def _affine_plan(lib: Any, op: RandomAffine, draws: Draws, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    params = _affine_params(lib, op, draws, sizes)
    # numpy's trigonometry on contiguous columns, as transform() calls it: the same numbers
    # (numpy may take a SIMD path for contiguous arrays only)
    columns = params.T.copy()
    a = np.deg2rad(columns[0])
    trig = np.stack([np.cos(a), np.sin(a), np.tan(np.deg2rad(columns[4])), np.tan(np.deg2rad(columns[5]))], 1)
    hw = np.ascontiguousarray(sizes, dtype=np.float64)
    m = np.empty((len(params), 3, 3))
    lib.pp_affine_matrix(native.address(trig), native.address(params), native.address(hw), len(hw),
                         native.address(m))
    return m, sizes


def _crop_sample(lib: Any, op: RandomResizedCrop, draws: Draws, sizes: np.ndarray) -> Params:
    pre = draws.prefix_np()
    hw = np.ascontiguousarray(sizes, dtype=np.float64)
    out = np.empty((len(hw), 4))
    lo, hi = math.log(op.ratio[0]), math.log(op.ratio[1])
    lib.pp_random_resized_crop(native.address(pre), draws.op, native.address(hw), len(hw), op.TRIES,
                               op.scale[0], op.scale[1] - op.scale[0], op.ratio[0], op.ratio[1],
                               lo, hi - lo, native.address(out))
    return {"top": out[:, 0], "left": out[:, 1], "height": out[:, 2], "width": out[:, 3]}


def _iou_crop_sample(lib: Any, op: RandomIoUCrop, draws: Draws, sizes: np.ndarray,
                     targets: Targets | None) -> Params:
    hw = np.ascontiguousarray(sizes, dtype=np.float64)
    n = len(hw)
    boxes = None if targets is None else targets.boxes
    data = counts = None
    if boxes is not None and len(boxes.data):  # else every image stays whole
        data = np.ascontiguousarray(boxes.data, dtype=np.float64)
        counts = np.ascontiguousarray(boxes.counts, dtype=np.int64)
        if counts.shape != (n,) or data.shape != (int(counts.sum()), 4):
            raise ValueError(f"RandomIoUCrop: boxes {data.shape} with counts {counts.shape} for {n} samples")
    options = np.asarray(op.sampler_options, dtype=np.float64)
    out = np.empty((n, 4))
    lib.pp_iou_crop(native.address(draws.prefix_np()), draws.op, native.address(hw), n,
                    None if data is None else native.address(data), None if counts is None else native.address(counts),
                    native.address(options), len(options), op.min_scale, op.max_scale - op.min_scale,
                    op.min_aspect_ratio, op.max_aspect_ratio, op.trials, op.rounds, native.address(out))
    return {"top": out[:, 0], "left": out[:, 1], "height": out[:, 2], "width": out[:, 3]}


def _jitter_sample(lib: Any, op: ColorJitter, draws: Draws, sizes: np.ndarray) -> Params:
    n = len(draws)
    ranges, given = op.ranges()
    out = np.empty((n, 4))
    lib.pp_color_jitter(native.address(draws.prefix_np()), draws.op, n, op.p, native.address(ranges),
                        native.address(given), native.address(out))
    return dict(zip(ColorJitter.PARAMS, out.T.copy()))


def _jitter_color(lib: Any, op: ColorJitter, params: Params, means: np.ndarray | None) -> np.ndarray:
    """ColorJitter.color in planner.c, from numpy's cos and sin: the same numbers."""
    b, c, s, h = (params[k] for k in ColorJitter.PARAMS)
    n = b.shape[0]
    stacked = means is not None and means.ndim == 3
    mu = np.zeros((1, n, 3)) if means is None else means
    mu = mu if stacked else mu.reshape(1, n, 3)
    a = 2 * math.pi * h
    q = np.ascontiguousarray(np.stack([b, c, s, h], 1), dtype=np.float64)
    trig = np.stack([np.cos(a), np.sin(a)], 1)
    mu = np.ascontiguousarray(mu, dtype=np.float64)
    out = np.empty((mu.shape[0], n, 3, 4))
    lib.pp_jitter_color(native.address(trig), native.address(q), native.address(mu), mu.shape[0], n,
                        native.address(HUE_BASIS), native.address(GREY_WEIGHTS), native.address(out))
    return out if stacked else out[0]


_PLAN: dict[type, Callable[..., tuple[np.ndarray, np.ndarray]]] = {RandomFlip: _flip_plan, RandomAffine: _affine_plan}
_SAMPLE: dict[type, Callable[..., Params]] = {RandomAffine: _affine_sample, RandomResizedCrop: _crop_sample,
                                              ColorJitter: _jitter_sample}
_COLOR: dict[type, Callable[..., np.ndarray]] = {ColorJitter: _jitter_color}
_OWN_DRAWS = frozenset({RandomFlip, RandomAffine, RandomResizedCrop, ColorJitter})  # hashed in planner.c
