"""A separable per-sample blur on CUDA: one Triton launch per axis for a batch's blurred rows.

GaussianBlur's twin (ops.blur._filter) sums the taps as torch operations on the whole batch,
a product and a sum per tap and axis: about 90 launches and as many passes over the blurred images
for GaussianBlur(23), about 3 ms per 256-image batch of the SimCLR pipeline on an H200. Here
each launch reads its samples through a table of row numbers (no gather of the rows first),
mirrors at the borders itself (no padded copy), and writes each output value once: pass one
reads the chosen rows of x and writes a float32 buffer of those rows, pass two reads the
buffer and writes the rows of the output (x itself when the caller owns it). Each value is
float32 products and sums in the twin's order, compiled without fused multiply-adds
(enable_fp_fusion=False), so the twin's numbers (tests/test_blur_kernel.py).

Memory traffic per blurred image and axis: its values read once from DRAM (the taps' other
reads hit L1/L2: a program's tile and its taps' halo are a few KB) and written once.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ...data.transfer import Upload
from ..filters import rows_output

__all__ = ["blur_rows"]

BLOCK_H, BLOCK_W = 16, 32  # a program's output tile (224 = 7 x 32: no idle lanes across a row)


# rows and weights come from one upload at offsets that are multiples of 8 bytes: not
# specialised on 16-byte alignment (a new offset would compile a new variant mid-run)
@triton.jit(do_not_specialize_on_alignment=["rows", "weights"])
def _blur_pass(src, dst, rows, weights,
               src_sn, src_sc, src_sh, src_sw,  # src's strides (elements): sample, channel, row, column
               dst_sn, dst_sc, dst_sh, dst_sw,  # dst's strides
               C, H, W,  # channels, height, width (the same for src and dst)
               TAPS: tl.constexpr,  # the kernel's length (odd), centred on the output value
               AXIS: tl.constexpr,  # 3: along a row (columns move), 2: along a column
               GATHER: tl.constexpr,  # src's sample of program row r is rows[r] (else r)
               SCATTER: tl.constexpr,  # dst's sample of program row r is rows[r] (else r)
               WIDE: tl.constexpr,  # the taps reach more than the axis's length - 1 past a border
               BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):  # the output tile
    pid = tl.program_id(0)  # r * C + c: one blurred row's channel
    r = pid // C
    c = pid % C
    sample = tl.load(rows + r).to(tl.int64)
    if GATHER:
        src_n = sample
    else:
        src_n = r.to(tl.int64)
    if SCATTER:
        dst_n = sample
    else:
        dst_n = r.to(tl.int64)
    hh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    ww = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    inside = (hh < H) & (ww < W)
    base = src + src_n * src_sn + c * src_sc
    if AXIS == 3:
        size = W
        along = ww
    else:
        size = H
        along = hh
    # mirrored without repeating the edge (torch's reflect padding); taps reaching further than
    # the axis is long mirror again (pixelwise.reflect_indices), through a remainder, which
    # costs an integer division per value and tap: only where they do (WIDE)
    period = tl.maximum(2 * (size - 1), 1)
    wrow = weights + r * TAPS
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)  # replaced by the first tap's products
    if AXIS == 3:
        first = tl.program_id(2) * BLOCK_W
        step = src_sw
    else:
        first = tl.program_id(1) * BLOCK_H
        step = src_sh
    if (first >= TAPS // 2) & (first + (BLOCK_H if AXIS == 2 else BLOCK_W) + TAPS // 2 <= size):
        # every tap of the tile inside the axis: no mirroring, each tap a fixed step from the
        # value's own address (the index arithmetic per tap was most of the pass's instructions)
        at = base + hh * src_sh + ww * src_sw
        for t in tl.static_range(TAPS):
            v = tl.load(at + (t - TAPS // 2) * step, mask=inside, other=0.0)
            if t == 0:
                acc = v * tl.load(wrow + t)
            else:
                acc = acc + v * tl.load(wrow + t)
    else:
        for t in tl.static_range(TAPS):
            k = along + (t - TAPS // 2)
            if WIDE:
                m = k % period
                m = tl.where(m < 0, m + period, m)
                m = tl.where(m >= size, period - m, m)
                m = tl.where(size > 1, m, 0)
            else:
                m = tl.where(k < 0, -k, k)
                m = tl.where(m >= size, period - m, m)
            if AXIS == 3:
                v = tl.load(base + hh * src_sh + m * src_sw, mask=inside, other=0.0)
            else:
                v = tl.load(base + m * src_sh + ww * src_sw, mask=inside, other=0.0)
            if t == 0:
                acc = v * tl.load(wrow + t)
            else:
                acc = acc + v * tl.load(wrow + t)
    tl.store(dst + dst_n * dst_sn + c * dst_sc + hh * dst_sh + ww * dst_sw, acc, mask=inside)


def _launch(src: torch.Tensor, dst: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor, axis: int,
            gather: bool, scatter: bool) -> None:
    c, h, w = src.shape[1:]
    taps = weights.shape[1]
    grid = (rows.shape[0] * c, triton.cdiv(h, BLOCK_H), triton.cdiv(w, BLOCK_W))
    _blur_pass[grid](src, dst, rows, weights, *src.stride(), *dst.stride(), c, h, w,
                     TAPS=taps, AXIS=axis, GATHER=gather, SCATTER=scatter, WIDE=taps // 2 >= (w if axis == 3 else h),
                     BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W, num_warps=4, enable_fp_fusion=False)


def blur_rows(x: torch.Tensor, rows: np.ndarray, along_w: np.ndarray | None, along_h: np.ndarray | None,
              owned: bool) -> torch.Tensor:
    """x (float32 [N, C, H, W], any strides) with samples `rows` (host int [R], distinct)
    correlated with their own 1-D kernels, along the rows first (along_w, float64 [R, kw],
    odd kw) then along the columns (along_h, [R, kh]), either None to skip that axis; borders
    mirrored. The other samples are x's. The kernels are made float32 on the host (the twin
    casts them on the device: the same rounding), and go up with the row numbers in one copy.
    owned: x may be overwritten (the result is x); else the result is a new tensor."""
    passes = [(3, k) for k in (along_w,) if k is not None] + [(2, k) for k in (along_h,) if k is not None]
    if not passes or len(rows) == 0:
        return x
    c, h, w = x.shape[1:]
    r = len(rows)
    upload = Upload()  # the row numbers and each distinct weight table in one copy
    upload.add(rows, torch.int32)
    tables = {id(k): k for _, k in passes}  # a square kernel's passes share one table
    slot = {key: upload.add(k, torch.float32) for key, k in tables.items()}
    sent = upload.send(x.device)
    rows_t = sent[0]
    weights = [sent[slot[id(k)]] for _, k in passes]  # [R, k] each
    out = rows_output(x, r, owned)
    first = torch.empty((r, c, h, w), dtype=torch.float32, device=x.device)
    _launch(x, first, rows_t, weights[0], passes[0][0], gather=True, scatter=False)
    if len(passes) == 2:
        _launch(first, out, rows_t, weights[1], passes[1][0], gather=False, scatter=True)
    else:
        out.index_copy_(0, rows_t.to(torch.int64), first)
    return out
