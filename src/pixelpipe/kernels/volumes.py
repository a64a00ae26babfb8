"""The volume warp and pointwise program: the Triton kernel on CUDA, the plain-torch reference
(also the CPU path) elsewhere. kernels.spec3d states what both compute."""

from __future__ import annotations

import torch

from ..data.volumes import VolumeBatch
from ..ops.volume_kinds import Step
from .reference.pointwise3d import pointwise3d_reference
from .reference.warp3d import warp3d_reference
from .spec3d import Warp3DSpec

__all__ = ["run_volume_stage"]


def run_volume_stage(batch: VolumeBatch, spec: Warp3DSpec, steps: list[Step],
                     dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(image [N, C, D, H, W] of `dtype`, label map int64 [N, 1, D, H, W] or None): one warp
    and the pointwise program, where the batch's data lies."""
    from . import gpu_kernels_available

    if batch.device.type == "cuda" and gpu_kernels_available():
        from .triton.warp3d import warp3d_pointwise_gpu

        return warp3d_pointwise_gpu(batch, spec, steps, dtype)
    if batch.device.type == "cpu":
        from .cpu.volumes import sample_map

        image, label = warp3d_reference(batch, spec, sample_map(len(spec)))
    else:
        image, label = warp3d_reference(batch, spec)
    return pointwise3d_reference(image, steps, dtype), label
