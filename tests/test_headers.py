"""read_header: every field checked against what Pillow reads from the same file.

Files are made here, with Pillow or by hand, from one photo of the ImageNet sample (the whole
module is skipped when it is absent: see helpers.SAMPLE_DIR).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from helpers import need_sample
from PIL import Image

from pixelpipe.decode import DecodeError, ImageInfo, read_header

PHOTO = "n01518878_ostrich.JPEG"


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    """An RGB photo cropped to an odd size (97 x 131), so that nothing divides evenly."""
    return Image.open(need_sample(PHOTO)).convert("RGB").crop((40, 60, 171, 157))


def save(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = struct.pack(">I", zlib.crc32(kind + payload))
    return struct.pack(">I", len(payload)) + kind + payload + crc


def png_bytes(arr: np.ndarray, ctype: int, depth: int, interlace: int = 0) -> bytes:
    """A PNG written by hand (Pillow cannot write 16-bit colour or interlaced PNGs)."""
    h, w = arr.shape[:2]
    raw = arr.astype(">u2").tobytes() if depth == 16 else arr.astype(np.uint8).tobytes()
    stride = len(raw) // h
    rows = b"".join(b"\x00" + raw[i * stride : (i + 1) * stride] for i in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    chunks = [(b"IHDR", ihdr), (b"IDAT", zlib.compress(rows)), (b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(png_chunk(k, p) for k, p in chunks)


def bmp_bytes(
    arr: np.ndarray, header: int = 40, top_down: bool = False, alpha: bool = False
) -> bytes:
    """A BMP written by hand: 24-bit (BITMAPCOREHEADER when header == 12), or 32-bit with
    bit-field masks B, G, R, A in a header of 56 bytes or more when alpha."""
    h, w = arr.shape[:2]
    bgr = arr[:, :, [2, 1, 0, 3]] if alpha else arr[:, :, ::-1]
    stride = (w * bgr.shape[2] + 3) // 4 * 4
    rows = [bgr[y].tobytes().ljust(stride, b"\x00") for y in range(h)]
    pixels = b"".join(rows if top_down else rows[::-1])
    if header == 12:
        info = struct.pack("<IHHHH", 12, w, h, 1, 24)
    else:
        bits, comp = (32, 3) if alpha else (24, 0)
        info = struct.pack("<IiiHHIIiiII", header, w, -h if top_down else h, 1, bits, comp,
                           len(pixels), 2835, 2835, 0, 0)
        if alpha:
            info += struct.pack("<IIII", 0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000)
        info = info.ljust(header, b"\x00")
    offset = 14 + len(info)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + pixels


def exif_block(orientation: int, order: str) -> bytes:
    """An Exif APP1 payload whose IFD0 holds only the orientation, in either byte order."""
    e = "<" if order == "II" else ">"
    ifd = struct.pack(e + "H", 1) + struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0)
    return b"Exif\x00\x00" + order.encode() + struct.pack(e + "HI", 42, 8) + ifd + b"\x00" * 4


def make_cases(photo: Image.Image) -> dict[str, tuple[bytes, int]]:
    """name -> (file, expected bits)."""
    rgba = photo.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(photo.size))
    arr = np.asarray(photo)
    grey16 = arr[:, :, 0].astype(np.uint32) * 257 + np.arange(photo.width)
    grey16 = grey16.clip(0, 65535).astype(np.uint16)
    return {
        "jpeg_baseline": (save(photo, "JPEG", quality=90), 8),
        "jpeg_progressive": (save(photo, "JPEG", progressive=True), 8),
        "jpeg_grey": (save(photo.convert("L"), "JPEG"), 8),
        "jpeg_cmyk": (save(photo.convert("CMYK"), "JPEG"), 8),
        "jpeg_444_icc_comment": (save(photo, "JPEG", subsampling=0, icc_profile=b"\x01" * 70_000,
                                      comment=b"hello"), 8),
        "png_rgb": (save(photo, "PNG"), 8),
        "png_rgba": (save(rgba, "PNG"), 8),
        "png_grey": (save(photo.convert("L"), "PNG"), 8),
        "png_grey_alpha": (save(rgba.convert("LA"), "PNG"), 8),
        "png_palette": (save(photo.quantize(64), "PNG"), 8),
        "png_1bit": (save(photo.convert("1"), "PNG"), 8),
        "png_grey16": (save(Image.fromarray(grey16), "PNG"), 16),
        "png_rgb16": (png_bytes(arr.astype(np.uint16) * 257 + 3, 2, 16), 16),
        "png_interlaced": (png_bytes(arr, 2, 8, interlace=1), 8),
        "webp_lossy": (save(photo, "WEBP", quality=80), 8),
        "webp_lossless": (save(photo, "WEBP", lossless=True), 8),
        "webp_lossy_alpha": (save(rgba, "WEBP", quality=80), 8),
        "webp_lossless_alpha": (save(rgba, "WEBP", lossless=True), 8),
        "webp_exif": (save(photo, "WEBP", exif=exif_block(6, "MM")), 8),
        "bmp_rgb": (save(photo, "BMP"), 8),
        "bmp_grey": (save(photo.convert("L"), "BMP"), 8),
        "bmp_palette": (save(photo.quantize(64), "BMP"), 8),
        "bmp_1bit": (save(photo.convert("1"), "BMP"), 8),
        "bmp_rgba_saved": (save(rgba, "BMP"), 8),
        "bmp_top_down": (bmp_bytes(arr, top_down=True), 8),
        "bmp_core_header": (bmp_bytes(arr, header=12), 8),
        "bmp_bitfields_alpha": (bmp_bytes(np.asarray(rgba), header=108, alpha=True), 8),
    }


CASES = [
    "jpeg_baseline", "jpeg_progressive", "jpeg_grey", "jpeg_cmyk", "jpeg_444_icc_comment",
    "png_rgb", "png_rgba", "png_grey", "png_grey_alpha", "png_palette", "png_1bit", "png_grey16",
    "png_rgb16", "png_interlaced", "webp_lossy", "webp_lossless", "webp_lossy_alpha",
    "webp_lossless_alpha", "webp_exif", "bmp_rgb", "bmp_grey", "bmp_palette", "bmp_1bit",
    "bmp_rgba_saved", "bmp_top_down", "bmp_core_header", "bmp_bitfields_alpha",
]
# Pillow mode -> channels the file stores (palettes count as colour).
MODE_CHANNELS = {"1": 1, "L": 1, "I;16": 1, "I": 1, "LA": 2, "P": 3, "RGB": 3, "RGBA": 4, "CMYK": 4}


@pytest.fixture(scope="module")
def cases(photo: Image.Image) -> dict[str, tuple[bytes, int]]:
    return make_cases(photo)


@pytest.mark.parametrize("name", CASES)
def test_fields_match_pillow(cases: dict[str, tuple[bytes, int]], name: str) -> None:
    data, bits = cases[name]
    info = read_header(data)
    im = Image.open(io.BytesIO(data))
    assert info.format == im.format.lower()
    assert (info.height, info.width) == (im.height, im.width) == (97, 131)
    assert info.channels == MODE_CHANNELS[im.mode]
    assert info.bits == bits
    progressive = bool(im.info.get("progressive") or im.info.get("interlace"))
    assert info.progressive == progressive
    assert info.progressive == (name in ("jpeg_progressive", "png_interlaced"))
    assert info.orientation == 1  # no JPEG here has Exif; WebP Exif is not read
    assert read_header(memoryview(data)) == info
    assert read_header(bytearray(data)) == info


def test_channel_counts_are_what_the_file_stores(cases: dict[str, tuple[bytes, int]]) -> None:
    got = {name: read_header(cases[name][0]).channels for name in CASES}
    assert got["jpeg_cmyk"] == 4 and got["png_rgba"] == 4 and got["webp_lossless_alpha"] == 4
    assert got["png_palette"] == 3 and got["bmp_palette"] == 3 and got["webp_lossy"] == 3
    assert got["png_grey_alpha"] == 2 and got["bmp_grey"] == 1 and got["png_1bit"] == 1
    assert got["bmp_rgba_saved"] == 3  # Pillow writes RGBA BMPs without an alpha mask
    assert got["bmp_bitfields_alpha"] == 4


@pytest.mark.parametrize("order", ["II", "MM"])
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_exif_orientation_both_byte_orders(
    photo: Image.Image, order: str, orientation: int
) -> None:
    data = save(photo, "JPEG", exif=exif_block(orientation, order))
    info = read_header(data)
    assert Image.open(io.BytesIO(data)).getexif()[0x0112] == orientation
    assert info.orientation == orientation
    assert (info.height, info.width) == (97, 131)  # stored size, before orientation
    assert info.oriented_size == ((131, 97) if orientation >= 5 else (97, 131))


def test_exif_written_by_pillow(photo: Image.Image) -> None:
    exif = Image.Exif()
    exif[0x0112] = 7
    assert read_header(save(photo, "JPEG", exif=exif.tobytes())).orientation == 7


@pytest.mark.parametrize("payload", [
    exif_block(0, "II"),  # out of range
    exif_block(9, "MM"),
    b"Exif\x00\x00XX*\x00garbage",  # unknown byte order
    b"Exif\x00\x00II*\x00\xff\xff\x00\x00",  # IFD offset past the end
    b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x05\x01\x12",  # entry count beyond the block
])
def test_bad_exif_gives_orientation_1(photo: Image.Image, payload: bytes) -> None:
    assert read_header(save(photo, "JPEG", exif=payload)).orientation == 1


def test_real_photo_with_orientation_6() -> None:
    data = need_sample("n02951585_can_opener.JPEG").read_bytes()
    im = Image.open(io.BytesIO(data))
    info = read_header(data)
    assert info.orientation == im.getexif()[0x0112] == 6
    assert (info.width, info.height) == im.size


def test_fill_bytes_and_restart_markers_before_frame(photo: Image.Image) -> None:
    data = save(photo, "JPEG")
    padded = data[:2] + b"\xff\xff\xff" + data[2:]  # fill bytes before the first marker
    assert read_header(padded) == read_header(data)


def test_sample_folder_matches_pillow() -> None:
    for path in sorted(need_sample().iterdir())[:60]:
        data = path.read_bytes()
        im = Image.open(io.BytesIO(data))
        info = read_header(data)
        assert (info.width, info.height) == im.size, path.name
        assert info.channels == MODE_CHANNELS[im.mode], path.name


# --------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"hello, this is a text file\n", "text without a JPEG"),
    (b"GIF89a\x01\x00\x01\x00", "GIF"),
    (b"II*\x00\x08\x00\x00\x00", "TIFF"),
    (b"\xff\xd8\xff", "truncated"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR", "truncated"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "truncated"),
    (b"BM\x00\x00", "truncated"),
    (bytes(range(256)) * 4, "binary data without a JPEG"),
])
def test_garbage_raises(data: bytes, words: str) -> None:
    with pytest.raises(DecodeError, match=words):
        read_header(data)
    assert issubclass(DecodeError, ValueError)


def test_every_truncated_header_raises(cases: dict[str, tuple[bytes, int]]) -> None:
    """Cut before the end of the header, a file must raise DecodeError (never IndexError or
    struct.error); cut after it, the header reads the same as the whole file's."""
    for name in ("jpeg_baseline", "jpeg_444_icc_comment", "png_rgb", "webp_lossy",
                 "webp_lossless", "webp_lossy_alpha", "bmp_palette", "bmp_bitfields_alpha"):
        data = cases[name][0]
        whole = read_header(data)
        ok = 0
        for cut in range(0, min(len(data), 71_000), 7 if len(data) < 2000 else 97):
            try:
                info = read_header(data[:cut])
            except DecodeError:
                continue
            assert info == whole, (name, cut)
            ok += 1
        assert ok > 0, name


def test_corrupt_fields_raise(cases: dict[str, tuple[bytes, int]]) -> None:
    png = bytearray(cases["png_rgb"][0])
    png[16:20] = b"\x00\x00\x00\x00"  # width 0
    with pytest.raises(DecodeError, match="size"):
        read_header(bytes(png))
    png = bytearray(cases["png_rgb"][0])
    png[24] = 3  # RGB with bit depth 3
    with pytest.raises(DecodeError, match="bit depth"):
        read_header(bytes(png))
    jpeg = cases["jpeg_baseline"][0]
    sof = jpeg.index(b"\xff\xc0")
    with pytest.raises(DecodeError, match="frame"):  # 2 components
        read_header(jpeg[: sof + 9] + b"\x02" + jpeg[sof + 10 :])
    with pytest.raises(DecodeError, match="marker"):  # no 0xFF where a marker must be
        read_header(jpeg[:2] + b"\x00" + jpeg[3:])
    with pytest.raises(DecodeError, match="before the first scan"):
        read_header(jpeg[:2] + b"\xff\xd9" + jpeg[2:])


def test_random_corruption_only_raises_decode_error(cases: dict[str, tuple[bytes, int]]) -> None:
    rng = np.random.default_rng(0)
    for name in ("jpeg_baseline", "png_rgb", "webp_lossless", "bmp_palette", "bmp_rgb"):
        data = cases[name][0]
        for _ in range(300):
            buf = bytearray(data[:1200])
            pos = rng.integers(0, len(buf), 3)
            buf[pos[0]] ^= 1 << int(rng.integers(8))
            buf[pos[1]] = int(rng.integers(256))
            buf[pos[2]] = 0xFF
            try:
                info = read_header(bytes(buf))
            except DecodeError:
                continue
            assert isinstance(info, ImageInfo) and info.height > 0 and info.width > 0
            assert info.channels in (1, 2, 3, 4) and 1 <= info.orientation <= 8
