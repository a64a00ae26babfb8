"""GPU decoding (nvImageCodec): pixels against Pillow, regions against the full decode, EXIF
orientation and fallbacks against the CPU decoder, the batch layout, streams.

Needs a CUDA device and nvidia-nvimgcodec (the pixelpipe[gpu] extra); the module skips
otherwise. Real photos come from the ImageNet sample, or from .gpu-host/data on a GPU host
(tests that need them skip when neither is there); edge cases are encoded here with Pillow.

Most tests use decoders with fancy_upsampling=True (libjpeg's chroma filter), the mode meant to
match the CPU decoder; the default mode (chroma by replication, as DALI) has its own test.
Tolerances, in 8-bit levels of |GPU - reference|:
- Against Pillow (libjpeg-turbo), fancy upsampling: mean < 1.5, max < 40.
- Against Pillow, the default replicated chroma: mean < 1.5 over the photos and < 6 for any
  one of them, no bound on single pixels (measured on the 500 sample photos: mean 0.14, worst
  image 4.4, single pixels up to 69 next to sharp colour edges). Wrong pixels (a shifted or
  transposed image, swapped channels) give means of tens of levels. JPEG decoders legitimately differ:
  nvJPEG's IDCT (and the hardware engine's) rounds differently from libjpeg's integer IDCT
  (a level or two everywhere), and chroma upsampling can differ next to sharp colour edges,
  where a few pixels may be off by tens of levels.
- A region against the full decode of the same file, cropped: mean < 0.5, max < 40. Expected
  identical: nvJPEG decodes the blocks covering the region with the same IDCT, then crops. Two
  things may still differ, both small on average: the region and the full image may land on
  different backends (hardware engine vs CUDA decoder; load hints split batches), and fancy
  chroma upsampling may differ in a one-pixel rim at the region's border (nvJPEG < 13.2). A box
  off by one pixel gives a mean of several levels on these images, so the mean bound is what
  catches wrong regions or orientations.
- Samples the CPU decoder handles (fallbacks) must equal decode_region exactly.

Region decoding with nvImageCodec 0.9.0 is known to crash some GPUs (NVIDIA/nvImageCodec#55:
SIGSEGV on H100). A subprocess tries it first; if it dies, the region tests fail with that
message instead of taking pytest down.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from pixelpipe import GpuDecoding, ImageBatch
from pixelpipe.decode import DecodeError, decode_region
from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")',
                allow_module_level=True)

import gpu_decode_fixtures as fixtures
from gpu_decode_fixtures import (
    CUDA,
    HW_FRACTIONS,
    PILLOW_MAX,
    PILLOW_MEAN,
    REGION_MAX,
    REGION_MEAN,
    assert_close,
    pillow_rgb,
    save,
    with_orientation,
)

photos, small, decoders, roi_safe = fixtures.photos, fixtures.small, fixtures.decoders, fixtures.roi_safe  # the shared fixtures


# --------------------------------------------------------------------------------- batch
def test_batch_layout(decoders, photos: list[bytes]) -> None:
    batch, fallback, why = decoders().decode_regions(photos)
    assert isinstance(batch, ImageBatch)
    assert batch.device.type == "cuda" and batch.data.dtype == torch.uint8
    assert (fallback, why) == ([], []), "sample photos fell back to the CPU"
    sizes = [pillow_rgb(p).shape[:2] for p in photos]
    table = batch.table
    assert table.device.type == "cpu" and table.dtype == torch.int64
    assert table[:, 1:3].tolist() == [list(s) for s in sizes]
    assert table[:, 3].tolist() == [3] * len(photos)
    ends = (table[:, 0] + table[:, 1] * table[:, 2] * 3).tolist()
    assert table[:, 0].tolist() == [0, *ends[:-1]]
    assert batch.data.numel() == ends[-1]


def test_empty(decoders) -> None:
    batch, fallback, why = decoders().decode_regions([])
    assert len(batch) == 0 and batch.device.type == "cuda" and fallback == [] and why == []


def test_arguments_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="hw_fraction"):
        GpuDecoder(CUDA, hw_fraction=1.5)
    with pytest.raises(ValueError, match="num_cpu_threads"):
        GpuDecoder(CUDA, num_cpu_threads=0)
    with pytest.raises(ValueError, match="CUDA device"):
        GpuDecoder(torch.device("cpu"))
    with pytest.raises(ValueError, match="max_pixels"):
        GpuDecoder(CUDA, max_pixels=0)


def test_max_pixels_applies_to_every_sample(small: Image.Image) -> None:
    """The decoder's max_pixels: a JPEG over it raises naming the sample and the limit (the CPU
    decoder's error), one at it decodes on the GPU."""
    jpeg = save(small, "JPEG")  # 131 x 97
    dec = GpuDecoder(CUDA, max_pixels=131 * 97 - 1)
    try:
        with pytest.raises(DecodeError, match="sample 1: .*more than max_pixels=12706"):
            dec.decode_regions([save(small.resize((20, 20)), "JPEG"), jpeg])
    finally:
        dec.close()
    dec = GpuDecoder(CUDA, max_pixels=131 * 97)
    try:
        batch, fallback, _ = dec.decode_regions([jpeg])
        assert fallback == [] and tuple(batch[0].shape) == (97, 131, 3)
    finally:
        dec.close()


def test_regions_must_match_blobs(decoders, small: Image.Image) -> None:
    data = save(small, "JPEG")
    with pytest.raises(ValueError, match="2 regions for 1 blobs"):
        decoders().decode_regions([data], [(0, 0, 1, 1), (0, 0, 1, 1)])
    with pytest.raises(ValueError, match="sample 0"):
        decoders().decode_regions([data], [(0, 0, 98, 10)])  # the image is 97 high


# --------------------------------------------------------------------------------- pixels
@pytest.mark.parametrize("hw_fraction", HW_FRACTIONS)
def test_full_decode_matches_pillow(decoders, photos: list[bytes], hw_fraction) -> None:
    batch, fallback, _ = decoders(hw_fraction).decode_regions(photos)
    assert fallback == []
    for i, p in enumerate(photos):
        assert_close(batch[i], pillow_rgb(p), PILLOW_MEAN, PILLOW_MAX, f"photo {i}")


@pytest.mark.parametrize("hw_fraction", HW_FRACTIONS)
def test_default_replicated_chroma_stays_close_to_pillow(decoders, photos: list[bytes], hw_fraction) -> None:
    batch, fallback, _ = decoders(hw_fraction, fancy=False).decode_regions(photos)
    assert fallback == []
    means = []
    for i, p in enumerate(photos):
        ref = pillow_rgb(p)
        got = batch[i].cpu().numpy().astype(np.int16)
        assert got.shape == ref.shape, f"photo {i}: shape {got.shape}, expected {ref.shape}"
        means.append(float(np.abs(got - ref).mean()))
    assert max(means) < 6 and sum(means) / len(means) < 1.5, f"mean |diff| per photo: {means}"


def test_fancy_upsampling_is_off_by_default() -> None:
    assert GpuDecoder.__init__.__kwdefaults__["fancy_upsampling"] is False
    assert GpuDecoding().fancy_upsampling is False


@pytest.mark.parametrize("kind", ["baseline", "progressive", "restart", "grey", "q100_444"])
def test_jpeg_kinds_match_pillow(decoders, small: Image.Image, kind: str) -> None:
    data = {
        "baseline": lambda: save(small, "JPEG", quality=85),
        "progressive": lambda: save(small, "JPEG", progressive=True),
        "restart": lambda: save(small, "JPEG", restart_marker_blocks=4),
        "grey": lambda: save(small.convert("L"), "JPEG"),
        "q100_444": lambda: save(small, "JPEG", quality=100, subsampling=0),
    }[kind]()
    batch, fallback, why = decoders().decode_regions([data])
    # All of these are plain 8-bit Huffman JPEGs that nvJPEG's CUDA decoder takes (the hardware
    # engine refuses progressive ones and passes them on).
    assert fallback == [], why
    out = batch[0]
    assert tuple(out.shape) == (97, 131, 3)
    assert_close(out, pillow_rgb(data), PILLOW_MEAN, PILLOW_MAX, kind)
    if kind == "grey":
        assert bool((out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all())


# -------------------------------------------------------------------------------- regions
def _regions(h: int, w: int, rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    fixed = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, h, w), (8, 16, 24, 48),
             (3, 5, h - 7, w - 2), (h // 2, 0, h // 2 + 1, w)]
    for _ in range(3):
        y0, y1 = sorted(int(v) for v in rng.choice(h + 1, 2, replace=False))
        x0, x1 = sorted(int(v) for v in rng.choice(w + 1, 2, replace=False))
        fixed.append((y0, x0, y1, x1))
    return fixed


@pytest.mark.parametrize("roi_decode", [True, False])
@pytest.mark.parametrize("hw_fraction", HW_FRACTIONS)
def test_region_equals_full_decode_cropped(decoders, photos: list[bytes], roi_safe: str,
                                           hw_fraction, roi_decode: bool) -> None:
    dec = decoders(hw_fraction, roi_decode)
    full, _, _ = dec.decode_regions(photos[:4])
    rng = np.random.default_rng(3)
    blobs, regions, owners = [], [], []
    for k, p in enumerate(photos[:4]):
        h, w = (int(v) for v in full.table[k, 1:3])
        for r in _regions(h, w, rng):
            blobs.append(p)
            regions.append(r)
            owners.append(k)
    batch, fallback, why = dec.decode_regions(blobs, regions)
    assert fallback == [], (
        f"regions fell back to the CPU ({why[:1]}): with nvJPEG < 13.2 nvImageCodec refuses ROI "
        f"decoding under fancy upsampling. Probe: {roi_safe}")
    for i, ((y0, x0, y1, x1), k) in enumerate(zip(regions, owners)):
        assert tuple(batch[i].shape) == (y1 - y0, x1 - x0, 3)
        ref = full[k][y0:y1, x0:x1].cpu().numpy()
        assert_close(batch[i], ref, REGION_MEAN, REGION_MAX, f"photo {k} region {regions[i]}")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation(decoders, small: Image.Image, roi_safe: str, orientation: int) -> None:
    data = with_orientation(small, orientation)
    h, w = (131, 97) if orientation >= 5 else (97, 131)
    regions = [None, (5, 7, h - 3, w - 11), (0, 0, 1, w), (h - 20, w - 9, h, w)]
    for roi_decode in (True, False):
        dec = decoders(None, roi_decode)
        batch, fallback, _ = dec.decode_regions([data] * len(regions), regions)
        assert fallback == []
        full = batch[0]
        assert_close(full, pillow_rgb(data), PILLOW_MEAN, PILLOW_MAX, f"orientation {orientation}")
        for i, r in enumerate(regions[1:], 1):
            cpu, _ = decode_region(data, region=r, rgb=True)
            what = f"orientation {orientation}, region {r}, roi_decode={roi_decode}"
            assert_close(batch[i], cpu, PILLOW_MEAN, PILLOW_MAX, what + " vs CPU")
            y0, x0, y1, x1 = r
            ref = full[y0:y1, x0:x1].cpu().numpy()
            assert_close(batch[i], ref, REGION_MEAN, REGION_MAX, what + " vs full decode")


# ------------------------------------------------------------------------------ fallbacks
def test_other_formats_and_cmyk_fall_back_exactly(decoders, small: Image.Image) -> None:
    jpeg = save(small, "JPEG")
    blobs = [jpeg, save(small, "PNG"), save(small.convert("CMYK"), "JPEG"), save(small, "WEBP"),
             jpeg]
    regions = [None, (1, 2, 50, 60), None, (0, 0, 97, 131), (4, 4, 20, 30)]
    batch, fallback, why = decoders().decode_regions(blobs, regions)
    assert fallback == [1, 2, 3]
    assert "png" in why[0] and "CMYK" in why[1] and "webp" in why[2]
    for i in fallback:
        np.testing.assert_array_equal(batch[i].cpu().numpy(),
                                      decode_region(blobs[i], region=regions[i], rgb=True)[0])


class _Flaky:
    """Stands in for nvImageCodec's decoder: returns None for, or raises on, chosen samples."""

    def __init__(self, inner, none_for: bytes = b"", raise_for: bytes = b"",
                 batch_raises: bool = False) -> None:
        self.inner, self.none_for, self.raise_for = inner, none_for, raise_for
        self.batch_raises = batch_raises
        self.tags: dict[int, bytes] = {}

    def decode(self, src, **kw):
        if isinstance(src, list):
            if self.batch_raises:
                raise RuntimeError("the whole batch failed")
            out = self.inner.decode(src, **kw)
            return [None if self.none_for and self._is(s, self.none_for) else o
                    for s, o in zip(src, out)]
        if self.raise_for and self._is(src, self.raise_for):
            raise RuntimeError("this sample failed")
        return self.inner.decode(src, **kw)

    def _is(self, code_stream, tag: bytes) -> bool:
        return self.tags.get(id(code_stream)) == tag


def test_nvimgcodec_failures_fall_back(small: Image.Image, monkeypatch) -> None:
    dec = GpuDecoder(CUDA, hw_fraction=0.0, api="python")  # wraps the binding's decoder
    good, bad = save(small, "JPEG", quality=80), save(small, "JPEG", quality=81)
    real = dec._decoder
    nvc = dec._nvc
    original = nvc.CodeStream

    def tagging(data):  # remember which code stream holds the "bad" file
        cs = original(data)
        flaky.tags[id(cs)] = b"bad" if data == bad else b"good"
        return cs

    monkeypatch.setattr(nvc, "CodeStream", tagging)
    for flaky, reason in [(_Flaky(real, none_for=b"bad"), "could not decode"),
                          (_Flaky(real, raise_for=b"bad", batch_raises=True), "raised")]:
        dec._decoder = flaky
        batch, fallback, why = dec.decode_regions([good, bad, good])
        assert fallback == [1] and reason in why[0], why
        np.testing.assert_array_equal(batch[1].cpu().numpy(), decode_region(bad, rgb=True)[0])
        assert_close(batch[0], pillow_rgb(good), PILLOW_MEAN, PILLOW_MAX, f"good sample, {reason} case")
    dec.close()


def test_undecodable_blobs_raise_naming_the_sample(decoders, small: Image.Image) -> None:
    jpeg = save(small, "JPEG")
    with pytest.raises(DecodeError, match="sample 2"):
        decoders().decode_regions([jpeg, jpeg, b"not an image at all, just bytes"])
    # Truncated: nvJPEG might hand back grey rows; Pillow raises, and so must we.
    with pytest.raises(DecodeError, match="sample 1"):
        decoders().decode_regions([jpeg, jpeg[: len(jpeg) * 2 // 3], jpeg])
    # several at once: the lowest raises, naming the others (a pipeline skips them together)
    with pytest.raises(DecodeError, match="sample 1") as caught:
        decoders().decode_regions([jpeg, jpeg[: len(jpeg) // 2], jpeg, b"not an image either", jpeg])
    assert [s for s, _ in caught.value.more] == [3], caught.value.more


def test_corrupt_scan_decodes_or_is_reported(decoders, small: Image.Image) -> None:
    jpeg = bytearray(save(small, "JPEG", quality=90))
    rng = np.random.default_rng(5)
    start = bytes(jpeg).index(b"\xff\xda") + 40
    for pos in rng.integers(start, len(jpeg) - 20, 12):
        jpeg[pos] = int(rng.integers(0, 255))  # never 0xff: no marker is created
    data = bytes(jpeg)
    try:
        batch, fallback, why = decoders().decode_regions([save(small, "JPEG"), data])
    except DecodeError as e:  # neither decoder accepted it
        assert "sample 1" in str(e)
        return
    assert tuple(batch[1].shape) == (97, 131, 3)
    if fallback:
        assert fallback == [1] and why[0]
        np.testing.assert_array_equal(batch[1].cpu().numpy(), decode_region(data, rgb=True)[0])


# -------------------------------------------------------------------------------- streams
def test_work_is_ordered_on_the_given_stream(decoders, photos: list[bytes]) -> None:
    dec = decoders(0.0)  # one backend: the same pixels every time
    ref, _, _ = dec.decode_regions(photos)
    torch.cuda.synchronize()
    side = torch.cuda.Stream(CUDA)
    with torch.cuda.stream(torch.cuda.Stream(CUDA)):  # a current stream that is neither
        batch, _, _ = dec.decode_regions(photos, stream=side)
    side.synchronize()
    assert torch.equal(batch.data, ref.data)
    assert torch.equal(batch.table, ref.table)
