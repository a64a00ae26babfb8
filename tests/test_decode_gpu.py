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

import io
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import SAMPLE_DIR, SAMPLE_MISSING
from PIL import Image, ImageOps

from pixelpipe import GpuDecoding, ImageBatch
from pixelpipe.decode import DecodeError, decode_region, read_header
from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")',
                allow_module_level=True)

PILLOW_MEAN, PILLOW_MAX = 1.5, 40
REGION_MEAN, REGION_MAX = 0.5, 40
HW_FRACTIONS = [None, 0.0, 1.0]
CUDA = torch.device("cuda")


# ----------------------------------------------------------------------------- fixtures
def save(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def with_orientation(im: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return save(im, "JPEG", quality=92, exif=exif.tobytes())


def pillow_rgb(data: bytes) -> np.ndarray:
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def assert_close(got: torch.Tensor, ref: np.ndarray, mean: float, peak: float, what: str) -> None:
    g = got.cpu().numpy().astype(np.int16)
    assert g.shape == ref.shape, f"{what}: shape {g.shape}, expected {ref.shape}"
    d = np.abs(g - ref.astype(np.int16))
    assert d.mean() < mean and d.max() < peak, (
        f"{what}: mean |diff| {d.mean():.3f} (< {mean}), max {d.max()} (< {peak})")


def sample_photos(n: int) -> list[bytes]:
    """The first n RGB/grey JPEGs of the sample (CMYK files go to the CPU on purpose)."""
    if not SAMPLE_DIR.is_dir():
        return []
    out = []
    for path in sorted(SAMPLE_DIR.glob("*.JPEG")):
        data = path.read_bytes()
        info = read_header(data)
        if info.format == "jpeg" and info.channels in (1, 3):
            out.append(data)
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    out = sample_photos(12)
    if not out:
        pytest.skip(SAMPLE_MISSING)
    return out


@pytest.fixture(scope="module")
def small() -> Image.Image:
    """A 131 x 97 RGB image with detail everywhere (neither side a multiple of 8 or 16)."""
    photos = sample_photos(1)
    if photos:
        return Image.open(io.BytesIO(photos[0])).convert("RGB").crop((40, 60, 171, 157))
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:97, 0:131]
    img = np.stack([x * 2, y * 2, (x * y) % 256], -1) + rng.normal(0, 12, (97, 131, 3))
    return Image.fromarray(img.clip(0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def decoders():
    made: dict[object, GpuDecoder] = {}

    def get(hw_fraction: float | None = None, roi_decode: bool = True, fancy: bool = True) -> GpuDecoder:
        key = (hw_fraction, roi_decode, fancy)
        if key not in made:
            made[key] = GpuDecoder(CUDA, hw_fraction=hw_fraction, roi_decode=roi_decode, fancy_upsampling=fancy)
        return made[key]

    yield get
    for d in made.values():
        d.close()


PROBE = r"""
import io, sys
sys.path[:0] = {path!r}
import numpy as np, torch
from PIL import Image
from pixelpipe.decode import read_header
from pixelpipe.decode.gpu import GpuDecoder
rng = np.random.default_rng(0)
blobs = [open(p, "rb").read() for p in {files!r}]
for i in range(32):
    h, w = (int(v) for v in rng.integers(64, 640, 2))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x ^ y) % 256], -1) + rng.normal(0, 8, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    blobs.append(buf.getvalue())
regions = []
for b in blobs:
    h, w = read_header(b).oriented_size
    y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
    regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
for hw in (None, 0.0, 1.0):
    batch, fallback, why = GpuDecoder(torch.device("cuda"), hw_fraction=hw).decode_regions(
        blobs, regions)
    torch.cuda.synchronize()
    print(f"hw_fraction={{hw}}: {{len(blobs)}} regions, {{len(fallback)}} fell back {{why[:1]}}")
"""


@pytest.fixture(scope="module")
def roi_safe() -> str:
    """Run region decodes in a subprocess first; fail (not crash) if that process dies."""
    files = [str(p) for p in sorted(SAMPLE_DIR.glob("*.JPEG"))[:32]] if SAMPLE_DIR.is_dir() else []
    code = PROBE.format(path=sys.path, files=files)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=False, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.fail("region decoding hung for 10 minutes in a subprocess")
    if done.returncode != 0:
        how = (f"was killed by signal {-done.returncode}" if done.returncode < 0
               else f"exited with {done.returncode}")
        pytest.fail(
            f"region (ROI) decoding {how} in a subprocess: NVIDIA/nvImageCodec#55 (0.9.0 ROI "
            "decode crashes on H100/B200, fails on A100)? Use GpuDecoder(roi_decode=False).\n"
            + (done.stdout + done.stderr)[-3000:])
    return done.stdout


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


# ------------------------------------------------------------------------------ views
@pytest.mark.parametrize("roi_decode", [True, False])
def test_views_feed_the_kernel_like_the_assembled_batch(decoders, small: Image.Image, roi_safe: str,
                                                        roi_decode: bool) -> None:
    """decode_views leaves nvImageCodec's images in place (orientation and crop by strides);
    the kernel must give exactly what it gives on decode_regions' batch, which copies each
    sample through torch views (the twin): every EXIF orientation, a grey JPEG, regions, and
    CPU fallbacks (PNG) in the same batch."""
    import pixelpipe as pp
    from pixelpipe.kernels.spec import PointwiseSpec
    from pixelpipe.kernels.triton.warp import warp_pointwise_gpu

    blobs = [with_orientation(small, o) for o in range(1, 9)]
    blobs += [save(small.convert("L"), "JPEG"), save(small, "PNG")]
    sizes = [(131, 97) if o >= 5 else (97, 131) for o in range(1, 9)] + [(97, 131)] * 2
    regions = [(3 + i, 5, h - 2 * i, w - 7) if i % 3 else None for i, (h, w) in enumerate(sizes)]
    dec = decoders(0.0, roi_decode)  # one backend: the same pixels on both calls
    views, fallback, _ = dec.decode_views(blobs, regions)
    assert fallback == [9]
    batch, _, _ = dec.decode_regions(blobs, regions)
    assert views.sizes.tolist() == batch.sizes.tolist()
    plan = pp.Compose([pp.RandomResizedCrop(48), pp.RandomRotate(20)]).stages[0].sample(
        0, 0, torch.arange(len(blobs)), batch.sizes.double())
    spec = plan.warp_spec((48, 48), plan.regions())
    pspec = PointwiseSpec(None, None, None, torch.float32, "NHWC", 3)
    got = warp_pointwise_gpu(views.data, views.table, spec, pspec)
    want = warp_pointwise_gpu(batch.data, batch.table, spec, pspec)
    views.retire(torch.cuda.current_stream())
    assert torch.equal(got, want)


def test_reused_buffers_give_the_same_pixels(photos: list[bytes], roi_safe: str) -> None:
    """Batches decoded into the buffers of earlier batches (regions of other sizes each round,
    so buffers must grow and shrink) equal batches decoded into fresh buffers."""
    reusing = GpuDecoder(CUDA, hw_fraction=0.0, roi_decode=True, api="python")  # the binding reuses buffers
    fresh = GpuDecoder(CUDA, hw_fraction=0.0, roi_decode=True, api="python")
    fresh._free_cap = 0  # never reuses
    stream = torch.cuda.current_stream()
    rng = np.random.default_rng(5)
    reused_rounds = 0
    for _ in range(4):
        regions = []
        for p in photos:
            h, w = read_header(p).oriented_size
            y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
            regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
        reused_rounds += len(reusing._free) >= len(photos)
        views, fallback, _ = reusing.decode_views(photos, regions)
        got = views.contiguous()
        views.retire(stream)
        want, _, _ = fresh.decode_regions(photos, regions)
        torch.cuda.synchronize()
        assert fallback == [] and torch.equal(got.table, want.table) and torch.equal(got.data, want.data)
    assert reused_rounds >= 2, "the decoder never got its buffers back"
    reusing.close()
    fresh.close()


# ------------------------------------------------------------- pixelpipe.decode(device="cuda")
def test_decode_on_cuda_matches_the_cpu_decoder(photos: list[bytes], small: Image.Image) -> None:
    """JPEGs on the GPU (fancy upsampling: within the Pillow tolerance), a PNG through the CPU
    decoder exactly; grey stays one channel unless rgb; the batch lives on the device."""
    from pixelpipe import decode

    png = save(small, "PNG")
    grey = save(small.convert("L"), "JPEG", quality=90)
    blobs = [*photos[:4], png, grey]
    want = decode(blobs)
    got = decode(blobs, device="cuda", fancy_upsampling=True)
    assert got.device.type == "cuda" and len(got) == len(blobs)
    assert got.sizes.tolist() == want.sizes.tolist()
    channels = [img.shape[2] for img in want.tolist()]
    assert channels[-1] == 1 and [img.shape[2] for img in got.tolist()] == channels
    for i in range(len(blobs)):
        assert_close(got[i], want[i].numpy(), PILLOW_MEAN, PILLOW_MAX, f"sample {i}")
    assert torch.equal(got[4].cpu(), want[4])  # the PNG: the CPU decoder's pixels
    rgb = decode(blobs, device="cuda", rgb=True)
    assert [img.shape[2] for img in rgb.tolist()] == [3] * len(blobs)


@pytest.mark.parametrize("exif", [True, False])
def test_decode_on_cuda_follows_exif_like_the_cpu_decoder(small: Image.Image, exif: bool) -> None:
    from pixelpipe import decode

    blobs = [with_orientation(small, o) for o in (1, 3, 6, 8)]
    want = decode(blobs, exif=exif)
    got = decode(blobs, device="cuda", exif=exif, fancy_upsampling=True)
    assert got.sizes.tolist() == want.sizes.tolist()
    for i in range(len(blobs)):
        assert_close(got[i], want[i].numpy(), PILLOW_MEAN, PILLOW_MAX, f"orientation sample {i}")


def test_decode_on_cuda_names_the_failing_sample(small: Image.Image) -> None:
    from pixelpipe import decode

    good = save(small, "JPEG", quality=85)
    with pytest.raises(DecodeError, match=r"sample 1"):
        decode([good, b"junk", good], device="cuda")


# ------------------------------------------------------------------ the C API and the binding
@pytest.mark.parametrize("hw_fraction", [None, 0.0])
def test_c_api_decodes_exactly_what_the_binding_decodes(photos: list[bytes], small: Image.Image, roi_safe: str,
                                                       hw_fraction) -> None:
    """The ctypes path (default) and nvImageCodec's Python binding: same backends, same
    options, so the same pixels, bit for bit; regions, orientations, a PNG fallback and a
    corrupt file included."""
    blobs = [*photos, with_orientation(small, 6), with_orientation(small, 3), save(small, "PNG"), b"\xff\xd8\xffjunk"]
    rng = np.random.default_rng(11)
    regions = []
    for b in blobs[:-1]:
        h, w = read_header(b).oriented_size
        y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
        regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
    c = GpuDecoder(CUDA, hw_fraction=hw_fraction, roi_decode=True, api="c")
    py = GpuDecoder(CUDA, hw_fraction=hw_fraction, roi_decode=True, api="python")
    assert c.api == "c" and py.api == "python"
    with pytest.raises(DecodeError, match=f"sample {len(blobs) - 1}"):
        c.decode_regions(blobs, [*regions, (0, 0, 1, 1)])
    got, fell_c, _ = c.decode_regions(blobs[:-1], regions)
    want, fell_py, _ = py.decode_regions(blobs[:-1], regions)
    torch.cuda.synchronize()
    assert fell_c == fell_py == [len(blobs) - 2]  # the PNG, on the CPU in both
    assert torch.equal(got.table, want.table) and torch.equal(got.data, want.data)
    views, _, _ = c.decode_views(blobs[:-1], regions)
    assert torch.equal(views.contiguous().data, want.data)  # the views' slow twin agrees
    views.retire(torch.cuda.current_stream())
    c.close()
    py.close()


def test_a_planned_batch_decodes_once(photos: list[bytes]) -> None:
    """The C API's images and view rows are made when the batch is planned; decoding the same
    plan a second time raises instead of reading buffers the first decode let go of."""
    dec = GpuDecoder(CUDA, api="c")
    planned = dec.plan(photos[:3])
    views, fell, _ = dec.decode_views(photos[:3], planned=planned)
    assert fell == [] and len(views) == 3
    views.retire(torch.cuda.current_stream())
    dec.plan(photos[:1])  # the next plan releases the decoded batch's handles
    with pytest.raises(ValueError, match="decoded already"):
        dec.decode_views(photos[:3], planned=planned)
    dec.close()


@pytest.mark.parametrize("hw_fraction", [None, 0.0])
def test_lanes_decode_exactly_what_one_decoder_decodes(photos: list[bytes], small: Image.Image, roi_safe: str,
                                                       hw_fraction) -> None:
    """Two or three decoders, each on a part of the batch at the same time, against one: the
    same pixels bit for bit, the same fallbacks, in the caller's order; a planned batch still
    decodes once."""
    blobs = [*photos, with_orientation(small, 6), save(small, "PNG"), *photos[:3]]
    rng = np.random.default_rng(12)
    regions = []
    for b in blobs:
        h, w = read_header(b).oriented_size
        y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
        regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
    one = GpuDecoder(CUDA, hw_fraction=hw_fraction, roi_decode=True, api="c", lanes=1)
    want, fell_one, _ = one.decode_regions(blobs, regions)
    for lanes in (2, 3):
        dec = GpuDecoder(CUDA, hw_fraction=hw_fraction, roi_decode=True, api="c", lanes=lanes)
        assert dec.lanes == lanes
        planned = dec.plan(blobs, regions)
        assert len(planned.opened) == lanes  # every lane got a part of this batch
        views, fell, _ = dec.decode_views(blobs, planned=planned)
        got = views.contiguous()
        views.retire(torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert fell == fell_one == [len(photos) + 1]  # the PNG
        assert torch.equal(got.table, want.table) and torch.equal(got.data, want.data)
        with pytest.raises(ValueError, match="decoded already"):
            dec.decode_views(blobs, planned=planned)
        dec.close()
    one.close()


def test_batches_on_different_lanes_decode_at_once(photos: list[bytes], roi_safe: str) -> None:
    """Batches planned for lanes 0 and 1 decode on two threads at the same time, each into
    what one decoder gives for it; a lane the decoder lacks is refused."""
    from concurrent.futures import ThreadPoolExecutor

    halves = [photos[: len(photos) // 2], photos[len(photos) // 2:]]
    one = GpuDecoder(CUDA, roi_decode=True, api="c", lanes=1)
    want = [one.decode_regions(h)[0] for h in halves]
    dec = GpuDecoder(CUDA, roi_decode=True, api="c", lanes=2)
    with pytest.raises(ValueError, match="lane"):
        dec.plan(halves[0], lane=2)
    for _ in range(3):
        planned = [dec.plan(h, lane=k) for k, h in enumerate(halves)]
        assert [[k for k, _, _ in p.opened] for p in planned] == [[0], [1]]
        streams = [torch.cuda.Stream(CUDA) for _ in halves]

        def run(k: int, stream: torch.cuda.Stream, plan: object) -> ImageBatch:
            with torch.cuda.stream(stream):
                views, fell, _ = dec.decode_views(halves[k], stream=stream, planned=plan)
                assert fell == []
                batch = views.contiguous()
                views.retire(stream)
                return batch

        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(run, [0, 1], streams, planned))
        torch.cuda.synchronize()
        for g, w in zip(got, want):
            assert torch.equal(g.table, w.table) and torch.equal(g.data, w.data)
    dec.close()
    one.close()
