"""CPU decoding: pixels against Pillow's own decode, regions, DCT scaling, EXIF orientation,
corrupt data, and the batched `decode`.

Files are made here with Pillow from photos of the ImageNet sample (the tests that need them
are skipped when it is absent: see helpers.SAMPLE_DIR).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from helpers import need_sample
from PIL import Image, ImageFile, ImageOps

from pixelpipe import ImageBatch
from pixelpipe.decode import DecodeError, cpu, decode, decode_region, read_header
from pixelpipe.decode.headers import parse_jpeg

PHOTOS = ["n01518878_ostrich.JPEG", "n01443537_goldfish.JPEG", "n02096051_Airedale.JPEG"]
# Mean |DCT-scaled decode - Pillow's box reduce of the full decode|, in 8-bit levels, for
# photos. Measured about 0.4 on the sample; a grid off by half a reduced pixel gives over 2.
DRAFT_TOL = 1.0


def need(name: str) -> bytes:
    return need_sample(name).read_bytes()


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    """An RGB photo, 375 x 500 (neither side a multiple of 8)."""
    return Image.open(io.BytesIO(need(PHOTOS[0]))).convert("RGB")


@pytest.fixture(scope="module")
def small(photo: Image.Image) -> Image.Image:
    return photo.crop((40, 60, 171, 157))  # 131 x 97


def save(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def with_orientation(im: Image.Image, orientation: int, **kw: object) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return save(im, "JPEG", exif=exif.tobytes(), **kw)


def pillow_pixels(data: bytes, rgb: bool = True) -> np.ndarray:
    """Pillow's decode, EXIF-transposed, in the documented output conventions."""
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if im.mode == "I;16":
        arr = np.asarray(im) >> 8
    elif im.mode in ("L", "LA", "1"):
        arr = np.asarray(im.convert("L"))
    else:
        arr = np.asarray(im.convert("RGB"))
    arr = arr.astype(np.uint8).reshape(arr.shape[0], arr.shape[1], -1)
    return np.repeat(arr, 3, axis=2) if rgb and arr.shape[2] == 1 else arr


def formats(im: Image.Image) -> dict[str, bytes]:
    rgba = im.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(im.size))
    grey16 = np.asarray(im)[:, :, 1].astype(np.uint32) * 257 + 100
    grey16 = grey16.clip(0, 65535).astype(np.uint16)
    return {
        "jpeg": save(im, "JPEG", quality=92),
        "jpeg_progressive": save(im, "JPEG", progressive=True),
        "jpeg_grey": save(im.convert("L"), "JPEG"),
        "jpeg_cmyk": save(im.convert("CMYK"), "JPEG"),
        "jpeg_restart": save(im, "JPEG", restart_marker_blocks=4),
        "png": save(im, "PNG"),
        "png_rgba": save(rgba, "PNG"),
        "png_la": save(rgba.convert("LA"), "PNG"),
        "png_palette": save(im.quantize(50), "PNG"),
        "png_1bit": save(im.convert("1"), "PNG"),
        "png_grey16": save(Image.fromarray(grey16), "PNG"),
        "webp": save(im, "WEBP", quality=85),
        "webp_lossless_alpha": save(rgba, "WEBP", lossless=True),
        "bmp": save(im, "BMP"),
        "bmp_palette": save(im.quantize(50), "BMP"),
        "bmp_grey": save(im.convert("L"), "BMP"),
    }


FORMATS = ["jpeg", "jpeg_progressive", "jpeg_grey", "jpeg_cmyk", "jpeg_restart", "png", "png_rgba",
           "png_la", "png_palette", "png_1bit", "png_grey16", "webp", "webp_lossless_alpha", "bmp",
           "bmp_palette", "bmp_grey"]
GREY = {"jpeg_grey", "png_la", "png_1bit", "png_grey16", "bmp_grey"}


@pytest.fixture(scope="module")
def files(small: Image.Image) -> dict[str, bytes]:
    return formats(small)


# --------------------------------------------------------------------------------- pixels
@pytest.mark.parametrize("name", FORMATS)
def test_pixels_equal_pillow(files: dict[str, bytes], name: str) -> None:
    data = files[name]
    for rgb in (True, False):
        out, scale = decode_region(data, rgb=rgb)
        assert scale == 1.0
        assert out.dtype == np.uint8 and out.flags.writeable and out.flags.c_contiguous
        assert out.shape[2] == (1 if name in GREY and not rgb else 3)
        np.testing.assert_array_equal(out, pillow_pixels(data, rgb))


def test_sixteen_bit_keeps_the_high_byte(small: Image.Image) -> None:
    values = (np.arange(97 * 131, dtype=np.uint32).reshape(97, 131) * 7 % 65536).astype(np.uint16)
    out, _ = decode_region(save(Image.fromarray(values), "PNG"), rgb=False)
    np.testing.assert_array_equal(out[:, :, 0], (values >> 8).astype(np.uint8))


@pytest.mark.parametrize("name", ["jpeg", "jpeg_progressive", "jpeg_cmyk", "jpeg_restart",
                                  "png_palette", "webp", "bmp_grey"])
def test_region_equals_full_decode_cropped(files: dict[str, bytes], name: str) -> None:
    data = files[name]
    full = pillow_pixels(data)
    rng = np.random.default_rng(1)
    regions = [(0, 0, 97, 131), (0, 0, 1, 1), (96, 130, 97, 131), (10, 0, 11, 131), (0, 5, 97, 6)]
    for _ in range(12):
        y0, y1 = sorted(rng.choice(98, 2, replace=False))
        x0, x1 = sorted(rng.choice(132, 2, replace=False))
        regions.append((int(y0), int(x0), int(y1), int(x1)))
    for y0, x0, y1, x1 in regions:
        out, scale = decode_region(data, (y0, x0, y1, x1))
        assert scale == 1.0
        np.testing.assert_array_equal(out, full[y0:y1, x0:x1], err_msg=str((y0, x0, y1, x1)))


def test_row_limited_jpeg_decode(photo: Image.Image) -> None:
    """The helper that stops libjpeg after the region's last row returns exactly the top rows of
    a full decode, and declines (None) whatever it cannot do safely."""
    data = save(photo, "JPEG", quality=90)
    full = np.asarray(Image.open(io.BytesIO(data)))
    layout = parse_jpeg(data, to_scan=True)[1]
    for rows in (1, 7, 8, 9, 250, 499):
        im = cpu._open("jpeg", data)
        out = cpu.decode_jpeg_rows(im, data, rows, layout)
        assert out is not None and out.size == (375, rows)
        np.testing.assert_array_equal(np.asarray(out), full[:rows])
    for denom in (2, 8):  # after a draft, in reduced rows
        im = cpu._open("jpeg", data)
        assert cpu._draft(im, denom) == denom
        ref = cpu._open("jpeg", data)
        cpu._draft(ref, denom)
        ref.load()
        out = cpu.decode_jpeg_rows(im, data, 20, layout)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(ref)[:20])
    assert cpu.decode_jpeg_rows(cpu._open("jpeg", data), data, 500, layout) is None  # all rows
    prog = save(photo, "JPEG", progressive=True)
    prog_layout = parse_jpeg(prog, True)[1]
    assert cpu.decode_jpeg_rows(cpu._open("jpeg", prog), prog, 10, prog_layout) is None
    cut = data[: len(data) * 2 // 3]  # no end-of-image marker: a truncated file
    assert cpu.decode_jpeg_rows(cpu._open("jpeg", cut), cut, 10, layout) is None
    dht = data.index(b"\xff\xc4")
    bad = data[: dht + 5] + b"\xff" * 16 + data[dht + 21 :]  # impossible Huffman code counts
    assert cpu.decode_jpeg_rows(cpu._open("jpeg", bad), bad, 10, layout) is None


def test_region_decode_uses_the_row_limited_path(
    photo: Image.Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = save(photo, "JPEG")
    used = []
    real = cpu.decode_jpeg_rows

    def spy(*args: object) -> Image.Image | None:
        used.append(real(*args))
        return used[-1]

    monkeypatch.setattr(cpu, "decode_jpeg_region", lambda *a: None)  # the Pillow path
    monkeypatch.setattr(cpu, "decode_jpeg_rows", spy)
    out, _ = decode_region(data, (100, 50, 300, 200))
    assert len(used) == 1 and used[0] is not None and used[0].size == (375, 300)
    np.testing.assert_array_equal(out, pillow_pixels(data)[100:300, 50:200])


# --------------------------------------------------------------------------------- DCT scaling
@pytest.mark.parametrize("region, min_size, denom", [
    (None, (150, 150), 2),  # 500 x 375 -> 250 x 188
    (None, (90, 90), 4),
    (None, (40, 40), 8),
    (None, (0, 0), 8),
    (None, (376, 1), 1),  # 1/2 would make 250 < 376 rows
    ((10, 21, 310, 341), (70, 80), 4),  # 300 x 320: 1/4 -> 75 x 80 ok, 1/8 -> 37 < 70
    ((10, 21, 310, 341), (75, 81), 2),  # 320 / 4 = 80 < 81
    ((3, 5, 99, 77), (12, 9), 8),
])
def test_draft_scale_shape_and_pixels(photo: Image.Image, region: tuple[int, int, int, int] | None,
                                      min_size: tuple[int, int], denom: int) -> None:
    data = save(photo, "JPEG", quality=90)
    out, scale = decode_region(data, region, min_size=min_size)
    assert scale == 1 / denom
    y0, x0, y1, x1 = region or (0, 0, 500, 375)
    h, w = -(-500 // denom), -(-375 // denom)  # the reduced image, ceil-sized
    box = (y0 // denom, x0 // denom, min(-(-y1 // denom), h), min(-(-x1 // denom), w))
    assert out.shape == (box[2] - box[0], box[3] - box[1], 3)
    # Exactly Pillow's own draft decode, cropped ...
    im = Image.open(io.BytesIO(data))
    im.draft("RGB", (375 // denom, 500 // denom))
    assert im.size == (w, h)
    np.testing.assert_array_equal(out, np.asarray(im)[box[0]:box[2], box[1]:box[3]])
    # ... and close to the full decode reduced by box averages on the same grid.
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").reduce(denom), dtype=np.int16)
    diff = np.abs(out.astype(np.int16) - ref[box[0]:box[2], box[1]:box[3]])
    assert diff.mean() < DRAFT_TOL


def test_min_size_ignored_for_other_formats(files: dict[str, bytes]) -> None:
    for name in ("png", "webp", "bmp"):
        out, scale = decode_region(files[name], min_size=(1, 1))
        assert scale == 1.0 and out.shape == (97, 131, 3)


# --------------------------------------------------------------------------------- EXIF
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation(small: Image.Image, orientation: int) -> None:
    data = with_orientation(small, orientation)
    expected = pillow_pixels(data)
    assert expected.shape[:2] == ((131, 97) if orientation >= 5 else (97, 131))
    out, _ = decode_region(data)
    np.testing.assert_array_equal(out, expected)
    h, w = expected.shape[:2]
    for y0, x0, y1, x1 in [(0, 0, h, w), (5, 7, 40, 90), (h - 9, w - 30, h, w - 1), (0, 1, 2, w)]:
        out, _ = decode_region(data, (y0, x0, y1, x1))
        np.testing.assert_array_equal(out, expected[y0:y1, x0:x1])
    stored, _ = decode_region(data, exif=False)
    np.testing.assert_array_equal(stored, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_with_draft_stays_aligned(photo: Image.Image, orientation: int) -> None:
    """375 x 500 stored: 4 (not 8) divides the 500 rows, nothing divides the 375 columns. A
    reduced decode must stay on the displayed grid, so scales that would put a partial DCT
    block first (on a reversed axis) are not used."""
    data = with_orientation(photo, orientation, quality=90)
    displayed = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    h, w = displayed.height, displayed.width
    out, scale = decode_region(data, (16, 24, h - 40, w - 8), min_size=(20, 20))
    if orientation in (2, 3, 7, 8):  # columns reversed
        assert scale == 1.0
    elif orientation in (4, 6):  # rows reversed
        assert scale == 0.25
    else:
        assert scale == 0.125
    d = round(1 / scale)
    ref = np.asarray(displayed.reduce(d), dtype=np.int16)
    y0, x0, y1, x1 = 16 // d, 24 // d, -(-(h - 40) // d), -(-(w - 8) // d)
    assert out.shape[:2] == (y1 - y0, x1 - x0)
    assert np.abs(out.astype(np.int16) - ref[y0:y1, x0:x1]).mean() < DRAFT_TOL


def test_real_photo_with_orientation_6() -> None:
    data = need("n02951585_can_opener.JPEG")
    out, _ = decode_region(data)
    np.testing.assert_array_equal(out, pillow_pixels(data))
    assert out.shape[:2] == read_header(data).oriented_size


# --------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("name", ["jpeg", "jpeg_progressive", "png", "webp", "bmp"])
def test_truncated_raises(photo: Image.Image, name: str) -> None:
    data = formats(photo.crop((0, 0, 200, 160)))[name]
    for cut in (0, 1, 10, 100, len(data) // 3, len(data) // 2, len(data) - 60):
        with pytest.raises(DecodeError):
            decode_region(data[:cut])


def test_truncated_jpeg_raises_even_for_a_region_above_the_cut(photo: Image.Image) -> None:
    data = save(photo, "JPEG")
    cut = data[: len(data) * 3 // 4]
    with pytest.raises(DecodeError, match="truncated"):
        decode_region(cut, (0, 0, 10, 10))


def test_truncated_raises_when_pillow_is_told_to_load_them(photo: Image.Image,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    for name in ("jpeg", "png"):
        data = formats(photo.crop((0, 0, 200, 160)))[name]
        with pytest.raises(DecodeError, match="truncated"):
            decode_region(data[: len(data) - 60])


def test_bit_flips_in_structure_raise(files: dict[str, bytes]) -> None:
    data = files["jpeg"]
    sof = data.index(b"\xff\xc0")
    dht = data.index(b"\xff\xc4")
    flips = [1, sof + 1, dht + 4 + 1]  # SOI -> not a JPEG, SOF0 -> DHT, Huffman table class
    for pos in flips:
        bad = bytearray(data)
        bad[pos] ^= 0x40
        with pytest.raises(DecodeError):
            decode_region(bytes(bad))
    png = bytearray(files["png"])
    png[40] ^= 0x10  # inside IDAT: the CRC (and zlib) no longer match
    with pytest.raises(DecodeError):
        decode_region(bytes(png))


def test_random_corruption_raises_decode_error_or_decodes(files: dict[str, bytes]) -> None:
    """libjpeg only warns about corrupt entropy data (so does Pillow): such files decode to wrong
    pixels. Everything else must be a DecodeError, never another exception."""
    rng = np.random.default_rng(0)
    for name in ("jpeg", "jpeg_progressive", "png", "webp", "bmp"):
        data = files[name]
        for _ in range(25):
            bad = bytearray(data)
            for pos in rng.integers(0, len(bad), 2):
                bad[pos] ^= 1 << int(rng.integers(8))
            try:
                out, _ = decode_region(bytes(bad), (3, 4, 50, 60), rgb=False)
            except DecodeError:
                continue
            assert out.dtype == np.uint8 and out.shape[:2] == (47, 56)


@pytest.mark.parametrize(
    "data", [b"", b"\x00" * 100, b"name,label\ncat.jpg,3\n", b"GIF89a" + b"\x00" * 50]
)
def test_not_an_image_raises(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_region(data)


def test_max_pixels(files: dict[str, bytes]) -> None:
    data = files["jpeg"]
    decode_region(data, max_pixels=97 * 131)
    with pytest.raises(DecodeError, match="max_pixels"):
        decode_region(data, max_pixels=97 * 131 - 1)
    bomb = bytearray(files["png"])
    bomb[16:24] = (100_000).to_bytes(4, "big") * 2  # 10^10 pixels claimed by IHDR
    with pytest.raises(DecodeError, match="max_pixels"):
        decode_region(bytes(bomb))


@pytest.mark.parametrize("region", [(0, 0, 98, 10), (-1, 0, 5, 5), (5, 5, 5, 9), (0, 10, 5, 2),
                                    (0, 0, 5.5, 9)])
def test_bad_region_is_a_value_error(
    files: dict[str, bytes], region: tuple[int, int, int, int]
) -> None:
    with pytest.raises(ValueError, match="region") as err:
        decode_region(files["jpeg"], region)
    assert not isinstance(err.value, DecodeError)
    with pytest.raises(ValueError, match="min_size"):
        decode_region(files["jpeg"], min_size=(-1, 4))


# --------------------------------------------------------------------------------- decode()
def test_decode_batch(files: dict[str, bytes]) -> None:
    names = ["jpeg", "jpeg_grey", "png_rgba", "png_grey16", "webp", "bmp_palette"]
    for rgb in (False, True):
        for threads in (1, 3):
            batch = decode([files[n] for n in names], rgb=rgb, num_threads=threads)
            assert isinstance(batch, ImageBatch) and len(batch) == len(names)
            assert batch.device == torch.device("cpu")
            assert batch.sizes.tolist() == [[97, 131]] * len(names)
            expected_c = [1 if n in GREY and not rgb else 3 for n in names]
            assert batch.channels.tolist() == expected_c
            for i, n in enumerate(names):
                np.testing.assert_array_equal(batch[i].numpy(), pillow_pixels(files[n], rgb))


def test_decode_sample_photos_with_threads() -> None:
    blobs = [need(p) for p in PHOTOS] + [need("n02951585_can_opener.JPEG")]
    batch = decode(blobs, num_threads=4)
    for i, data in enumerate(blobs):
        np.testing.assert_array_equal(batch[i].numpy(), pillow_pixels(data, rgb=False))
    assert batch.channels.tolist() == [3, 3, 1, 3]


def test_decode_error_names_the_sample(files: dict[str, bytes]) -> None:
    good = files["jpeg"]
    for threads in (1, 2):
        with pytest.raises(DecodeError, match=r"^sample 2: .*truncated"):
            decode([good, good, good[:500], good, b"junk"], num_threads=threads)
    with pytest.raises(DecodeError, match=r"^sample 1: empty"):
        decode([good, b""])


def test_decode_edge_cases(files: dict[str, bytes]) -> None:
    assert len(decode([])) == 0
    if not torch.cuda.is_available():  # on a GPU, tests/test_decode_gpu_views.py covers device="cuda"
        with pytest.raises(RuntimeError, match="cuda"):
            decode([files["jpeg"]], device="cuda")
        with pytest.raises(RuntimeError, match="cuda:1"):
            decode([files["jpeg"]], device="cuda:1")
    with pytest.raises(ValueError, match="device"):
        decode([files["jpeg"]], device="meta")
    with pytest.raises(ValueError, match="num_threads"):
        decode([files["jpeg"]], num_threads=0)
    out = decode([memoryview(files["png"]), bytearray(files["bmp"])])
    assert out.sizes.tolist() == [[97, 131], [97, 131]]
