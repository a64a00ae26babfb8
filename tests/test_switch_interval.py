"""The GIL switch interval a GPU Pipeline holds while it runs (pixelpipe._threads.
hold_switch_interval): lowered to the smallest interval held, nested holders, the interval found
first back when the last lets go, a lower one left alone; a CPU Pipeline does not touch it.
tests/test_pipeline_gpu.py checks a CUDA Pipeline holds and gives it back."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from corpus import samples

from pixelpipe import Compose, Pipeline, RandomResizedCrop
from pixelpipe._threads import hold_switch_interval


@pytest.fixture(autouse=True)
def default_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def test_lowered_while_held_and_given_back() -> None:
    release = hold_switch_interval(0.0005)
    assert sys.getswitchinterval() == pytest.approx(0.0005, rel=0.02)
    release()
    assert sys.getswitchinterval() == pytest.approx(0.005, rel=0.02)
    release()  # a second call changes nothing
    assert sys.getswitchinterval() == pytest.approx(0.005, rel=0.02)


def test_holders_nest_and_the_smallest_wins() -> None:
    a = hold_switch_interval(0.002)
    b = hold_switch_interval(0.0005)
    assert sys.getswitchinterval() == pytest.approx(0.0005, rel=0.02)
    b()
    assert sys.getswitchinterval() == pytest.approx(0.002, rel=0.02)  # a still holds its own
    c = hold_switch_interval(0.001)
    a()
    assert sys.getswitchinterval() == pytest.approx(0.001, rel=0.02)
    c()
    assert sys.getswitchinterval() == pytest.approx(0.005, rel=0.02)


def test_a_lower_interval_is_left_alone() -> None:
    sys.setswitchinterval(0.0001)
    release = hold_switch_interval(0.0005)
    assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.02)
    release()
    assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.02)


def test_a_cpu_pipeline_does_not_touch_it() -> None:
    seen = []
    with Pipeline([(it.data, it.label) for it in samples(12)], Compose([RandomResizedCrop(16)]), 4, gil_switch_interval=0.0005) as pipe:
        for _ in pipe:
            seen.append(sys.getswitchinterval())
    assert seen and all(s == pytest.approx(0.005, rel=0.02) for s in seen)


@pytest.mark.parametrize("bad", [0, -0.001])
def test_the_interval_is_checked(bad: float) -> None:
    with pytest.raises(ValueError, match="gil_switch_interval"):
        Pipeline([(it.data, it.label) for it in samples(4)], Compose([RandomResizedCrop(16)]), 2, gil_switch_interval=bad)
