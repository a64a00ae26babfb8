"""decode/headers_batch.parse_jpegs (native/jpeg_headers.c) against its twin and reference,
decode/headers.parse_jpeg: on real JPEGs, on made-up headers with every Exif variant, and on
thousands of truncated and corrupted ones. Where parse_jpeg parses, parse_jpegs gives equal
values; where parse_jpeg raises (or the blob is not a JPEG), parse_jpegs leaves it to the caller
(None), so that the errors keep their messages."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from helpers import SAMPLE_DIR, SAMPLE_MISSING

from pixelpipe import native
from pixelpipe.decode.headers import parse_jpeg
from pixelpipe.decode.headers_batch import parse_jpegs
from pixelpipe.engine.sources import EncodedSource

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler: the native parser is not built")


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def exif(order: bytes, tag_type: int, value: int, magic: int = 42, ifd: int = 8, count: int = 2) -> bytes:
    e = "<" if order == b"II" else ">"
    value_bytes = struct.pack(e + ("H" if tag_type == 3 else "I"), value % 65536 if tag_type == 3 else value).ljust(4, b"\0")
    entries = struct.pack(e + "HHI", 0x0110, 2, 4) + b"abcd"  # another tag first
    entries += struct.pack(e + "HHI", 0x0112, tag_type, 1) + value_bytes
    tiff = order + struct.pack(e + "HI", magic, ifd) + struct.pack(e + "H", count) + entries
    return segment(0xE1, b"Exif\0\0" + tiff)


def jpeg(sof: int = 0xC0, comps: int = 3, h: int = 300, w: int = 400, bits: int = 8, extra: bytes = b"",
         after_sof: bytes = b"") -> bytes:
    frame = struct.pack(">BHHB", bits, h, w, comps) + b"".join(bytes([k + 1, 0x11, 0]) for k in range(comps))
    scan = bytes([comps]) + b"".join(bytes([k + 1, 0]) for k in range(comps)) + b"\x00\x3f\x00"
    return (b"\xff\xd8" + extra + segment(0xDB, bytes(65)) + segment(sof, frame) + after_sof
            + segment(0xC4, bytes(20)) + segment(0xDA, scan) + b"\x12\x34" * 20 + b"\xff\xd9")


def made_up() -> list[bytes]:
    out = [jpeg(), jpeg(0xC2), jpeg(0xC1, 1), jpeg(0xCF, 4, bits=12), jpeg(0xC3, 2), jpeg(h=0), jpeg(w=0)]
    for order in (b"II", b"MM"):
        for tag_type in (3, 4, 5):
            for value in (0, 1, 3, 6, 8, 9, 70000):
                out.append(jpeg(extra=exif(order, tag_type, value)))
        out += [jpeg(extra=exif(order, 3, 6, magic=41)), jpeg(extra=exif(order, 3, 6, ifd=4000)),
                jpeg(extra=exif(order, 3, 6, count=40)), jpeg(extra=exif(order, 3, 6, count=1)),
                jpeg(extra=exif(order, 3, 6) + exif(order, 3, 8)),
                jpeg(after_sof=exif(order, 3, 6))]  # Exif after the frame: not in the frame's info
    out += [jpeg(extra=segment(0xE1, b"Exif\0\0XX")), jpeg(extra=segment(0xE1, b"Exi")),
            jpeg(extra=b"\xff\xff\xff" + segment(0xE0, b"JFIF\0")), jpeg(extra=b"\xff\xd0\xff\x01"),
            jpeg(extra=b"\xff\xd8"), b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n" + bytes(30), b""]
    return out


def damaged(blobs: list[bytes], seed: int) -> list[bytes]:
    """Every prefix of the first header bytes, and random byte changes, insertions and cuts."""
    rng = np.random.default_rng(seed)
    out = []
    for b in blobs:
        head = b[:600]
        out += [b[:k] for k in range(0, len(head), 7)]
        for _ in range(12):
            a = bytearray(b)
            k = int(rng.integers(0, min(len(a), 400)))
            choice = int(rng.integers(0, 3))
            if choice == 0:
                a[k] = int(rng.integers(0, 256))
            elif choice == 1:
                a[k:k] = bytes([0xFF, int(rng.integers(0, 256))])
            else:
                del a[k:k + int(rng.integers(1, 9))]
            out.append(bytes(a))
    return out


def assert_twins(blobs: list[bytes]) -> int:
    """parse_jpegs against parse_jpeg on each blob, both ways of to_scan; how many parsed."""
    parsed = 0
    for to_scan in (True, False):
        got = parse_jpegs(blobs, to_scan)
        assert len(got) == len(blobs)
        for b, g in zip(blobs, got):
            try:
                want = parse_jpeg(b, to_scan=to_scan)
            except Exception:
                want = None
            if b[:3] != b"\xff\xd8\xff":
                assert g is None
                continue
            assert g == want, (b[:80], to_scan)
            parsed += want is not None
    return parsed


def test_made_up_headers_parse_as_parse_jpeg_parses_them():
    blobs = made_up()
    assert assert_twins(blobs) > 2 * 30
    oriented = parse_jpegs([jpeg(extra=exif(b"MM", 3, 6)), jpeg(extra=exif(b"II", 4, 8)), jpeg(extra=exif(b"II", 3, 9))])
    assert [g[0].orientation for g in oriented] == [6, 8, 1]
    assert oriented[0][0].oriented_size == (400, 300)


def test_damaged_headers_parse_or_are_left_to_parse_jpeg():
    assert_twins(damaged(made_up()[:12], seed=3))


def test_real_jpegs():
    paths = sorted(SAMPLE_DIR.glob("*.JPEG"))[:64] if SAMPLE_DIR.is_dir() else []
    if not paths:
        pytest.skip(SAMPLE_MISSING)
    blobs = [p.read_bytes() for p in paths]
    assert assert_twins(blobs) == 2 * len(blobs)
    assert_twins(damaged(blobs[:4], seed=4))


def test_what_is_not_bytes_is_left_to_the_caller_and_equal_values_are_shared():
    b = jpeg()
    got = parse_jpegs([b, bytearray(b), memoryview(b), b])
    assert got[1] is None and got[2] is None
    assert got[0] == got[3] == parse_jpeg(b, to_scan=True)
    assert got[0][0] is got[3][0] and got[0][1] is got[3][1]
    with native.disabled():
        assert parse_jpegs([b, b]) == [None, None]


def test_encoded_source_reads_the_same_headers_with_and_without_the_native_parser():
    blobs = made_up()[:4] + [jpeg(extra=exif(b"II", 3, 6))]
    fast = EncodedSource(blobs)
    with native.disabled():
        slow = EncodedSource(blobs)
    assert fast.infos == slow.infos and fast.jpeg_headers == slow.jpeg_headers
    assert np.array_equal(fast.sizes(), slow.sizes())
