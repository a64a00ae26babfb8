"""benchmarks/train_host_time.py's CPU parts (no GPU needed): its record of Python's garbage
collections by thread, and its watch over the Pipeline's hand-over of each batch."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
tool = pytest.importorskip("train_host_time")


def test_collections_are_recorded_by_thread_and_generation(capsys):
    collections = tool.Collections()
    gc.callbacks.append(collections)
    try:
        gc.collect(0)
        other = threading.Thread(target=gc.collect, args=(1,), name="helper")
        other.start()
        other.join()
    finally:
        gc.callbacks.remove(collections)
    assert len(collections.spent[("training", 0)]) == 1
    assert len(collections.spent[("helper", 1)]) == 1
    assert all(t >= 0 for times in collections.spent.values() for t in times)
    collections.report(steps=2)
    out = capsys.readouterr().out
    assert "generation 0 on training: 0.50 a step" in out and "generation 1 on helper" in out


def test_hand_over_is_watched_for_pending_batches(monkeypatch):
    from pixelpipe.loader import pipeline

    seen = []
    monkeypatch.setattr(pipeline, "hand_over", lambda batch, event, stream: seen.append(batch))

    class Event:
        def __init__(self, done: bool) -> None:
            self.done = done

        def query(self) -> bool:
            return self.done

    pending = tool.watch_hand_over()
    pipeline.hand_over({"a": 1}, Event(True), None)
    pipeline.hand_over({"b": 2}, Event(False), None)
    assert pending == [False, True]
    assert seen == [{"a": 1}, {"b": 2}]  # the batch still goes to the original hand-over


def test_thread_times_name_python_threads_and_count_their_cpu():
    import time

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=spin, name="pixelpipe-read_3")
    worker.start()
    try:
        start = time.perf_counter()
        before = tool.thread_times()
        time.sleep(0.3)
        after = tool.thread_times()
        wall = time.perf_counter() - start  # reading /proc for every thread may take a while too
    finally:
        stop.set()
        worker.join()
    names = {name for name, _ in after.values()}
    assert "training" in names and "pixelpipe-read" in names
    spun = after[worker.native_id][1] - before[worker.native_id][1]
    assert 0.02 < spun <= wall + 0.02  # one thread: at most the wall time between the readings
