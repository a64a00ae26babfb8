"""The GPU decoder's per-sample planning (pure Python, runs without a GPU): which files go to
nvImageCodec, which to the CPU decoder and why, and the region in stored coordinates."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from pixelpipe.decode import decode_region
from pixelpipe.decode.gpu_plan import plan_job
from pixelpipe.decode.gpu_views import Job


def encode(im: Image.Image, fmt: str = "JPEG", **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:60, 0:90]
    img = np.stack([x * 2, y * 3, (x * y) % 256], -1) + rng.normal(0, 10, (60, 90, 3))
    return Image.fromarray(img.clip(0, 255).astype(np.uint8))


def oriented(im: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(im, quality=90, exif=exif.tobytes())


def test_files_nvimgcodec_cannot_take_go_to_the_cpu_with_a_reason(photo: Image.Image) -> None:
    good = encode(photo, quality=90)
    cases = {
        "png": (encode(photo, "PNG"), "png: no GPU decoder"),
        "cmyk": (encode(photo.convert("CMYK"), quality=90), "CMYK/YCCK"),
        "truncated": (good[: len(good) - 200], "truncated JPEG"),
        "garbage": (b"\xff\xd8\xff" + b"\x00" * 40, "header"),
    }
    for name, (blob, reason) in cases.items():
        got = plan_job(3, blob, None, True)
        assert isinstance(got, str) and reason in got, (name, got)
    assert isinstance(plan_job(3, good, None, True), Job)


def test_regions_map_to_stored_coordinates_like_the_cpu_decoder(photo: Image.Image) -> None:
    """For every orientation, decoding the stored box the plan names and orienting it gives the
    CPU decoder's pixels of the displayed region (the contract the GPU path relies on)."""
    for orientation in range(1, 9):
        blob = oriented(photo, orientation)
        disp = decode_region(blob, rgb=True)[0]
        region = (5, 7, min(disp.shape[0], 41), min(disp.shape[1], 52))
        job = plan_job(0, blob, region, True)
        assert isinstance(job, Job) and job.orientation == orientation and job.roi
        assert job.out_size == (region[2] - region[0], region[3] - region[1])
        stored = decode_region(blob, rgb=True, exif=False)[0]
        y0, x0, y1, x1 = job.box
        pixels = stored[y0:y1, x0:x1]
        if orientation >= 5:
            pixels = pixels.transpose(1, 0, 2)
        flips = {1: (), 2: (1,), 3: (0, 1), 4: (0,), 5: (), 6: (1,), 7: (0, 1), 8: (0,)}[orientation]
        if flips:
            pixels = np.flip(pixels, flips)
        want = disp[region[0]:region[2], region[1]:region[3]]
        assert np.array_equal(pixels, want), orientation


def test_whole_images_and_exif_off(photo: Image.Image) -> None:
    blob = oriented(photo, 6)
    whole = plan_job(0, blob, None, True)
    assert isinstance(whole, Job) and not whole.roi and whole.box == (0, 0, 60, 90) and whole.out_size == (90, 60)
    stored = plan_job(0, blob, None, True, exif=False)
    assert isinstance(stored, Job) and stored.orientation == 1 and stored.out_size == (60, 90)
    off = plan_job(0, blob, (0, 0, 10, 20), False)
    assert isinstance(off, Job) and not off.roi  # roi_decode=False: the whole image, cropped later


def test_a_region_outside_the_image_names_the_sample(photo: Image.Image) -> None:
    with pytest.raises(ValueError, match="sample 7"):
        plan_job(7, encode(photo), (0, 0, 61, 10), True)
