"""benchmarks/train_profile.py's arithmetic on hand-made GPU records (no GPU needed): the
training stream is the one with the most kernels, its busy time is the union of its kernels,
its gaps the rest of its window, and the other streams' kernels and copies are summed apart,
with the part of their kernels that overlapped a training kernel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
train_profile = pytest.importorskip("train_profile")


def test_union_merges_overlapping_and_touching_intervals():
    assert train_profile.union([(5, 9), (0, 3), (3, 4), (8, 12), (20, 21)]) == [(0, 4), (5, 12), (20, 21)]
    assert train_profile.union([]) == []


def test_overlap_counts_only_the_time_inside_busy_intervals():
    busy = [(0, 10), (20, 30)]
    assert train_profile.overlap([(5, 25)], busy) == 5 + 5
    assert train_profile.overlap([(10, 20), (31, 40)], busy) == 0
    assert train_profile.overlap([(0, 40)], busy) == 20


def test_a_step_split_into_training_busy_time_gaps_and_the_loaders_work():
    ms = 1_000_000  # records are in ns; the analysis reports ms per step
    recs = [  # two steps on stream 7: kernels 0-4, 4-6 ms (step 1) and 9-12, 12-14 ms (step 2)
        ("conv", 7, 0, 4 * ms, True), ("bn", 7, 4 * ms, 6 * ms, True),
        ("conv", 7, 9 * ms, 12 * ms, True), ("bn", 7, 12 * ms, 14 * ms, True),
        # the loader: a kernel on stream 20 half beside a training kernel, a copy on stream 21
        ("warp", 20, 5 * ms, 7 * ms, True), ("Memcpy HtoD (Pageable -> Device)", 21, 7 * ms, 8 * ms, False),
    ]
    r = train_profile.analyse(recs, steps=2)
    assert r["stream"] == 7 and r["streams"] == 3
    assert r["window"] == pytest.approx(7.0)  # 0-14 ms over 2 steps
    assert r["busy"] == pytest.approx(5.5) and r["window"] - r["busy"] == pytest.approx(1.5)
    assert r["ksum"] == pytest.approx(5.5)
    assert r["other_kernels"] == pytest.approx(1.0) and r["other_copies"] == pytest.approx(0.5)
    assert r["overlap"] == pytest.approx(0.5)  # 5-6 ms of the warp ran beside "bn"
    assert [name for name, _ in r["loader_top"]] == ["warp", "Memcpy HtoD (Pageable -> Device)"]
    assert sorted(r["names"]) == ["bn", "conv"] and r["names"]["conv"] == [4 * ms, 3 * ms]
