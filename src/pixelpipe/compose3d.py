"""Compose3D: a list of volume ops planned into one warp and one pointwise program. A spec: it
samples, folds, and hands the work to kernels.volumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .data.random import Draws, prefix
from .data.volumes import VolumeBatch, VolumeHeaders
from .kernels.spec3d import BORDERS_3D, Deformation, Warp3DSpec, antialias_sigmas
from .ops.checks import check_finite
from .ops.volume_kinds import Step, VolumeGeometryOp, VolumeIntensityOp, VolumeOp, VolumeState, translation

__all__ = ["Compose3D", "VolumePlan"]

OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_HALF = np.full(3, 0.5)


@dataclass
class VolumePlan:
    """A batch's plan: the warp, the pointwise program, and where the outputs lie in the world.

    Attributes:
        warp: the warp (inverse matrices, output size, border, antialiasing).
        steps: the intensity steps in order (unfolded).
        matrix: float64 [N, 4, 4], the forward matrix input -> output voxel coordinates.
        affine: float64 [N, 4, 4], each output's voxel-index-to-world matrix.
        spacing: float64 [N, 3], each output's voxel sizes.
    """

    warp: Warp3DSpec
    steps: list[Step]
    matrix: np.ndarray
    affine: np.ndarray
    spacing: np.ndarray


def _moved_affine(affine: np.ndarray, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the index-to-world affine and the inverse matrix) after `matrix`: output index j has
    its centre at j + 0.5, from input point inverse @ (j + 0.5), input index that - 0.5."""
    inverse = np.linalg.inv(matrix)
    n = len(matrix)
    moved = affine @ translation(np.tile(-_HALF, (n, 1))) @ inverse @ translation(np.tile(_HALF, (n, 1)))
    return moved, inverse


class Compose3D:
    """Volume ops applied as one warp (trilinear image, nearest label map, the same 4x4 matrix
    per sample) and one pointwise program.

    Args:
        ops: the volume ops, in order. Geometric ops multiply into one matrix per sample; the
            intensity ops run, in their order, on the warped volume (statistics such as
            NormalizeIntensity's are those of the output, noise and bias fields are per output
            voxel), whatever their place among the geometric ops.
        dtype: output dtype: torch.float32, float16 or bfloat16.
        border: "constant" (`fill`, and `label_fill` for the label map), "replicate" or
            "reflect" (about the faces, edge voxel repeated).
        fill: the image's value beyond a constant border, in input units (e.g. -1000 for CT air).
        label_fill: the label map's value there (0, or an ignore index such as 255).
        antialias: blur the input before a warp that shrinks an axis by 1.25x or more
            (kernels.spec3d says how); False never blurs.
        num_samples: outputs per volume (patch-based training, MONAI's num_samples): each
            volume is augmented k times, every random op drawing anew for each patch (patch
            j of the volume of index i draws as sample i * k + j); the output has N * k rows,
            "index" repeats each volume's index and "patch" gives j.

    Calling it: ``compose(volumes, labels=None, spacing=None, affine=None, seed=0, epoch=0,
    indices=None)`` with a VolumeBatch, or a list of [D, H, W] / [D, H, W, C] tensors or
    arrays (then labels, spacing and affine per volume, as VolumeBatch.from_list takes them).
    Returns a dict: "image" [N, C, D, H, W] of `dtype`, "label" int64 [N, 1, D, H, W] when
    label maps were given, "affine" float64 [N, 4, 4] and "spacing" float64 [N, 3] of the
    outputs (voxel index to world, as nibabel's), "index" int64 [N]. Every output must have
    the same size: end the geometric ops with a crop or a Resize3D when sizes differ. `indices`
    (default 0..N-1) with the seed and epoch fix every random draw, so a sample gets the same
    augmentation alone or in any batch.

    The work runs where the data is: on CUDA with Triton, the fused kernel
    (kernels.triton.warp3d); elsewhere the plain-torch reference (kernels.reference.warp3d).

    Example:
        >>> import torch, pixelpipe as pp
        >>> t = pp.Compose3D([pp.RandomAffine3D(degrees=10), pp.RandomFlip3D(), pp.RandomCrop3D(16),
        ...                   pp.ScaleIntensityRange(-1000, 400)], dtype=torch.float16)
        >>> out = t([torch.zeros(20, 24, 22, dtype=torch.int16)], labels=[torch.zeros(20, 24, 22, dtype=torch.uint8)])
        >>> out["image"].shape, out["label"].shape
        (torch.Size([1, 1, 16, 16, 16]), torch.Size([1, 1, 16, 16, 16]))
    """

    def __init__(self, ops: Sequence[VolumeOp], dtype: torch.dtype = torch.float32, border: str = "constant",
                 fill: float = 0.0, label_fill: int = 0, antialias: bool = True, num_samples: int = 1) -> None:
        ops = list(ops)
        for i, op in enumerate(ops):
            if not isinstance(op, (VolumeGeometryOp, VolumeIntensityOp)):
                raise TypeError(f"ops[{i}] is {type(op).__name__}, not a volume op (Compose3D takes the 3D ops: "
                                "RandomAffine3D, RandomCrop3D, ScaleIntensityRange, ...)")
        if dtype not in OUT_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {dtype}")
        if border not in BORDERS_3D:
            raise ValueError(f"border must be one of {', '.join(map(repr, BORDERS_3D))}, got {border!r}")
        if isinstance(label_fill, bool) or not isinstance(label_fill, int):
            raise ValueError(f"label_fill must be an int, got {label_fill!r}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or not 1 <= num_samples <= 1024:
            raise ValueError(f"num_samples must be an int in [1, 1024], got {num_samples!r}")
        self.ops, self.dtype, self.border, self.num_samples = ops, dtype, border, num_samples
        self.fill, self.label_fill, self.antialias = check_finite("fill", fill), label_fill, bool(antialias)

    def __repr__(self) -> str:
        inner = ",\n".join(f"    {op!r}" for op in self.ops)
        return (f"Compose3D([\n{inner}\n], dtype={self.dtype}, border={self.border!r}, fill={self.fill}, "
                f"label_fill={self.label_fill}, antialias={self.antialias}, num_samples={self.num_samples})")

    def plan(self, batch: VolumeBatch | VolumeHeaders, seed: int = 0, epoch: int = 0,
             indices: Any = None) -> VolumePlan:
        """Sample every op for the batch (or its headers: nothing here reads voxels, except
        RandomCropByLabel its label maps) and fold the geometry: the warp and the program.
        `indices` are the draws' sample indices (default 0..N-1)."""
        n = len(batch)
        if n == 0:  # the output size of an empty batch: as a one-voxel volume's
            one = VolumeBatch.from_list([torch.zeros(1, 1, 1)], [torch.zeros(1, 1, 1, dtype=torch.uint8)])
            warp = self.plan(one, seed, epoch).warp
            empty = np.zeros((0, 4, 4))
            return VolumePlan(Warp3DSpec(empty, warp.out_size, self.border, self.fill, self.label_fill), [],
                              empty, empty, np.zeros((0, 3)))
        idx = np.arange(n, dtype=np.int64) if indices is None else np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) != n:
            raise ValueError(f"got {len(idx)} indices for {n} volumes")
        pre = prefix(seed, epoch, idx)
        state = VolumeState(batch.sizes.numpy().copy(), batch.spacing.copy(), batch.affine.copy(),
                            np.tile(np.eye(4), (n, 1, 1)), batch)
        steps: list[Step] = []
        deform: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (matrix before, frame, field)
        for pos, op in enumerate(self.ops):
            draws = Draws(seed, epoch, idx, pos, prefix=pre)
            params = op.sample(draws, state)
            if getattr(op, "deformation", False):
                if deform is not None:
                    raise ValueError("a Compose3D takes one ElasticDeformation3D")
                deform = (state.matrix.copy(), state.sizes.copy(), params["field"])
            if isinstance(op, VolumeGeometryOp):
                m, sizes = op.transform(params, state)
                state.matrix = m @ state.matrix
                state.sizes = np.asarray(sizes, dtype=np.float64)
                state.affine = _moved_affine(batch.affine, state.matrix)[0]
                state.spacing = np.linalg.norm(state.affine[:, :3, :3], axis=-2)
            else:
                steps.append(op.step(params, draws))
        out = np.rint(state.sizes).astype(np.int64)
        if (out != out[0]).any():
            differ = sorted({tuple(s) for s in out.tolist()})[:4]
            raise ValueError(f"the outputs differ in size ({differ} ...): end the geometric ops with a crop "
                             "or a Resize3D so that every sample has one size")
        if (out <= 0).any():
            raise ValueError(f"an output size is {out[0].tolist()}: every axis needs at least one voxel")
        affine, inverse = _moved_affine(batch.affine, state.matrix)
        size = tuple(int(v) for v in out[0])
        sigmas = antialias_sigmas(inverse) if self.antialias else np.zeros((n, 3))
        elastic = None
        if deform is not None:
            before, frame, field = deform
            elastic = Deformation(before @ inverse, np.linalg.inv(before), field.astype(np.float32), frame)
        warp = Warp3DSpec(inverse, size, self.border, self.fill, self.label_fill, sigmas, elastic)  # type: ignore[arg-type]
        return VolumePlan(warp, steps, state.matrix, affine, np.linalg.norm(affine[:, :3, :3], axis=-2))

    def __call__(self, volumes: Any, labels: Sequence[Any] | None = None, spacing: Any = None, affine: Any = None,
                 seed: int = 0, epoch: int = 0, indices: Any = None) -> dict[str, Any]:
        if isinstance(volumes, VolumeBatch):
            if labels is not None or spacing is not None or affine is not None:
                raise ValueError("a VolumeBatch carries its labels, spacing and affines: give them to it")
            batch = volumes
        else:
            batch = VolumeBatch.from_list(list(volumes), labels, spacing, affine)
        n, k = len(batch), self.num_samples
        idx = np.arange(n, dtype=np.int64) if indices is None else np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) != n:
            raise ValueError(f"got {len(idx)} indices for {n} volumes")
        draw_idx = idx
        if k > 1:  # k patches per volume: rows pointing at the same voxels, each drawing anew
            batch = batch.repeat_each(k)
            draw_idx = (idx[:, None] * k + np.arange(k)[None, :]).reshape(-1)
        return self.finish(batch, self.plan(batch, seed, epoch, draw_idx), idx)

    def finish(self, batch: VolumeBatch, plan: VolumePlan, indices: np.ndarray) -> dict[str, Any]:
        """Run a plan on the batch's voxels: the warp and the pointwise program, in the output
        dict. `indices` are the volumes' indices (each repeated num_samples times in "index").
        A loader that planned from headers passes the boxes it read with the plan's inverse
        matrices moved to them (VolumePipeline)."""
        from .kernels.volumes import run_volume_stage

        k = self.num_samples
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        image, label = run_volume_stage(batch, plan.warp, plan.steps, self.dtype)
        out: dict[str, Any] = {"image": image, "affine": torch.from_numpy(plan.affine),
                               "spacing": torch.from_numpy(plan.spacing),
                               "index": torch.from_numpy(np.repeat(idx, k))}
        if k > 1:
            out["patch"] = torch.arange(k).repeat(len(idx))
        if label is not None:
            out["label"] = label
        return out
