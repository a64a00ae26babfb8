"""CPU fast paths for axis-aligned warps (crops, resizes, flips), per sample, on worker threads.

Most training and evaluation plans map a source window straight onto the output, possibly
mirrored. Two exact shortcuts cover them, each called once per sample (a C++ call per image,
no Python arithmetic per pixel) so they can run on the decoding threads:

- "window" (bilinear): the window is whole pixels: the warp is torch's antialiased
  `interpolate` of that window (same filters and edge renormalisation as the reference, computed in fixed point on
  uint8 with SIMD; about 10x faster than any composition of generic torch ops), called in its
  out= form on the strided window view (no copy of the window);
- "separable": any other axis-aligned warp whose source points stay inside the image (e.g. a
  window at a fractional position after DCT-scaled decoding): two small matrix products with the
  reference's own 1-D filter weights.

- "general": everything else (rotations, shears, perspective, borders, nearest, no antialias)
  on a uint8 source: one call of warp.c per sample (`pp_warp_general`, the GIL released), the
  reference's arithmetic per output pixel (source point, per-pixel stretch, each axis's taps
  once, the 2-D sum), reading the decoded region in place; the CPU stage has it write the
  pointwise pass's result straight into the output slot (`finish_general`). Samples an
  ElasticTransform's field moves take it through `pp_warp_deformed` (the field read on the way).

`classify` names the first two (and REFERENCE for the rest); `with_general` moves the rest to
"general" where warp.c was built, "separable" samples too (warp.c's two 1-D passes are cheaper). Without it (no C compiler at install), and for float sources
(between stages), they go through the reference warp, batched.
The per-sample paths read the batch's parameters from Python lists (SampleRows, made once per
batch) rather than by indexing the spec's tensors on the worker threads, and `resize_window`
leaves the mirroring to its caller, so that the CPU stage can fold it into its pointwise pass.
Agreement with warp_reference is tested: exact up to float rounding for "separable"; for
"window" at most 2 grey levels, from the fixed-point weights and the uint8 intermediate between
its two passes; for "general" float32 rounding: its exact per-pixel path computes the
reference's operations in its order, its 8-pixel AVX2 blocks round the weights to float32
(values clamped to [0, 255]: at most 2.4e-3 grey levels apart measured, 0.01 allowed), hence at
most 1 grey level once rounded to uint8 (tests/test_warp_cpu.py, TestGeneralWarp).
"""

from __future__ import annotations

import ctypes as C
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ... import native
from ..filters import BORDER_CODE, INTERP_CODE, SUPPORT
from ..reference.warp import warp_reference
from ..spec import PointwiseSpec, WarpSpec

REFERENCE, WINDOW, SEPARABLE, GENERAL = 0, 1, 2, 3
_TOL = 1e-6
# F.interpolate(..., mode="bilinear", antialias=True) on uint8 writing into a given
# channels-last tensor (the op's out= form): the same kernel and the same bytes as the
# functional form, ~80 us less per 224x224 output (0.11 against 0.19 ms from a 260x250 window,
# torch 2.13, one thread); tests/test_warp_cpu.py checks them equal
_RESIZE_INTO = getattr(torch._C._nn, "_upsample_bilinear2d_aa", None)


def classify(spec: WarpSpec) -> torch.Tensor:
    """int64 [N]: which implementation each sample takes (REFERENCE, WINDOW or SEPARABLE).

    In numpy: it runs once per batch on the thread that starts the workers, while the planning
    thread holds the GIL for most of its time; torch's ~20 ops on [N] tensors each let go of the
    GIL and waited to get it back (~2 ms per batch of 64 on 2 cores, with both workers idle),
    numpy's run in one go (~30 us). The same float64 operations as the torch form it replaced
    (tests/test_warp_cpu.py keeps that form and checks the two agree)."""
    n = len(spec)
    kind = np.full(n, REFERENCE, dtype=np.int64)
    if n == 0 or spec.interpolation == "nearest" or not spec.antialias:
        return torch.from_numpy(kind)
    inv = spec.inverse
    H, W = spec.out_size
    aligned = (np.abs(inv[:, 0, 1]) < _TOL) & (np.abs(inv[:, 1, 0]) < _TOL) & (np.abs(inv[:, 2, 0]) < _TOL) \
        & (np.abs(inv[:, 2, 1]) < _TOL) & (np.abs(inv[:, 2, 2] - 1) < _TOL)
    u0, u1 = inv[:, 0, 2], inv[:, 0, 0] * W + inv[:, 0, 2]
    v0, v1 = inv[:, 1, 2], inv[:, 1, 1] * H + inv[:, 1, 2]
    lo_u, hi_u = np.minimum(u0, u1), np.maximum(u0, u1)
    lo_v, hi_v = np.minimum(v0, v1), np.maximum(v0, v1)
    clip = spec.clip.astype(np.float64)
    img = spec.image_size.astype(np.float64)
    exact = (np.abs(lo_u - clip[:, 1]) < 1e-4) & (np.abs(hi_u - clip[:, 3]) < 1e-4) \
        & (np.abs(lo_v - clip[:, 0]) < 1e-4) & (np.abs(hi_v - clip[:, 2]) < 1e-4)
    inside = (lo_u >= -1e-9) & (lo_v >= -1e-9) & (hi_u <= img[:, 1] + 1e-9) & (hi_v <= img[:, 0] + 1e-9)
    kind[aligned & inside] = SEPARABLE
    if spec.interpolation == "bilinear":
        # torch's uint8 bicubic clamps its overshoot between the two passes (up to 20 grey
        # levels off on hard edges), so bicubic takes the float separable path instead
        kind[aligned & exact] = WINDOW
    return torch.from_numpy(kind)


@dataclass
class SampleRows:
    """A batch's per-sample parameters as Python lists, read from the spec once per batch.

    The per-sample paths run on worker threads that share the GIL: indexing a tensor for each
    number (spec.clip[i].tolist(), float(spec.inverse[i, 0, 0])) costs microseconds of held GIL
    per call, so the threads read these lists instead."""

    kinds: list[int]
    clip: list[list[int]]
    origin: list[list[int]]
    mirror_x: list[bool]
    mirror_y: list[bool]
    packed: np.ndarray | None = None  # WarpSpec.packed_np(), when some sample is GENERAL
    # with a displacement field: which samples it moves, its rows (Deformation.rows()), its
    # nodes (float32, contiguous) and their (gh, gw)
    bent: list[bool] | None = None
    deform_rows: np.ndarray | None = None
    fields: np.ndarray | None = None
    field_dims: np.ndarray | None = None


def sample_rows(spec: WarpSpec, kind: torch.Tensor) -> SampleRows:
    """The SampleRows of a batch; kind: its classify() (or with_general's)."""
    inv = spec.inverse
    kinds = kind.tolist()
    packed = spec.packed_np() if GENERAL in kinds else None
    rows = SampleRows(kinds, spec.clip.tolist(), spec.origin.tolist(), (inv[:, 0, 0] < 0).tolist(),
                      (inv[:, 1, 1] < 0).tolist(), packed)
    d = spec.deform
    if d is not None:
        rows.bent = d.active().tolist()
        rows.deform_rows = d.rows()
        rows.fields = np.ascontiguousarray(d.field, dtype=np.float32)
        rows.field_dims = np.array(d.field.shape[2:], dtype=np.int64)
    return rows


# see warp.c: pp_warp_general(src, geo int64 [18], row float64 [21], pw float32 [21], dst);
# pp_warp_deformed(the same, drow float64 [22], field float32 [2, gh, gw], dims int64 [2]);
# pp_pointwise(src, geo int64 [13], pw, dst); pp_channel_sums(src, geo int64 [6], out float64 [3])
_SIGNATURES = {"pp_warp_general": (C.c_int64, [C.c_void_p] * 5), "pp_warp_deformed": (C.c_int64, [C.c_void_p] * 8),
               "pp_pointwise": (C.c_int64, [C.c_void_p] * 4), "pp_channel_sums": (None, [C.c_void_p] * 3)}
_DTYPE_CODE = {torch.uint8: 0, torch.float32: 1, torch.float16: 2, torch.bfloat16: 3}


def general_library() -> C.CDLL | None:
    """warp.c's library (loaded once per process), or None where it was not built (after
    native's one-line notice): the reference then warps what "general" would."""
    return native.shared("warp.c", "rotations, shears and perspective warps run through the plain-torch "
                         "reference warp, batched", C.CDLL, _SIGNATURES)


def with_general(kind: torch.Tensor) -> torch.Tensor:
    """kind (classify's, for uint8 sources) with its REFERENCE and SEPARABLE samples taking the
    "general" path where warp.c was built. warp.c takes axis-aligned samples inside the image in
    two 1-D passes (warp_separable.h): ~1 ms a 224x224 sample on one thread (bicubic, shrinking
    about 2x) against ~3 ms for the separable path's sparse products in float32 and the torch
    pointwise pass after them (DeiT's preset on the ImageNet sample, 2 cores: 25% less CPU per
    batch; bilinear samples decoded at a DCT scale: ~2.5 ms each before). Both agree with the
    reference within the tolerances the module docstring states."""
    k = kind.numpy()  # numpy, not torch ops on [N]: see classify
    moved = (k == REFERENCE) | (k == SEPARABLE)
    if not moved.any() or general_library() is None:
        return kind
    return torch.from_numpy(np.where(moved, GENERAL, k))


def _general(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int, dst: torch.Tensor,
             strides: tuple[int, int, int], channels: int, pw: np.ndarray, color: bool, clamp: bool) -> None:
    """pp_warp_general of sample i (img: its stored HWC uint8 pixels, any strides) into dst,
    whose element strides (y, x, channel) and channels are given."""
    lib = general_library()
    assert lib is not None and rows.packed is not None and img.dtype == torch.uint8
    h, w, c = img.shape
    sy, sx, sc = img.stride()
    H, W = spec.out_size
    geo = np.array([h, w, c, sy, sx, sc, H, W, INTERP_CODE[spec.interpolation],
                    BORDER_CODE[spec.border], int(spec.antialias), _DTYPE_CODE[dst.dtype], *strides, channels,
                    int(color), int(clamp)], dtype=np.int64)
    row = rows.packed[i]
    if rows.bent is not None and rows.bent[i]:  # through the displacement field
        assert rows.deform_rows is not None and rows.fields is not None and rows.field_dims is not None
        status = lib.pp_warp_deformed(img.data_ptr(), geo.ctypes.data, row.ctypes.data, pw.ctypes.data,
                                      dst.data_ptr(), rows.deform_rows[i].ctypes.data, rows.fields[i].ctypes.data,
                                      rows.field_dims.ctypes.data)
    else:
        status = lib.pp_warp_general(img.data_ptr(), geo.ctypes.data, row.ctypes.data, pw.ctypes.data, dst.data_ptr())
    if status:
        raise ValueError(f"sample {i}: the general warp cannot take this sample (taps {row[19:21]}, "
                         f"{c} channels, buffer {h}x{w})")


def _pointwise_args(spec: WarpSpec | None, color: np.ndarray | None, k: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 [21]: fill (3; zeros without a spec: the pointwise pass alone reads none),
    colour matrix (3 x 4, zeros when None), scale (3), bias (3)."""
    pw = np.zeros(21, dtype=np.float32)
    if spec is not None:
        pw[0:3] = spec.fill
    if color is not None:
        pw[3:15] = color.reshape(12)
    pw[15 : 15 + len(k)] = k
    pw[18 : 18 + len(b)] = b
    return pw


def _slot_strides(slot: torch.Tensor, layout: str) -> tuple[int, int, int]:
    """(y, x, channel) element strides of a sample's slot of the stage's output."""
    st = slot.stride()
    return (st[1], st[2], st[0]) if layout == "NCHW" else (st[0], st[1], st[2])


def _source(x: torch.Tensor | np.ndarray) -> tuple[int, list[int]]:
    """(address of pixel (0, 0), [H, W, dtype code (0 uint8, 1 float32), element strides y, x,
    channel (0 for grey)]) of an [H, W, C] uint8 or float32 image: a tensor, or an array with
    any strides (negative ones for a mirrored view)."""
    a = x.numpy() if isinstance(x, torch.Tensor) else x
    assert a.dtype in (np.uint8, np.float32) and a.ndim == 3
    h, w, c = a.shape
    sy, sx, sc = (s // a.itemsize for s in a.strides)
    return a.ctypes.data, [h, w, 0 if a.dtype == np.uint8 else 1, sy, sx, sc if c > 1 else 0]


def channel_sums(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """float64 [3]: the sums of each channel of a warped [H, W, 3] (or grey) uint8 or float32
    sample (warp.c: exact for uint8, float64 sums for float32), for channel_means' numbers
    computed per sample."""
    lib = general_library()
    assert lib is not None
    address, geo = _source(x)
    args = np.array(geo, dtype=np.int64)  # alive through the call (the GIL is released in it)
    out = np.zeros(3)
    lib.pp_channel_sums(address, args.ctypes.data, out.ctypes.data)
    return out


def finish_warped(x: torch.Tensor | np.ndarray, spec: WarpSpec | None, pspec: PointwiseSpec, color: np.ndarray | None,
                  post: tuple[np.ndarray, np.ndarray], slot: torch.Tensor) -> None:
    """The pointwise pass alone (finish_general's, by warp.c) of a warped [H, W, 3] (or grey)
    uint8 or float32 sample (any strides: a mirrored view is read in place) into its slot:
    stage.finish_sample's numbers, up to float32 rounding (without a colour matrix exactly
    them: v * k, then + b, rounded once). spec: the stage's warp (its fill), or None."""
    lib = general_library()
    assert lib is not None
    address, geo = _source(x)
    geo += [_DTYPE_CODE[slot.dtype], *_slot_strides(slot, pspec.layout), pspec.channels, int(color is not None), 1]
    args = np.array(geo, dtype=np.int64)  # alive through the call (the GIL is released in it)
    pw = _pointwise_args(spec, color, *post)
    if lib.pp_pointwise(address, args.ctypes.data, pw.ctypes.data, slot.data_ptr()):
        raise ValueError(f"the pointwise pass cannot take a {geo[2]} sample into a {slot.dtype} slot")


def general_sample(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """float32 [H, W, 3] in pixel units (written into out, if given): sample i warped by warp.c
    (no pointwise pass), the numbers warp_reference gives up to float rounding."""
    H, W = spec.out_size
    if out is None:
        out = torch.empty(H, W, 3, dtype=torch.float32)
    pw = _pointwise_args(spec, None, np.ones(3, dtype=np.float32), np.zeros(3, dtype=np.float32))
    _general(img, spec, rows, i, out, out.stride(), 3, pw, color=False, clamp=False)
    return out


def finish_general(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int, pspec: PointwiseSpec,
                   color: np.ndarray | None, post: tuple[np.ndarray, np.ndarray], slot: torch.Tensor) -> None:
    """Sample i warped by warp.c and finished in the same pass (colour matrix color [3, 4]
    float32 or None, clamp, grey, v * k + b with post = (k, b) float32, the cast), written into
    its slot of the stage's output ([C, H, W] or [H, W, C] as pspec.layout says)."""
    pw = _pointwise_args(spec, color, *post)
    _general(img, spec, rows, i, slot, _slot_strides(slot, pspec.layout), pspec.channels, pw, color=color is not None,
             clamp=True)


def resize_window(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int) -> torch.Tensor:
    """uint8 [C, H, W], channels-last in memory (HWC bytes): sample i's clip window resized by
    torch's antialiased `interpolate`, *before* the mirroring (rows.mirror_x / mirror_y say
    which axes the "window" path then reverses)."""
    y0, x0, y1, x1 = rows.clip[i]
    oy, ox = rows.origin[i]
    # the window is a strided view (a decoded region carries margins): no copy, the kernel's
    # first step (to 4-byte pixels) reads any strides at the same speed
    win = img.numpy()[y0 - oy : y1 - oy, x0 - ox : x1 - ox]
    src = torch.from_numpy(win.transpose(2, 0, 1)[None])  # NCHW view of the HWC bytes
    if _RESIZE_INTO is None or spec.interpolation != "bilinear":
        return F.interpolate(src, size=spec.out_size, mode=spec.interpolation, antialias=True)[0]
    H, W = spec.out_size
    out = torch.from_numpy(np.empty((1, H, W, win.shape[2]), dtype=np.uint8).transpose(0, 3, 1, 2))
    return _RESIZE_INTO(src, [H, W], False, out=out)[0]


def _window(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int) -> torch.Tensor:
    """uint8 [H, W, C]: interpolate the sample's clip window (img is the stored HWC sample)."""
    res = resize_window(img, spec, rows, i).permute(1, 2, 0)
    if rows.mirror_x[i]:
        res = res.flip(1)
    if rows.mirror_y[i]:
        res = res.flip(0)
    return res


def _separable(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int) -> torch.Tensor:
    """float32 [H, W, C]: Wy @ window @ Wx^T with the reference's normalised 1-D weights."""
    H, W = spec.out_size
    inv = spec.inverse[i]
    limit = spec.max_scale()[i]
    y0, x0, y1, x1 = rows.clip[i]
    oy, ox = rows.origin[i]
    win = img[y0 - oy : y1 - oy, x0 - ox : x1 - ox].to(torch.float32)
    h, w, c = win.shape
    img_h, img_w = spec.image_size[i].tolist()
    wy = band_weights(float(inv[1, 1]), float(inv[1, 2]), H, float(limit[0]), y0, y1, img_h, spec)
    wx = band_weights(float(inv[0, 0]), float(inv[0, 2]), W, float(limit[1]), x0, x1, img_w, spec)
    # the weight matrices are banded (a few taps per row): sparse products are ~7x faster than
    # dense ones here (0.7 ms against 4.6 ms for a 380x450 window)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        wy_s, wx_s = torch.from_numpy(wy).to_sparse_csr(), torch.from_numpy(wx).to_sparse_csr()
    tmp = (wy_s @ win.reshape(h, w * c)).view(H, w, c)  # rows resampled: [H, w, c]
    out = wx_s @ tmp.permute(1, 0, 2).reshape(w, H * c)  # columns: [W, H * c]
    return out.view(W, H, c).permute(1, 0, 2)


def band_weights(a: float, b: float, n_out: int, limit: float, lo: int, hi: int, size: int,
                 spec: WarpSpec) -> np.ndarray:
    """float32 [n_out, hi - lo]: warp_torch.axis_weights (its twin, the reference's own taps)
    computed in numpy, every tap of every output at once: the same float64 operations in the
    same order (tests/test_warp_cpu.py: equal to 1 float32 ulp, for the row sums; exactly equal
    on its cases), in 0.13 ms instead of 0.31 ms of torch ops on [n_out] tensors for 224
    outputs from 309 pixels (3% of the rn50 samples, those decoded at a DCT scale, take this
    path: ~0.4 ms less each, ~1% of the stage's time)."""
    interp = spec.interpolation
    coord = a * (np.arange(n_out, dtype=np.float64) + 0.5) + b
    aa = spec.antialias and interp != "nearest"
    scale = min(max(abs(a), 1.0), limit) if aa else 1.0
    taps = 1 if interp == "nearest" else max(int(math.ceil(2 * SUPPORT[interp] * scale - 1e-9)), 1)
    if interp == "nearest":
        first = np.floor(coord)
    else:
        first = np.floor(coord - 0.5 - SUPPORT[interp] * scale) + 1
    k = first[:, None] + np.arange(taps, dtype=np.float64)  # [n_out, taps]
    if interp == "nearest":
        w = np.ones_like(k)
    else:
        w = _filter_np((k + 0.5 - coord[:, None]) / scale, interp)
    kb = _border_np(k.astype(np.int64), size, spec.border)
    # every source point is inside the image here: taps beyond it are dropped ("constant") or
    # read through the border rule; taps outside the clip range are dropped
    keep = (kb >= lo) & (kb < hi)
    if spec.border == "constant":
        keep &= (k >= 0) & (k < size)
    w = np.where(keep, w, 0.0)
    dense = np.zeros((n_out, hi - lo), dtype=np.float64)
    rows = np.arange(n_out)
    cols = np.clip(kb - lo, 0, hi - lo - 1)
    for t in range(taps):  # tap by tap, as the twin's scatter_add_ does (same sums, same order);
        dense[rows, cols[:, t]] += w[:, t]  # one entry per row in each: no repeated index
    return (dense / np.maximum(dense.sum(1, keepdims=True), 1e-300)).astype(np.float32)


def _filter_np(t: np.ndarray, interpolation: str) -> np.ndarray:
    """filters.filter_weight in numpy (same operations)."""
    a = np.abs(t)
    if interpolation == "bilinear":
        return np.maximum(1.0 - a, 0.0)
    c = -0.5
    near = ((c + 2.0) * a - (c + 3.0)) * a * a + 1.0
    far = ((c * a - 5.0 * c) * a + 8.0 * c) * a - 4.0 * c
    return np.where(a < 1.0, near, np.where(a < 2.0, far, 0.0))


def _border_np(k: np.ndarray, size: int, border: str) -> np.ndarray:
    """The index part of filters.border_index in numpy."""
    if border in ("constant", "replicate"):
        return np.clip(k, 0, size - 1)
    if border == "wrap":
        return np.remainder(k, size)
    period = max(2 * (size - 1), 1)
    m = np.remainder(k, period)
    m = np.where(m >= size, period - m, m)
    return m if size > 1 else np.zeros_like(m)


def warp_sample(img: torch.Tensor, spec: WarpSpec, rows: SampleRows, i: int) -> torch.Tensor:
    """Sample i (img: its stored HWC pixels) by the "window", "separable" or "general" path:
    [H, W, 3] (uint8 for window, float32 for the others); a grey sample is expanded to 3
    channels."""
    kind = rows.kinds[i]
    if kind == GENERAL:
        return general_sample(img, spec, rows, i)
    res = _window(img, spec, rows, i) if kind == WINDOW else _separable(img, spec, rows, i)
    return res.expand(*res.shape[:2], 3) if res.shape[2] == 1 else res


def warp_cpu(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec,
             map_fn: Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]] = map) -> torch.Tensor:
    """Same contract as warp_reference, with the fast paths where they apply: uint8
    [N, H, W, 3] when every sample takes the "window" path, float32 otherwise."""
    n = len(spec)
    H, W = spec.out_size
    if data.dtype != torch.uint8 or data.is_cuda or n == 0:
        return warp_reference(data, table, spec)
    kind = classify(spec)
    rows = sample_rows(spec, kind)
    kinds = rows.kinds
    table_rows = table.tolist()
    out = torch.empty(n, H, W, 3, dtype=torch.uint8 if bool((kind == WINDOW).all()) else torch.float32)

    def one(i: int) -> None:
        off, bh, bw, c = table_rows[i]
        out[i].copy_(warp_sample(data[off : off + bh * bw * c].view(bh, bw, c), spec, rows, i))

    for _ in map_fn(one, [i for i in range(n) if kinds[i] != REFERENCE]):
        pass
    rest = (kind == REFERENCE).nonzero().flatten()
    if len(rest):
        out[rest] = warp_reference(data, table[rest], spec[rest.numpy()]).to(out.dtype)
    return out
