"""The GPU volume kernel: one Triton launch reads the ragged batch and writes the final tensor.

Per output voxel: its source point from the sample's 3x4 inverse matrix (kernels.spec3d's
convention, grid_sample's align_corners=False), the 8 trilinear taps with the border rule, every
channel, then, fused, the pointwise epilogue: clamp(a x + b, lo, hi), a NormalizeIntensity's
per-sample scale and shift, a second clamp(a x + b, lo, hi), the cast. With an elastic
deformation the source point goes through its coarse field on the way (8 more taps of 3
floats per voxel, from a field of a few KB per sample that stays in L1/L2). The label map is read in
the same program at the nearest voxel of the same source point. Twin: reference.warp3d +
reference.pointwise3d (fused_epilogue_reference is the epilogue's), checked by
tests/test_volumes_gpu.py.

A normalize needs the statistics of the values entering it: a first launch of the same kernel
(STORE=False) warps and writes per-program partial (sum, sum of squares, count), summed in
float64 on the device; the second launch warps again and finishes. No intermediate volume is
written and the host never waits. Steps beyond the fused ones (gamma, contrast, noise, bias
field) run after the kernel as the reference's torch code, on the device, from a float32 output.

Memory traffic per launch: each output voxel is written once (2 bytes for float16) plus its
label (8 bytes, int64); the 8 taps of neighbouring output voxels overlap, so the source (2
bytes per voxel for int16) is read from DRAM about once per launch through L1/L2 when the warp
does not shrink. A batch of 8 crops of 96^3 from int16 volumes: ~7 M voxels, ~14 MB of source
read, 14 MB of float16 and 57 MB of int64 labels written.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ...data.volumes import VolumeBatch
from ...ops.volume_kinds import Step
from ..reference.pointwise3d import epilogue_rows, norm_from_sums, run_steps, split_program
from ..reference.warp3d import source_volume
from ..spec3d import BORDERS_3D, Warp3DSpec

BORDER_CODE_3D = {b: i for i, b in enumerate(BORDERS_3D)}  # 0 constant, 1 reflect, 2 replicate


@triton.jit
def _remap(k, size, BORDER: tl.constexpr):
    """An integer tap index remapped by the border rule, and whether it lies outside."""
    outside = (k < 0) | (k >= size)
    if BORDER == 1:  # reflect about the faces, the edge voxel repeated (period 2 size)
        period = 2 * size
        m = k % period
        m = tl.where(m < 0, m + period, m)
        kb = tl.where(m >= size, period - 1 - m, m)
    else:  # replicate; constant (index only used to keep reads in bounds)
        kb = tl.minimum(tl.maximum(k, 0), size - 1)
    return kb, outside


@triton.jit
def _nearest(c):
    """Round half to even (grid_sample's nearest), on float32 index coordinates."""
    r = tl.floor(c + 0.5)
    half = r - c == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(half & odd, r - 1.0, r).to(tl.int32)


@triton.jit
def _control(t, size, K):
    """Along one axis: the lower control point's index and the upper one's weight of the frame
    coordinate t (control points k / (K - 1) * size, the field held beyond the faces)."""
    u = tl.minimum(tl.maximum(t / size * (K - 1), 0.0), (K - 1) * 1.0)
    k = tl.minimum(tl.floor(u).to(tl.int32), K - 2)
    return k, u - k.to(tl.float32)


@triton.jit
def _field(fp, q0, q1, q2, f0, f1, f2, K0, K1, K2):
    """The coarse displacement field (fp: [3, K0, K1, K2]) at frame point q, trilinear."""
    k0, w0 = _control(q0, f0, K0)
    k1, w1 = _control(q1, f1, K1)
    k2, w2 = _control(q2, f2, K2)
    plane = K0 * K1 * K2
    d0 = tl.zeros_like(q0)
    d1 = tl.zeros_like(q0)
    d2 = tl.zeros_like(q0)
    for corner in tl.static_range(8):
        if corner & 4:
            i0, u0 = k0 + 1, w0
        else:
            i0, u0 = k0, 1.0 - w0
        if corner & 2:
            i1, u1 = k1 + 1, w1
        else:
            i1, u1 = k1, 1.0 - w1
        if corner & 1:
            i2, u2 = k2 + 1, w2
        else:
            i2, u2 = k2, 1.0 - w2
        wt = u0 * u1 * u2
        off = (i0 * K1 + i1) * K2 + i2
        d0 += wt * tl.load(fp + off)
        d1 += wt * tl.load(fp + plane + off)
        d2 += wt * tl.load(fp + 2 * plane + off)
    return d0, d1, d2


@triton.jit
def _warp3d_kernel(
    src_ptr,  # flat volume buffer (uint8, int16, uint16, float16 or float32), [D, H, W, C] per sample
    table_ptr,  # int64 [N, 6]: offset, D, H, W, C, label offset
    inv_ptr,  # float32 [N, 12]: the inverse's top 3x4 rows (output -> input voxel coordinates)
    ep_ptr,  # float32 [N, 8]: (a, b, lo, hi) before and after the normalize
    norm_ptr,  # float32 [N, 2]: the normalize's (scale, shift), read when NORM
    part_ptr,  # float32 [N, P, 3]: per-program (sum, sum of squares, count), written when SUMS
    out_ptr,  # [N, C, D, H, W] contiguous, the output dtype
    lab_ptr,  # flat integer label buffer, read when LABELS
    lab_out_ptr,  # int64 [N, 1, D, H, W], written when LABELS
    def_ptr,  # float32 [N, 15]: outer 3x4 rows (frame -> input), frame size, read when DEFORM
    field_ptr,  # float32 [N, 3, K0, K1, K2]: control-point displacements, read when DEFORM
    K0, K1, K2,  # control points per axis
    D, H, W,  # output size
    C,  # channels (every sample has C)
    P,  # programs per sample along axis 0 (the partial sums' stride)
    fill, label_fill,  # beyond a constant border
    BORDER: tl.constexpr,  # 0 constant, 1 reflect, 2 replicate
    NORM: tl.constexpr,  # apply norm_ptr's scale and shift between the two clamps
    NONZERO: tl.constexpr,  # the normalize touches (and counts) only values != 0
    SUMS: tl.constexpr,  # write partial sums of the values entering the normalize
    STORE: tl.constexpr,  # write the image (and label) outputs
    LABELS: tl.constexpr,  # warp the label map too (nearest)
    DEFORM: tl.constexpr,  # inv_ptr maps output -> frame; add the field there, then def_ptr's outer
    BLOCK: tl.constexpr,  # output voxels per program
):
    n = tl.program_id(1)
    pid = tl.program_id(0)
    vox = pid * BLOCK + tl.arange(0, BLOCK)
    total = D * H * W
    mask = vox < total
    od = vox // (H * W)
    oh = (vox // W) % H
    ow = vox % W
    p0 = od.to(tl.float32) + 0.5
    p1 = oh.to(tl.float32) + 0.5
    p2 = ow.to(tl.float32) + 0.5
    g = inv_ptr + n * 12
    q0 = tl.load(g + 0) * p0 + tl.load(g + 1) * p1 + tl.load(g + 2) * p2 + tl.load(g + 3)
    q1 = tl.load(g + 4) * p0 + tl.load(g + 5) * p1 + tl.load(g + 6) * p2 + tl.load(g + 7)
    q2 = tl.load(g + 8) * p0 + tl.load(g + 9) * p1 + tl.load(g + 10) * p2 + tl.load(g + 11)
    if DEFORM:  # q is in the deformation's frame: add the field there, then map to the input
        dp = def_ptr + n * 15
        fp = field_ptr + n.to(tl.int64) * (3 * K0 * K1 * K2)
        d0, d1, d2 = _field(fp, q0, q1, q2, tl.load(dp + 12), tl.load(dp + 13), tl.load(dp + 14), K0, K1, K2)
        q0 = q0 + d0
        q1 = q1 + d1
        q2 = q2 + d2
        r0 = tl.load(dp + 0) * q0 + tl.load(dp + 1) * q1 + tl.load(dp + 2) * q2 + tl.load(dp + 3)
        r1 = tl.load(dp + 4) * q0 + tl.load(dp + 5) * q1 + tl.load(dp + 6) * q2 + tl.load(dp + 7)
        r2 = tl.load(dp + 8) * q0 + tl.load(dp + 9) * q1 + tl.load(dp + 10) * q2 + tl.load(dp + 11)
        q0 = r0
        q1 = r1
        q2 = r2
    # index coordinates (voxel centres at integers): source point - 0.5
    c0 = q0 - 0.5
    c1 = q1 - 0.5
    c2 = q2 - 0.5
    t = table_ptr + n * 6
    src = src_ptr + tl.load(t + 0)
    sd = tl.load(t + 1).to(tl.int32)
    sh = tl.load(t + 2).to(tl.int32)
    sw = tl.load(t + 3).to(tl.int32)
    # source points far outside are held there so that int32 indices cannot overflow
    c0 = tl.minimum(tl.maximum(c0, -1.0e6), 1.0e6)
    c1 = tl.minimum(tl.maximum(c1, -1.0e6), 1.0e6)
    c2 = tl.minimum(tl.maximum(c2, -1.0e6), 1.0e6)
    f0 = tl.floor(c0)
    f1 = tl.floor(c1)
    f2 = tl.floor(c2)
    w0 = c0 - f0  # weight of the upper tap along each axis
    w1 = c1 - f1
    w2 = c2 - f2
    k0 = f0.to(tl.int32)
    k1 = f1.to(tl.int32)
    k2 = f2.to(tl.int32)
    a0, o0a = _remap(k0, sd, BORDER)
    b0, o0b = _remap(k0 + 1, sd, BORDER)
    a1, o1a = _remap(k1, sh, BORDER)
    b1, o1b = _remap(k1 + 1, sh, BORDER)
    a2, o2a = _remap(k2, sw, BORDER)
    b2, o2b = _remap(k2 + 1, sw, BORDER)
    e = ep_ptr + n * 8
    ea = tl.load(e + 0)
    eb = tl.load(e + 1)
    elo = tl.load(e + 2)
    ehi = tl.load(e + 3)
    fa = tl.load(e + 4)
    fb = tl.load(e + 5)
    flo = tl.load(e + 6)
    fhi = tl.load(e + 7)
    ns = 1.0
    nt = 0.0
    if NORM:
        ns = tl.load(norm_ptr + n * 2 + 0)
        nt = tl.load(norm_ptr + n * 2 + 1)
    s_sum = tl.zeros([BLOCK], tl.float32)
    s_sq = tl.zeros([BLOCK], tl.float32)
    s_cnt = tl.zeros([BLOCK], tl.float32)
    out_base = out_ptr + n.to(tl.int64) * C * total
    for ch in range(0, C):
        acc = tl.zeros([BLOCK], tl.float32)
        for corner in tl.static_range(8):
            if corner & 4:
                i0, x0, u0 = b0, o0b, w0
            else:
                i0, x0, u0 = a0, o0a, 1.0 - w0
            if corner & 2:
                i1, x1, u1 = b1, o1b, w1
            else:
                i1, x1, u1 = a1, o1a, 1.0 - w1
            if corner & 1:
                i2, x2, u2 = b2, o2b, w2
            else:
                i2, x2, u2 = a2, o2a, 1.0 - w2
            wt = u0 * u1 * u2
            off = ((i0 * sh + i1) * sw + i2) * C + ch
            if BORDER == 0:
                is_fill = x0 | x1 | x2
                v = tl.load(src + off, mask=mask & ~is_fill, other=0).to(tl.float32)
                v = tl.where(is_fill, fill, v)
            else:
                v = tl.load(src + off, mask=mask, other=0).to(tl.float32)
            acc += wt * v
        y = tl.minimum(tl.maximum(acc * ea + eb, elo), ehi)
        if SUMS:
            if NONZERO:
                keep = mask & (y != 0.0)
            else:
                keep = mask
            s_sum += tl.where(keep, y, 0.0)
            s_sq += tl.where(keep, y * y, 0.0)
            s_cnt += tl.where(keep, 1.0, 0.0)
        if STORE:
            if NORM:
                z = y * ns + nt
                if NONZERO:
                    z = tl.where(y != 0.0, z, y)
                y = z
            y = tl.minimum(tl.maximum(y * fa + fb, flo), fhi)
            tl.store(out_base + ch * total + vox, y.to(out_ptr.dtype.element_ty), mask=mask)
    if SUMS:
        pp = part_ptr + (n * P + pid) * 3
        tl.store(pp + 0, tl.sum(s_sum, axis=0))
        tl.store(pp + 1, tl.sum(s_sq, axis=0))
        tl.store(pp + 2, tl.sum(s_cnt, axis=0))
    if LABELS and STORE:
        r0 = _nearest(c0)
        r1 = _nearest(c1)
        r2 = _nearest(c2)
        m0, x0 = _remap(r0, sd, BORDER)
        m1, x1 = _remap(r1, sh, BORDER)
        m2, x2 = _remap(r2, sw, BORDER)
        lsrc = lab_ptr + tl.load(t + 5)
        loff = (m0 * sh + m1) * sw + m2
        if BORDER == 0:
            out = x0 | x1 | x2
            lv = tl.load(lsrc + loff, mask=mask & ~out, other=0).to(tl.int64)
            lv = tl.where(out, label_fill, lv)
        else:
            lv = tl.load(lsrc + loff, mask=mask, other=0).to(tl.int64)
        tl.store(lab_out_ptr + n.to(tl.int64) * total + vox, lv, mask=mask)


def _prefiltered(batch: VolumeBatch, spec: Warp3DSpec) -> VolumeBatch:
    """The batch with the antialiasing blur applied where the spec asks (float32), or the batch
    itself when no sample shrinks: the blur is the reference's torch code on the device."""
    assert spec.sigmas is not None
    if not (spec.sigmas > 0).any():
        return batch
    vols = [source_volume(batch, i, spec.sigmas[i]).permute(1, 2, 3, 0) for i in range(len(batch))]
    return VolumeBatch(torch.cat([v.reshape(-1) for v in vols]), _float_table(batch), batch.labels,
                       batch.spacing, batch.affine, batch.sources)


def _float_table(batch: VolumeBatch) -> torch.Tensor:
    """The table of the same samples packed back to back (offsets recomputed)."""
    t = batch.table.clone()
    sizes = t[:, 1:5].prod(1)
    t[:, 0] = torch.cumsum(sizes, 0) - sizes
    return t


def warp3d_pointwise_gpu(batch: VolumeBatch, spec: Warp3DSpec, steps: list[Step], dtype: torch.dtype,
                         block: int = 512, num_warps: int = 4) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Warp, fused epilogue and cast: (image [N, C, D, H, W] of dtype, int64 labels or None).
    One launch, two with a normalize (its statistics first), then the remaining steps."""
    n = len(spec)
    D, H, W = spec.out_size
    dev = batch.device
    c = batch.common_channels()
    first, norm, after, rest = split_program(steps)
    out_dtype = torch.float32 if rest else dtype
    image = torch.empty(n, c, D, H, W, dtype=out_dtype, device=dev)
    label = None if batch.labels is None else torch.empty(n, 1, D, H, W, dtype=torch.int64, device=dev)
    if n == 0:
        return image.to(dtype), label
    src = _prefiltered(batch, spec)
    table = src.kernel_table()
    deform = spec.deform
    if deform is None:
        inv = torch.from_numpy(spec.rows().astype(np.float32)).to(dev)
        def_rows, field, ks = torch.zeros(1, dtype=torch.float32, device=dev), None, (2, 2, 2)
    else:  # inner (output -> frame) in the matrix slot; outer and the frame size beside the field
        inv = torch.from_numpy(deform.inner[:, :3, :].reshape(n, 12).astype(np.float32)).to(dev)
        rows = np.concatenate([deform.outer[:, :3, :].reshape(n, 12), deform.frame], 1)
        def_rows = torch.from_numpy(rows.astype(np.float32)).to(dev)
        field = torch.from_numpy(np.ascontiguousarray(deform.field, dtype=np.float32)).to(dev)
        ks = tuple(int(k) for k in deform.field.shape[2:])
    ep = torch.from_numpy(epilogue_rows(first, after, n)).to(dev)
    programs = triton.cdiv(D * H * W, block)
    grid = (programs, n)
    dummy = torch.zeros(1, dtype=torch.float32, device=dev)
    labels_in = src.labels if src.labels is not None else dummy
    common = dict(BORDER=BORDER_CODE_3D[spec.border], DEFORM=deform is not None, BLOCK=block, num_warps=num_warps)
    field_in = field if field is not None else dummy
    nonzero = bool(norm is not None and norm.params["nonzero"][0])
    norm_rows = dummy
    if norm is not None:
        part = torch.empty(n, programs, 3, dtype=torch.float32, device=dev)
        _warp3d_kernel[grid](src.data, table, inv, ep, dummy, part, image, labels_in, dummy, def_rows, field_in,
                             *ks, D, H, W, c, programs,
                             float(spec.fill), int(spec.label_fill), NORM=False, NONZERO=nonzero, SUMS=True,
                             STORE=False, LABELS=False, **common)
        norm_rows = norm_from_sums(part.to(torch.float64).sum(1), norm).contiguous()
    _warp3d_kernel[grid](src.data, table, inv, ep, norm_rows, dummy, image, labels_in,
                         label if label is not None else dummy, def_rows, field_in, *ks, D, H, W, c, programs,
                         float(spec.fill),
                         int(spec.label_fill), NORM=norm is not None, NONZERO=nonzero, SUMS=False, STORE=True,
                         LABELS=label is not None, **common)
    if rest:
        image = run_steps(image, rest).to(dtype)
    return image, label
