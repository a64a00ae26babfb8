"""benchmarks/gpu_decoder_ceiling.py's lanes on stand-ins (no GPU, no nvImageCodec): which decode
calls each decoder makes, which of them are timed, and how a split deals a batch's images."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
ceiling = pytest.importorskip("gpu_decoder_ceiling")


@pytest.fixture
def decoders(monkeypatch):
    """Stand-in decoders recording (lane, blobs) per decode, and whether the clock ran."""
    from pixelpipe.decode import nvimgcodec_alloc, nvimgcodec_c

    made, calls, clock = [], [], {"on": False}

    class FakeDecoder:
        def __init__(self, api, device, threads, backends, options, allocators):
            self.lane, self.backends = len(made), backends
            made.append(self)

        def open(self, blobs, boxes, sizes, stream):
            return (tuple(blobs), tuple(boxes), tuple(sizes))

        def decode(self, blobs, boxes, sizes, stream, opened):
            assert opened == (tuple(blobs), tuple(boxes), tuple(sizes))
            calls.append((self.lane, tuple(blobs), clock["on"]))

        def close(self):
            pass

    class Meter:
        def start(self):
            clock["on"] = True

        def stop(self):
            clock["on"] = False
            return "usage"

    monkeypatch.setattr(nvimgcodec_c, "CDecoder", FakeDecoder)
    monkeypatch.setattr(nvimgcodec_alloc, "allocators", lambda device: "alloc")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: types.SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setattr(ceiling, "BATCH", 2)
    return made, calls, Meter()


def _regions(n: int, epochs: int) -> list[list[tuple[int, int, int, int]]]:
    # sample i of epoch e: a region of (i + 1) x (e + 1) pixels, so that sizes differ
    return [[(0, 0, i + 1, e + 1) for i in range(n)] for e in range(epochs + 1)]


def test_call_rate_deals_batches_to_lanes_and_times_all_but_the_first_epoch(decoders) -> None:
    made, calls, meter = decoders
    blobs = [bytes([i]) for i in range(5)]  # batches of 2: three calls an epoch
    setting = ceiling.Setting("x", 4, 0.75, decoders=2)
    rate, usage = ceiling.call_rate(None, setting, blobs, _regions(5, 2), [(1, 1)] * 5, 2, meter)
    assert rate > 0 and usage == "usage" and len(made) == 2
    assert all(d.backends[0] == ("HW_GPU_ONLY", 0.75) for d in made)
    # calls 0..8 (three epochs of three), call i on lane i % 2; the first epoch's untimed
    by_lane = {j: [(b, on) for lane, b, on in calls if lane == j] for j in (0, 1)}
    assert [len(v) for v in by_lane.values()] == [5, 4]
    assert [on for _, on in by_lane[0]] == [False, False, True, True, True]  # calls 0, 2 | 4, 6, 8
    assert [on for _, on in by_lane[1]] == [False, True, True, True]  # call 1 | 3, 5, 7
    timed = sorted(b for _, b, on in calls if on)
    assert len(timed) == 6 and sum(len(b) for b in timed) == 2 * len(blobs)  # two epochs of images


def test_split_rate_sends_the_largest_regions_to_the_hardware_lane(decoders) -> None:
    made, calls, meter = decoders
    blobs = [bytes([i]) for i in range(4)]  # two batches of 2 an epoch
    setting = ceiling.Setting("x", 4, 0.5, split=0.5)
    rate, usage, (hw_s, cuda_s) = ceiling.split_rate(None, setting, blobs, _regions(4, 1), 1, meter)
    assert rate > 0 and hw_s >= 0 and cuda_s >= 0
    assert made[0].backends[0] == ("HW_GPU_ONLY", None) and all(k != "HW_GPU_ONLY" for k, _ in made[1].backends)
    # each batch's larger region (the later sample: i + 1 rows) to lane 0, the other to lane 1
    assert [b for lane, b, _ in calls if lane == 0] == [(b"\x01",), (b"\x03",)] * 2
    assert [b for lane, b, _ in calls if lane == 1] == [(b"\x00",), (b"\x02",)] * 2
    assert sum(on for _, _, on in calls) == 4  # the second epoch on both lanes
