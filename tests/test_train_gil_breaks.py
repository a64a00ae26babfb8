"""benchmarks/train_throughput.py --gil-breaks: the wrapped per-sample calls of a Pipeline's
planning thread give the GIL up every N calls and return what the originals return (no GPU
needed)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
train_throughput = pytest.importorskip("train_throughput")


def test_every_nth_call_gives_the_gil_up(monkeypatch):
    from pixelpipe.decode import gpu
    from pixelpipe.loader import reading

    for module, name in ((gpu, "plan_job"), (gpu, "slot_row"), (reading, "Item")):  # restored afterwards
        monkeypatch.setattr(module, name, getattr(module, name))
    original_plan, original_item = gpu.plan_job, reading.Item
    sleeps = []
    monkeypatch.setattr(train_throughput.time, "sleep", sleeps.append)
    train_throughput.gil_breaks(3)
    buf = io.BytesIO()
    Image.fromarray(np.zeros((20, 30, 3), dtype=np.uint8)).save(buf, "JPEG")
    blob = buf.getvalue()
    jobs = [gpu.plan_job(i, blob, None, False) for i in range(4)]
    assert jobs == [original_plan(i, blob, None, False) for i in range(4)]
    assert sleeps == [0]  # the third call
    items = [reading.Item(b"x", 1, i, "s", True) for i in range(5)]
    assert sleeps == [0, 0, 0]  # calls 6 and 9 of the shared count
    assert all(isinstance(it, original_item) for it in items)
    assert items[2].index == 2 and items[2].data == b"x"
