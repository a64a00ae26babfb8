"""Formats through the pipeline: a photo of the ImageNet sample re-encoded as JPEG (baseline,
progressive, 4:2:0, grey, CMYK, EXIF orientations 1-8), PNG (8 and 16 bit, grey, RGBA, palette),
WebP (lossy, lossless) and BMP (24 bit, palette), read by a Folder and passed through an
identity pipeline (a CenterCrop of the full size, uint8 NHWC), must give Pillow's pixels
exactly: Pillow's decode, EXIF transpose and RGB conversion of the same bytes. 16-bit files are
checked against the 8-bit image they were made from (their high byte), independently of Pillow.

Skipped when the ImageNet sample is absent (see helpers.SAMPLE_DIR).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from corpus import format_files, photo
from helpers import SAMPLE_DIR
from PIL import Image, ImageOps

from pixelpipe import CenterCrop, Compose, Pipeline

H, W = 45, 61  # displayed size of every file; neither a multiple of 8 nor 16
SIXTEEN_BIT = ("png_rgb16", "png_grey16")


def pillow(data: bytes) -> np.ndarray:
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    return np.asarray(im.convert("RGB"))


def identity(reader: object, h: int, w: int, batch: int) -> Pipeline:
    return Pipeline(reader, Compose([CenterCrop((h, w))], dtype=torch.uint8, layout="NHWC"),
                    batch_size=batch, shuffle=False, num_threads=2)


@pytest.fixture(scope="module")
def decoded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Image.Image, dict[str, tuple[bytes, np.ndarray]]]:
    """The photo, and for every format: its bytes and what the pipeline made of them."""
    im = photo().resize((W, H), Image.Resampling.BICUBIC)
    files = format_files(im)
    root = tmp_path_factory.mktemp("formats")
    for name, (data, ext) in files.items():
        path = root / name / f"image.{ext}"  # one class per format: label = sorted position
        path.parent.mkdir()
        path.write_bytes(data)
    names = sorted(files)
    with identity(str(root), H, W, batch=len(names)) as pipe:
        batch = next(iter(pipe))
    assert batch["label"].tolist() == list(range(len(names)))
    return im, {n: (files[n][0], img.numpy()) for n, img in zip(names, batch["image"])}


NAMES = sorted(format_files(Image.new("RGB", (W, H))))


@pytest.mark.parametrize("name", NAMES)
def test_pixels_equal_pillows(decoded: tuple[Image.Image, dict], name: str) -> None:
    im, results = decoded
    data, got = results[name]
    assert got.shape == (H, W, 3) and got.dtype == np.uint8
    if name == "png_rgb16":
        expected = np.asarray(im)  # the high bytes of the file's samples
    elif name == "png_grey16":
        expected = np.repeat(np.asarray(im.convert("L"))[:, :, None], 3, axis=2)
    else:
        expected = pillow(data)
    assert np.array_equal(got, expected), f"max difference {np.abs(got.astype(int) - expected).max()}"


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("jpeg_exif")])
def test_exif_orientation_shows_the_photo_upright(decoded: tuple[Image.Image, dict], name: str) -> None:
    """Independently of Pillow's transpose: the oriented file looks like the photo it was made
    from (JPEG loss only), and unlike the photo mirrored or turned."""
    im, results = decoded
    got = results[name][1].astype(np.float64)
    photo_px = np.asarray(im, dtype=np.float64)
    assert np.abs(got - photo_px).mean() < 4
    assert np.abs(got - photo_px[:, ::-1]).mean() > 12 and np.abs(got - photo_px[::-1]).mean() > 12


def test_grey_and_cmyk_become_rgb(decoded: tuple[Image.Image, dict]) -> None:
    im, results = decoded
    grey = results["jpeg_grey"][1]
    assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()
    cmyk = results["jpeg_cmyk"][1].astype(np.float64)
    assert np.abs(cmyk - np.asarray(im, dtype=np.float64)).mean() < 6  # colours, not inverted


@pytest.mark.parametrize("name", ["n01518878_ostrich.JPEG", "n02692877_airship.JPEG"])
def test_sample_photos_at_full_size(tmp_path: Path, name: str) -> None:
    """Unmodified photos (colour, and a grey JPEG) at their own size."""
    photo(name)  # skips when absent
    data = (SAMPLE_DIR / name).read_bytes()
    expected = pillow(data)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / name).write_bytes(data)
    h, w = expected.shape[:2]
    with identity(str(tmp_path), h, w, batch=1) as pipe:
        got = next(iter(pipe))["image"][0].numpy()
    assert np.array_equal(got, expected)
