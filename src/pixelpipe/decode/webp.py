"""WebP decoding straight into a NumPy buffer with libwebp's advanced API (WebPDecode, MODE_RGB).

Pillow 13 opens every WebP through WebPAnimDecoder: the frame is decoded into an RGBA canvas,
copied into a bytes object, unpacked into an image, cropped and converted to RGB. Here libwebp
writes RGB pixels directly into an array (external memory), with the GIL released, and the
region is a view of it. Most of the time is libwebp's VP8 decode, which both paths share: on the
ImageNet sample as WebP q=90 (2-core EPYC) a whole image takes 3.3 ms instead of 3.6 ms on one
thread, and 8 threads decode about 610 images/s instead of 465 (benchmarks/webp_decode.py).

Exactness (tests/test_decode_webp.py): decode_region's pixels are the Pillow path's (whole
decode, crop, alpha dropped) for all 75,000 regions tried: 500 photos x lossy q=90, q=50,
lossless, lossy and lossless RGBA, grey "L"; 25 regions each, odd offsets and edges included.
libwebp's MODE_RGB ignores alpha without premultiplying, so images with alpha take this path
too. Grey images come out with 3 channels, as from Pillow (which opens every WebP as RGB or
RGBA), whatever `rgb` asks.

Why the whole image is decoded, not a crop (config.options.use_cropping):
- A crop's first and last rows and columns differ from a whole decode (fancy chroma upsampling
  treats the crop's edges as the picture's: 42% of random regions of lossy images differed, by
  up to 45 levels). Widening the crop by 1 pixel (its left and top edges even) and trimming is
  exact (every region of 5 small odd-sized images in 4 encodings: 707,000), but that alone saves
  nothing: every macroblock row above the crop's bottom is still entropy-decoded and
  reconstructed, and the strong loop filter (Pillow's default) runs from the top-left corner
  whatever the crop (q=90, 50%-area regions: crop down to the bottom 3.19 ms, whole 3.21 ms).
- Only stopping at the region's bottom saves time (2.81 ms), but then damage to the bitstream
  below the region goes unnoticed: of 2,700 files with one bit flipped, Pillow rejected 445, and
  a crop ending at the region returned pixels for 391 of them. Decoding to the end fails exactly
  where Pillow fails (6,000 truncated or bit-flipped files, 2,514 rejected: the same outcome and
  pixels for all), so corrupt files still raise DecodeError through the Pillow path.

The library is Pillow's own (site-packages/pillow.libs/libwebp-*.so*), or else the system's
libwebp, each only when its version is the one Pillow reports (so that the pixels are Pillow's)
and its WebPDecoderConfig has our size. Without one, `available()` is False and decoding stays
with Pillow. Anything unusual (an animation, a size other than the header's, any libwebp error)
returns None: the caller then lets Pillow decode, which gives the complete error messages. EXIF
orientation is applied to WebP by neither path (`read_header` reports orientation 1 for WebP).

Thread safety: every call has its own WebPDecoderConfig; libwebp keeps no state between calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
from functools import lru_cache

import numpy as np

__all__ = ["available", "decode_webp_region"]

# WEBP_DECODER_ABI_VERSION of a recent decode.h (0x0210; Pillow 13 bundles libwebp 1.6.0). libwebp
# refuses a call only when the major byte differs, which would mean the structures below changed.
_ABI = 0x0210
_MODE_RGB = 0  # WEBP_CSP_MODE: R, G, B bytes, alpha ignored (not premultiplied)
_OK = 0  # VP8_STATUS_OK


# The structures of libwebp's decode.h (ABI 2.x), field for field. Their sizes on 64-bit Linux:
# 40, 120, 76 and 240 bytes, the sizes libwebp itself clears in WebPGetFeaturesInternal,
# WebPInitDecBufferInternal and WebPInitDecoderConfigInternal (checked in the tests).
class _Features(ctypes.Structure):  # WebPBitstreamFeatures
    _fields_ = [("width", ctypes.c_int), ("height", ctypes.c_int), ("has_alpha", ctypes.c_int),
                ("has_animation", ctypes.c_int), ("format", ctypes.c_int), ("pad", ctypes.c_uint32 * 5)]


class _RGBABuffer(ctypes.Structure):  # WebPRGBABuffer
    _fields_ = [("rgba", ctypes.c_void_p), ("stride", ctypes.c_int), ("size", ctypes.c_size_t)]


class _YUVABuffer(ctypes.Structure):  # WebPYUVABuffer: unused, but it sets the union's size
    _fields_ = [("y", ctypes.c_void_p), ("u", ctypes.c_void_p), ("v", ctypes.c_void_p), ("a", ctypes.c_void_p),
                ("y_stride", ctypes.c_int), ("u_stride", ctypes.c_int), ("v_stride", ctypes.c_int),
                ("a_stride", ctypes.c_int), ("y_size", ctypes.c_size_t), ("u_size", ctypes.c_size_t),
                ("v_size", ctypes.c_size_t), ("a_size", ctypes.c_size_t)]


class _Planes(ctypes.Union):
    _fields_ = [("RGBA", _RGBABuffer), ("YUVA", _YUVABuffer)]


class _DecBuffer(ctypes.Structure):  # WebPDecBuffer
    _fields_ = [("colorspace", ctypes.c_int), ("width", ctypes.c_int), ("height", ctypes.c_int),
                ("is_external_memory", ctypes.c_int), ("u", _Planes), ("pad", ctypes.c_uint32 * 4),
                ("private_memory", ctypes.c_void_p)]


class _Options(ctypes.Structure):  # WebPDecoderOptions
    _fields_ = [(name, ctypes.c_int) for name in (
        "bypass_filtering", "no_fancy_upsampling", "use_cropping", "crop_left", "crop_top", "crop_width",
        "crop_height", "use_scaling", "scaled_width", "scaled_height", "use_threads", "dithering_strength",
        "flip", "alpha_dithering_strength")] + [("pad", ctypes.c_uint32 * 5)]


class _Config(ctypes.Structure):  # WebPDecoderConfig
    _fields_ = [("input", _Features), ("output", _DecBuffer), ("options", _Options)]


class _Lib:
    """libwebp's functions. WebPDecode releases the GIL (ctypes.CDLL); the header calls around it
    take microseconds and keep it (ctypes.PyDLL), as in pixelpipe.decode.turbo."""

    def __init__(self, path: str) -> None:
        free, held = ctypes.CDLL(path), ctypes.PyDLL(path)
        self.path = path
        self.version = held.WebPGetDecoderVersion()  # 0xMMmmpp
        self.init_config = held.WebPInitDecoderConfigInternal
        self.init_config.argtypes = [ctypes.POINTER(_Config), ctypes.c_int]
        self.get_features = held.WebPGetFeaturesInternal
        self.get_features.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_Features), ctypes.c_int]
        self.decode = free.WebPDecode
        self.decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_Config)]


def _pillow_webp_version() -> int | None:
    """Pillow's libwebp version as 0xMMmmpp; None when Pillow has no WebP support."""
    from PIL import features

    try:
        text = features.version("webp")
        major, minor, patch = (int(v) for v in text.split(".")[:3])
    except (ValueError, TypeError, AttributeError):
        return None
    return (major << 16) | (minor << 8) | patch


def _candidates() -> list[str]:
    """Pillow's bundled libwebp first, then the system's."""
    paths = []
    spec = importlib.util.find_spec("PIL")
    if spec is not None and spec.origin:
        libs = os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "pillow.libs")
        if os.path.isdir(libs):
            paths += [os.path.join(libs, f) for f in sorted(os.listdir(libs)) if f.startswith("libwebp-")]
    system = ctypes.util.find_library("webp")
    if system:
        paths.append(system)
    return paths


@lru_cache(maxsize=1)
def _library() -> _Lib | None:
    want = _pillow_webp_version()
    if want is None:
        return None
    for path in _candidates():
        try:
            lib = _Lib(path)
        except (OSError, AttributeError):
            continue
        if lib.version == want and _layout_matches(lib):  # another version could round differently
            return lib
    return None


def _layout_matches(lib: _Lib) -> bool:
    """libwebp clears sizeof(WebPDecoderConfig) bytes when it initialises one: a library whose
    structure had another size would write past ours, or read fields we never set."""
    size = ctypes.sizeof(_Config)
    raw = (ctypes.c_uint8 * (2 * size))(*([0xAA] * (2 * size)))
    if not lib.init_config(ctypes.cast(raw, ctypes.POINTER(_Config)), _ABI):
        return False
    return max((i + 1 for i in range(2 * size) if raw[i] != 0xAA), default=0) == size


def available() -> bool:
    """True when a libwebp of Pillow's version could be loaded."""
    return _library() is not None


def decode_webp_region(data: bytes, region: tuple[int, int, int, int],
                       size: tuple[int, int] | None = None) -> np.ndarray | None:
    """The pixels [y0:y1, x0:x1] of a still WebP as HWC uint8 RGB, exactly what Pillow's decode
    of the whole image gives cropped (alpha dropped); None when this decoder does not handle the
    file (the caller falls back to Pillow). `size` is the (h, w) the header gave, if known: any
    other size is left to Pillow."""
    lib = _library()
    if lib is None:
        return None
    config = _Config()
    if not lib.init_config(ctypes.byref(config), _ABI):
        return None
    if lib.get_features(data, len(data), ctypes.byref(config.input), _ABI) != _OK:
        return None
    features = config.input
    height, width = features.height, features.width
    if features.has_animation or size is not None and size != (height, width):
        return None
    y0, x0, y1, x1 = region
    if not (0 <= y0 < y1 <= height and 0 <= x0 < x1 <= width):
        return None
    out = np.empty((height, width, 3), dtype=np.uint8)
    buf = config.output
    buf.colorspace = _MODE_RGB
    buf.is_external_memory = 1
    buf.u.RGBA.rgba = out.ctypes.data
    buf.u.RGBA.stride = width * 3
    buf.u.RGBA.size = out.nbytes
    if lib.decode(data, len(data), ctypes.byref(config)) != _OK:
        return None  # corrupt, truncated, unsupported: Pillow raises the full error
    return out if (y0, x0, y1, x1) == (0, 0, height, width) else out[y0:y1, x0:x1]
