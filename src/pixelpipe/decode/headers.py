"""Image header parsing: size, channels and orientation without decoding any pixels.

The planner needs each image's size before it decides which region to decode, so this runs once
per sample on the host and must be cheap: pure-Python `struct` reads of the first few hundred
bytes (a typical JPEG takes a few microseconds). Only JPEG, PNG, WebP and BMP are recognised;
anything else, including truncated headers, raises `DecodeError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["DecodeError", "ImageInfo", "read_header"]


class DecodeError(ValueError):
    """The bytes are not a decodable image (unknown format, corrupt or truncated data)."""


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """What an image file stores, read from its header.

    Attributes:
        format: "jpeg", "png", "webp" or "bmp".
        height, width: the stored size, before EXIF orientation is applied.
        channels: channels the file stores: 1 grey, 2 grey + alpha, 3 colour (palettes count as
            3 unless a BMP palette is the plain grey ramp Pillow decodes as grey), 4 for RGBA
            or a CMYK JPEG.
        bits: bits per decoded sample, 8 or 16 (PNG depths 1, 2 and 4 count as 8; a 12-bit
            JPEG reports 12).
        progressive: a progressive JPEG or an Adam7-interlaced PNG; False otherwise.
        orientation: EXIF orientation 1..8 of a JPEG (1 when absent or invalid); 1 for the
            other formats.
    """

    format: str
    height: int
    width: int
    channels: int
    bits: int
    progressive: bool
    orientation: int = 1

    @property
    def grey(self) -> bool:
        """Decoded with one channel when RGB is not asked for: grey, or grey + alpha."""
        return self.channels in (1, 2)

    @property
    def oriented_size(self) -> tuple[int, int]:
        """(height, width) of the displayed image, after EXIF orientation 5..8 swap the axes."""
        if self.orientation >= 5:
            return self.width, self.height
        return self.height, self.width


def read_header(data: bytes | bytearray | memoryview) -> ImageInfo:
    """Parse the header of a JPEG, PNG, WebP or BMP file.

    Reads only the bytes needed: JPEG markers up to the frame header (SOFn), the PNG IHDR
    chunk, the first WebP chunk, the BMP info header (and its palette, to tell grey from colour).

    Raises:
        DecodeError: empty or unknown data, a truncated header, or impossible header values.

    Example:
        >>> read_header(open("cat.jpg", "rb").read())  # doctest: +SKIP
        ImageInfo(format='jpeg', height=375, width=500, channels=3, bits=8, ...)
    """
    if isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1):
        data = data.cast("B")
    n = len(data)
    if n == 0:
        raise DecodeError("empty data (0 bytes)")
    head = bytes(data[:12])
    if head[:3] == b"\xff\xd8\xff":
        return parse_jpeg(data)[0]
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return _parse_png(data)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _parse_webp(data)
    if head[:2] == b"BM":
        return _parse_bmp(data)
    raise DecodeError(f"unsupported or unknown image format: {_describe(head)}")


def _describe(head: bytes) -> str:
    for magic, name in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"{name} (only JPEG, PNG, WebP and BMP are decoded)"
    # the bytes' kind, never the bytes: a mislabelled text file's contents stay out of errors
    kind = "text" if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head) else "binary data"
    return f"{kind} without a JPEG, PNG, WebP or BMP signature ({len(head)} bytes looked at)"


_OTHER_FORMATS = [
    (b"GIF8", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"\x00\x00\x00\x0cjP", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000 codestream"),
    (b"\xff\xd8", "JPEG with a broken first marker"),
    (b"\x89PNG", "PNG with a broken signature"),
    (b"RIFF", "RIFF container that is not WebP"),
]

# ----------------------------------------------------------------------------------- JPEG
# SOFn markers carry the frame header; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not
# frames. Progressive frames are C2, C6, CA and CE.
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True, slots=True)
class JpegLayout:
    """Where a JPEG's first scan starts, for decoders that feed libjpeg in steps.

    sof: the frame marker (0xC0 baseline, 0xC1 extended sequential, 0xC2 progressive, ...).
    sos_end: offset just past the first start-of-scan segment, where entropy-coded data begins;
        -1 when parsing stopped at the frame header.
    scan_components: components in the first scan (== channels when the scan is interleaved).
    """

    sof: int
    sos_end: int = -1
    scan_components: int = 0


def parse_jpeg(data: bytes | memoryview, to_scan: bool = False) -> tuple[ImageInfo, JpegLayout]:
    """Walk JPEG marker segments up to the frame header (or the first scan if to_scan).

    APPn and other segments are skipped by their length; the first APP1 "Exif" segment gives
    the orientation. Raises DecodeError on a truncated or malformed marker sequence.
    """
    n = len(data)
    unpack = struct.unpack_from
    pos = 2
    orientation = 0  # 0: no Exif segment seen yet
    info: ImageInfo | None = None
    sof = 0
    while True:
        if pos + 4 > n:
            what = "start of scan" if info else "frame header (SOF)"
            raise DecodeError(f"truncated JPEG: no {what} in {n} bytes")
        if data[pos] != 0xFF:
            raise DecodeError(
                f"corrupt JPEG: expected a marker at byte {pos}, found 0x{data[pos]:02x}"
            )
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        pos += 2
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM, RSTn: no payload
            continue
        if marker in (0xD8, 0xD9):
            raise DecodeError(
                f"corrupt JPEG: marker 0x{marker:02x} at byte {pos - 2} before the first scan"
            )
        (length,) = unpack(">H", data, pos)
        end = pos + length
        if length < 2 or end > n:
            raise DecodeError(
                f"truncated JPEG: segment 0x{marker:02x} at byte {pos - 2} has length {length}, "
                f"{n - pos} bytes left"
            )
        if marker == 0xE1 and orientation == 0 and data[pos + 2 : pos + 8] == b"Exif\x00\x00":
            orientation = _exif_orientation(data, pos + 8, end)
        elif marker in _SOF and info is None:
            if length < 8:
                raise DecodeError(f"corrupt JPEG: frame header of length {length}")
            bits, height, width, comps = unpack(">BHHB", data, pos + 2)
            if width == 0 or height == 0 or comps not in (1, 3, 4) or length < 8 + 3 * comps:
                raise DecodeError(
                    f"corrupt or unsupported JPEG frame: {width}x{height}, {comps} components "
                    "(a height of 0, defined later by a DNL marker, is not supported)"
                )
            sof = marker
            info = ImageInfo(
                "jpeg", height, width, comps, bits, marker in _PROGRESSIVE, max(orientation, 1)
            )
            if not to_scan:
                return info, JpegLayout(sof)
        elif marker == 0xDA:
            if info is None:
                raise DecodeError("corrupt JPEG: start of scan before the frame header")
            return info, JpegLayout(sof, end, data[pos + 2])
        pos = end


def _exif_orientation(data: bytes | memoryview, tiff: int, end: int) -> int:
    """Orientation tag of IFD0 in the TIFF structure at data[tiff:end]; 1 if absent or bad.

    A malformed Exif block is not an error: Pillow decodes such files and ignores the block.
    """
    order = bytes(data[tiff : tiff + 2])
    if order == b"II":
        e = "<"
    elif order == b"MM":
        e = ">"
    else:
        return 1
    try:
        magic, ifd = struct.unpack_from(e + "HI", data, tiff + 2)
        if magic != 42:
            return 1
        ifd += tiff
        if ifd + 2 > end:
            return 1
        (count,) = struct.unpack_from(e + "H", data, ifd)
        entry = ifd + 2
        for _ in range(count):
            if entry + 12 > end:
                return 1
            tag, typ = struct.unpack_from(e + "HH", data, entry)
            if tag == _EXIF_ORIENTATION:
                if typ == 3:  # SHORT
                    (value,) = struct.unpack_from(e + "H", data, entry + 8)
                elif typ == 4:  # LONG
                    (value,) = struct.unpack_from(e + "I", data, entry + 8)
                else:
                    return 1
                return value if 1 <= value <= 8 else 1
            entry += 12
    except struct.error:
        return 1
    return 1


# ----------------------------------------------------------------------------------- PNG
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


def _parse_png(data: bytes | memoryview) -> ImageInfo:
    if len(data) < 29:
        raise DecodeError(f"truncated PNG: {len(data)} bytes, the IHDR chunk needs 29")
    length, kind = struct.unpack_from(">I4s", data, 8)
    if kind != b"IHDR" or length != 13:
        raise DecodeError(
            f"corrupt PNG: first chunk is {kind!r} of length {length}, not IHDR of 13"
        )
    width, height, depth, ctype, _, _, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    if width == 0 or height == 0 or width >= 2**31 or height >= 2**31:
        raise DecodeError(f"corrupt PNG: size {width}x{height}")
    if depth not in _PNG_DEPTHS.get(ctype, ()):
        raise DecodeError(f"corrupt PNG: colour type {ctype} with bit depth {depth}")
    return ImageInfo("png", height, width, _PNG_CHANNELS[ctype], 16 if depth == 16 else 8,
                     interlace == 1, 1)


# ----------------------------------------------------------------------------------- WebP
def _parse_webp(data: bytes | memoryview) -> ImageInfo:
    n = len(data)
    if n < 30:
        raise DecodeError(f"truncated WebP: {n} bytes")
    kind = bytes(data[12:16])
    if kind == b"VP8 ":  # lossy: 3-byte frame tag, start code 9d 01 2a, 14-bit sizes
        if bytes(data[23:26]) != b"\x9d\x01\x2a" or data[20] & 1:
            raise DecodeError("corrupt WebP: VP8 chunk without a key frame start code")
        width, height = struct.unpack_from("<HH", data, 26)
        width, height, channels = width & 0x3FFF, height & 0x3FFF, 3
    elif kind == b"VP8L":  # lossless: signature 0x2f, then 14-bit sizes - 1, alpha bit, version
        (bits,) = struct.unpack_from("<I", data, 21)
        if data[20] != 0x2F or bits >> 29:
            raise DecodeError("corrupt WebP: bad VP8L signature or version")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        channels = 4 if bits >> 28 & 1 else 3
    elif kind == b"VP8X":  # extended: flags, 3 reserved bytes, 24-bit canvas sizes - 1
        flags = data[20]
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        channels = 4 if flags & 0x10 else 3
    else:
        raise DecodeError(f"corrupt WebP: first chunk is {kind!r}, not VP8, VP8L or VP8X")
    if width == 0 or height == 0:
        raise DecodeError(f"corrupt WebP: size {width}x{height}")
    return ImageInfo("webp", height, width, channels, 8, False, 1)


# ----------------------------------------------------------------------------------- BMP
_BMP_COMPRESSIONS = {0: "none", 1: "RLE8", 2: "RLE4", 3: "bit fields"}  # what Pillow decodes


def _parse_bmp(data: bytes | memoryview) -> ImageInfo:
    n = len(data)
    if n < 26:
        raise DecodeError(f"truncated BMP: {n} bytes")
    (size,) = struct.unpack_from("<I", data, 14)
    if size == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes, 3-byte palette entries
        width, height, _, bits = struct.unpack_from("<HHHH", data, 18)
        compression, colors, entry = 0, 0, 3
    elif size in (40, 52, 56, 64, 108, 124):
        if n < 14 + 40:
            raise DecodeError(f"truncated BMP: {n} bytes, the info header needs 54")
        width, height, _, bits, compression = struct.unpack_from("<iiHHI", data, 18)
        (colors,) = struct.unpack_from("<I", data, 46)
        entry = 4
        height = abs(height)  # negative: rows stored top-down
    else:
        raise DecodeError(f"unsupported BMP: info header of {size} bytes")
    if width <= 0 or height == 0:
        raise DecodeError(f"corrupt BMP: size {width}x{height}")
    if compression not in _BMP_COMPRESSIONS:
        raise DecodeError(f"unsupported BMP compression {compression} (JPEG, PNG or alpha fields)")
    if bits <= 8:
        channels = _bmp_palette_channels(data, 14 + size, colors or 1 << bits, entry)
    elif bits in (16, 24, 32):
        channels = 4 if bits == 32 and compression == 3 and _bmp_has_alpha(data, size) else 3
    else:
        raise DecodeError(f"corrupt BMP: {bits} bits per pixel")
    return ImageInfo("bmp", height, width, channels, 8, False, 1)


def _bmp_palette_channels(data: bytes | memoryview, start: int, colors: int, entry: int) -> int:
    """1 if the palette is the plain grey ramp (Pillow then decodes to grey), else 3."""
    if colors > 256:
        raise DecodeError(f"corrupt BMP: palette of {colors} colours")
    pal = bytes(data[start : start + colors * entry])
    if len(pal) < colors * entry:
        raise DecodeError("truncated BMP: palette cut short")
    ramp = b"\x00\xff" if colors == 2 else bytes(range(colors))
    blue, green, red = pal[0::entry], pal[1::entry], pal[2::entry]
    return 1 if blue == green == red == ramp else 3


def _bmp_has_alpha(data: bytes | memoryview, size: int) -> bool:
    """Whether a 32-bit bit-field BMP keeps alpha in Pillow: an alpha mask is set (headers of
    56 bytes and more carry one), or all four masks are zero. The R, G, B masks sit at byte 54
    whatever the header size (inside V2+ headers, right after a 40-byte one)."""
    need = 70 if size >= 56 else 66
    if len(data) < need:
        raise DecodeError("truncated BMP: bit-field masks cut short")
    masks = struct.unpack_from("<IIII" if size >= 56 else "<III", data, 54)
    return (len(masks) == 4 and masks[3] != 0) or not any(masks)
