"""CPU decoding with Pillow: one image region at a time, or a whole batch on a thread pool.

`decode_region` is the planner's decoder: it returns only the pixels of a region (in displayed,
EXIF-oriented coordinates), decoding a JPEG at a reduced DCT scale (1/2, 1/4, 1/8) when the
region would still be at least `min_size` there, and stopping the JPEG decoder after the last
row the region needs. `decode` turns a list of encoded images into an `ImageBatch`.

Every failure on the data (unknown format, corrupt, truncated, too many pixels) is a
`DecodeError`; bad arguments are plain `ValueError`s.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image, ImageFile

from ..data.batch import ImageBatch
from ..data.threads import default_threads
from .headers import DecodeError, ImageInfo, JpegLayout, parse_jpeg, read_header
from .turbo import decode_jpeg_region
from .webp import decode_webp_region

__all__ = ["dct_scale", "decode_cpu", "decode_region", "pil_to_array"]

# EXIF orientation -> the transpose that displays the stored image (PIL.ImageOps.exif_transpose).
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# Orientations whose transpose reverses the stored rows / the stored columns.
_REVERSES_ROWS = frozenset({3, 4, 6, 7})
_REVERSES_COLS = frozenset({2, 3, 7, 8})
_JPEG_END = b"\xff\xd9"
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_CODEC_BROKEN = -2  # Pillow's IMAGING_CODEC_BROKEN error code


def decode_region(
    data: bytes | bytearray | memoryview,
    region: tuple[int, int, int, int] | None = None,
    min_size: tuple[int, int] | None = None,
    rgb: bool = True,
    exif: bool = True,
    max_pixels: int = 100_000_000,
) -> tuple[np.ndarray, float]:
    """Decode the pixels of one region of an encoded image.

    Args:
        data: a JPEG, PNG, WebP or BMP file.
        region: (y0, x0, y1, x1), end-exclusive, in the full-resolution displayed image (after
            EXIF orientation when `exif`); None for the whole image.
        min_size: (h, w). A JPEG may be decoded at DCT scale s = 1/2, 1/4 or 1/8 (the smallest
            allowed) when region_h * s >= h and region_w * s >= w; None decodes at full size.
            When the orientation reverses an axis, s is also limited to scales that divide that
            stored axis, so that the reduced pixel grid stays aligned with the displayed one.
        rgb: convert grey images to 3 channels; False keeps them at 1.
        exif: apply the JPEG's EXIF orientation, as PIL.ImageOps.exif_transpose does.
        max_pixels: files whose width * height (from the header) exceed this raise before
            anything is decoded.

    Returns:
        (pixels, scale): pixels is a writable HWC uint8 array with 1 or 3 channels holding
        exactly the reduced region floor(y0*s), floor(x0*s), ceil(y1*s), ceil(x1*s) (clipped
        to the reduced image) of the displayed image reduced by `scale` (1, 0.5, 0.25 or
        0.125). Reduced pixel j covers full-resolution pixels [j / s, (j + 1) / s), which is how
        libjpeg scales (Pillow's draft box is (0, 0, W / s, H / s) too); the reduced size is
        ceil(size * s).

    Conversions: CMYK and palette images become RGB, alpha is dropped, 1-bit images become
    0/255 grey, and 16-bit samples keep their high byte (v >> 8, as Pillow does itself for
    16-bit RGB PNGs; note Pillow's own convert("L") of 16-bit grey clips instead).

    Raises:
        DecodeError: the data is not a decodable image, or exceeds max_pixels.
        ValueError: region or min_size outside the allowed range.
    """
    data = data if isinstance(data, bytes) else bytes(data)
    layout = None
    if data[:3] == b"\xff\xd8\xff":  # walk on to the first scan, for decode_jpeg_rows
        info, layout = parse_jpeg(data, to_scan=True)
    else:
        info = read_header(data)
    if info.height * info.width > max_pixels:
        raise DecodeError(
            f"{info.width}x{info.height} {info.format} has {info.width * info.height} pixels, "
            f"more than max_pixels={max_pixels}"
        )
    orientation = info.orientation if exif else 1
    disp_h, disp_w = (info.width, info.height) if orientation >= 5 else (info.height, info.width)
    y0, x0, y1, x1 = _check_region(region, disp_h, disp_w)
    denom = _choose_denominator(info, orientation, y1 - y0, x1 - x0, min_size)
    if ImageFile.LOAD_TRUNCATED_IMAGES:  # Pillow would fill truncated images with grey
        _check_complete(info, layout, data)
    complete = layout is not None and data.rfind(_JPEG_END, layout.sos_end) >= 0
    if info.format == "jpeg" and orientation == 1 and complete:  # truncated files: Pillow raises
        fast = decode_jpeg_region(data, (y0, x0, y1, x1), denom)  # TurboJPEG: crop + scale
        if fast is not None:
            if rgb and fast.shape[2] == 1:
                fast = np.repeat(fast, 3, axis=2)
            return fast, 1.0 / denom
    if info.format == "webp" and orientation == 1:  # libwebp into our buffer, no RGBA canvas
        fast = decode_webp_region(data, (y0, x0, y1, x1), (info.height, info.width))
        if fast is not None:
            return fast, 1.0
    try:
        im = _open(info.format, data)
        if im.size != (info.width, info.height):
            raise DecodeError(f"header says {info.width}x{info.height}, Pillow reads {im.size}")
        if denom > 1:
            denom = _draft(im, denom)
        # The displayed reduced region, then the same pixels in the stored (reduced) image.
        w, h = im.size
        dh, dw = (w, h) if orientation >= 5 else (h, w)
        box = (y0 // denom, x0 // denom, min(-(-y1 // denom), dh), min(-(-x1 // denom), dw))
        sy0, sx0, sy1, sx1 = _stored_box(box, orientation, h, w)
        full = None
        if layout is not None and sy1 < h:
            full = decode_jpeg_rows(im, data, sy1, layout)
        if full is None:
            im.load()
            full = im
        out = full if (sx0, sy0, sx1, sy1) == (0, 0, w, h) else full.crop((sx0, sy0, sx1, sy1))
        if orientation != 1:
            out = out.transpose(_TRANSPOSE[orientation])
        pixels = pil_to_array(out, rgb)
    except (DecodeError, MemoryError):
        raise
    except Exception as e:  # Pillow's plugins raise OSError, SyntaxError, struct.error, ...
        raise DecodeError(f"cannot decode this {info.format}: {type(e).__name__}: {e}") from e
    return pixels, 1.0 / denom


def dct_scale(info: ImageInfo, region: tuple[int, int, int, int], min_size: tuple[int, int] | None,
              exif: bool = True) -> float:
    """The scale decode_region will decode this region at (1, 1/2, 1/4 or 1/8), from the header
    alone, so that a planner knows it before decoding."""
    orientation = info.orientation if exif else 1
    y0, x0, y1, x1 = region
    return 1.0 / _choose_denominator(info, orientation, y1 - y0, x1 - x0, min_size)


def decode_cpu(images: Sequence[bytes | bytearray | memoryview], rgb: bool = False, num_threads: int | None = None,
               exif: bool = True) -> ImageBatch:
    """Whole images decoded on a pool of threads (pixelpipe.decode's CPU path; see decode.files).

    Raises:
        DecodeError: "sample i: ..." for the first sample (lowest index) that fails.
    """
    def one(i: int) -> np.ndarray:
        try:
            return decode_region(images[i], rgb=rgb, exif=exif)[0]
        except DecodeError as e:
            raise DecodeError(f"sample {i}: {e}") from e

    n = len(images)
    threads = min(num_threads or default_threads(), n)
    if threads <= 1:
        arrays = [one(i) for i in range(n)]
    else:
        with ThreadPoolExecutor(threads, thread_name_prefix="pixelpipe-decode") as pool:
            futures = [pool.submit(one, i) for i in range(n)]
            try:
                arrays = [f.result() for f in futures]  # in order: the lowest failing index wins
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    return ImageBatch.from_list(arrays) if arrays else ImageBatch.empty()


def decode_jpeg_rows(
    im: Image.Image, data: bytes, rows: int, layout: JpegLayout
) -> Image.Image | None:
    """Decode only the first `rows` rows of an opened, unloaded (maybe drafted) JPEG.

    libjpeg decodes top to bottom, so a region ending at `rows` needs nothing below it. Pillow
    has no public way to stop early: we drive its JPEG decoder ourselves with a tile that ends
    at `rows`. The decoder then reads those rows and fails in jpeg_finish_decompress ("too
    little data read"), which is the one outcome accepted as success here.

    To keep that from hiding real errors this is used only for baseline / extended sequential
    JPEGs with one interleaved scan, where no libjpeg error can occur after the scan has started
    (corrupt entropy data only gives warnings, which Pillow ignores in full decodes too). The
    headers are fed first, alone, so that table errors show up there; and the file must hold
    an end-of-image marker after the scan, so that truncated files fail as full decodes do.

    Returns None whenever anything differs from that plan; the caller then lets Pillow decode
    the whole image, which raises the proper error if there is one.
    """
    if layout.sof not in (0xC0, 0xC1) or layout.scan_components != len(im.getbands()):
        return None
    if len(im.tile) != 1 or data.rfind(_JPEG_END, layout.sos_end) < 0:
        return None
    codec, extents, offset, args = im.tile[0]
    width, height = im.size
    if codec != "jpeg" or offset != 0 or tuple(extents) != (0, 0, width, height):
        return None
    if not 0 < rows < height:
        return None
    out = Image.new(im.mode, (width, rows))
    decoder = Image._getdecoder(im.mode, codec, args, im.decoderconfig)
    try:
        decoder.setimage(out.im, (0, 0, width, rows))
        view = memoryview(data)
        used, err = decoder.decode(view[: layout.sos_end])
        if used < 0 or err != 0:
            return None  # the headers are bad: let Pillow report it
        used, err = decoder.decode(view[used:])
    finally:
        decoder.cleanup()
    return out if (used, err) == (-1, _CODEC_BROKEN) else None


# --------------------------------------------------------------------------------- helpers
def _check_region(
    region: tuple[int, int, int, int] | None, h: int, w: int
) -> tuple[int, int, int, int]:
    if region is None:
        return 0, 0, h, w
    if type(region) is tuple and len(region) == 4 and all(type(v) is int for v in region):
        y0, x0, y1, x1 = region  # a planned batch's regions: ints already
        if 0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w:
            return region
    y0, x0, y1, x1 = (int(v) for v in region)
    if (y0, x0, y1, x1) != tuple(region):
        raise ValueError(f"region must hold integers (y0, x0, y1, x1), got {tuple(region)}")
    if not (0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w):
        raise ValueError(
            f"region (y0, x0, y1, x1) = {tuple(region)} must satisfy 0 <= y0 < y1 <= {h} and "
            f"0 <= x0 < x1 <= {w} (the displayed image is {h}x{w})"
        )
    return y0, x0, y1, x1


def _choose_denominator(
    info: ImageInfo, orientation: int, rh: int, rw: int, min_size: tuple[int, int] | None
) -> int:
    """The largest JPEG DCT scale denominator that keeps the region at least min_size."""
    if min_size is None:
        return 1
    mh, mw = min_size
    if mh < 0 or mw < 0:
        raise ValueError(f"min_size must be (h, w) >= 0, got {min_size}")
    if info.format != "jpeg":
        return 1
    for d in (8, 4, 2):
        if rh < mh * d or rw < mw * d or info.height < d or info.width < d:
            continue
        if orientation in _REVERSES_ROWS and info.height % d:
            continue  # the partial last block row would land on the displayed top
        if orientation in _REVERSES_COLS and info.width % d:
            continue
        return d
    return 1


def _draft(im: Image.Image, d: int) -> int:
    """Ask Pillow's JPEG draft mode for DCT scale 1/d; return the denominator it set up."""
    w, h = im.size
    # draft() picks the largest of 8, 4, 2, 1 that divides (W // w_req, H // h_req) at most;
    # requesting (W // d, H // d) gives exactly d (W // (W // d) lies in [d, 2d)).
    im.draft(None, (w // d, h // d))
    got = im.decoderconfig[0] if im.decoderconfig else 1
    if im.size != (-(-w // got), -(-h // got)):
        raise DecodeError(f"JPEG draft at 1/{got} gave size {im.size} for {w}x{h}")
    return got


def _stored_box(
    box: tuple[int, int, int, int], orientation: int, h: int, w: int
) -> tuple[int, int, int, int]:
    """Map (y0, x0, y1, x1) in the displayed image to the stored h x w image (same pixels)."""
    y0, x0, y1, x1 = box
    if orientation == 1:
        return box
    if orientation == 2:
        return y0, w - x1, y1, w - x0
    if orientation == 3:
        return h - y1, w - x1, h - y0, w - x0
    if orientation == 4:
        return h - y1, x0, h - y0, x1
    if orientation == 5:
        return x0, y0, x1, y1
    if orientation == 6:
        return h - x1, y0, h - x0, y1
    if orientation == 7:
        return h - x1, w - y1, h - x0, w - y0
    return x0, w - y1, x1, w - y0  # 8


def _open(fmt: str, data: bytes) -> ImageFile.ImageFile:
    """Open with the format's plugin directly: no format probing, and no Pillow
    decompression-bomb limit (max_pixels is the limit here)."""
    if fmt == "jpeg":
        from PIL import JpegImagePlugin as plugin
        cls = plugin.JpegImageFile
    elif fmt == "png":
        from PIL import PngImagePlugin as plugin
        cls = plugin.PngImageFile
    elif fmt == "bmp":
        from PIL import BmpImagePlugin as plugin
        cls = plugin.BmpImageFile
    else:
        from PIL import WebPImagePlugin as plugin
        cls = plugin.WebPImageFile
    return cls(io.BytesIO(data))


def _check_complete(info: ImageInfo, layout: JpegLayout | None, data: bytes) -> None:
    """With ImageFile.LOAD_TRUNCATED_IMAGES set, Pillow pads truncated files instead of
    failing; catch the common cases (no end marker) ourselves."""
    if layout is not None and data.rfind(_JPEG_END, layout.sos_end) < 0:
        raise DecodeError("truncated JPEG: no end-of-image marker after the scan")
    if info.format == "png" and _PNG_END not in data[-1024:]:
        raise DecodeError("truncated PNG: no IEND chunk at the end")


def pil_to_array(im: Image.Image, rgb: bool) -> np.ndarray:
    """HWC uint8 with 1 or 3 channels (3 when rgb), in a fresh writable array."""
    mode = im.mode
    if mode in ("RGB", "L"):
        arr = np.array(im)
    elif mode == "RGBA":
        arr = np.array(im.convert("RGB"))
    elif mode == "LA":
        arr = np.array(im.getchannel(0))
    elif mode.startswith("I"):  # 16-bit grey PNG: "I;16", "I;16B" or "I"
        arr = (np.clip(np.asarray(im), 0, 65535) >> 8).astype(np.uint8)
    elif mode == "1":
        arr = np.array(im.convert("L"))
    else:  # P, PA, CMYK, ...
        arr = np.array(im.convert("RGB"))
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if rgb and arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    return arr
