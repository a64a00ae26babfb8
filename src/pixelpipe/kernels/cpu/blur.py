"""A separable per-sample blur of float32 CPU tensors in C (native/blur.c), one call per batch or
piece: GaussianBlur's CPU form (kernels.pixel_forms).

Why: the twin (ops.blur._filter) is a torch product and an in-place sum per tap and axis, two
passes over the blurred images per tap: about 2 ms per 224x224 image per thread for
GaussianBlur(23), most of the SimCLR pipeline's pixel time on the CPU. blur.c reads and writes
each image about twice, with the twin's float32 products and sums in its order (no fused
multiply-adds), so the same bits (tests/test_blur_cpu.py). The call releases the GIL, so the
Engine's threads blur their pieces at once.
"""

from __future__ import annotations

import ctypes as C

import numpy as np
import torch

from ... import native
from ..filters import rows_output

__all__ = ["blur_library", "blur_rows_cpu"]

# pp_blur_rows(src, dst, rows int64 [R], wk float32 [R, kw], hk float32 [R, kh], geo int64 [14])
_SIGNATURES = {"pp_blur_rows": (C.c_int64, [C.c_void_p] * 6)}


def blur_library() -> C.CDLL | None:
    """blur.c's library (loaded once per process), or None where it was not built (after
    native's one-line notice), with PIXELPIPE_NATIVE=0 or inside native.disabled(): the torch
    tap loop runs then."""
    if not native.enabled():
        return None
    return native.shared("blur.c", "GaussianBlur runs as torch's tap loop on the CPU", C.CDLL, _SIGNATURES)


def blur_rows_cpu(x: torch.Tensor, rows: np.ndarray, along_w: np.ndarray | None, along_h: np.ndarray | None,
                  owned: bool) -> torch.Tensor:
    """x (float32 [N, C, H, W] on the CPU, any strides) with samples `rows` (host int [R],
    distinct) correlated with their own 1-D kernels, along the rows first (along_w, float64
    [R, kw], odd kw) then along the columns (along_h, [R, kh]), either None to skip that axis;
    borders mirrored. The other samples are x's. The kernels are cast to float32 as the twin
    casts them. owned: x may be overwritten (the result is x); else the result is a new tensor.
    Needs blur_library() (not None)."""
    if (along_w is None and along_h is None) or len(rows) == 0:
        return x
    lib = blur_library()
    assert lib is not None, "blur_rows_cpu needs blur.c built and native code on"
    n, c, h, w = x.shape
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    r = len(rows)
    if rows.min() < 0 or rows.max() >= n:
        raise ValueError(f"rows must lie in 0..{n - 1}, got {rows.min()}..{rows.max()}")
    out = rows_output(x, r, owned)
    wk = np.ascontiguousarray(along_w if along_w is not None else np.ones((r, 1)), dtype=np.float32)
    hk = np.ascontiguousarray(along_h if along_h is not None else np.ones((r, 1)), dtype=np.float32)
    geo = np.array([r, c, h, w, wk.shape[1], hk.shape[1], *x.stride(), *out.stride()], dtype=np.int64)
    if lib.pp_blur_rows(x.data_ptr(), out.data_ptr(), native.address(rows), native.address(wk),
                        native.address(hk), native.address(geo)) != 0:
        raise MemoryError(f"blur.c could not allocate its buffers for {h}x{w} images")
    return out
