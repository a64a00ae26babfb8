"""The mask warp on any device, in its fastest form there: on the CPU the C form
(kernels.cpu.masks, native/mask_warp.c) where it was built; on CUDA the Triton kernel
(kernels.triton.masks: one launch, none of the twin's [N, H, W] planes) where Triton imports;
elsewhere, and through a displacement field on any device, the plain-torch twin
(kernels.reference.masks). All give the same labels (tests/test_mask_warp_cpu.py,
tests/test_mask_kernel.py)."""

from __future__ import annotations

import numpy as np
import torch

from .cpu.masks import warp_masks_cpu
from .deform import Deformation
from .filters import BORDER_CODE
from .reference import masks as reference

__all__ = ["warp_masks"]


def warp_masks(masks: list[torch.Tensor] | torch.Tensor, inverse: np.ndarray, image_sizes: np.ndarray, out_size: tuple[int, int],
               border: str, fill: int, device: torch.device | str, deform: Deformation | None = None) -> torch.Tensor:
    """reference.masks.warp_masks (the same arguments and result), by the C form or the Triton
    kernel where one applies."""
    kind = torch.device(device).type
    if (kind == "cpu" and deform is None and len(masks)
            and all(m.device.type == "cpu" for m in masks)):
        out = warp_masks_cpu(masks, inverse, image_sizes, out_size, border, fill)
        if out is not None:
            return out
    if kind == "cuda" and deform is None and border in BORDER_CODE and _labels(masks):
        from . import gpu_kernels_available

        if gpu_kernels_available():
            from .triton.masks import warp_masks_gpu

            return warp_masks_gpu(masks, inverse, image_sizes, out_size, border, fill, device)
    return reference.warp_masks(masks, inverse, image_sizes, out_size, border, fill, device, deform)


def _labels(masks: list[torch.Tensor] | torch.Tensor) -> bool:
    """Whether the masks are integer or bool label images (the kernel's inputs), or none."""
    return not len(masks) or not (masks[0].dtype.is_floating_point or masks[0].dtype.is_complex)
