"""COCO polygon masks through pycocotools' own C functions, one call per sample without the GIL
(native/coco_masks.c, which is handed the addresses of rleFrPoly, rleMerge, rleDecode and rleFree
in the installed pycocotools extension: the kept library's rasterisation, bit for bit).

Why: pycocotools' Python functions hold the GIL, so a Pipeline's reader threads rasterised one
sample at a time (two threads took longer than one for the same samples); through this call
they work side by side. The Python calls stay as the twin (the Coco reader uses them where this
library is not there), and tests/test_coco_masks.py compares the two label images.
"""

from __future__ import annotations

import ctypes as C
import threading
from typing import Any

import numpy as np

from .. import native

__all__ = ["library", "rasterise", "takes"]

_P, _I = C.c_void_p, C.c_int64
SIGNATURES = {"pp_coco_set": (None, [_P] * 4), "pp_coco_polygons": (C.c_int, [_I, _P, _P, _P, _P, _P, _I, _P, _I])}
FUNCTIONS = ("rleFrPoly", "rleMerge", "rleDecode", "rleFree")  # maskApi's, in pp_coco_set's order
_WIRED: list[Any] = []
_LOCK = threading.Lock()


def library() -> C.CDLL | None:
    """coco_masks.c wired to the installed pycocotools, or None (no C helper, PIXELPIPE_NATIVE=0,
    or a pycocotools without those functions): the Python calls then. Once per process."""
    with _LOCK:
        if not _WIRED:
            _WIRED.append(_wire())
        found = _WIRED[0]
        return None if found is None else found[0]


def _wire() -> tuple[C.CDLL, C.CDLL] | None:
    if not native.enabled():
        return None
    try:
        import pycocotools._mask as extension

        api = C.CDLL(extension.__file__)
        for name in FUNCTIONS:
            getattr(api, name)
    except (ImportError, OSError, AttributeError):
        return None
    lib = native.shared("coco_masks.c", "COCO polygons are rasterised through pycocotools' Python calls",
                        signatures=SIGNATURES)
    if lib is None:
        return None
    return native.wire(lib, "pp_coco_set", api, FUNCTIONS), api  # the extension held with it


def takes(polygons: list[list[float]]) -> bool:
    """Whether an object's polygons go the way the C call rasterises them: pycocotools reads a
    list whose first polygon has 4 values as boxes, and refuses fewer (the Python calls then)."""
    return len(polygons) > 0 and len(polygons[0]) > 4


def rasterise(lib: C.CDLL, out: np.ndarray, objects: list[tuple[tuple[int, int, int, int], list[list[float]], int]]) -> None:
    """Write each object's label into `out` (C-contiguous uint8 or int32 [H, W]) where its
    polygons (in image coordinates) cover, rasterised inside its window (y0, x0, y1, x1), in
    order (a later object over an earlier one)."""
    if not objects:
        return
    if out.dtype not in (np.uint8, np.int32) or not out.flags.c_contiguous:
        raise ValueError(f"the label image must be C-contiguous uint8 or int32, got {out.dtype}")
    n = len(objects)
    parts = np.array([len(polys) for _, polys, _ in objects], dtype=np.int64)
    lengths = np.array([len(p) for _, polys, _ in objects for p in polys], dtype=np.int64)
    xy = np.array([v for _, polys, _ in objects for p in polys for v in p], dtype=np.float64)
    windows = np.array([w for w, _, _ in objects], dtype=np.int64).reshape(n, 4)
    values = np.array([v for _, _, v in objects], dtype=np.int64)
    if lib.pp_coco_polygons(n, parts.ctypes.data, lengths.ctypes.data, xy.ctypes.data, windows.ctypes.data,
                            values.ctypes.data, out.itemsize, out.ctypes.data, out.shape[1]) != 0:
        raise MemoryError("out of memory while rasterising COCO polygons")
