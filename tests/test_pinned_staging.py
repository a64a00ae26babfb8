"""decode/pinned_staging.py without a GPU: the environment switch. The pool itself and the
pixels decoded from staged bitstreams are checked on a GPU (tests/test_decode_gpu_native.py)."""

from __future__ import annotations

import pytest

from pixelpipe.decode.pinned_staging import ENV, staging_wanted


@pytest.mark.parametrize("value, default, want", [("0", True, False), ("1", False, True), ("", True, True),
                                                  ("", False, False), (" 1 ", False, True)])
def test_the_switch_overrides_the_default(monkeypatch: pytest.MonkeyPatch, value: str, default: bool, want: bool):
    monkeypatch.setenv(ENV, value)
    assert staging_wanted(default) is want


def test_an_unset_switch_keeps_the_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(ENV, raising=False)
    assert staging_wanted(True) is True and staging_wanted(False) is False
    assert staging_wanted() is False  # off unless asked for (decode/pinned_staging.py says why)


def test_a_bad_value_says_what_it_takes(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(ENV, "yes")
    with pytest.raises(ValueError, match="PIXELPIPE_PINNED_BITSTREAMS must be 0 or 1, got 'yes'"):
        staging_wanted(True)


def test_a_batch_past_the_largest_arena_is_not_staged(monkeypatch: pytest.MonkeyPatch):
    import numpy as np

    from pixelpipe.decode import pinned_staging

    assert pinned_staging.staged_size(np.array([1, 64, 65])) == 64 + 64 + 128
    monkeypatch.setattr(pinned_staging, "LARGEST", 200)
    assert pinned_staging.staged_size(np.array([100, 100])) is None  # 128 + 128 > 200
    assert pinned_staging.staged_size(np.array([100])) == 128
