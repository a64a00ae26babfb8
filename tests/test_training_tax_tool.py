"""benchmarks/training_tax.py's background load (no GPU needed): the thread runs Python for about the
load it is given in every period, gives the GIL up between pieces (the main thread, itself in
Python, keeps running), and stops when told."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
training_tax = pytest.importorskip("training_tax")


def test_background_load_per_period_and_stop():
    stop, got = threading.Event(), []
    worker = threading.Thread(target=training_tax.background, args=(4.0, 20.0, 50.0, stop, got))
    worker.start()
    time.sleep(0.5)  # the main thread waits in C: the background gets what it asks for
    stop.set()
    worker.join(timeout=2)
    assert not worker.is_alive()
    assert 10 <= len(got) <= 30  # about 25 periods of 20 ms in 0.5 s
    per_period = sorted(got)[len(got) // 2]
    assert 0.001 <= per_period <= 0.008  # about 4 ms of CPU a period (less where the core is shared)


def test_no_load_means_no_thread_work():
    stop, got = threading.Event(), []
    stop.set()
    training_tax.background(3.0, 10.0, 20.0, stop, got)
    assert got == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind, load, piece", [("launches", 1.0, 20.0), ("gpu", 2.0, 200.0), ("waits", 1.0, 50.0)])
def test_cuda_kinds_report_their_work_and_stop(kind, load, piece):
    stop, got = threading.Event(), []
    worker = threading.Thread(target=training_tax.KINDS[kind], args=(load, 20.0, piece, stop, got))
    worker.start()
    time.sleep(0.4)
    stop.set()
    worker.join(timeout=10)
    assert not worker.is_alive() and got
    expected = {"launches": (100.0, 100.0), "gpu": (0.5, 4.0), "waits": (10.0, 10.0)}[kind]  # calls, GPU ms, waits
    assert expected[0] <= got[0] <= expected[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_timed_steps_times_each_step():
    """train_throughput.timed_steps, which training_tax and train() share: a rate, every step's
    host and GPU time, sorted."""
    import itertools

    from train_throughput import timed_steps

    x = torch.zeros(1 << 16, device="cuda")
    t = timed_steps(lambda b: b.add_(1.0), itertools.repeat(x), 2, 6)
    torch.cuda.synchronize()
    assert t.rate > 0 and 0.0 <= t.waited < 1.0 and t.wall_ms > 0
    assert len(t.issue_ms) == len(t.gpu_ms) == 6 and t.issue_ms == sorted(t.issue_ms)
    assert len(t.cpu_ms) == 6 and all(v >= 0 for v in t.cpu_ms)  # the calling thread's CPU per step
    assert float(x[0]) == 8.0  # warm-up and timed steps ran


def test_pipeline_load_draws_paced_batches_and_stops(tmp_path):
    """The pipeline kind on the CPU: a Pipeline over a folder, drawn at about LOAD batches a
    period once under way, then closed."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(tmp_path / f"{i}.jpg")
    stop, got = threading.Event(), []
    worker = threading.Thread(target=training_tax.pipeline_load, args=(0.5, 100.0, 0.0, stop, got),
                              kwargs={"data": str(tmp_path), "device": "cpu"})
    worker.start()
    deadline = time.perf_counter() + 60
    while len(got) < 3 and time.perf_counter() < deadline:
        time.sleep(0.05)
    stop.set()
    worker.join(timeout=30)
    assert not worker.is_alive() and len(got) >= 3
    assert all(0.0 < g <= 0.55 for g in got)  # paced at half a batch per 100 ms (or slower)
