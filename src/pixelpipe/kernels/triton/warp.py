"""The GPU kernel: one Triton launch reads the ragged uint8 batch and writes the final tensor.

Per output pixel: the source point from the sample's 3x3 inverse matrix with perspective
division, the antialiasing stretch from the local Jacobian, the filter taps (border rule, clip
box, Pillow's edge renormalisation), then, fused, the sample's colour matrix, clamp,
normalisation, cast and layout. With a displacement field (an ElasticTransform's, DEFORM) the
source point goes through it on the way: 4 more float32 taps of 2 values per output pixel,
from a field of a few KB per sample that stays in L1/L2 (kernels.deform says how it is read).
Twin: warp_torch.warp_reference + pointwise_torch.
pointwise_reference (tests/test_gpu_kernels.py checks they agree).

Sources: an ImageBatch (one buffer, contiguous HWC samples) or a DeviceViews (samples left in
the decoder's buffers; per-sample row and column strides, possibly negative). Memory traffic:
each output element is written once; source pixels are read through L1/L2 by the neighbouring
output pixels that share them (a 224x224 output of a 300x300 window reads each source byte from
DRAM about once).

Per sample one float64 row of parameters, uploaded in one copy per call (`pack_params`): 21
geometry values, then with a colour transform its 3x4 matrix, then, when the matrix depends on
the warped image's mean colour, 9 slopes. The mean-dependent case takes two launches: the warp
writes a float32 intermediate and sums each sample's channels (atomics into [N, 3]); a pointwise
launch reads those sums, completes the colour matrix itself (out = A x + b0 + B mu) and
finishes from the intermediate, so no host round trip sits between the two and the warp runs
once (warping twice, once for the sums and once fused, took 1.33 ms per batch of the rich
pipeline on an H100 against 0.63 ms for one warp).
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ...data.batch import strided_table
from ...data.transfer import device_constant, to_device
from ..filters import BORDER_CODE, INTERP_CODE
from ..spec import PointwiseSpec, WarpSpec

GEOM_COLS = 21  # see WarpSpec.packed
COLOR_COLS = 12  # the colour matrix, row-major 3x4, after the geometry
SLOPE_COLS = 9  # d(offset)/d(mean colour), row-major 3x3, after the colour matrix


@triton.jit
def _filter(t, INTERP: tl.constexpr):
    a = tl.abs(t)
    if INTERP == 1:
        w = tl.maximum(1.0 - a, 0.0)
    else:  # Keys cubic, a = -0.5 (Pillow's bicubic)
        near = (1.5 * a - 2.5) * a * a + 1.0
        far = ((-0.5 * a + 2.5) * a - 4.0) * a + 2.0
        w = tl.where(a < 1.0, near, tl.where(a < 2.0, far, 0.0))
    return w


@triton.jit
def _border(k, size, BORDER: tl.constexpr):
    """Remap an integer tap index by the border rule; also say whether it left the image."""
    outside = (k < 0) | (k >= size)
    if BORDER == 3:  # wrap
        kb = k % size
        kb = tl.where(kb < 0, kb + size, kb)
    elif BORDER == 1:  # reflect without repeating the edge
        period = tl.maximum(2 * (size - 1), 1)
        m = k % period
        m = tl.where(m < 0, m + period, m)
        m = tl.where(m >= size, period - m, m)
        kb = tl.where(size > 1, m, 0)
    else:  # constant (index unused when outside) and replicate
        kb = tl.minimum(tl.maximum(k, 0), size - 1)
    return kb, outside


@triton.jit
def _tap(k, d, inv, size, lo, hi, inside, INTERP: tl.constexpr, BORDER: tl.constexpr):
    """Tap k along one axis, d = k + 0.5 - centre its float32 distance from the source point
    and inv the float32 reciprocal of the stretch: its index remapped by the border rule,
    whether it reads the fill colour (constant border, source point inside the image), and its
    filter weight (0 for a tap outside the clip box [lo, hi) of the decoded region or dropped
    at a constant edge)."""
    kb, out = _border(k, size, BORDER)
    if BORDER == 0:
        fill = out & ~inside
        keep = fill | (~out & (kb >= lo) & (kb < hi))
    else:
        fill = tl.zeros_like(out)
        keep = (kb >= lo) & (kb < hi)
    if INTERP == 0:
        w = tl.where(keep, 1.0, 0.0)
    else:
        w = tl.where(keep, _filter(d * inv, INTERP), 0.0)
    return kb, fill, w


@triton.jit
def _bilinear(p, k, GW, ax, ay, ok):
    """One component of the coarse field (p: float32 [Gh, Gw]) between nodes k, k + 1, k + GW
    and k + GW + 1, at fractions (ax, ay)."""
    v00 = tl.load(p + k, mask=ok, other=0.0)
    v01 = tl.load(p + k + 1, mask=ok, other=0.0)
    v10 = tl.load(p + k + GW, mask=ok, other=0.0)
    v11 = tl.load(p + k + GW + 1, mask=ok, other=0.0)
    return (v00 * (1.0 - ax) + v01 * ax) * (1.0 - ay) + (v10 * (1.0 - ax) + v11 * ax) * ay


@triton.jit
def _field(fp, fx, fy, sy, sx, ch, cw, GH, GW, mask):
    """(dx, dy): the coarse field (fp: float32 [2, Gh, Gw]) at frame point (fx, fy), bilinear,
    held at its edge nodes beyond them (kernels.deform.field_at)."""
    tx = tl.minimum(tl.maximum(fx / sx, 0.0), cw - 1.0)
    ty = tl.minimum(tl.maximum(fy / sy, 0.0), ch - 1.0)
    ok = mask & (tx == tx) & (ty == ty)  # no read for a NaN point (a perspective's horizon)
    tx = tl.where(ok, tx, 0.0)
    ty = tl.where(ok, ty, 0.0)
    jx = tl.minimum(tl.floor(tx), cw - 2.0)
    jy = tl.minimum(tl.floor(ty), ch - 2.0)
    ax = (tx - jx).to(tl.float32)
    ay = (ty - jy).to(tl.float32)
    k = jy.to(tl.int32) * GW + jx.to(tl.int32)
    dx = _bilinear(fp, k, GW, ax, ay, ok)
    dy = _bilinear(fp + GH * GW, k, GW, ax, ay, ok)
    return dx, dy


@triton.jit
def _colour(g, sums_ptr, n, H, W, r, gg, b, MEANS: tl.constexpr):
    """The sample's colour matrix (parameter row g, columns 21..32) applied to (r, gg, b); with
    MEANS its offsets first completed from the slopes (columns 33..41) and the mean colour
    (the sums at sums_ptr over H W pixels)."""
    cp = g + 21
    o0 = tl.load(cp + 3).to(tl.float32)
    o1 = tl.load(cp + 7).to(tl.float32)
    o2 = tl.load(cp + 11).to(tl.float32)
    if MEANS:
        inv_hw = 1.0 / (H * W * 1.0)
        mu0 = tl.load(sums_ptr + n * 3 + 0) * inv_hw
        mu1 = tl.load(sums_ptr + n * 3 + 1) * inv_hw
        mu2 = tl.load(sums_ptr + n * 3 + 2) * inv_hw
        sp = g + 33
        o0 += (tl.load(sp + 0).to(tl.float32) * mu0 + tl.load(sp + 1).to(tl.float32) * mu1
               + tl.load(sp + 2).to(tl.float32) * mu2)
        o1 += (tl.load(sp + 3).to(tl.float32) * mu0 + tl.load(sp + 4).to(tl.float32) * mu1
               + tl.load(sp + 5).to(tl.float32) * mu2)
        o2 += (tl.load(sp + 6).to(tl.float32) * mu0 + tl.load(sp + 7).to(tl.float32) * mu1
               + tl.load(sp + 8).to(tl.float32) * mu2)
    r2 = (tl.load(cp + 0).to(tl.float32) * r + tl.load(cp + 1).to(tl.float32) * gg
          + tl.load(cp + 2).to(tl.float32) * b + o0)
    g2 = (tl.load(cp + 4).to(tl.float32) * r + tl.load(cp + 5).to(tl.float32) * gg
          + tl.load(cp + 6).to(tl.float32) * b + o1)
    b2 = (tl.load(cp + 8).to(tl.float32) * r + tl.load(cp + 9).to(tl.float32) * gg
          + tl.load(cp + 10).to(tl.float32) * b + o2)
    return r2, g2, b2


@triton.jit
def _finish_store(dst, s_c, r, gg, b, post_ptr, mask, ty_out: tl.constexpr, GREY_OUT: tl.constexpr,
                  ROUND: tl.constexpr):
    """Clamp to 0..255, the per-channel scale and bias, rounding for uint8, cast, store."""
    r = tl.minimum(tl.maximum(r, 0.0), 255.0)
    gg = tl.minimum(tl.maximum(gg, 0.0), 255.0)
    b = tl.minimum(tl.maximum(b, 0.0), 255.0)
    if GREY_OUT:
        grey = 0.299 * r + 0.587 * gg + 0.114 * b
        grey = grey * tl.load(post_ptr + 0) + tl.load(post_ptr + 3)
        if ROUND:
            grey = tl.floor(grey + 0.5)
        tl.store(dst, grey.to(ty_out), mask=mask)
    else:
        r = r * tl.load(post_ptr + 0) + tl.load(post_ptr + 3)
        gg = gg * tl.load(post_ptr + 1) + tl.load(post_ptr + 4)
        b = b * tl.load(post_ptr + 2) + tl.load(post_ptr + 5)
        if ROUND:
            r = tl.floor(r + 0.5)
            gg = tl.floor(gg + 0.5)
            b = tl.floor(b + 0.5)
        tl.store(dst, r.to(ty_out), mask=mask)
        tl.store(dst + s_c, gg.to(ty_out), mask=mask)
        tl.store(dst + 2 * s_c, b.to(ty_out), mask=mask)


@triton.jit
def _pointwise_kernel(
    src_ptr,  # float32 [N, H, W, 3]: the warped images (pixel units)
    params_ptr,  # float64 [N, P]: as the warp kernel's (the colour columns are read)
    P,
    sums_ptr,  # float32 [N, 3]: the warped images' channel sums
    post_ptr,  # float32 [6]
    out_ptr,
    H, W,
    s_n, s_c, s_y, s_x,
    MEANS: tl.constexpr,
    GREY_OUT: tl.constexpr,
    ROUND: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The second pass of a mean-dependent colour chain: colour (offsets from the means),
    clamp, normalise, cast and layout of the images the first pass warped."""
    n = tl.program_id(1)
    pix = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = pix < H * W
    src = src_ptr + n.to(tl.int64) * (H * W * 3) + pix * 3
    r = tl.load(src, mask=mask, other=0.0)
    gg = tl.load(src + 1, mask=mask, other=0.0)
    b = tl.load(src + 2, mask=mask, other=0.0)
    r, gg, b = _colour(params_ptr + n * P, sums_ptr, n, H, W, r, gg, b, MEANS)
    dst = out_ptr + n.to(tl.int64) * s_n + (pix // W) * s_y + (pix % W) * s_x  # batches past 2^31 elements
    _finish_store(dst, s_c, r, gg, b, post_ptr, mask, out_ptr.dtype.element_ty, GREY_OUT, ROUND)


@triton.jit
def _warp_kernel(
    src_ptr,  # uint8 or float32 flat buffer: every sample HWC, back to back
    table_ptr,  # int64 [N, 6]: offset, height, width, channels, row and column strides (bytes)
    params_ptr,  # float64 [N, P]: geometry (WarpSpec.packed), colour matrix, slopes (pack_params)
    P,  # the parameter rows' length
    post_ptr,  # float32 [6]: per-channel scale and bias applied after the clamp
    fill_ptr,  # float32 [3]: border colour (0..255)
    out_ptr,  # output tensor (any of uint8, float16, bfloat16, float32)
    sums_ptr,  # float32 [N, 3]: per-sample channel sums of the warp, written when SUMS, read when MEANS
    def_ptr,  # float64 [N, 22]: inner, outer (3x3 each), node spacing y, x, counts y, x; read when DEFORM
    field_ptr,  # float32 [N, 2, GH, GW]: the displacement fields (frame pixels); read when DEFORM
    GH, GW,  # the fields' node rows and columns (padding included)
    H, W,  # output height and width
    s_n, s_c, s_y, s_x,  # output element strides (NCHW or NHWC)
    INTERP: tl.constexpr,  # 0 nearest, 1 bilinear, 2 bicubic
    BORDER: tl.constexpr,  # 0 constant, 1 reflect, 2 replicate, 3 wrap
    ANTIALIAS: tl.constexpr,  # stretch the filter when shrinking
    COLOR: tl.constexpr,  # apply the colour matrix
    MEANS: tl.constexpr,  # complete its offsets from the slopes and the sums (mean = sum / (H W))
    FINISH: tl.constexpr,  # clamp + post scale/bias + cast; else raw warp values
    SUMS: tl.constexpr,  # accumulate per-sample channel sums
    GREY_OUT: tl.constexpr,  # write one grey channel
    ROUND: tl.constexpr,  # round to nearest (uint8 output)
    STORE: tl.constexpr,  # write the output (False: only the sums)
    DEFORM: tl.constexpr,  # the source point through def_ptr's matrices and the field (kernels.deform)
    BLOCK: tl.constexpr,  # output pixels per program
):
    n = tl.program_id(1)
    pix = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = pix < H * W
    oi = pix // W
    oj = pix % W
    x = oj.to(tl.float64) + 0.5
    y = oi.to(tl.float64) + 0.5
    g = params_ptr + n * P
    m0 = tl.load(g + 0)
    m1 = tl.load(g + 1)
    m2 = tl.load(g + 2)
    m3 = tl.load(g + 3)
    m4 = tl.load(g + 4)
    m5 = tl.load(g + 5)
    m6 = tl.load(g + 6)
    m7 = tl.load(g + 7)
    m8 = tl.load(g + 8)
    # int32 within a sample (an image holds under 2^31 bytes: max_pixels); int64 only for the
    # sample's offset in the buffer, added to the base pointer once
    img_h = tl.load(g + 9).to(tl.int32)
    img_w = tl.load(g + 10).to(tl.int32)
    org_y = tl.load(g + 11).to(tl.int32)
    org_x = tl.load(g + 12).to(tl.int32)
    cy0 = tl.load(g + 13).to(tl.int32)
    cx0 = tl.load(g + 14).to(tl.int32)
    cy1 = tl.load(g + 15).to(tl.int32)
    cx1 = tl.load(g + 16).to(tl.int32)
    lim_y = tl.load(g + 17)
    lim_x = tl.load(g + 18)
    taps_y = tl.load(g + 19).to(tl.int32)
    taps_x = tl.load(g + 20).to(tl.int32)
    t = table_ptr + n * 6
    src = src_ptr + tl.load(t + 0)
    ch = tl.load(t + 3).to(tl.int32)
    rs = tl.load(t + 4).to(tl.int32)
    cs = tl.load(t + 5).to(tl.int32)

    pz = m6 * x + m7 * y + m8
    u = (m0 * x + m1 * y + m2) / pz
    v = (m3 * x + m4 * y + m5) / pz
    if ANTIALIAS:
        dux = (m0 - u * m6) / pz
        duy = (m1 - u * m7) / pz
        dvx = (m3 - v * m6) / pz
        dvy = (m4 - v * m7) / pz
        sx = tl.minimum(tl.maximum(tl.sqrt(dux * dux + duy * duy), 1.0), lim_x)
        sy = tl.minimum(tl.maximum(tl.sqrt(dvx * dvx + dvy * dvy), 1.0), lim_y)
    else:
        sx = tl.full([BLOCK], 1.0, tl.float64)
        sy = tl.full([BLOCK], 1.0, tl.float64)
    if DEFORM:  # the source point through the field; the stretch above stays the matrices'
        dp = def_ptr + n * 22
        qz = tl.load(dp + 6) * x + tl.load(dp + 7) * y + tl.load(dp + 8)
        fx = (tl.load(dp + 0) * x + tl.load(dp + 1) * y + tl.load(dp + 2)) / qz
        fy = (tl.load(dp + 3) * x + tl.load(dp + 4) * y + tl.load(dp + 5)) / qz
        fp = field_ptr + n.to(tl.int64) * (2 * GH * GW)
        ddx, ddy = _field(fp, fx, fy, tl.load(dp + 18), tl.load(dp + 19), tl.load(dp + 20), tl.load(dp + 21),
                          GH, GW, mask)
        fx = fx + ddx.to(tl.float64)
        fy = fy + ddy.to(tl.float64)
        rz = tl.load(dp + 15) * fx + tl.load(dp + 16) * fy + tl.load(dp + 17)
        u = (tl.load(dp + 9) * fx + tl.load(dp + 10) * fy + tl.load(dp + 11)) / rz
        v = (tl.load(dp + 12) * fx + tl.load(dp + 13) * fy + tl.load(dp + 14)) / rz
    inside = (u >= 0) & (u < img_w.to(tl.float64)) & (v >= 0) & (v < img_h.to(tl.float64))
    # source points beyond 2^30 pixels (a perspective's far side) are held there, so that the
    # int32 tap indices cannot overflow; every border rule reads the same there as further out
    # except reflect and wrap, whose period then no longer matches the far-away point
    u = tl.minimum(tl.maximum(u, -1073741824.0), 1073741824.0)
    v = tl.minimum(tl.maximum(v, -1073741824.0), 1073741824.0)
    if INTERP == 0:
        first_x = tl.floor(u).to(tl.int32)
        first_y = tl.floor(v).to(tl.int32)
    elif INTERP == 1:
        first_x = tl.floor(u - 0.5 - sx).to(tl.int32) + 1
        first_y = tl.floor(v - 0.5 - sy).to(tl.int32) + 1
    else:
        first_x = tl.floor(u - 0.5 - 2.0 * sx).to(tl.int32) + 1
        first_y = tl.floor(v - 0.5 - 2.0 * sy).to(tl.int32) + 1
    # per-tap filter arguments in float32: the distance of the first tap from the source point
    # (a few pixels, exact enough in float32) plus the tap number, times 1 / stretch
    dx0 = (first_x.to(tl.float64) + 0.5 - u).to(tl.float32)
    dy0 = (first_y.to(tl.float64) + 0.5 - v).to(tl.float32)
    isx = (1.0 / sx).to(tl.float32)
    isy = (1.0 / sy).to(tl.float32)
    c1 = tl.minimum(ch - 1, 1)
    c2 = tl.minimum(ch - 1, 2)
    f0 = tl.load(fill_ptr + 0)
    f1 = tl.load(fill_ptr + 1)
    f2 = tl.load(fill_ptr + 2)
    acc0 = tl.zeros([BLOCK], tl.float32)
    acc1 = tl.zeros([BLOCK], tl.float32)
    acc2 = tl.zeros([BLOCK], tl.float32)
    wsum = tl.zeros([BLOCK], tl.float32)
    for ty in range(0, taps_y):
        kyb, fill_y, wy = _tap(first_y + ty, dy0 + ty, isy, img_h, cy0, cy1, inside, INTERP, BORDER)
        row = (kyb - org_y) * rs
        for tx in range(0, taps_x):
            kxb, fill_x, wx = _tap(first_x + tx, dx0 + tx, isx, img_w, cx0, cx1, inside, INTERP, BORDER)
            w = wy * wx
            is_fill = fill_y | fill_x
            read = mask & (w != 0.0) & ~is_fill
            base = row + (kxb - org_x) * cs
            p0 = tl.load(src + base, mask=read, other=0).to(tl.float32)
            p1 = tl.load(src + base + c1, mask=read, other=0).to(tl.float32)
            p2 = tl.load(src + base + c2, mask=read, other=0).to(tl.float32)
            acc0 += w * tl.where(is_fill, f0, p0)
            acc1 += w * tl.where(is_fill, f1, p1)
            acc2 += w * tl.where(is_fill, f2, p2)
            wsum += w
    ok = wsum > 0
    r = tl.where(ok, acc0 / tl.where(ok, wsum, 1.0), f0)
    gg = tl.where(ok, acc1 / tl.where(ok, wsum, 1.0), f1)
    b = tl.where(ok, acc2 / tl.where(ok, wsum, 1.0), f2)
    if SUMS:
        tl.atomic_add(sums_ptr + n * 3 + 0, tl.sum(tl.where(mask, r, 0.0), axis=0))
        tl.atomic_add(sums_ptr + n * 3 + 1, tl.sum(tl.where(mask, gg, 0.0), axis=0))
        tl.atomic_add(sums_ptr + n * 3 + 2, tl.sum(tl.where(mask, b, 0.0), axis=0))
    if COLOR:
        r, gg, b = _colour(g, sums_ptr, n, H, W, r, gg, b, MEANS)
    dst = out_ptr + n.to(tl.int64) * s_n + oi * s_y + oj * s_x  # batches past 2^31 elements
    ty_out = out_ptr.dtype.element_ty
    if not STORE:
        pass
    elif FINISH:
        _finish_store(dst, s_c, r, gg, b, post_ptr, mask, ty_out, GREY_OUT, ROUND)
    else:
        tl.store(dst, r.to(ty_out), mask=mask)
        tl.store(dst + s_c, gg.to(ty_out), mask=mask)
        tl.store(dst + 2 * s_c, b.to(ty_out), mask=mask)


def _post(spec: PointwiseSpec) -> tuple[float, ...]:
    """Per-channel (scale x3, bias x3) applied after the clamp (grey uses the first pair)."""
    k, b = spec.scale_bias()
    return (k * 3)[:3] + (b * 3)[:3]


def pack_params(spec: WarpSpec, color: torch.Tensor | np.ndarray | None = None,
                slopes: np.ndarray | None = None) -> np.ndarray:
    """float64 [N, 21 (+ 12 (+ 9))]: the kernel's per-sample row (see the module docstring).
    color: [N, 3, 4] (the whole matrix, or with slopes its value at mean colour 0); slopes:
    [N, 3, 3], d(offset of output channel)/d(mean of input channel)."""
    parts = [spec.packed_np()]
    n = len(spec)
    if color is not None:
        c = color.detach().cpu().numpy() if isinstance(color, torch.Tensor) else color
        parts.append(c.reshape(n, COLOR_COLS))
        if slopes is not None:
            parts.append(slopes.reshape(n, SLOPE_COLS))
    return np.concatenate(parts, 1, dtype=np.float64) if len(parts) > 1 else parts[0]


def _launch(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec, params: torch.Tensor, out: torch.Tensor,
            strides: tuple[int, ...], color: bool, means: bool, post: tuple[float, ...], finish: bool,
            sums: torch.Tensor | None, grey: bool, rounding: bool, block: int = 256, num_warps: int = 4,
            store: bool = True) -> None:
    n = len(spec)
    H, W = spec.out_size
    if n == 0 or H * W == 0:
        return
    dev = data.device
    fill = device_constant(tuple(spec.fill), dev)
    post_d = device_constant(post, dev)
    sums_d = sums if sums is not None else device_constant((0.0,), dev)  # not read without SUMS or MEANS
    deform = spec.deform
    if deform is None:  # not read
        def_rows, field, gh, gw = sums_d, sums_d, 2, 2
    else:  # uploaded per call (a few KB per sample)
        def_rows = to_device(deform.rows(), dev)
        field = to_device(np.ascontiguousarray(deform.field, dtype=np.float32), dev)
        gh, gw = int(deform.field.shape[2]), int(deform.field.shape[3])
    grid = (triton.cdiv(H * W, block), n)
    _warp_kernel[grid](
        data, table, params, params.shape[1], post_d, fill, out, sums_d, def_rows, field, gh, gw, H, W, *strides,
        INTERP=INTERP_CODE[spec.interpolation], BORDER=BORDER_CODE[spec.border],
        ANTIALIAS=bool(spec.antialias and spec.interpolation != "nearest"), COLOR=color, MEANS=means,
        FINISH=finish, SUMS=sums is not None and not means, GREY_OUT=grey, ROUND=rounding, STORE=store,
        DEFORM=deform is not None, BLOCK=block, num_warps=num_warps,
    )


def _inputs(data: torch.Tensor, table: torch.Tensor, params: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The table and the parameter rows on the data's device (one copy each at most; a device
    table, as an ImageBatch's kernel_table() or a DeviceViews', stays as it is)."""
    return to_device(strided_table(table), data.device), to_device(params, data.device)


def warp_gpu(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec, sums: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Warp only: float32 [N, H, W, 3] in pixel units, and per-sample channel means if asked."""
    n = len(spec)
    H, W = spec.out_size
    out = torch.empty(n, H, W, 3, dtype=torch.float32, device=data.device)
    acc = torch.zeros(n, 3, dtype=torch.float32, device=data.device) if sums else None
    tab, params = _inputs(data, table, pack_params(spec))
    _launch(data, tab, spec, params, out, (H * W * 3, 1, W * 3, 3), False, False, (0.0,) * 6, False, acc,
            False, False)
    means = acc / float(max(H * W, 1)) if acc is not None else None
    return out, means


def warp_pointwise_gpu(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec, pspec: PointwiseSpec,
                       block: int = 256, num_warps: int = 4, slopes: np.ndarray | None = None,
                       params: torch.Tensor | None = None) -> torch.Tensor:
    """Warp, colour, clamp, normalise, cast and layout in one launch: the final tensor.

    slopes: [N, 3, 3] when pspec.color holds the colour matrices at mean colour 0 of a chain
    that depends on the warped images' means (out = A x + b0 + B mu, B the slopes): then a
    first launch warps into a float32 intermediate and sums it, and a pointwise launch
    completes the offsets from the sums and finishes from the intermediate.

    params: pack_params(spec, pspec.color, slopes) already on the device (made ahead for
    several batches, kernels.pack_ahead); packed here when None."""
    n = len(spec)
    H, W = spec.out_size
    c = pspec.channels
    if pspec.layout == "NCHW":
        out = torch.empty(n, c, H, W, dtype=pspec.dtype, device=data.device)
        strides = (c * H * W, H * W, W, 1)
    else:
        out = torch.empty(n, H, W, c, dtype=pspec.dtype, device=data.device)
        strides = (H * W * c, 1, W * c, c)
    color = pspec.color is not None
    if slopes is not None and not color:
        raise ValueError("slopes need the colour matrices they complete (pspec.color)")
    tab, params = _inputs(data, table, pack_params(spec, pspec.color, slopes) if params is None else params)
    if slopes is None:
        _launch(data, tab, spec, params, out, strides, color, False, _post(pspec), True, None, c == 1,
                pspec.dtype == torch.uint8, block, num_warps)
        return out
    if n == 0 or H * W == 0:
        return out
    warped = torch.empty(n, H, W, 3, dtype=torch.float32, device=data.device)
    sums = torch.zeros(n, 3, dtype=torch.float32, device=data.device)
    _launch(data, tab, spec, params, warped, (H * W * 3, 1, W * 3, 3), False, False, (0.0,) * 6, False, sums,
            False, False, block, num_warps)
    _pointwise_kernel[(triton.cdiv(H * W, 1024), n)](
        warped, params, params.shape[1], sums, device_constant(_post(pspec), data.device), out, H, W, *strides,
        MEANS=True, GREY_OUT=c == 1, ROUND=pspec.dtype == torch.uint8, BLOCK=1024, num_warps=4)
    return out
