"""The GPU decoder's per-sample planning (pure Python, runs without a GPU): which files go to
nvImageCodec, which to the CPU decoder and why, and the region in stored coordinates."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
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


def _claiming(blob: bytes, h: int, w: int) -> bytes:
    """The JPEG with its frame header (SOF0) claiming h x w pixels; the scan is unchanged."""
    at = blob.index(b"\xff\xc0") + 5  # marker, length (2), precision (1)
    return blob[:at] + h.to_bytes(2, "big") + w.to_bytes(2, "big") + blob[at + 4:]


def test_images_over_max_pixels_go_to_the_cpu_decoder(photo: Image.Image) -> None:
    """The decoder's max_pixels routes bigger images to the CPU decoder (which raises for
    them, as on the CPU path); over 100M pixels they go there whatever max_pixels is."""
    blob = encode(photo, quality=90)  # 90 x 60
    assert isinstance(plan_job(0, blob, None, True, max_pixels=5400), Job)
    small = plan_job(0, blob, None, True, max_pixels=5399)
    assert isinstance(small, str) and "90x60 pixels: over 5,399 pixels" in small
    huge = _claiming(blob, 9000, 12000)
    assert "over 100,000,000 pixels" in plan_job(0, huge, None, True, max_pixels=10**9)


def test_the_fallback_decodes_with_the_decoders_max_pixels(photo: Image.Image) -> None:
    """decode_sample (the CPU side of a GPU batch) applies the limit it is given (it used to
    apply decode_region's default whatever the decoder's), and names the sample."""
    from pixelpipe.decode.gpu_fallback import SampleDecodeError, decode_sample

    blob = encode(photo, quality=90)  # 90 x 60
    with pytest.raises(SampleDecodeError, match="sample 0: 90x60 jpeg has 5400 pixels, more than max_pixels=5399"):
        decode_sample([blob], None, True, 0, 5399)
    assert decode_sample([blob], None, True, 0, 5400).shape == (60, 90, 3)
    with pytest.raises(SampleDecodeError, match="more than max_pixels=100000000"):
        decode_sample([_claiming(blob, 9000, 12000)], None, True, 0)  # the default


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("roi", [False, True])
def test_slot_row_is_view_row_of_the_slot(orientation: int, roi: bool) -> None:
    """The planning thread's shortcut for pixelpipe's own slots gives the row that the checked
    path reads from the slot's __cuda_array_interface__, for every orientation, region or whole."""
    from pixelpipe.decode.gpu_views import Job, slot_row, view_row
    from pixelpipe.decode.nvimgcodec_open import Slot

    stored = (37, 53)
    box = (3, 5, 30, 41)
    out = (box[2] - box[0], box[3] - box[1])
    job = Job(4, out[::-1] if orientation >= 5 else out, stored, box, orientation, roi)
    h, w = job.decoded_size
    slot = Slot(torch.zeros(1, dtype=torch.uint8), 1 << 40, h, w)
    assert slot.__cuda_array_interface__["shape"] == (h, w, 3)
    assert slot_row(job, slot.address) == view_row(job, slot.__cuda_array_interface__, slot.strides)
