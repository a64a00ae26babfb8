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

from ...data.transfer import to_device
from ..filters import rows_output

__all__ = ["blur_rows", "blur_rows_into"]

BLOCK_H, BLOCK_W = 16, 32  # a program's output tile (224 = 7 x 32: no idle lanes across a row)


@triton.jit
def _taps(base, hh, ww, inside, s_h, s_w, wrow, H, W, tile_h, tile_w,
          TAPS: tl.constexpr, AXIS: tl.constexpr, WIDE: tl.constexpr,
          BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """The correlation of one sample's channel (at `base`, strides s_h, s_w) with the TAPS
    weights at wrow (float32 bits in an int32 table), along AXIS (3: a row, 2: a column), over
    the output tile (hh, ww) whose first row / column is tile_h / tile_w: float32 products
    summed tap by tap, borders mirrored."""
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
                acc = v * tl.load(wrow + t).to(tl.float32, bitcast=True)
            else:
                acc = acc + v * tl.load(wrow + t).to(tl.float32, bitcast=True)
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
                acc = v * tl.load(wrow + t).to(tl.float32, bitcast=True)
            else:
                acc = acc + v * tl.load(wrow + t).to(tl.float32, bitcast=True)
    return acc


# a call's tables are one int32 upload (the weights as float32 bits), each at an offset that
# changes with the rows that blur: offsets not specialised (a new divisibility by 16 or a 1
# would compile a new variant mid-run)
@triton.jit(do_not_specialize=["rows_at", "weights_at"])
def _blur_pass(src, dst, tables, rows_at, weights_at,  # rows: tables[rows_at:], weights: tables[weights_at:]
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
    sample = tl.load(tables + rows_at + r).to(tl.int64)
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
    acc = _taps(src + src_n * src_sn + c * src_sc, hh, ww, inside, src_sh, src_sw, tables + weights_at + r * TAPS,
                H, W, tile_h, tile_w, TAPS, AXIS, WIDE, BLOCK_H, BLOCK_W)
    tl.store(dst + dst_n * dst_sn + c * dst_sc + hh * dst_sh + ww * dst_sw, acc, mask=inside)


@triton.jit(do_not_specialize=["weights_at"])
def _blur_finish(x, part, dst, tables, weights_at, scale, bias,  # tables: src_of [N], w_of [N], weights at weights_at
                 x_sn, x_sc, x_sh, x_sw,  # x's strides: the samples that do not blur are read here
                 p_sn, p_sc, p_sh, p_sw,  # part's strides: the samples that blur, as the last pass reads them
                 d_sn, d_sc, d_sh, d_sw,  # dst's strides (the output's, any dtype)
                 N, C, H, W,
                 TAPS: tl.constexpr, AXIS: tl.constexpr, WIDE: tl.constexpr,
                 NORM: tl.constexpr,  # v * scale[c] + bias[c] (one rounding) before the store
                 BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    pid = tl.program_id(0)  # n * C + c: every sample's channel
    n = pid // C
    c = pid % C
    s = tl.load(tables + n)  # src_of: part's sample for a sample that blurs, -1 for one that does not
    tile_h = tl.program_id(1) * BLOCK_H
    tile_w = tl.program_id(2) * BLOCK_W
    hh = tile_h + tl.arange(0, BLOCK_H)[:, None]
    ww = tile_w + tl.arange(0, BLOCK_W)[None, :]
    inside = (hh < H) & (ww < W)
    if s >= 0:
        k = tl.load(tables + N + n)  # w_of: its row of the weights
        acc = _taps(part + s.to(tl.int64) * p_sn + c * p_sc, hh, ww, inside, p_sh, p_sw,
                    tables + weights_at + k * TAPS, H, W, tile_h, tile_w, TAPS, AXIS, WIDE, BLOCK_H, BLOCK_W)
    else:
        acc = tl.load(x + n.to(tl.int64) * x_sn + c * x_sc + hh * x_sh + ww * x_sw, mask=inside, other=0.0)
    if NORM:
        acc = tl.fma(acc, tl.load(scale + c), tl.load(bias + c))
    tl.store(dst + n.to(tl.int64) * d_sn + c * d_sc + hh * d_sh + ww * d_sw, acc.to(dst.dtype.element_ty),
             mask=inside)


def _launch(src: torch.Tensor, dst: torch.Tensor, tables: torch.Tensor, rows_at: int, weights_at: int, taps: int,
            rows: int, axis: int, gather: bool, scatter: bool) -> None:
    c, h, w = src.shape[1:]
    grid = (rows * c, triton.cdiv(h, BLOCK_H), triton.cdiv(w, BLOCK_W))
    _blur_pass[grid](src, dst, tables, rows_at, weights_at, *src.stride(), *dst.stride(), c, h, w,
                     TAPS=taps, AXIS=axis, GATHER=gather, SCATTER=scatter, WIDE=taps // 2 >= (w if axis == 3 else h),
                     BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W, num_warps=4, enable_fp_fusion=False)


def _tables(parts: list[np.ndarray], device: torch.device) -> tuple[torch.Tensor, list[int]]:
    """The int32 parts (float parts as their float32 bits) joined and sent in one copy, and
    where each starts: one to_device, not a tensor view per part (on an H200 host an Upload of
    the four tables took 136-141 us against 22-38 for one copy, in its views)."""
    flat = [p.astype(np.float32).view(np.int32).reshape(-1) if p.dtype.kind == "f" else p.astype(np.int32).reshape(-1)
            for p in parts]
    starts = np.cumsum([0] + [len(f) for f in flat[:-1]]).tolist()
    return to_device(np.concatenate(flat), device), starts


def _with_kernels(head: list[np.ndarray], passes: list[tuple[int, np.ndarray]],
                  device: torch.device) -> tuple[torch.Tensor, list[int], dict[int, int]]:
    """_tables of the `head` parts followed by each distinct kernel table of the passes (a
    square kernel's two passes share one): (tables, the head parts' starts, each kernel's start
    by id)."""
    kernels = list({id(k): k for _, k in passes}.values())
    tables, starts = _tables([*head, *kernels], device)
    return tables, starts[: len(head)], {id(k): starts[len(head) + j] for j, k in enumerate(kernels)}


def _passes(along_w: np.ndarray | None, along_h: np.ndarray | None) -> list[tuple[int, np.ndarray]]:
    """(axis, kernels) of each pass: along the rows (3) first, then along the columns (2)."""
    return [(3, k) for k in (along_w,) if k is not None] + [(2, k) for k in (along_h,) if k is not None]


def blur_rows(x: torch.Tensor, rows: np.ndarray, along_w: np.ndarray | None, along_h: np.ndarray | None,
              owned: bool) -> torch.Tensor:
    """x (float32 [N, C, H, W], any strides) with samples `rows` (host int [R], distinct)
    correlated with their own 1-D kernels, along the rows first (along_w, float64 [R, kw],
    odd kw) then along the columns (along_h, [R, kh]), either None to skip that axis; borders
    mirrored. The other samples are x's. The kernels are made float32 on the host (the twin
    casts them on the device: the same rounding), and go up with the row numbers in one copy.
    owned: x may be overwritten (the result is x); else the result is a new tensor."""
    passes = _passes(along_w, along_h)
    if not passes or len(rows) == 0:
        return x
    c, h, w = x.shape[1:]
    r = len(rows)
    tables, _, at = _with_kernels([rows], passes, x.device)
    out = rows_output(x, r, owned)
    first = torch.empty((r, c, h, w), dtype=torch.float32, device=x.device)
    (axis0, k0), last = passes[0], passes[-1]
    _launch(x, first, tables, 0, at[id(k0)], k0.shape[1], r, axis0, gather=True, scatter=False)
    if len(passes) == 2:
        _launch(first, out, tables, 0, at[id(last[1])], last[1].shape[1], r, last[0], gather=False, scatter=True)
    else:
        out.index_copy_(0, tables[:r].to(torch.int64), first)  # the rows, as uploaded
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
    passes = _passes(along_w, along_h)
    n, c, h, w = x.shape
    r = len(rows) if passes else 0
    src_of = np.full(n, -1, dtype=np.int32)  # the sample of `part` the last pass blurs, -1: none
    w_of = np.zeros(n, dtype=np.int32)  # its row of the last pass's weights
    if r:
        w_of[rows] = np.arange(r, dtype=np.int32)
        src_of[rows] = w_of[rows] if len(passes) == 2 else rows  # pass one's rows, or x's samples
    # src_of, w_of, the rows, each distinct kernel table: one copy
    tables, starts, at = _with_kernels([src_of, w_of, rows if r else np.zeros(1, np.int32)], passes if r else [],
                                       x.device)
    part = x
    if r and len(passes) == 2:
        part = torch.empty((r, c, h, w), dtype=torch.float32, device=x.device)
        axis0, k0 = passes[0]
        _launch(x, part, tables, starts[2], at[id(k0)], k0.shape[1], r, axis0, gather=True, scatter=False)
    axis, last = passes[-1] if r else (3, None)
    taps = last.shape[1] if last is not None else 1
    norm = scale is not None
    if norm:
        assert bias is not None
        scale, bias = scale.reshape(-1), bias.reshape(-1)
    grid = (n * c, triton.cdiv(h, BLOCK_H), triton.cdiv(w, BLOCK_W))
    _blur_finish[grid](x, part, out, tables, at[id(last)] if last is not None else 0,
                       scale if norm else x, bias if norm else x,
                       *x.stride(), *part.stride(), *out.stride(), n, c, h, w,
                       TAPS=taps, AXIS=axis, WIDE=taps // 2 >= (w if axis == 3 else h), NORM=norm,
                       BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W, num_warps=4, enable_fp_fusion=False)
