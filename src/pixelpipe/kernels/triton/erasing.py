"""RandomErasing's random noise on CUDA in one Triton launch: each erased rectangle's values hashed
and written where they go.

Twin: ops.erasing.noise_on_device, which makes the same values from the same table of numbers
per rectangle (ops.erasing.noise_table) as about 60 torch launches (a search for each value's
rectangle, divisions for its position, the hash's integer steps one operation at a time, then
a scatter): 1.4 ms of host time per call of RandAugment's pipeline on 64 images on an H200
(benchmarks/gpu_augment_host.py --cprofile), a third of the call's host time. Here program
(t, r) takes values t * BLOCK .. of rectangle r: its position from the rectangle's width,
height and area, the field's two uniform draws from the sample's two states and the
position's key (random._mix_u32's steps on uint32, which wrap as the twin's int32 products do),
then the Box-Muller normal as random.normal_keyed computes it: sqrt(-2 log u1) * cos(2 pi u2)
in float32, each operation rounded once (no fused multiply-adds; sqrt rounded to nearest; log
and cos are libdevice's logf and cosf, the functions torch's CUDA kernels call). The values
equal the twin's on CUDA (tests/test_erasing_kernel.py); through Triton's interpreter, log and
cos are numpy's, within a few units in the last place.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from ...data.transfer import to_device

__all__ = ["noise_rectangles"]

BLOCK = 1024


@triton.jit
def _mix(x):
    """random._mix_u32 on uint32 values."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _uniform(state, key):
    """The field's uniform in (0, 1) at a key (random.normal_keyed's u1, u2 before the clamp)."""
    return ((_mix(state ^ key) >> 8) & 0xFFFFFF).to(tl.float32) * (1.0 / 16777216.0)


# R, the batch's rectangle count, changes from batch to batch: not specialised (a count that
# happens to be 1 or a multiple of 16 would compile a new variant mid-run)
@triton.jit(do_not_specialize=["R"])
def _noise_kernel(out, tab, R, BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr):
    """Program (t, r): values t * BLOCK .. of rectangle r (tab: ops.erasing.noise_table's rows,
    R columns) written into out at their sample's element."""
    r = tl.program_id(1)
    end = tl.load(tab + r)
    count = end - tl.load(tab + R + r)
    local = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = local < count
    width = tl.load(tab + 2 * R + r)
    height = tl.load(tab + 3 * R + r)
    area = tl.load(tab + 4 * R + r)
    channel = local // area
    row = local // width - channel * height
    element = local + tl.load(tab + 5 * R + r) + channel * tl.load(tab + 8 * R + r) + row * tl.load(tab + 7 * R + r)
    key = _mix(element.to(tl.int32).to(tl.uint32, bitcast=True) + 0x9E3779B9)
    s1 = tl.load(tab + 9 * R + r).to(tl.int32).to(tl.uint32, bitcast=True)
    s2 = tl.load(tab + 10 * R + r).to(tl.int32).to(tl.uint32, bitcast=True)
    u1 = tl.maximum(_uniform(s1, key), 1.0 / 16777216.0)
    u2 = _uniform(s2, key)
    if LIBDEVICE:
        v = tl.sqrt_rn(-2.0 * libdevice.log(u1)) * libdevice.cos(6.283185307179586 * u2)
    else:  # Triton's interpreter has no libdevice: numpy's log and cos
        v = tl.sqrt_rn(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
    tl.store(out + tl.load(tab + 6 * R + r) + element, v.to(out.dtype.element_ty), mask=m)


def noise_rectangles(out: torch.Tensor, table: np.ndarray) -> torch.Tensor:
    """out (contiguous [N, C, H, W], floating) with the rectangles of `table` (int64 [11, R],
    ops.erasing.noise_table) set to their noise; out itself."""
    if not out.is_contiguous() or not out.is_floating_point():
        raise ValueError(f"noise_rectangles writes into a contiguous floating tensor, got {out.dtype} "
                         f"with strides {out.stride()}")
    r = table.shape[1]
    if r == 0:
        return out
    counts = table[0] - table[1]
    if counts.max() <= 0:
        return out
    tab = to_device(np.ascontiguousarray(table, dtype=np.int64), out.device)
    _noise_kernel[(triton.cdiv(int(counts.max()), BLOCK), r)](out, tab, r, BLOCK=BLOCK, num_warps=4,
                                                                LIBDEVICE=os.environ.get("TRITON_INTERPRET") != "1",
                                                                enable_fp_fusion=False)
    return out
