"""JPEG region decoding with libjpeg-turbo's TurboJPEG 3 API (cropping and DCT scaling).

Pillow decodes whole JPEGs (pixelpipe stops it after the last row a region needs, no more).
TurboJPEG 3 can also skip the IDCT of the rows above a region and of the columns beside it,
and scale by 1/2, 1/4 or 1/8 in the IDCT: on the ImageNet sample a 49%-area window decodes in
0.98 ms against 1.61 ms for Pillow's whole image, with identical pixels (both are libjpeg-turbo;
tested against Pillow in tests/test_decode_turbo.py).

The library comes from the `turbojpeg` wheel (installed with pixelpipe on Linux x86-64), which
bundles libturbojpeg with the TurboJPEG 3 API; pixelpipe calls it through ctypes and never
imports that package's own bindings. Without it, `available()` is False and decoding stays with
Pillow. Anything unusual (CMYK, 12-bit, an EXIF rotation, a warning from libjpeg) is left to
the Pillow path, which has the complete error handling.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from functools import lru_cache

import numpy as np

_INIT_DECOMPRESS = 1
_P_SUBSAMP, _P_WIDTH, _P_HEIGHT, _P_PRECISION, _P_COLORSPACE = 4, 5, 6, 7, 8
_CS_RGB, _CS_YCBCR, _CS_GRAY = 0, 1, 2
_PF_RGB, _PF_GRAY = 0, 6
# iMCU width in pixels for each TJSAMP (444, 422, 420, GRAY, 440, 411, 441)
_MCU_WIDTH = {0: 8, 1: 16, 2: 16, 3: 8, 4: 8, 5: 32, 6: 8}
_MARGIN = 8  # pixels: fancy upsampling reaches at most 4 (4:1:1) beyond the crop


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Scale(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


class _Lib:
    """libturbojpeg's functions. The decode itself releases the GIL (ctypes.CDLL); the small
    calls around it (header, parameters, crop, scale: microseconds each) keep it
    (ctypes.PyDLL): releasing and taking the GIL again costs more than they do, and each time
    it is taken back the worker may wait for another thread's Python."""

    def __init__(self, path: str) -> None:
        free, held = ctypes.CDLL(path), ctypes.PyDLL(path)
        self.tj3Init = held.tj3Init
        self.tj3Init.restype = ctypes.c_void_p
        self.tj3Init.argtypes = [ctypes.c_int]
        self.tj3DecompressHeader = held.tj3DecompressHeader
        self.tj3DecompressHeader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        self.tj3Get = held.tj3Get
        self.tj3Get.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.tj3SetCroppingRegion = held.tj3SetCroppingRegion
        self.tj3SetCroppingRegion.argtypes = [ctypes.c_void_p, _Region]
        self.tj3SetScalingFactor = held.tj3SetScalingFactor
        self.tj3SetScalingFactor.argtypes = [ctypes.c_void_p, _Scale]
        self.tj3Decompress8 = free.tj3Decompress8
        self.tj3Decompress8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_int]
        self.tj3Destroy = held.tj3Destroy
        self.tj3Destroy.argtypes = [ctypes.c_void_p]


@lru_cache(maxsize=1)
def _library() -> _Lib | None:
    spec = importlib.util.find_spec("turbojpeg")
    if spec is None or not spec.submodule_search_locations and not spec.origin:
        return None
    base = os.path.dirname(spec.origin) if spec.origin else list(spec.submodule_search_locations)[0]
    libs = os.path.join(base, "turbojpeg.libs")
    if not os.path.isdir(libs):
        return None
    names = [f for f in os.listdir(libs) if f.startswith("libturbojpeg")]
    if not names:
        return None
    try:
        return _Lib(os.path.join(libs, names[0]))
    except (OSError, AttributeError):
        return None


def available() -> bool:
    """True when libturbojpeg with the TurboJPEG 3 API could be loaded."""
    return _library() is not None


_local = threading.local()


def _handle(lib: _Lib) -> int:
    h = getattr(_local, "handle", None)
    if h is None:
        h = lib.tj3Init(_INIT_DECOMPRESS)
        _local.handle = h
    return h


def _discard(lib: _Lib) -> None:
    """Drop this thread's handle after a failure: a handle that met corrupt data can refuse
    later, valid files (seen with this libturbojpeg build)."""
    h = getattr(_local, "handle", None)
    if h is not None:
        lib.tj3Destroy(h)
        _local.handle = None


def decode_jpeg_region(data: bytes, region: tuple[int, int, int, int], denom: int) -> np.ndarray | None:
    """The pixels floor(y0/d), floor(x0/d), ceil(y1/d), ceil(x1/d) of the JPEG reduced by 1/d
    (HWC uint8, 1 or 3 channels), exactly what Pillow's decode of the same region gives; None
    when this decoder does not handle the file (the caller falls back to Pillow)."""
    lib = _library()
    if lib is None:
        return None
    out = _decode(lib, data, region, denom)
    if out is None:
        _discard(lib)
    return out


def _decode(lib: _Lib, data: bytes, region: tuple[int, int, int, int], denom: int) -> np.ndarray | None:
    h = _handle(lib)
    if lib.tj3DecompressHeader(h, data, len(data)) != 0:
        return None
    if lib.tj3Get(h, _P_PRECISION) != 8:
        return None
    colorspace = lib.tj3Get(h, _P_COLORSPACE)
    if colorspace not in (_CS_RGB, _CS_YCBCR, _CS_GRAY):
        return None
    width, height = lib.tj3Get(h, _P_WIDTH), lib.tj3Get(h, _P_HEIGHT)
    mcu = _MCU_WIDTH.get(lib.tj3Get(h, _P_SUBSAMP))
    if mcu is None:
        return None
    if lib.tj3SetScalingFactor(h, _Scale(1, denom)) != 0:
        return None
    sw, sh = -(-width // denom), -(-height // denom)
    y0, x0, y1, x1 = region
    y0, x0 = y0 // denom, x0 // denom
    y1, x1 = min(-(-y1 // denom), sh), min(-(-x1 // denom), sw)
    # Chroma upsampling looks at neighbouring samples: a crop's edge pixels would differ from a
    # whole decode (up to 17 grey levels seen). Decoding _MARGIN more pixels on the left, right
    # and top and cutting them off gives exactly the whole decode's pixels (tested on random
    # regions). Not below: libjpeg decodes top to bottom and reads the rows under an output row
    # (its upsampling context) whether or not more rows are asked for, so stopping at y1 gives
    # the same rows, and saves entropy decoding an iMCU row in about half the regions (~5% of
    # the decode; tests/test_decode_turbo.py checks the bottom rows against Pillow).
    ey0, ey1 = max(0, y0 - _MARGIN), y1
    ex0, ex1 = max(0, x0 - _MARGIN), min(sw, x1 + _MARGIN)
    step = max(1, mcu // denom)  # the crop's left edge must sit on a (scaled) iMCU boundary
    ex0 -= ex0 % step
    whole = (ex0, ey0, ex1, ey1) == (0, 0, sw, sh)
    box = _Region(0, 0, 0, 0) if whole else _Region(ex0, ey0, ex1 - ex0, ey1 - ey0)
    if lib.tj3SetCroppingRegion(h, box) != 0:
        return None
    grey = colorspace == _CS_GRAY
    out = np.empty((ey1 - ey0, ex1 - ex0, 1 if grey else 3), dtype=np.uint8)
    if lib.tj3Decompress8(h, data, len(data), out.ctypes.data, 0, _PF_GRAY if grey else _PF_RGB) != 0:
        return None  # an error or a libjpeg warning (e.g. corrupt data): Pillow decides
    return out[y0 - ey0 : y1 - ey0, x0 - ex0 : x1 - ex0]
