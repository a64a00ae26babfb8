"""A policy's pixel operations on CUDA in one to three Triton launches per step, each sample its own operation.

Twin: `PolicySteps.apply_gathered` (ops.structure), which gathers the rows of every (step,
operation) pair, runs the operation's torch form (augment_space.apply_columns) and writes the
rows back. Measured on an H200 (benchmarks/gpu_augment_host.py --ops): RandAugment(2, 9) on
150 decoded images took 275 kernel launches and 11.8 ms of host time per call that way, for
1.7 ms of kernels: the host bounded it. Here a step is at most three launches over the whole
batch, whichever operation each sample took:

- statistics, only where a step has samples whose operation needs them, in two launches: one
  program per tile of TILE pixels of such a sample writes the tile's grey sum (Contrast) and
  each channel's lowest and highest value (AutoContrast), and adds each channel's histogram of
  grey levels (Equalize) into the sample's with integer atomics; then one program per sample
  combines its tiles in a fixed order (so the same numbers on every run) into the grey mean,
  the channels' range and the equalising tables. One program per sample over all its pixels
  took 0.63 ms of the 1.02 ms of kernels of a RandAugment(2, 9) call on 64 images (H200): a
  handful of programs each reading a whole image alone;
- the operations: one program per tile of a sample's pixels branches on the sample's
  operation code (none, Brightness, Color, Contrast, Sharpness, Posterize, Solarize,
  AutoContrast, Equalize, Invert, timm's SolarizeAdd) and writes every channel of its pixels
  into the step's output.
  Sharpness reads each pixel's 3x3 neighbourhood, so a step never writes the tensor it reads:
  two buffers take turns.

Every value is the twin's float32 arithmetic in the twin's order (compiled without fused
multiply-adds; divisions rounded to nearest, Sharpness's by 13 as torch does it on the device:
a product with the reciprocal on CUDA; grey levels rounded half to even through the 1.5 x 2^23
trick, as torch.round), so the same numbers, except Contrast, whose mean sums the
pixels in another order than torch's reduction (by tiles, then the tiles' sums) (a few units in the last place of the mean).
tests/test_policy_kernel.py holds the two to that.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ...data.transfer import Upload
from ..cpu.policy import CODES  # the operation codes (0: none), shared with the CPU form

__all__ = ["CODES", "policy_steps"]

_NEEDS_STATS = tuple(CODES[name] for name in ("Contrast", "AutoContrast", "Equalize"))  # the kernels branch on these
# code -> whether it needs statistics: a lookup (3 us a step on the host, np.isin 19)
_STATS_OF = np.isin(np.arange(max(CODES.values()) + 1), _NEEDS_STATS)
STAT_COLS = 8  # grey mean, then the channels' lowest (3) and highest (3) values, one spare
BLOCK = 1024
TILE = 4096  # pixels of one sample per statistics program (a multiple of BLOCK)


@triton.jit
def _levels(v):
    """Grey levels of [0, 1] values: round(255 v) half to even, clamped to 0..255, int32
    (pixelwise.grey_levels). Adding and taking away 1.5 x 2^23 rounds a float32 below 2^22 to
    the nearest integer, ties to even, as torch.round does."""
    r = (v * 255.0 + 12582912.0) - 12582912.0
    return tl.minimum(tl.maximum(r, 0.0), 255.0).to(tl.int32)


@triton.jit
def _grey(v0, v1, v2):
    """(x * GREY).sum(1) of augment_space._grey: the products, then summed in channel order."""
    return (v0 * 0.299 + v1 * 0.587) + v2 * 0.114


# the per-sample numbers and row lists come from one upload (data.transfer.Upload) at offsets
# that are multiples of 8 bytes: not specialised on 16-byte alignment, or a new offset would
# compile a new variant of the kernel in the middle of training
@triton.jit(do_not_specialize_on_alignment=["rows", "codes"])
def _tile_stats_kernel(src, rows, codes, part, hist, HW, T, C: tl.constexpr, TILE: tl.constexpr,
                       BLOCK: tl.constexpr):
    """Program (t, r): the statistics sample rows[r]'s operation (codes) needs, over its pixels
    t * TILE .. (t + 1) * TILE: the grey sum (Contrast) and each channel's lowest and highest
    value (AutoContrast) into part[n, t], each channel's histogram of grey levels (Equalize)
    added into hist[n] (integer atomics: the same counts in any order)."""
    n = tl.load(rows + tl.program_id(1))
    t = tl.program_id(0)
    code = tl.load(codes + n)
    base = src + n.to(tl.int64) * (C * HW)
    pp = part + (n.to(tl.int64) * T + t) * 8
    offs = tl.arange(0, BLOCK)
    first = t * TILE
    if code == 3:  # Contrast: the tile's grey sum
        acc = tl.zeros([BLOCK], tl.float32)
        for k in tl.static_range(TILE // BLOCK):
            o = first + k * BLOCK + offs
            m = o < HW
            v0 = tl.load(base + o, mask=m, other=0.0)
            if C == 3:
                g = _grey(v0, tl.load(base + HW + o, mask=m, other=0.0), tl.load(base + 2 * HW + o, mask=m, other=0.0))
            else:
                g = v0
            acc += tl.where(m, g, 0.0)
        tl.store(pp, tl.sum(acc, axis=0))
    elif code == 7:  # AutoContrast: each channel's lowest and highest value in the tile
        for c in tl.static_range(C):
            lo = tl.full([BLOCK], float("inf"), tl.float32)
            hi = tl.full([BLOCK], float("-inf"), tl.float32)
            for k in tl.static_range(TILE // BLOCK):
                o = first + k * BLOCK + offs
                m = o < HW
                v = tl.load(base + c * HW + o, mask=m, other=0.0)
                lo = tl.minimum(lo, tl.where(m, v, float("inf")))
                hi = tl.maximum(hi, tl.where(m, v, float("-inf")))
            tl.store(pp + 1 + c, tl.min(lo, axis=0))
            tl.store(pp + 4 + c, tl.max(hi, axis=0))
    elif code == 8:  # Equalize: each channel's histogram of the tile, added to the sample's
        level = tl.arange(0, 512)
        for c in tl.static_range(C):
            h = tl.zeros([512], tl.int32)
            for k in tl.static_range(TILE // BLOCK):
                o = first + k * BLOCK + offs
                m = o < HW
                lv = _levels(tl.load(base + c * HW + o, mask=m, other=0.0))
                h += tl.histogram(tl.where(m, lv, 256), 512)  # bin 256 takes the lanes past the end
            tl.atomic_add(hist + (n * C + c) * 256 + level, h, mask=(level < 256) & (h > 0))


@triton.jit(do_not_specialize_on_alignment=["rows", "codes"])
def _finish_stats_kernel(rows, codes, part, hist, stats, lut, HW, T, C: tl.constexpr, TP: tl.constexpr):
    """Program r: sample rows[r]'s statistics from its tiles' (T of them, TP a power of two at
    least T, both in a fixed order): the grey mean, the channels' range, the equalising tables
    (levels.equalize_reference's rule; the histograms zeroed again for the next step)."""
    n = tl.load(rows + tl.program_id(0))
    code = tl.load(codes + n)
    t = tl.arange(0, TP)
    pp = part + (n.to(tl.int64) * T + t) * 8
    if code == 3:
        tl.store(stats + n * 8, tl.sum(tl.load(pp, mask=t < T, other=0.0), axis=0) / HW)
    elif code == 7:
        for c in tl.static_range(C):
            tl.store(stats + n * 8 + 1 + c, tl.min(tl.load(pp + 1 + c, mask=t < T, other=float("inf")), axis=0))
            tl.store(stats + n * 8 + 4 + c, tl.max(tl.load(pp + 4 + c, mask=t < T, other=float("-inf")), axis=0))
    elif code == 8:
        level = tl.arange(0, 256)
        for c in tl.static_range(C):
            hp = hist + (n * C + c) * 256 + level
            h = tl.load(hp).to(tl.int64)
            tl.store(hp, tl.zeros([256], tl.int32))
            top = tl.max(tl.where(h > 0, level, -1), axis=0)  # the highest level present
            at_top = tl.sum(tl.where(level == top, h, 0), axis=0)
            step = (HW - at_top) // 255
            below = tl.cumsum(h, axis=0) - h
            table = tl.minimum((step // 2 + below) // tl.maximum(step, 1), 255)
            table = tl.where(step == 0, level.to(tl.int64), table)
            tl.store(lut + (n * C + c) * 256 + level, table.to(tl.float32) * (1.0 / 255.0))


@triton.jit
def _one(code, val, v, c, n, stats, lut, grey, C: tl.constexpr):
    """Channel c's values v after the pointwise operation `code` (not Sharpness)."""
    out = v
    if code == 1:  # Brightness
        out = tl.minimum(tl.maximum(v * val, 0.0), 1.0)
    elif code == 2:  # Color: blended with the pixel's grey
        out = tl.minimum(tl.maximum(val * v + (1.0 - val) * grey, 0.0), 1.0)
    elif code == 3:  # Contrast: blended with the image's mean grey
        mean = tl.load(stats + n * 8)
        out = tl.minimum(tl.maximum(val * v + (1.0 - val) * mean, 0.0), 1.0)
    elif code == 5:  # Posterize: the levels' highest bits (val: the mask)
        out = (_levels(v) & val.to(tl.int32)).to(tl.float32) * (1.0 / 255.0)
    elif code == 6:  # Solarize: inverted from level val up
        out = tl.where(v * 255.0 >= val, 1.0 - v, v)
    elif code == 7:  # AutoContrast
        lo = tl.load(stats + n * 8 + 1 + c)
        hi = tl.load(stats + n * 8 + 4 + c)
        flat = hi <= lo
        out = tl.minimum(tl.maximum(tl.div_rn(v - tl.where(flat, 0.0, lo), tl.where(flat, 1.0, hi - lo)), 0.0), 1.0)
    elif code == 8:  # Equalize: the channel's table at the level
        out = tl.load(lut + (n * C + c) * 256 + _levels(v))
    elif code == 9:  # Invert
        out = 1.0 - v
    elif code == 10:  # SolarizeAdd (timm's): the levels under 128 raised by val, at most to 255
        lv = _levels(v).to(tl.float32)
        out = tl.where(lv < 128.0, tl.minimum(lv + val, 255.0), lv) * (1.0 / 255.0)
    return out


@triton.jit
def _sharpen(sb, c, HW, H, W, i, j, o, m, val, RECIPROCAL: tl.constexpr):
    """RandomSharpness's blend at channel c (ops.blur.sharpen): the 3x3 smoothing (centre 5,
    neighbours 1, over 13; neighbours added row by row), the outermost pixels kept. The twin
    divides by 13 with torch's div_, which on CUDA multiplies by the float32 reciprocal of a
    scalar divisor and on the CPU divides: RECIPROCAL picks the CUDA form."""
    p = sb + c * HW
    v = tl.load(p + o, mask=m, other=0.0)
    inner = m & (i > 0) & (i < H - 1) & (j > 0) & (j < W - 1)
    s = v * 5.0
    for dy in tl.static_range(3):
        for dx in tl.static_range(3):
            if dy != 1 or dx != 1:
                s = s + tl.load(p + o + (dy - 1) * W + (dx - 1), mask=inner, other=0.0)
    if RECIPROCAL:
        s = s * (1.0 / 13.0)
    else:
        s = tl.div_rn(s, 13.0)
    blended = tl.minimum(tl.maximum((v - s) * val + s, 0.0), 1.0)
    return tl.where(inner, blended, v)


# stats and lut are the call's upload (an offset of 8 bytes' multiple) when no sample needs
# statistics, tensors of their own otherwise: neither specialised on alignment, as codes and values
@triton.jit(do_not_specialize_on_alignment=["codes", "values", "stats", "lut"])
def _apply_kernel(src, dst, codes, values, stats, lut, H, W, C: tl.constexpr, RECIPROCAL: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Program (t, n): pixels t * BLOCK.. of sample n through its operation, every channel."""
    n = tl.program_id(1)
    HW = H * W
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < HW
    code = tl.load(codes + n)
    val = tl.load(values + n)
    sb = src + n.to(tl.int64) * (C * HW)
    db = dst + n.to(tl.int64) * (C * HW)
    if code == 4:  # Sharpness (images of 2 pixels or fewer a side are kept)
        i = o // W
        j = o % W
        for c in tl.static_range(C):
            tl.store(db + c * HW + o, _sharpen(sb, c, HW, H, W, i, j, o, m, val, RECIPROCAL), mask=m)
    elif C == 3:
        v0 = tl.load(sb + o, mask=m, other=0.0)
        v1 = tl.load(sb + HW + o, mask=m, other=0.0)
        v2 = tl.load(sb + 2 * HW + o, mask=m, other=0.0)
        grey = _grey(v0, v1, v2)
        tl.store(db + o, _one(code, val, v0, 0, n, stats, lut, grey, C), mask=m)
        tl.store(db + HW + o, _one(code, val, v1, 1, n, stats, lut, grey, C), mask=m)
        tl.store(db + 2 * HW + o, _one(code, val, v2, 2, n, stats, lut, grey, C), mask=m)
    else:
        v0 = tl.load(sb + o, mask=m, other=0.0)
        tl.store(db + o, _one(code, val, v0, 0, n, stats, lut, v0, C), mask=m)


def policy_steps(x: torch.Tensor, codes: np.ndarray, values: np.ndarray, owned: bool) -> torch.Tensor:
    """x (float32 [N, C, H, W], C 1 or 3, values in [0, 1]) through S steps: at step s sample i
    takes operation codes[s, i] (CODES; 0 none) with its number values[s, i] (the factor of
    Brightness, Color, Contrast and Sharpness; the mask of Posterize's levels; Solarize's
    threshold in levels; SolarizeAdd's addend; unused otherwise). owned: x may be overwritten.
    A new or reused contiguous tensor."""
    n, c, h, w = x.shape
    if c not in (1, 3) or x.dtype != torch.float32:
        raise ValueError(f"policy_steps takes float32 images of 1 or 3 channels, got {x.dtype} with {c}")
    codes = np.asarray(codes, dtype=np.int32).reshape(-1, n)
    live = [s for s in range(codes.shape[0]) if codes[s].any()]
    if not live or n == 0 or h * w == 0:
        return x
    if h <= 2 or w <= 2:  # Sharpness keeps such images as they are (augment_space.apply_columns)
        codes = np.where(codes == CODES["Sharpness"], 0, codes)
    upload = Upload()
    at_codes = upload.add(codes, torch.int32)
    at_values = upload.add(np.asarray(values, dtype=np.float64).reshape(-1, n), torch.float32)
    stat_rows = {s: np.flatnonzero(_STATS_OF[codes[s]]) for s in live}
    at_rows = {s: upload.add(r, torch.int32) for s, r in stat_rows.items() if len(r)}
    sent = upload.send(x.device)
    codes_d, values_d = sent[at_codes], sent[at_values]  # [steps, N] each
    needs = any(len(r) for r in stat_rows.values())
    tiles = triton.cdiv(h * w, TILE)
    stats = torch.empty(n, STAT_COLS, dtype=torch.float32, device=x.device) if needs else values_d
    lut = torch.empty(n, c, 256, dtype=torch.float32, device=x.device) if needs else values_d
    part = torch.empty(n, tiles, STAT_COLS, dtype=torch.float32, device=x.device) if needs else values_d
    equalizes = bool(np.any(codes == CODES["Equalize"]))  # the histograms start at 0; each step leaves them so
    hist = torch.zeros(n, c, 256, dtype=torch.int32, device=x.device) if equalizes else codes_d
    src = x.contiguous()
    ours = owned or src is not x  # a contiguous copy is ours to overwrite
    spare: torch.Tensor | None = None  # a tensor of ours that no later step reads
    for s in live:
        dst = spare if spare is not None else torch.empty_like(src)
        if s in at_rows:
            rows = sent[at_rows[s]]
            _tile_stats_kernel[(tiles, len(rows))](src, rows, codes_d[s], part, hist, h * w, tiles, C=c, TILE=TILE,
                                                   BLOCK=BLOCK, num_warps=4, enable_fp_fusion=False)
            _finish_stats_kernel[(len(rows),)](rows, codes_d[s], part, hist, stats, lut, h * w, tiles, C=c,
                                               TP=triton.next_power_of_2(tiles), num_warps=4, enable_fp_fusion=False)
        _apply_kernel[(triton.cdiv(h * w, BLOCK), n)](src, dst, codes_d[s], values_d[s], stats, lut, h, w, C=c,
                                                      RECIPROCAL=x.device.type == "cuda", BLOCK=BLOCK, num_warps=4,
                                                      enable_fp_fusion=False)
        spare, src, ours = (src if ours else None), dst, True
    return src
