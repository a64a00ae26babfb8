"""The region-decoding probe: its environment override and its verdict when the child fails."""

from __future__ import annotations

import pytest

from pixelpipe.decode.roi_probe import LAST_FAILURE, roi_decode_safe


@pytest.fixture(autouse=True)
def fresh_cache():
    roi_decode_safe.cache_clear()
    yield
    roi_decode_safe.cache_clear()


@pytest.mark.parametrize("value,expect", [("0", False), ("1", True)])
def test_environment_decides_without_a_probe(monkeypatch, value, expect):
    monkeypatch.setenv("PIXELPIPE_GPU_ROI", value)
    assert roi_decode_safe(999, "") is expect  # no child could run on device 999


def test_a_failing_child_means_unsafe(monkeypatch):
    """Device 999 exists nowhere (and without nvImageCodec the import fails): the child exits
    with an error, so region decoding must be judged unsafe rather than assumed."""
    monkeypatch.delenv("PIXELPIPE_GPU_ROI", raising=False)
    assert roi_decode_safe(999, ":fancy_upsampling=1") is False
    assert LAST_FAILURE[999].startswith("exit ")  # the notice says how it failed
