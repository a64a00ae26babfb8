"""The hardware share of GpuDecoder(hw_fraction="auto") (decode/hw_split.py): how a batch is
split between the hardware and the CUDA decoder, and how the share follows their decode times.
Pure Python: runs without CUDA."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import pixelpipe as pp
from pixelpipe.decode.hw_split import HardwareSplit, check_hw_fraction


def _jobs(sides: list[int]) -> list[SimpleNamespace]:
    return [SimpleNamespace(index=i, decoded_size=(s, s)) for i, s in enumerate(sides)]


def _pixels(part: list[SimpleNamespace]) -> int:
    return sum(h * w for h, w in (j.decoded_size for j in part))


def test_the_largest_regions_go_to_the_hardware_up_to_the_share() -> None:
    jobs = _jobs([10, 40, 20, 30, 10, 50])  # pixels 100, 1600, 400, 900, 100, 2500 (total 5600)
    parts = dict(HardwareSplit(share=0.5).split(jobs))
    assert [j.index for j in parts[0]] == [1, 5]  # 2500 + 1600 >= 2800; in the jobs' order
    assert [j.index for j in parts[1]] == [0, 2, 3, 4]
    parts = dict(HardwareSplit(share=0.9).split(jobs))
    assert [j.index for j in parts[0]] == [1, 2, 3, 5] and _pixels(parts[0]) >= 0.9 * 5600 - 1
    # every job goes to exactly one lane
    for share in (0.05, 0.3, 0.75, 0.98):
        got = HardwareSplit(share=share).split(jobs)
        assert sorted(j.index for _, part in got for j in part) == list(range(6))


def test_ties_and_small_batches() -> None:
    split = HardwareSplit(share=0.5)
    assert split.split([]) == []
    one = _jobs([7])
    assert split.split(one) == [(0, one)]  # the hardware always gets the largest
    parts = dict(split.split(_jobs([5, 5, 5, 5])))  # equal sizes: the first ones by position
    assert [j.index for j in parts[0]] == [0, 1] and [j.index for j in parts[1]] == [2, 3]


def test_the_share_converges_to_equal_decode_times() -> None:
    """Lanes that decode 3 and 1 pixels per second: the share settles where both take as long
    (0.75), whatever it starts from."""
    for start in (0.05, 0.5, 0.98):
        split = HardwareSplit(share=start)
        total = 1_000_000
        for _ in range(60):
            hw_px = split.share * total
            split.observe((int(hw_px), hw_px / 3.0), (int(total - hw_px), (total - hw_px) / 1.0))
        assert split.share == pytest.approx(0.75, abs=0.01), start
        assert split.batches == 60


def test_the_share_stays_in_its_bounds_and_probes_an_idle_lane() -> None:
    split = HardwareSplit(share=0.9, low=0.05, high=0.98)
    for _ in range(40):  # the CUDA lane is 1000x faster: the share goes to its floor, not below
        split.observe((1000, 1.0), (1000, 0.001))
    assert split.share == 0.05
    split = HardwareSplit(share=0.5, step=0.05)
    assert split.observe((1000, 1.0), None) == pytest.approx(0.45)  # CUDA lane idle: more for it
    assert split.observe(None, (1000, 1.0)) == pytest.approx(0.5)  # hardware idle: more for it
    assert split.observe(None, None) == pytest.approx(0.5)
    assert split.observe((0, 0.0), (10, 1.0)) == pytest.approx(0.5)  # nothing timed: unchanged


def test_bad_settings_are_refused() -> None:
    for kwargs in ({"share": 1.0}, {"share": 0.01}, {"gain": 0.0}, {"low": 0.5, "share": 0.4}):
        with pytest.raises(ValueError):
            HardwareSplit(**kwargs)
    for good in (None, "auto", 0, 0.5, 1):
        check_hw_fraction(good)
    for bad in (True, "half", 1.01, -0.5, [0.5]):
        with pytest.raises(ValueError, match="hw_fraction"):
            check_hw_fraction(bad)


def test_gpu_decoding_takes_auto_with_one_lane() -> None:
    assert pp.GpuDecoding(hw_fraction="auto").hw_fraction == "auto"
    with pytest.raises(ValueError, match="lanes must be 1"):
        pp.GpuDecoding(hw_fraction="auto", lanes=2)
    with pytest.raises(ValueError, match="hw_fraction"):
        pp.GpuDecoding(hw_fraction="fast")
