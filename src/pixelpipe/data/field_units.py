"""The two uniform fields under RandomErasing's per-pixel noise on the CPU in one C pass
(native/noise.c), for Draws.normal_field_at_np: the same bits as its numpy hashing, about 0.4 of
the 0.5 ms a piece of 8 DeiT samples spent on ~53,000 values on one thread. None where the
library was not built or native code is off (PIXELPIPE_NATIVE=0, native.disabled()): the numpy
form runs then. rectangle_units makes the same numbers for whole rectangles of a batch from five
numbers each (no element and sample array per value)."""

from __future__ import annotations

import ctypes as C

import numpy as np

from .. import native

__all__ = ["field_units", "rectangle_units"]

# pp_field_units(s1 uint32 [N], s2 uint32 [N], rows int64 [K], elements int64 [K], k, u1 float32 [K], u2 float32 [K])
# pp_rect_units(s1, s2, rects int64 [R, 5], r, c, h, w, u1, u2)
_SIGNATURES = {"pp_field_units": (None, [C.c_void_p] * 4 + [C.c_int64] + [C.c_void_p] * 2),
               "pp_rect_units": (None, [C.c_void_p] * 3 + [C.c_int64] * 4 + [C.c_void_p] * 2)}


def _library() -> C.CDLL | None:
    if not native.enabled():
        return None
    return native.shared("noise.c", "RandomErasing's noise is hashed in numpy on the CPU", C.CDLL, _SIGNATURES)


def field_units(s1: np.ndarray, s2: np.ndarray, rows: np.ndarray,
                elements: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(u1, u2), float32 [K]: the uniforms of the fields whose per-sample states are s1 and s2
    (uint32 [N]) at value k's sample rows[k] (int64, in 0..N-1) and element elements[k] (int64;
    the counter wraps at 32 bits), or None without the C library."""
    lib = _library()
    if lib is None:
        return None
    s1 = np.ascontiguousarray(s1, dtype=np.uint32)
    s2 = np.ascontiguousarray(s2, dtype=np.uint32)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    elements = np.ascontiguousarray(elements, dtype=np.int64)
    if len(rows) != len(elements) or (len(rows) and (rows.min() < 0 or rows.max() >= min(len(s1), len(s2)))):
        raise ValueError(f"field_units: {len(rows)} rows for {len(elements)} elements, rows within 0..{len(s1) - 1}")
    u1 = np.empty(len(rows), dtype=np.float32)
    u2 = np.empty(len(rows), dtype=np.float32)
    if len(rows):
        lib.pp_field_units(native.address(s1), native.address(s2), native.address(rows), native.address(elements),
                           len(rows), native.address(u1), native.address(u2))
    return u1, u2


def rectangle_units(s1: np.ndarray, s2: np.ndarray, rects: np.ndarray, shape: tuple[int, int, int],
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """field_units at every value of each rectangle of rects (int64 [R, 5]: sample, top, left,
    height, width, inside fields of `shape` (C, H, W)), rectangle after rectangle, each channel
    by channel and row by row: the elements (ch * H + top + i) * W + left + j. None without the
    C library."""
    lib = _library()
    if lib is None:
        return None
    c, h, w = (int(v) for v in shape)
    s1 = np.ascontiguousarray(s1, dtype=np.uint32)
    s2 = np.ascontiguousarray(s2, dtype=np.uint32)
    rects = np.ascontiguousarray(rects, dtype=np.int64).reshape(-1, 5)
    sample, top, left, rh, rw = rects.T
    if len(rects) and (sample.min() < 0 or sample.max() >= min(len(s1), len(s2)) or top.min() < 0 or left.min() < 0
                       or rh.min() < 0 or rw.min() < 0 or (top + rh).max() > h or (left + rw).max() > w):
        raise ValueError(f"rectangle_units: rectangles {rects.tolist()} outside {len(s1)} fields of {shape}")
    k = int(c * (rh * rw).sum())
    u1 = np.empty(k, dtype=np.float32)
    u2 = np.empty(k, dtype=np.float32)
    if k:
        lib.pp_rect_units(native.address(s1), native.address(s2), native.address(rects), len(rects), c, h, w,
                          native.address(u1), native.address(u2))
    return u1, u2
