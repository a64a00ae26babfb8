"""GpuDecoder's native helpers on a GPU, each against its twin: pixelpipe's allocators for
nvImageCodec (decode/nvimgcodec_alloc.py, the default) against nvImageCodec's own; a batch
decoded in one native call (native/decode.c) against the same calls made one by one from
Python; batches decoded ahead on the decode queue's thread (native/queue.c, the default)
against batches decoded when asked; pixelpipe's executor (native/executor.c, opt-in) against
nvImageCodec's. The same pixels bit for bit, batch after batch (so the
buffers grow on the way). Needs a CUDA device, nvImageCodec and the ImageNet sample; skipped
otherwise."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from helpers import SAMPLE_DIR, SAMPLE_MISSING

from pixelpipe.decode import read_header
from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")', allow_module_level=True)

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    paths = sorted(SAMPLE_DIR.glob("*.JPEG"))[:96] if SAMPLE_DIR.is_dir() else []
    out = [p.read_bytes() for p in paths]
    out = [b for b in out if read_header(b).channels in (1, 3)]
    if len(out) < 32:
        pytest.skip(SAMPLE_MISSING)
    return out


def batches(jpegs: list[bytes], seed: int,
            size: int = 32) -> Iterator[tuple[list[bytes], list[tuple[int, int, int, int]]]]:
    """Batches of `size` of the sample, each with a random region per image."""
    rng = np.random.default_rng(seed)
    for start in range(0, len(jpegs), size):  # growing images, so growing buffers
        blobs = jpegs[start:start + size]
        regions = []
        for b in blobs:
            h, w = read_header(b).oriented_size
            y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
            regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
        yield blobs, regions


def assert_same_decode(a: GpuDecoder, b: GpuDecoder, blobs: list[bytes], regions: Any) -> None:
    got, fell_a, _ = a.decode_regions(blobs, regions)
    want, fell_b, _ = b.decode_regions(blobs, regions)
    torch.cuda.synchronize()
    assert fell_a == fell_b
    assert torch.equal(got.table, want.table) and torch.equal(got.data, want.data)


@pytest.mark.parametrize("hw_fraction", [None, 0.0, 0.75])
def test_own_allocators_decode_what_the_defaults_decode(jpegs: list[bytes], hw_fraction) -> None:
    """hw_fraction 0.0 sends every JPEG through the CUDA decoder, whose per-thread buffers the
    padding concerns; None through the hardware one (where the GPU has it)."""
    ours = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c")
    theirs = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c", allocators=False)
    assert ours.allocators_used and not theirs.allocators_used
    assert "allocators=True" in repr(ours)
    for blobs, regions in batches(jpegs, 5):
        for regs in (None, regions):
            assert_same_decode(ours, theirs, blobs, regs)
    ours.close()
    theirs.close()


@pytest.mark.parametrize("hw_fraction", [0.0, 0.75])
def test_pixelpipes_executor_decodes_what_nvimgcodecs_decodes(jpegs: list[bytes], hw_fraction, monkeypatch) -> None:
    monkeypatch.setenv("PIXELPIPE_NVIMGCODEC_EXECUTOR", "pixelpipe")  # the default follows the environment
    ours = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c")
    theirs = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c", executor=False)
    assert ours.executor_used and not theirs.executor_used
    assert ours._c[0].executor is not None and theirs._c[0].executor is None
    for blobs, regions in batches(jpegs, 7):
        for regs in (None, regions):
            assert_same_decode(ours, theirs, blobs, regs)
    pool = ours._c[0].executor
    assert pool.tasks_done() > 0  # nvImageCodec ran its tasks on the pool
    ours.close()
    theirs.close()
    assert pool.handle is None  # stopped with its decoder


@pytest.mark.parametrize("variable, attribute", [("PIXELPIPE_NVIMGCODEC_ALLOCATORS", "allocators_used"),
                                                 ("PIXELPIPE_DECODE_AHEAD", "decode_ahead_used"),
                                                 ("PIXELPIPE_PINNED_BITSTREAMS", "_c[0].staging is not None")])
def test_environment_switches_turn_the_helpers_off(variable, attribute) -> None:
    code = ("import torch; from pixelpipe.decode.gpu import GpuDecoder; "
            f"d = GpuDecoder(torch.device('cuda'), api='c'); print(d.{attribute}); d.close()")
    for value, want in (("0", "False"), ("1", "True")):
        env = {variable: value, "PYTHONPATH": ":".join(sys.path)}
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                             text=True, check=True, timeout=300)
        assert out.stdout.strip().splitlines()[-1] == want, (variable, value)


def test_one_native_call_decodes_what_the_calls_one_by_one_decode(jpegs: list[bytes]) -> None:
    fast = GpuDecoder(CUDA, api="c")
    slow = GpuDecoder(CUDA, api="c")
    if fast._c[0]._api.batch is None:
        pytest.skip("native/decode.c was not built here (no C compiler)")
    for lane in slow._c:
        lane.native_batch = False
    for blobs, regions in batches(jpegs, 6):
        assert_same_decode(fast, slow, blobs, regions)
    issued, waited, back = fast._c[0].last_times
    assert issued <= waited <= back and slow._c[0].last_times is None
    fast.close()
    slow.close()


def ahead_and_asked(**kwargs: Any) -> tuple[GpuDecoder, GpuDecoder]:
    fast = GpuDecoder(CUDA, api="c", **kwargs)
    slow = GpuDecoder(CUDA, api="c", decode_ahead=False, **kwargs)
    if not fast.decode_ahead_used:
        pytest.skip("native/queue.c or decode.c was not built here (no C compiler)")
    assert not slow.decode_ahead_used and "decode_ahead=True" in repr(fast)
    return fast, slow


@pytest.mark.parametrize("lanes", [1, 2])
def test_decoding_ahead_decodes_what_decoding_when_asked_decodes(jpegs: list[bytes], lanes: int) -> None:
    """lanes=2: a batch split over two lanes, each decoding on its own queue's thread."""
    fast, slow = ahead_and_asked(lanes=lanes)
    for blobs, regions in batches(jpegs, 7):
        for regs in (None, regions):
            assert_same_decode(fast, slow, blobs, regs)
    fast.close()
    slow.close()


def test_batches_planned_ahead_decode_in_order_on_another_stream(jpegs: list[bytes]) -> None:
    """Every batch planned (and so queued) before the first is asked for, as a Pipeline's
    planning thread works ahead; each read on a stream of its own, which must see exactly its
    batch's pixels once decode_views returns."""
    fast, slow = ahead_and_asked()
    work = list(batches(jpegs, 8))
    # the decoder's stream busy for a while first: its decodes are queued behind that work,
    # and each reading stream must wait for its batch's event, not only for the host
    torch.cuda._sleep(100_000_000)  # on the current stream
    fast._c_streams[0].wait_stream(torch.cuda.current_stream())
    planned = [fast.plan(blobs, regions) for blobs, regions in work]
    assert all(lane._queue is not None for lane in fast._c)
    for (blobs, regions), plan in zip(work, planned):
        stream = torch.cuda.Stream()
        views, fell, _ = fast.decode_views(blobs, regions, stream, planned=plan)
        with torch.cuda.stream(stream):
            got = views.contiguous()
            views.retire(stream)
        want, fell_slow, _ = slow.decode_regions(blobs, regions)
        stream.synchronize()
        torch.cuda.synchronize()
        assert fell == fell_slow
        assert torch.equal(got.table, want.table) and torch.equal(got.data, want.data)
    fast.close()
    slow.close()


def test_planned_batches_never_decoded_are_taken_back(jpegs: list[bytes]) -> None:
    """A planned batch dropped before its decode is cancelled or waited for, never left
    writing into freed memory; close() with batches still queued returns, and what was
    planned before it cannot be decoded after it."""
    fast, slow = ahead_and_asked()
    work = list(batches(jpegs, 9, size=10))  # at least 4 batches from the fixture's 32 or more JPEGs
    planned = [fast.plan(blobs, regions) for blobs, regions in work]
    tickets = [p.opened[0][2].ticket for p in planned]
    assert all(t is not None and t.job is not None for t in tickets)
    del planned[1:3]  # dropped: queued or decoding
    gc.collect()
    assert tickets[1].job is None and tickets[2].job is None  # taken back (cancelled or waited for)
    assert tickets[0].job is not None
    blobs, regions = work[0]
    got, _, _ = fast.decode_regions(blobs, regions)  # the decoder still works
    want, _, _ = slow.decode_regions(blobs, regions)
    torch.cuda.synchronize()
    assert torch.equal(got.data, want.data)
    left = fast.plan(*work[-1])
    queue = fast._c[0]._queue
    fast.close()
    assert queue.closed and not queue._live  # every ticket retired before the queue was freed
    assert all(t.job is None for t in tickets) and left.opened[0][2].ticket is None
    with pytest.raises(RuntimeError, match="closed"):
        fast.decode_views(*work[-1], planned=left)
    slow.close()


def test_a_batch_opened_in_one_native_call_decodes_what_the_calls_one_by_one_decode(jpegs: list[bytes]) -> None:
    """native/open.c against CDecoder's per-image calls from Python (native_open=False)."""
    from pixelpipe.decode import nvimgcodec_open

    fast = GpuDecoder(CUDA, api="c")
    slow = GpuDecoder(CUDA, api="c")
    if nvimgcodec_open.library(fast._c[0]._api) is None:
        pytest.skip("native/open.c was not built here (no C compiler)")
    for lane in slow._c:
        lane.native_open = False
    for blobs, regions in batches(jpegs, 10):
        for regs in (None, regions):
            assert_same_decode(fast, slow, blobs, regs)
    planned = fast.plan(*next(batches(jpegs, 11)))
    assert planned.opened[0][2].native is not None  # made by open.c
    planned = slow.plan(*next(batches(jpegs, 11)))
    assert planned.opened[0][2].native is None and planned.opened[0][2].images
    fast.close()
    slow.close()



@pytest.mark.parametrize("hw_fraction", [None, 0.0, 0.75])
def test_bitstreams_staged_in_pinned_memory_decode_what_they_decode_in_place(jpegs: list[bytes], hw_fraction) -> None:
    """decode/pinned_staging.py: the blobs copied into pinned arenas by native/open.c, against
    code streams over the blobs themselves; batch after batch, so arenas are reused once the
    device is done with them and a larger batch takes a larger one."""
    from pixelpipe.decode import nvimgcodec_open
    from pixelpipe.decode.pinned_staging import PinnedStaging

    staged = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c")
    plain = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c")
    if nvimgcodec_open.library(staged._c[0]._api) is None:
        pytest.skip("native/open.c was not built here (no C compiler)")
    for lane in staged._c:
        lane.staging = PinnedStaging()
    for lane in plain._c:
        lane.staging = None
    for _ in range(3):
        for blobs, regions in batches(jpegs, 12):
            for regs in (None, regions):
                assert_same_decode(staged, plain, blobs, regs)
    pool = staged._c[0].staging
    assert 1 <= pool.made <= 3  # reused (the last batch's arena is held until the next one is planned)
    staged.close()
    plain.close()


def test_a_staging_arena_is_reused_only_once_its_stream_is_done() -> None:
    from pixelpipe.decode.pinned_staging import GRAIN, PinnedStaging

    pool = PinnedStaging(keep=2)
    a = pool.take(10)
    assert a.is_pinned() and a.numel() == GRAIN
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # keeps the stream busy well past the next take
    pool.give(a, stream)
    b = pool.take(10)
    assert b.data_ptr() != a.data_ptr() and pool.made == 2  # a is still read by the stream
    stream.synchronize()
    assert pool.take(GRAIN).data_ptr() == a.data_ptr()  # done: reused, any size it holds
    c = pool.take(GRAIN + 1)
    assert c.numel() == 2 * GRAIN  # rounded up to the grain
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)
    pool.give(a, stream)
    pool.give(b, stream)  # the pool holds `keep` (2) arenas, both still read by the stream
    made = pool.made
    assert pool.take(10).data_ptr() == a.data_ptr() and pool.made == made  # waited for the oldest
    assert stream.query()


@pytest.mark.parametrize("native_open", [True, False])
def test_close_on_another_thread_while_batches_are_planned(jpegs: list[bytes], native_open: bool) -> None:
    """A planning thread keeps planning while another thread closes the decoder: every plan()
    either gives a batch (released by close) or raises "closed"; nothing crashes, and plan()
    after close() raises."""
    import threading
    import time

    work = list(batches(jpegs, 12))
    dec = GpuDecoder(CUDA, api="c")
    for lane in dec._c:
        lane.native_open = native_open
    outcomes: list[str] = []
    started = threading.Event()

    def planner() -> None:
        end = time.monotonic() + 60
        k = 0
        while time.monotonic() < end:
            try:
                planned = dec.plan(*work[k % len(work)])
            except RuntimeError as e:
                outcomes.append(str(e))
                return
            outcomes.append("planned")
            started.set()
            del planned
            k += 1

    thread = threading.Thread(target=planner)
    thread.start()
    assert started.wait(30)
    time.sleep(0.05)
    dec.close()
    thread.join(60)
    assert not thread.is_alive()
    assert outcomes[0] == "planned" and "closed" in outcomes[-1]
    assert set(outcomes[:-1]) == {"planned"}
    with pytest.raises(RuntimeError, match="closed"):
        dec.plan(*work[0])


def test_samples_for_the_cpu_decoder_start_when_the_batch_is_planned(jpegs: list[bytes]) -> None:
    """plan() starts the samples nvImageCodec does not take (a PNG here) on the CPU decoder's
    threads, so they are decoded and copied to the device before the batch is decoded;
    decode_views uses that copy (equal to decode_region's pixels), and counts them as
    fallbacks. After close() nothing more starts."""
    import io

    from PIL import Image

    from pixelpipe.decode import decode_region

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(13).integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(buf, "PNG")
    blobs = [jpegs[0], buf.getvalue(), jpegs[1]]
    regions = [None, (2, 3, 20, 33), None]
    dec = GpuDecoder(CUDA)
    planned = dec.plan(blobs, regions)
    assert planned.pending.samples == set(planned.why) == {1}
    assert planned.pending.wait(60)  # decoded and copied without decode_views being called
    want = decode_region(blobs[1], region=regions[1], rgb=True)[0]
    np.testing.assert_array_equal(planned.pending.result(1), want)
    assert planned.pending.data.device.type == "cuda" and planned.pending.event is not None
    stream = torch.cuda.current_stream()
    views, fallback, why = dec.decode_views(blobs, regions, stream, planned=planned)
    batch = views.contiguous()
    views.retire(stream)
    assert fallback == [1] and "png" in why[0]
    np.testing.assert_array_equal(batch[1].cpu().numpy(), want)
    dec.close()
    with pytest.raises(RuntimeError, match="closed"):
        dec._start_cpu(blobs, regions, True, [1])
    with pytest.raises(RuntimeError, match="closed"):
        dec.plan(blobs, regions)
