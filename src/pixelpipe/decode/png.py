"""PNG decoding straight into a NumPy buffer with libpng's simplified API (png_image).

Pillow decodes PNG with its own zlib-based decoder: its load loop takes the GIL back for every
64 KiB block, unpacks each row into its 4-byte pixel format, and the Pillow path of
decode_region then converts to RGB / grey in another pass. Here libpng inflates, unfilters
and de-interlaces into an array in one call (png_image_finish_read, GIL released), and the
region is a view of it. Both paths inflate with the same system zlib (about half of the time),
so the gain is modest: on the ImageNet sample as RGB PNG (2-core EPYC) 4.5-4.8 ms instead of
5.1 ms per image on one thread, 1.2-1.3x the images/s on 8 threads (benchmarks/png_decode.py).

Exactness (tests/test_decode_png.py): the pixels are the Pillow path's (whole decode, crop,
`_to_array`'s conversions) for grey at 1, 2, 4 and 8 bits ("1" and "L"), grey + alpha, RGB,
RGBA and palettes (1 to 8 bits, short palettes, out-of-range indices), with or without tRNS,
plain or Adam7-interlaced, for every region tried. Why they are:
- libpng sees only the chunks that define the pixels: the signature, IHDR, PLTE (palettes
  only), the IDAT run and what follows it. gAMA, cHRM, sRGB, iCCP, cICP, sBIT, bKGD and tRNS
  never reach it, so it applies no colour transform (the simplified API gamma-corrects when a
  gAMA is more than ~5% from sRGB's; Pillow ignores gAMA) and never composites alpha onto a
  background. Pillow ignores them too for the pixels: tRNS only matters to Pillow's RGBA or
  LA conversions, which decode_region does not use.
- The output format follows IHDR's colour type: grey stays 1 channel (G), palettes and RGB
  give RGB; grey + alpha and RGBA are read as GA / RGBA (8-bit sRGB formats: alpha is never
  premultiplied) and the alpha channel is dropped from the view.
- 16-bit files are left to Pillow: the simplified API treats 16-bit samples as linear and
  gamma-encodes them, where Pillow keeps the high byte.

Errors: Pillow opens the file first (about 10 us: it reads and CRC-checks every chunk before
the image data, exactly as the Pillow path does), and after the image data only tIME, tEXt
and IEND may follow (those Pillow reads without failing). libpng checks the CRC of every
chunk it sees and the image data. Whenever anything fails, warns or looks unusual (APNG, 16
bits, IDAT chunks not in one run, no IEND) this returns None and Pillow decodes, raising the
complete errors. So every file libpng decodes is one that Pillow decodes to the same pixels
(checked on truncated and bit-flipped files: the same outcome and pixels as the Pillow path).

The library is Pillow's bundled libpng16 (site-packages/pillow.libs), else the system's; each
must be 1.6.x and decode a built-in test image correctly (which checks the struct layout).
Thread safety: every call has its own png_image; libpng keeps no state between calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import io
import os
import struct
import zlib
from functools import lru_cache

import numpy as np

__all__ = ["available", "decode_png_region"]

_VERSION = 1  # PNG_IMAGE_VERSION
_GRAY, _GA, _RGB, _RGBA = 0, 1, 2, 3  # PNG_FORMAT_*: bit 0 alpha, bit 1 colour
_WARNING = 1  # PNG_IMAGE_WARNING in warning_or_error
# (format to read, channels to keep) by IHDR colour type
_OUTPUT = {0: (_GRAY, 1), 2: (_RGB, 3), 3: (_RGB, 3), 4: (_GA, 1), 6: (_RGBA, 3)}
_AFTER_IDAT = frozenset({b"tIME", b"tEXt", b"IEND"})  # Pillow reads these without failing
_ANIMATION = frozenset({b"acTL", b"fcTL", b"fdAT"})


class _Image(ctypes.Structure):  # png_image of png.h (libpng 1.6), 104 bytes on 64-bit Linux
    _fields_ = [("opaque", ctypes.c_void_p), ("version", ctypes.c_uint32), ("width", ctypes.c_uint32),
                ("height", ctypes.c_uint32), ("format", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("colormap_entries", ctypes.c_uint32), ("warning_or_error", ctypes.c_uint32),
                ("message", ctypes.c_char * 64)]


class _Lib:
    """libpng's simplified-API functions. png_image_finish_read (the decode) releases the GIL
    (ctypes.CDLL); reading the header and freeing take microseconds and keep it (ctypes.PyDLL),
    as in pixelpipe.decode.turbo."""

    def __init__(self, path: str) -> None:
        free, held = ctypes.CDLL(path), ctypes.PyDLL(path)
        self.path = path
        self.version = held.png_access_version_number()  # 10658 for 1.6.58
        self.begin = held.png_image_begin_read_from_memory
        self.begin.argtypes = [ctypes.POINTER(_Image), ctypes.c_void_p, ctypes.c_size_t]
        self.finish = free.png_image_finish_read
        self.finish.argtypes = [ctypes.POINTER(_Image), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                ctypes.c_void_p]
        self.free = held.png_image_free
        self.free.argtypes = [ctypes.POINTER(_Image)]
        self.free.restype = None


def _candidates() -> list[str]:
    """Pillow's bundled libpng16 first, then the system's."""
    paths = []
    spec = importlib.util.find_spec("PIL")
    if spec is not None and spec.origin:
        libs = os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "pillow.libs")
        if os.path.isdir(libs):
            paths += [os.path.join(libs, f) for f in sorted(os.listdir(libs)) if f.startswith("libpng16")]
    system = ctypes.util.find_library("png16")
    if system:
        paths.append(system)
    return paths


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _self_test(lib: _Lib) -> bool:
    """Decode a 3x2 RGBA file as RGB: right size and pixels only if our png_image is libpng's."""
    pixels = np.arange(24, dtype=np.uint8).reshape(2, 3, 4) * 10
    raw = b"".join(b"\0" + row.tobytes() for row in pixels)
    data = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 6, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))
    got = _decode(lib, data, _RGBA, 4)
    return got is not None and got.shape == (2, 3, 4) and np.array_equal(got, pixels)


@lru_cache(maxsize=1)
def _library() -> _Lib | None:
    for path in _candidates():
        try:
            lib = _Lib(path)
        except (OSError, AttributeError):
            continue
        if 10600 <= lib.version < 10700 and _self_test(lib):
            return lib
    return None


def available() -> bool:
    """True when a working libpng 1.6 could be loaded."""
    return _library() is not None


def _decode(lib: _Lib, data: bytes, fmt: int, channels: int) -> np.ndarray | None:
    """The whole image as HWC uint8 in `fmt`; None on any libpng error or warning."""
    image = _Image(version=_VERSION)
    try:
        if not lib.begin(ctypes.byref(image), data, len(data)) or image.warning_or_error:
            return None
        image.format = fmt
        out = np.empty((image.height, image.width, channels), dtype=np.uint8)
        ok = lib.finish(ctypes.byref(image), None, out.ctypes.data, image.width * channels, None)
        return out if ok and not image.warning_or_error else None
    finally:
        lib.free(ctypes.byref(image))


def _stream_for_libpng(data: bytes, palette: bool, text_budget: int) -> bytes | None:
    """The file as libpng should see it: signature, IHDR, PLTE when `palette`, then the IDAT
    run up to IEND; None when the chunks are not laid out as Pillow and libpng both read
    them alike (animation, IDATs not in one run, other chunks after the image data, no IEND,
    a chunk running past the end, more tEXt than the `text_budget` bytes Pillow still accepts)."""
    pos, n = 33, len(data)  # after the signature and IHDR (checked by read_header)
    plte = idat = None
    after_idat = False
    while pos + 12 <= n:
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if end > n or kind in _ANIMATION:
            return None
        if kind == b"IDAT":
            if idat is None:
                idat = pos
            elif after_idat:
                return None
            after_idat = False
        elif idat is None:
            if kind == b"PLTE" and plte is None:
                plte = (pos, end)
        elif kind not in _AFTER_IDAT:
            return None
        else:
            after_idat = True
            text_budget -= length if kind == b"tEXt" else 0
            if kind == b"IEND":
                if text_budget < 0:
                    return None
                kept = data[plte[0]:plte[1]] if palette and plte else b""
                if data[33:idat] == kept and end == n:
                    return data  # nothing to leave out: no copy
                return data[:33] + kept + data[idat:end]
        pos = end
    return None


def decode_png_region(data: bytes, region: tuple[int, int, int, int],
                      size: tuple[int, int] | None = None) -> np.ndarray | None:
    """The pixels [y0:y1, x0:x1] of a PNG of at most 8 bits per sample as HWC uint8, exactly
    what the Pillow path of decode_region gives: 1 channel for grey (with or without alpha),
    3 for RGB, RGBA and palettes (alpha dropped). None when this decoder does not handle the
    file (the caller falls back to Pillow). `size` is the (h, w) the header gave, if known."""
    lib = _library()
    if lib is None or len(data) < 33 or data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    width, height, depth, ctype = struct.unpack_from(">IIBB", data, 16)
    if depth > 8 or ctype not in _OUTPUT or size is not None and size != (height, width):
        return None
    y0, x0, y1, x1 = region
    if not (0 <= y0 < y1 <= height and 0 <= x0 < x1 <= width):
        return None
    from PIL import PngImagePlugin

    try:  # Pillow's checks of every chunk before the image data (CRCs, contents)
        with PngImagePlugin.PngImageFile(io.BytesIO(data)) as im:
            budget = PngImagePlugin.MAX_TEXT_MEMORY - getattr(im.png, "text_memory", 1 << 62)
    except Exception:
        return None
    stream = _stream_for_libpng(data, ctype == 3, budget)
    if stream is None:
        return None
    fmt, keep = _OUTPUT[ctype]
    out = _decode(lib, stream, fmt, 1 + (fmt & 1) + 2 * (fmt >> 1 & 1))
    if out is None or out.shape[:2] != (height, width):
        return None
    if out.shape[2] != keep:  # alpha dropped: a compact copy of the region, as Pillow's path gives
        return np.ascontiguousarray(out[y0:y1, x0:x1, :keep])
    return out if (y0, x0, y1, x1) == (0, 0, height, width) else out[y0:y1, x0:x1]
