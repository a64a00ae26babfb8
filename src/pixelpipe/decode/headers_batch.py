"""The JPEG headers of a batch parsed in one C call (native/jpeg_headers.c), as parse_jpeg gives
them; parse_jpeg (decode/headers.py) stays the reference and handles what the C code leaves.

Why: a GPU Pipeline's planning thread parsed every JPEG header of every batch in Python, about
8 us per image, 2-2.5 ms per batch of 256, while the Pipeline's threads were bound by the GIL:
with those parses cached instead (an experiment), the rn50 Pipeline ran 1.4x faster on an H100
(measured). The C walk is the same as parse_jpeg's; where parse_jpeg
would raise, or a blob is not a JPEG (or not a `bytes`), the C code says "not parsed" and the
caller runs parse_jpeg, so every error keeps its message. Equal ImageInfo and JpegLayout values
are shared (both are frozen), which keeps the cost of making them small.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..native.pointers import bytes_pointers
from .headers import _PROGRESSIVE, ImageInfo, JpegLayout

__all__ = ["parse_jpegs"]

_SHARED: dict[tuple[int, ...], Any] = {}  # equal ImageInfo / JpegLayout values made once (cleared when large)
_SHARED_MAX = 1 << 16


def _library() -> Any:
    from .. import native

    if native.library() is None:  # PIXELPIPE_NATIVE=0, native.disabled() or no compiler: numpy/Python
        return None
    return native.shared("jpeg_headers.c", "JPEG headers parsed in Python", C.PyDLL,  # quick: keeps the GIL
                         {"pp_parse_jpegs": (None, [C.c_int64, C.c_void_p, C.c_void_p, C.c_int, C.c_void_p])})


def parse_jpegs(blobs: Sequence[Any], to_scan: bool = True) -> list[tuple[ImageInfo, JpegLayout] | None]:
    """Per blob, what parse_jpeg(blob, to_scan) returns, or None where the caller must call
    parse_jpeg itself (not a JPEG, a header parse_jpeg refuses, not `bytes`, or no C
    compiler: then every entry is None)."""
    n = len(blobs)
    lib = _library() if n else None
    if lib is None:
        return [None] * n
    usable = blobs
    if set(map(type, blobs)) != {bytes}:  # what is not `bytes` is left to parse_jpeg
        usable = [b if type(b) is bytes else None for b in blobs]
        lengths = np.fromiter((0 if b is None else len(b) for b in usable), np.int64, n)
    else:  # the usual batch: the lengths in one C loop
        lengths = np.fromiter(map(len, blobs), np.int64, n)
    data, _owner = bytes_pointers(usable)
    out = np.empty((n, 9), dtype=np.int64)
    lib.pp_parse_jpegs(n, data, lengths.ctypes.data, int(to_scan), out.ctypes.data)
    got: list[tuple[ImageInfo, JpegLayout] | None] = []
    shared = _SHARED
    if len(shared) > _SHARED_MAX:
        shared.clear()
    for ok, height, width, comps, bits, sof, orientation, sos_end, scan in out.tolist():
        if not ok:
            got.append(None)
            continue
        key = (height, width, comps, bits, sof, orientation)  # 6 numbers: an ImageInfo
        info = shared.get(key)
        if info is None:
            info = shared[key] = ImageInfo("jpeg", height, width, comps, bits, sof in _PROGRESSIVE, orientation)
        key = (sof, sos_end, scan)  # 3 numbers: a JpegLayout
        layout = shared.get(key)
        if layout is None:
            layout = shared[key] = JpegLayout(sof, sos_end, scan)
        got.append((info, layout))
    return got
