"""benchmarks/gpu_pipeline_threads.py's CPU accounting (no GPU): each live thread's CPU time
from /proc, Python threads by name, and cores per group between two snapshots."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
tool = pytest.importorskip("gpu_pipeline_threads")
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")


def _spin(seconds: float, stop: threading.Event | None = None) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds and not (stop is not None and stop.is_set()):
        pass


def test_cores_by_thread_name():
    stop = threading.Event()
    worker = threading.Thread(target=_spin, args=(5.0, stop), name="pixelpipe-test-spinner", daemon=True)
    worker.start()
    before, t0 = tool.thread_cpu(), time.perf_counter()
    _spin(0.3)
    after, seconds = tool.thread_cpu(), time.perf_counter() - t0
    stop.set()
    worker.join()
    used = tool.cores_used(before, after, seconds)
    assert "pixelpipe-test-spinner" in used and "MainThread" in used
    assert used["MainThread"] * seconds >= 0.25  # 0.3 s of CPU spun, counted in clock ticks
    assert all(v >= 0 for v in used.values())
    grouped = tool.cores_used({"lib [7]": 1.0, "lib [8]": 1.0}, {"lib [7]": 2.0, "lib [8]": 1.5, "x": 0.5}, 2.0)
    assert grouped == {"lib (threads)": 0.75, "x": 0.25}
