"""pixelpipe._cuda_sync: event record and stream wait that keep the GIL, and their fallbacks."""

from __future__ import annotations

import pytest
import torch

from pixelpipe import _cuda_sync

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("driver", [True, False])
def test_a_wait_orders_the_second_stream_after_the_first(driver, monkeypatch):
    if not driver:  # the torch fallback must order the streams just the same
        monkeypatch.setattr(_cuda_sync, "_driver", lambda: None)
    elif _cuda_sync._driver() is None:
        pytest.skip("libcuda.so.1 cannot be loaded here")
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    ring = _cuda_sync.EventRing(2, a)
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    for _ in range(5):
        with torch.cuda.stream(a):
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time before the write
            x.fill_(1.0)
            done = ring.take()
            _cuda_sync.record(done, a)
        _cuda_sync.wait(b, done)
        with torch.cuda.stream(b):
            seen = x.clone()
        torch.cuda.synchronize()
        assert bool((seen == 1.0).all())  # b read after a's write
        x.zero_()
        torch.cuda.synchronize()


@pytest.mark.gpu
@cuda
def test_the_ring_makes_its_events_ahead_and_hands_them_out_in_turn():
    ring = _cuda_sync.EventRing(3, torch.cuda.current_stream())
    got = [ring.take() for _ in range(6)]
    assert all(e.cuda_event for e in got)  # created already: no creation on the decode thread
    assert got[:3] == got[3:] and len({id(e) for e in got[:3]}) == 3


def test_without_a_driver_the_torch_calls_are_made():
    calls = []

    class FakeEvent:
        cuda_event = 0

        def record(self, stream):
            calls.append(("record", stream))

    class FakeStream:
        cuda_stream = 0

        def wait_event(self, event):
            calls.append(("wait", event))

    e, s = FakeEvent(), FakeStream()
    _cuda_sync.record(e, s)  # no CUDA event yet: torch's record creates it
    _cuda_sync.wait(s, e)
    assert calls == [("record", s), ("wait", e)]
