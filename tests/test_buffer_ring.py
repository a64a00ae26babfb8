"""The decoder lanes' ring of batch buffers (decode/buffer_ring.py) on the host: buffers lent
again only once their retire event completed, the earliest retired waited for when the ring is
full, stale and outgrown buffers dropped, short batches outside the ring; on a GPU, a Pipeline's
lanes lend from it and keep at most two buffers each (skips without CUDA and nvImageCodec)."""

from __future__ import annotations

import gc

import pytest
import torch
from helpers import SAMPLE_DIR, SAMPLE_MISSING

from pixelpipe.decode.buffer_ring import BufferRing
from pixelpipe.decode.steady import HighWater

MIB = 1 << 20


class Event:
    """A stand-in for a CUDA event: done when told, or once synchronized."""

    def __init__(self, done: bool = False) -> None:
        self.done, self.synced = done, 0

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synced += 1
        self.done = True


def host(size: int) -> torch.Tensor:
    return torch.empty(size, dtype=torch.uint8)


def ring(slots: int = 2) -> BufferRing:
    return BufferRing(slots, HighWater(headroom=1.25, align=MIB))


def test_a_buffer_is_lent_again_only_once_its_kernels_ran():
    r = ring()
    a, la = r.take(10 * MIB, host)
    b, lb = r.take(10 * MIB, host)
    assert a.data_ptr() != b.data_ptr() and r.allocated == 2
    event = Event(done=False)
    la.retired(event)
    lb.retired(Event(done=True))
    c, _ = r.take(10 * MIB, host)  # b's kernels ran, a's not: b again
    assert c.data_ptr() == b.data_ptr()
    assert event.synced == 0 and r.waits == 0 and r.allocated == 2


def test_a_full_ring_waits_for_the_earliest_retired_buffer():
    r = ring()
    a, la = r.take(10 * MIB, host)
    b, lb = r.take(10 * MIB, host)
    first, second = Event(), Event()
    lb.retired(first)
    la.retired(second)
    c, _ = r.take(10 * MIB, host)
    assert c.data_ptr() == b.data_ptr()  # retired first
    assert first.synced == 1 and second.synced == 0 and r.waits == 1 and r.allocated == 2


def test_every_buffer_lent_gives_one_outside_the_ring():
    r = ring(slots=1)
    a, la = r.take(10 * MIB, host)
    b, lb = r.take(10 * MIB, host)
    assert lb is None and b.data_ptr() != a.data_ptr() and len(r) == 1 and r.outside == 1
    assert b.numel() == a.numel()  # the high-water size all the same


def test_a_short_batch_gets_its_exact_size_outside_the_ring():
    r = ring()
    r.take(10 * MIB, host)
    small, lease = r.take(1000, host)
    assert lease is None and small.numel() == 1000 and len(r) == 1


def test_a_lent_buffer_nobody_holds_leaves_the_ring():
    r = ring(slots=1)
    a, la = r.take(10 * MIB, host)
    del a, la
    gc.collect()
    b, lb = r.take(10 * MIB, host)  # the dropped batch's buffer is gone: a new one in its place
    assert lb is not None and len(r) == 1 and r.allocated == 2


def test_a_larger_batch_replaces_free_buffers_of_the_old_size():
    r = ring()
    a, la = r.take(10 * MIB, host)
    la.retired(Event(done=True))
    big, lbig = r.take(20 * MIB, host)
    assert big.numel() >= 20 * MIB and lbig is not None
    assert len(r) == 1 and r.allocated == 2  # the old one dropped, not lent for the new size


def test_retiring_twice_or_late_changes_nothing():
    r = ring(slots=1)
    a, la = r.take(10 * MIB, host)
    la.retired(Event(done=True))
    b, lb = r.take(10 * MIB, host)
    la.retired(Event(done=True))  # a stale lease: the slot is lent to b now
    c, lc = r.take(10 * MIB, host)
    assert lc is None and c.data_ptr() != b.data_ptr()


def test_bad_slots_raise():
    with pytest.raises(ValueError, match="slots"):
        BufferRing(slots=0)


def test_a_gpu_decoder_lends_batch_buffers_from_its_lanes_rings():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from pixelpipe.decode import read_header
    from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

    if not gpu_decoder_available():
        pytest.skip("needs nvImageCodec")
    paths = sorted(SAMPLE_DIR.glob("*.JPEG"))[:48] if SAMPLE_DIR.is_dir() else []
    blobs = [b for b in (p.read_bytes() for p in paths) if read_header(b).channels in (1, 3)]
    if len(blobs) < 32:
        pytest.skip(SAMPLE_MISSING)
    ringed = GpuDecoder(torch.device("cuda"), steady_buffers=True, lanes=2)
    exact = GpuDecoder(torch.device("cuda"))
    try:
        if ringed.api != "c":
            pytest.skip("needs nvImageCodec's C API")
        stream = torch.cuda.current_stream()
        for k in range(10):  # the batches alternate lanes, each of a few different images
            batch = blobs[k % 3:][:32]
            planned = ringed.plan(batch, lane=k % 2)
            views, fallback, _ = ringed.decode_views(batch, stream=stream, planned=planned)
            got = views.contiguous()
            views.retire(stream)
            want = exact.decode_regions(batch)[0]
            assert fallback == [] and len(got) == len(want)
            for x, y in zip(got, want):
                assert torch.equal(x, y)
        rings = [lane.steady for lane in ringed._c]
        assert all(isinstance(r, BufferRing) for r in rings)
        assert all(len(r) <= 2 for r in rings), [len(r) for r in rings]
        assert 2 <= sum(r.allocated for r in rings) <= 6  # a buffer per lane, more only as needs grew
    finally:
        ringed.close()
        exact.close()
