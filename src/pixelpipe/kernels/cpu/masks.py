"""The mask warp's fast form on the CPU: native/mask_warp.c, one C call per batch without the
GIL, each output pixel computed and written once. The twin is kernels/reference/masks.py (plain
torch, which the GPU runs); both compute each source point with the same float64 operations in
the same order and the same border rules, so the same labels (tests/test_mask_warp_cpu.py).

Why: the twin's [N, H, W] float64 planes made a rotated 1024x1024 mask cost 80-119 ms on 2 cores
(15 ms for an axis-aligned map, whose rows and columns it computes once); here 8 ms on one core,
either map (a LetterBox of ImageNet-sized label images to 1024x1024, this 2-core machine).
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Sequence

import numpy as np
import torch

from ... import native
from ..filters import BORDER_CODE

__all__ = ["mask_library", "warp_masks_cpu"]

_P, _I = C.c_void_p, C.c_int64
_SIGNATURES = {"pp_mask_warp": (_I, [_P, _I, _P, _P, _I, _P, _I, _I, _I, _I, _P, _P])}


def mask_library() -> C.CDLL | None:
    """native/mask_warp.c loaded, or None (without a C compiler, or PIXELPIPE_NATIVE=0): the
    twin warps the masks then."""
    if not native.enabled():
        return None
    return native.shared("mask_warp.c", "masks are warped by the plain-torch twin on the CPU", C.CDLL, _SIGNATURES)


def warp_masks_cpu(masks: Sequence[torch.Tensor], inverse: np.ndarray, image_sizes: np.ndarray,
                   out_size: tuple[int, int], border: str, fill: int) -> torch.Tensor | None:
    """reference.masks.warp_masks for masks on the CPU (no displacement field): [N, H, W, C]
    in their dtype; None where the C helper is not there."""
    lib = mask_library()
    if lib is None or border not in BORDER_CODE:
        return None
    n = len(masks)
    H, W = out_size
    c, dtype = masks[0].shape[2], masks[0].dtype
    out = torch.empty((n, H, W, c), dtype=dtype)
    if n == 0 or H == 0 or W == 0:
        return out
    flat = torch.cat([m.reshape(-1) for m in masks]).contiguous()
    offsets = np.concatenate([[0], np.cumsum([m.numel() for m in masks])[:-1]]).astype(np.int64)
    hw = np.ascontiguousarray(np.round(image_sizes).astype(np.int64).reshape(n, 2))
    inv = np.ascontiguousarray(inverse, dtype=np.float64).reshape(n, 9)
    label = torch.tensor([fill], dtype=dtype)  # as the twin converts it
    lib.pp_mask_warp(flat.data_ptr(), flat.element_size(), offsets.ctypes.data, hw.ctypes.data, c, inv.ctypes.data,
                     n, H, W, BORDER_CODE[border], label.data_ptr(), out.data_ptr())
    return out
