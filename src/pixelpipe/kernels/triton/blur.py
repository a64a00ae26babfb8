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

__all__ = ["blur_rows", "blur_rows_into"]

BLOCK_H, BLOCK_W = 16, 32  # a program's output tile (224 = 7 x 32: no idle lanes across a row)


@triton.jit
def _taps(base, hh, ww, inside, s_h, s_w, wrow, H, W, tile_h, tile_w,
          TAPS: tl.constexpr, AXIS: tl.constexpr, WIDE: tl.constexpr,
          BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """The correlation of one sample's channel (at `base`, strides s_h, s_w) with the TAPS
    weights at wrow, along AXIS (3: a row, 2: a column), over the output tile (hh, ww) whose
    first row / column is tile_h / tile_w: float32 products summed tap by tap, borders mirrored."""
    if AXIS == 3:
        size = W
        along = ww
        first = tile_w
        step = s_w
    else:
        size = H
        along = hh
        first = tile_h
        step = s_h
    # mirrored without repeating the edge (torch's reflect padding); taps reaching further than
    # the axis is long mirror again (pixelwise.reflect_indices), through a remainder, which
    # costs an integer division per value and tap: only where they do (WIDE)
    period = tl.maximum(2 * (size - 1), 1)
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)  # replaced by the first tap's products
    if (first >= TAPS // 2) & (first + (BLOCK_H if AXIS == 2 else BLOCK_W) + TAPS // 2 <= size):
        # every tap of the tile inside the axis: no mirroring, each tap a fixed step from the
        # value's own address (the index arithmetic per tap was most of the pass's instructions)
        at = base + hh * s_h + ww * s_w
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
                v = tl.load(base + hh * s_h + m * s_w, mask=inside, other=0.0)
            else:
                v = tl.load(base + m * s_h + ww * s_w, mask=inside, other=0.0)
            if t == 0:
                acc = v * tl.load(wrow + t)
            else:
                acc = acc + v * tl.load(wrow + t)
    return acc


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
    tile_h = tl.program_id(1) * BLOCK_H
    tile_w = tl.program_id(2) * BLOCK_W
    hh = tile_h + tl.arange(0, BLOCK_H)[:, None]
    ww = tile_w + tl.arange(0, BLOCK_W)[None, :]
    inside = (hh < H) & (ww < W)
    acc = _taps(src + src_n * src_sn + c * src_sc, hh, ww, inside, src_sh, src_sw, weights + r * TAPS, H, W,
                tile_h, tile_w, TAPS, AXIS, WIDE, BLOCK_H, BLOCK_W)
    tl.store(dst + dst_n * dst_sn + c * dst_sc + hh * dst_sh + ww * dst_sw, acc, mask=inside)


@triton.jit(do_not_specialize_on_alignment=["src_of", "w_of", "weights"])
def _blur_finish(x, part, dst, src_of, w_of, weights, scale, bias,
                 x_sn, x_sc, x_sh, x_sw,  # x's strides: the samples that do not blur are read here
                 p_sn, p_sc, p_sh, p_sw,  # part's strides: the samples that blur, as the last pass reads them
                 d_sn, d_sc, d_sh, d_sw,  # dst's strides (the output's, any dtype)
                 C, H, W,
                 TAPS: tl.constexpr, AXIS: tl.constexpr, WIDE: tl.constexpr,
                 NORM: tl.constexpr,  # v * scale[c] + bias[c] (one rounding) before the store
                 BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    pid = tl.program_id(0)  # n * C + c: every sample's channel
    n = pid // C
    c = pid % C
    s = tl.load(src_of + n)  # part's sample for a sample that blurs, -1 for one that does not
    tile_h = tl.program_id(1) * BLOCK_H
    tile_w = tl.program_id(2) * BLOCK_W
    hh = tile_h + tl.arange(0, BLOCK_H)[:, None]
    ww = tile_w + tl.arange(0, BLOCK_W)[None, :]
    inside = (hh < H) & (ww < W)
    if s >= 0:
        k = tl.load(w_of + n)
        acc = _taps(part + s.to(tl.int64) * p_sn + c * p_sc, hh, ww, inside, p_sh, p_sw, weights + k * TAPS, H, W,
                    tile_h, tile_w, TAPS, AXIS, WIDE, BLOCK_H, BLOCK_W)
    else:
        acc = tl.load(x + n.to(tl.int64) * x_sn + c * x_sc + hh * x_sh + ww * x_sw, mask=inside, other=0.0)
    if NORM:
        acc = tl.fma(acc, tl.load(scale + c), tl.load(bias + c))
    tl.store(dst + n.to(tl.int64) * d_sn + c * d_sc + hh * d_sh + ww * d_sw, acc.to(dst.dtype.element_ty),
             mask=inside)


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


def blur_rows_into(x: torch.Tensor, rows: np.ndarray, along_w: np.ndarray | None, along_h: np.ndarray | None,
                   out: torch.Tensor, scale: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> None:
    """blur_rows(x, rows, along_w, along_h) written into `out` (a [N, C, H, W] view of any
    float dtype and strides: the batch's output), with Normalize's scale and bias (float32
    [1, C, 1, 1], from engine.pixels.normalize_operands) applied on the way when given: the
    last pass reads every sample, the blurred ones through their kernels and the others as
    they are, and stores out's dtype. So the stage's last two passes (the blur's column pass
    and Normalize's cast into the output) are one, and the blurred rows are not written back
    into x and read again. Each value is the blur's float32 sum (blur_rows' numbers), then
    fma(v, scale, bias) (one rounding, as torch's addcmul rounds it on CUDA), then the cast."""
    passes = [(3, k) for k in (along_w,) if k is not None] + [(2, k) for k in (along_h,) if k is not None]
    n, c, h, w = x.shape
    r = len(rows) if passes else 0
    src_of = np.full(n, -1, dtype=np.int32)  # the sample of `part` the last pass blurs, -1: none
    w_of = np.zeros(n, dtype=np.int32)  # its row of the last pass's weights
    if r:
        w_of[rows] = np.arange(r, dtype=np.int32)
        src_of[rows] = w_of[rows] if len(passes) == 2 else rows  # pass one's rows, or x's samples
    upload = Upload()  # the tables and each distinct weight table in one copy
    for table in (rows if r else np.zeros(1), src_of, w_of):
        upload.add(table, torch.int32)
    tables = {id(k): k for _, k in passes} if r else {}
    slot = {key: upload.add(k, torch.float32) for key, k in tables.items()}
    sent = upload.send(x.device)
    rows_t, src_t, w_t = sent[:3]
    part = x
    if r and len(passes) == 2:
        part = torch.empty((r, c, h, w), dtype=torch.float32, device=x.device)
        _launch(x, part, rows_t, sent[slot[id(passes[0][1])]], passes[0][0], gather=True, scatter=False)
    axis, last = passes[-1] if r else (3, None)
    weights = sent[slot[id(last)]] if last is not None else src_t  # no sample blurs: never read
    taps = last.shape[1] if last is not None else 1
    norm = scale is not None
    if norm:
        assert bias is not None
        scale, bias = scale.reshape(-1), bias.reshape(-1)
    grid = (n * c, triton.cdiv(h, BLOCK_H), triton.cdiv(w, BLOCK_W))
    _blur_finish[grid](x, part, out, src_t, w_t, weights, scale if norm else x, bias if norm else x,
                       *x.stride(), *part.stride(), *out.stride(), c, h, w,
                       TAPS=taps, AXIS=axis, WIDE=taps // 2 >= (w if axis == 3 else h), NORM=norm,
                       BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W, num_warps=4, enable_fp_fusion=False)
