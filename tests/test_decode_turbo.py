"""The TurboJPEG region decoder gives exactly Pillow's pixels (both are libjpeg-turbo), for
any region and DCT scale, and declines what it does not handle."""

from __future__ import annotations

import io

import numpy as np
import pytest
from helpers import SAMPLE_DIR
from PIL import Image

from pixelpipe.decode import decode_region, turbo

pytestmark = pytest.mark.skipif(not turbo.available(), reason="libturbojpeg (the turbojpeg wheel) is not installed")


def _jpegs() -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
        arr = (rng.random((101, 157, 3)) * 60 + np.linspace(0, 190, 157)[None, :, None]).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "JPEG", quality=90, subsampling=subsampling)
        out.append(buf.getvalue())
    buf = io.BytesIO()
    Image.fromarray(np.tile(np.arange(157, dtype=np.uint8), (101, 1))).save(buf, "JPEG", quality=85)
    out.append(buf.getvalue())  # grey
    buf = io.BytesIO()
    Image.fromarray(np.zeros((64, 80, 3), np.uint8) + 90).save(buf, "JPEG", progressive=True)
    out.append(buf.getvalue())
    if SAMPLE_DIR.is_dir():
        out += [p.read_bytes() for p in sorted(SAMPLE_DIR.glob("*.JPEG"))[:6]]
    return out


def _pillow(data: bytes, denom: int) -> np.ndarray:
    im = Image.open(io.BytesIO(data))
    if denom > 1:
        im.draft(None, (im.width // denom, im.height // denom))
    a = np.asarray(im)
    return a[..., None] if a.ndim == 2 else a


@pytest.mark.parametrize("denom", [1, 2, 4, 8])
def test_regions_equal_pillow(denom: int) -> None:
    rng = np.random.default_rng(denom)
    for data in _jpegs():
        full = _pillow(data, denom)
        W, H = Image.open(io.BytesIO(data)).size
        for _ in range(8):
            y0, y1 = sorted(int(v) for v in rng.choice(H + 1, 2, replace=False))
            x0, x1 = sorted(int(v) for v in rng.choice(W + 1, 2, replace=False))
            out = turbo.decode_jpeg_region(data, (y0, x0, y1, x1), denom)
            assert out is not None
            ry0, rx0 = y0 // denom, x0 // denom
            ry1, rx1 = min(-(-y1 // denom), full.shape[0]), min(-(-x1 // denom), full.shape[1])
            np.testing.assert_array_equal(out, full[ry0:ry1, rx0:rx1], err_msg=str((y0, x0, y1, x1, denom)))


@pytest.mark.parametrize("denom", [1, 2])
def test_every_bottom_edge_equals_pillow(denom: int) -> None:
    """Regions are decoded with no margin below them: every last row (each offset in and
    across the iMCU rows, each subsampling) must still be Pillow's row."""
    rng = np.random.default_rng(10 + denom)
    for data in _jpegs()[:5]:
        full = _pillow(data, denom)
        W, H = Image.open(io.BytesIO(data)).size
        for y1 in range(1, H + 1):
            y0 = int(rng.integers(0, y1))
            x0, x1 = sorted(int(v) for v in rng.choice(W + 1, 2, replace=False))
            out = turbo.decode_jpeg_region(data, (y0, x0, y1, x1), denom)
            ry1, rx1 = min(-(-y1 // denom), full.shape[0]), min(-(-x1 // denom), full.shape[1])
            np.testing.assert_array_equal(out, full[y0 // denom : ry1, x0 // denom : rx1], err_msg=str((y0, x0, y1, x1)))


def test_declines_what_pillow_must_handle() -> None:
    buf = io.BytesIO()
    Image.new("CMYK", (40, 30), (10, 20, 30, 40)).save(buf, "JPEG")
    assert turbo.decode_jpeg_region(buf.getvalue(), (0, 0, 30, 40), 1) is None
    good = _jpegs()[0]
    assert turbo.decode_jpeg_region(good[: len(good) // 2], (0, 0, 50, 50), 1) is None  # truncated
    assert turbo.decode_jpeg_region(b"not a jpeg", (0, 0, 1, 1), 1) is None
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF  # corrupt entropy data: libjpeg warns
    turbo.decode_jpeg_region(bytes(flipped), (0, 0, 50, 50), 1)
    # a failure must not poison the thread's decoder for the next, valid file
    assert turbo.decode_jpeg_region(good, (0, 0, 50, 50), 1) is not None


def test_decode_region_uses_it_and_agrees() -> None:
    data = _jpegs()[2]
    out, scale = decode_region(data, (10, 20, 70, 120), rgb=False)
    assert scale == 1.0
    np.testing.assert_array_equal(out, _pillow(data, 1)[10:70, 20:120])
