"""GPU decoding (nvImageCodec), continued from tests/test_decode_gpu.py: decoded images as views
that feed the kernel like the assembled batch, reused buffers, `pixelpipe.decode(device="cuda")`
against the CPU decoder, the C API against the Python binding, and decoder lanes. The same
tolerances and photos (tests/gpu_decode_fixtures.py); skips without a CUDA device and
nvImageCodec.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from pixelpipe import ImageBatch
from pixelpipe.decode import DecodeError, read_header
from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")',
                allow_module_level=True)

import gpu_decode_fixtures as fixtures
from gpu_decode_fixtures import (
    CUDA,
    PILLOW_MAX,
    PILLOW_MEAN,
    assert_close,
    save,
    with_orientation,
)

photos, small, decoders, roi_safe = fixtures.photos, fixtures.small, fixtures.decoders, fixtures.roi_safe  # the shared fixtures


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


def test_lanes_of_their_own_shares_decode_what_a_decoder_of_that_share_decodes(photos: list[bytes],
                                                                               roi_safe: str) -> None:
    """lane_fractions: each lane is a decoder of its own hardware share (bit for bit what a
    decoder of that share gives); a batch planned without a lane decodes on the first, whole."""
    with pytest.raises(ValueError, match="lane_fractions"):
        GpuDecoder(CUDA, lane_fractions=[0.5, None], lanes=2)
    with pytest.raises(ValueError, match="lane_fractions"):
        GpuDecoder(CUDA, lane_fractions=[1.5])
    dec = GpuDecoder(CUDA, roi_decode=True, api="c", lane_fractions=[0.0, None])
    assert dec.lanes == 2 and "lane_fractions=[0.0, None]" in repr(dec)
    for k, share in enumerate([0.0, None]):
        one = GpuDecoder(CUDA, hw_fraction=share, roi_decode=True, api="c")
        want = one.decode_regions(photos)[0]
        planned = dec.plan(photos, lane=k)
        assert [lane for lane, _, _ in planned.opened] == [k]
        views, fell, _ = dec.decode_views(photos, planned=planned)
        got = views.contiguous()
        views.retire(torch.cuda.current_stream())
        torch.cuda.synchronize()
        assert fell == [] and torch.equal(got.data, want.data) and torch.equal(got.table, want.table)
        one.close()
    assert [lane for lane, _, _ in dec.plan(photos).opened] == [0]
    dec.close()
