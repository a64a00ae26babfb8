"""A Pipeline's decoder that follows its consumer (GpuDecoding(ahead_fraction=...)): the
setting's checks, the lanes' settings, the lane each batch plans for, and the producer's signal
of being ahead of its consumer (the two decoders the Engine asks for: tests/test_decode_lanes.py). Runs without a GPU (the decoder is a stand-in);
tests/test_decode_gpu_views.py and tests/test_pipeline_gpu.py decode with it on CUDA."""

from __future__ import annotations

import threading
import time
import types

import pytest

from pixelpipe import GpuDecoding
from pixelpipe.engine.lanes import DecodeLanes
from pixelpipe.loader.producer import Producer


@pytest.mark.parametrize("bad", [1.5, -0.1, "on", True, [0.5]])
def test_gpu_decoding_checks_the_ahead_share(bad) -> None:
    with pytest.raises(ValueError, match="ahead_fraction"):
        GpuDecoding(ahead_fraction=bad)


def test_the_ahead_share_needs_one_lane() -> None:
    with pytest.raises(ValueError, match="lanes"):
        GpuDecoding(ahead_fraction=None, lanes=2)


@pytest.mark.parametrize("share", [None, 0.0, 0.9, 1])
def test_a_share_or_none_follows_the_consumer(share) -> None:
    assert GpuDecoding(ahead_fraction=share).follows_consumer
    assert not GpuDecoding().follows_consumer and GpuDecoding().ahead_fraction == "off"


def test_the_decoder_lanes_are_derived_from_the_settings() -> None:
    assert (GpuDecoding().decoders, GpuDecoding().lane_fractions) == (1, None)
    assert (GpuDecoding(lanes=3).decoders, GpuDecoding(lanes=3).lane_fractions) == (3, None)
    following = GpuDecoding(hw_fraction=0.6, ahead_fraction=None)
    assert (following.decoders, following.lane_fractions) == (2, [0.6, None])


def _lanes(gpu: GpuDecoding) -> DecodeLanes:
    return DecodeLanes(types.SimpleNamespace(gpu=gpu))


def test_a_following_decoder_plans_on_the_second_lane_only_while_ahead() -> None:
    lanes = _lanes(GpuDecoding(ahead_fraction=None))
    assert [lanes.next_lane(ahead) for ahead in (False, True, True, False)] == [0, 1, 1, 0]


def test_equal_lanes_still_alternate_whatever_the_consumer_does() -> None:
    lanes = _lanes(GpuDecoding(lanes=3))
    seen = []
    for ahead in (True, False, True, False):
        seen.append(lanes.next_lane(ahead))
        lanes._next = (seen[-1] + 1) % 3  # what submit does, without decoding
    assert seen == [0, 1, 2, 0]


def test_the_producer_is_ahead_while_its_last_batch_found_one_waiting() -> None:
    """Batch 1 is handed over to an empty queue (not ahead); batch 2 finds batch 1 untaken
    (ahead); a consumer that takes each batch as it comes leaves the producer behind again."""
    gate = [threading.Event() for _ in range(4)]
    handed = []

    def work(stop: threading.Event):
        for k in range(4):
            gate[k].wait(10)
            handed.append(k)
            yield k

    producer = Producer(work, depth=2)
    try:
        gate[0].set()
        assert producer.get() == 0
        assert not producer.ahead  # handed to an empty queue
        gate[1].set()
        _until(lambda: handed == [0, 1])
        time.sleep(0.05)  # batch 1 is in the queue, untaken
        gate[2].set()
        _until(lambda: handed == [0, 1, 2])
        _until(lambda: producer.ahead)  # batch 2 found batch 1 waiting
        assert producer.get() == 1 and producer.get() == 2
        gate[3].set()
        assert producer.get() == 3
        assert not producer.ahead  # batch 3 found the queue empty
    finally:
        producer.stop()


def _until(cond, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_lanes_of_their_own_shares_each_get_every_thread() -> None:
    from pixelpipe.decode.gpu_plan import backends, lane_settings

    assert lane_settings(0.75, 8, 2, None) == [(backends(0.75), 4)] * 2  # equal lanes share them
    made = lane_settings(0.75, 8, 1, [0.75, None])
    assert made == [(backends(0.75), 8), (backends(None), 8)]
    assert made[1][0][0] == ("HW_GPU_ONLY", None) and backends(0.0)[0] == ("GPU_ONLY", None)


@pytest.mark.parametrize(("fractions", "lanes"), [([], 1), ([0.5, None], 2), ([1.5], 1), ([-0.1, None], 1)])
def test_lane_shares_are_checked(fractions, lanes) -> None:
    from pixelpipe.decode.gpu_plan import lane_settings

    with pytest.raises(ValueError, match="lane_fractions"):
        lane_settings(0.75, 8, lanes, fractions)
