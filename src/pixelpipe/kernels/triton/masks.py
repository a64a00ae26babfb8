"""The nearest-neighbour warp of label images (masks) on CUDA in one Triton launch.

Twin: kernels.reference.masks.warp_masks (its definition), whose gather is built from whole
planes: the general form makes about fifteen [N, H, W] float64/int64 temporaries (x, y, the
products and sums, u, v, their floors, the border rule's, the index) in some forty launches per
2^24 output pixels (about 2 GB of planes a pass: 64 masks at 1024x1024 take four), and even its
axis-aligned form writes an int64 index and a flag per output value before the gather. Here
program n * tiles + t takes output pixels t * BLOCK .. of sample n and carries each to its
label in registers: the source point from the sample's inverse matrix in float64 with the twin's
operations in its order (products rounded separately: compiled without fused multiply-adds;
the division is IEEE's, div.rn.f64), the twin's floor (NaN and far points held at +-2^30), its
border rule, the gather of the C channels, and the fill beyond a "constant" border. The labels
equal the twin's (tests/test_mask_kernel.py). The twin's axis-aligned form is the same numbers
as its general form (its _axis_aligned says why), so one form serves both.

Memory traffic: each output value written once (N * H * W * C * itemsize bytes); each label
read once per output pixel that takes it, through L1/L2 (neighbouring output pixels read
neighbouring labels, so an enlarging warp reads each source byte from DRAM about once and a
shrinking one only the sectors holding labels it keeps); 96 bytes per sample of matrices,
sizes and offsets, uploaded in one copy. Masks on the host are joined there and copied once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import triton
import triton.language as tl

from ...data.transfer import Upload
from ..filters import BORDER_CODE
from ..reference.masks import joined_masks

__all__ = ["warp_masks_gpu"]

BLOCK_VALUES = 1024  # output values (pixels x channels rounded to a power of two) a program
LIMIT = 1 << 30  # the twin's bound on source indices (reference.masks._floor_index)


@triton.jit
def _floor_index(t):
    """reference.masks._floor_index as int32: NaN -> 2^30, clamped to +-2^30, floored."""
    t = tl.where(t != t, 1073741824.0, t)
    t = tl.minimum(tl.maximum(t, -1073741824.0), 1073741824.0)
    return tl.floor(t).to(tl.int32)


@triton.jit
def _border(k, size, BORDER: tl.constexpr):
    """filters.border_index: (k moved into [0, size) by the rule, k beyond the axis)."""
    outside = (k < 0) | (k >= size)
    if BORDER == 3:  # wrap: torch.remainder, never negative
        k = k % size
        k = tl.where(k < 0, k + size, k)
    elif BORDER == 1:  # reflect without repeating the edge; a 1-pixel axis has nothing to mirror
        period = tl.maximum(2 * (size - 1), 1)
        k = k % period
        k = tl.where(k < 0, k + period, k)
        k = tl.where(k >= size, period - k, k)
        k = tl.where(size > 1, k, 0)
    else:  # constant and replicate: the edge
        k = tl.minimum(tl.maximum(k, 0), size - 1)
    return k, outside


# the tables come from one upload at offsets that are multiples of 8 bytes: not specialised on
# 16-byte alignment (a new offset would compile a new variant mid-run); nor is the fill label
# numel (the batch's mask elements) changes from batch to batch: not specialised (one that happens
# to be a multiple of 16 would compile a new variant mid-run)
@triton.jit(do_not_specialize=["fill", "numel"], do_not_specialize_on_alignment=["inverse", "sizes", "offsets"])
def _mask_warp(flat, out, inverse, sizes, offsets,  # joined masks, [N, H, W, C] output, float64 [N, 9], int64 [N, 2], int64 [N]
               numel,  # elements of flat: every index is held inside it, as the twin's gather holds it
               H, W, C,  # output height and width, channels
               tiles,  # programs per sample: cdiv(H * W, BLOCK)
               fill,  # the label beyond a "constant" border (already in the masks' dtype)
               BORDER: tl.constexpr,  # filters.BORDER_CODE
               WIDE: tl.constexpr,  # a mask side may exceed 2^30: the border rule in int64, not int32
               BLOCK: tl.constexpr,  # output pixels a program
               CHANNELS: tl.constexpr):  # C rounded up to a power of two
    pid = tl.program_id(0)
    n = pid // tiles
    p = (pid % tiles) * BLOCK + tl.arange(0, BLOCK)
    live = p < H * W
    i = p // W
    x = (p - i * W).to(tl.float64) + 0.5
    y = i.to(tl.float64) + 0.5
    m = inverse + n * 9
    pz = tl.load(m + 6) * x + tl.load(m + 7) * y + tl.load(m + 8)
    u = (tl.load(m + 0) * x + tl.load(m + 1) * y + tl.load(m + 2)) / pz
    v = (tl.load(m + 3) * x + tl.load(m + 4) * y + tl.load(m + 5)) / pz
    iu = _floor_index(u)
    iv = _floor_index(v)
    mh = tl.load(sizes + 2 * n)
    mw = tl.load(sizes + 2 * n + 1)
    if WIDE:
        iu = iu.to(tl.int64)
        iv = iv.to(tl.int64)
    else:  # indices within +-2^30 and sides within 2^30: int32 remainders, far cheaper
        mh = mh.to(tl.int32)
        mw = mw.to(tl.int32)
    ku, out_u = _border(iu, mw, BORDER)
    kv, out_v = _border(iv, mh, BORDER)
    first = tl.load(offsets + n) + (kv.to(tl.int64) * mw + ku) * C  # int64: offsets pass 2^31
    ch = tl.arange(0, CHANNELS)
    keep = live[:, None] & (ch[None, :] < C)
    at = tl.minimum(tl.maximum(first[:, None] + ch[None, :], 0), numel - 1)
    label = tl.load(flat + at, mask=keep)
    if BORDER == 0:
        label = tl.where((out_u | out_v)[:, None], fill.to(label.dtype), label)
    dst = (n.to(tl.int64) * H * W + p)[:, None] * C + ch[None, :]
    tl.store(out + dst, label, mask=keep)


def warp_masks_gpu(masks: Sequence[torch.Tensor] | torch.Tensor, inverse: np.ndarray, image_sizes: np.ndarray,
                   out_size: tuple[int, int], border: str, fill: int, device: torch.device | str) -> torch.Tensor:
    """reference.masks.warp_masks without a displacement field, by one launch: per-sample
    integer or bool label images [H_i, W_i, C] (one dtype, one C; on the host or the device)
    through float64 inverse matrices [N, 3, 3], image_sizes [N, 2] (h, w), to [N, H, W, C]
    of their dtype on `device`."""
    n = len(masks)
    H, W = out_size
    device = torch.device(device)
    if n == 0:
        return torch.zeros(0, H, W, 1, dtype=torch.uint8, device=device)  # as the twin
    if border not in BORDER_CODE:
        raise ValueError(f"border must be one of {sorted(BORDER_CODE)}, got {border!r}")
    c, dtype = masks[0].shape[2], masks[0].dtype
    if dtype.is_floating_point or dtype.is_complex:
        raise ValueError(f"masks are integer or bool label images, got {dtype}")
    if H * W >= 1 << 31:
        raise ValueError(f"out_size {out_size}: at most 2^31 - 1 output pixels a sample")
    out = torch.empty((n, H, W, c), dtype=dtype, device=device)
    if out.numel() == 0:
        return out
    flat, starts = joined_masks(masks, device)  # as the twin joins and counts them
    if flat.numel() == 0:
        raise ValueError("masks: every label image is empty, there is no label to read")
    hw = np.round(image_sizes).astype(np.int64).reshape(n, 2)
    upload = Upload()  # matrices, sizes and offsets in one copy
    upload.add(np.asarray(inverse, dtype=np.float64).reshape(n, 9), torch.float64)
    upload.add(hw, torch.int64)
    upload.add(starts, torch.int64)
    inv_t, hw_t, offsets_t = upload.send(device)
    label = int(torch.tensor(fill, dtype=dtype).item())  # converted as the twin converts it
    if dtype == torch.bool:  # Triton loads no bool tensors: the same bytes as uint8
        flat, target = flat.view(torch.uint8), out.view(torch.uint8)
    else:
        target = out
    channels = triton.next_power_of_2(c)
    block = max(16, BLOCK_VALUES // channels)
    tiles = triton.cdiv(H * W, block)
    _mask_warp[(n * tiles,)](flat, target, inv_t, hw_t, offsets_t, flat.numel(), H, W, c, tiles, label,
                             BORDER=BORDER_CODE[border], WIDE=bool(np.abs(hw).max() > LIMIT), BLOCK=block,
                             CHANNELS=channels, num_warps=4, enable_fp_fusion=False)
    return out
