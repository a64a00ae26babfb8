"""The mask warp on any device, in its fastest form there: on the CPU the C form
(kernels.cpu.masks, native/mask_warp.c) where it was built and no displacement field moves the
points; elsewhere, and through a field, the plain-torch twin (kernels.reference.masks). Both
give the same labels (tests/test_mask_warp_cpu.py)."""

from __future__ import annotations

import numpy as np
import torch

from .cpu.masks import warp_masks_cpu
from .deform import Deformation
from .reference import masks as reference

__all__ = ["warp_masks"]


def warp_masks(masks: list[torch.Tensor] | torch.Tensor, inverse: np.ndarray, image_sizes: np.ndarray, out_size: tuple[int, int],
               border: str, fill: int, device: torch.device | str, deform: Deformation | None = None) -> torch.Tensor:
    """reference.masks.warp_masks (the same arguments and result), by the C form where it applies."""
    if (torch.device(device).type == "cpu" and deform is None and len(masks)
            and all(m.device.type == "cpu" for m in masks)):
        out = warp_masks_cpu(masks, inverse, image_sizes, out_size, border, fill)
        if out is not None:
            return out
    return reference.warp_masks(masks, inverse, image_sizes, out_size, border, fill, device, deform)
