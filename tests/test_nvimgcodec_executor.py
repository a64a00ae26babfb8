"""native/executor.c, the thread pool pixelpipe can hand nvImageCodec as its executor
(decode/nvimgcodec_executor.py), driven here the way nvImageCodec drives it, through the
functions of its nvimgcodecExecutorDesc_t, with Python tasks (no GPU needed): every scheduled
task runs once, on a worker whose index is below the thread count; wait() returns once all
have run; the queue grows past its first size and keeps the order; each worker makes the
device current first; destroy finishes what is queued."""

from __future__ import annotations

import ctypes as C
import threading

import pytest
from helpers import native_built

from pixelpipe.decode import nvimgcodec_executor as executor
from pixelpipe.decode import nvimgcodec_structs as S

LIB = native_built("executor.c")
needs_cc = pytest.mark.skipif(LIB is None, reason="no C compiler: the executor was not built")

TASK = C.CFUNCTYPE(None, C.c_int, C.c_int, C.c_void_p)
SET_DEVICE = C.CFUNCTYPE(C.c_int, C.c_int)
SCHEDULE = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_int, C.c_void_p, C.c_void_p)
RUN_OR_WAIT = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int)
THREADS = C.CFUNCTYPE(C.c_int, C.c_void_p)


def _pool(threads: int):
    devices: list[int] = []
    set_device = SET_DEVICE(lambda d: devices.append(d) or 0)
    pool = executor.make(threads, 3, set_device)
    assert pool is not None
    desc = pool.desc  # called through the descriptor's pointers, as nvImageCodec calls them
    calls = (SCHEDULE(desc.schedule), RUN_OR_WAIT(desc.run), RUN_OR_WAIT(desc.wait), THREADS(desc.getNumThreads))
    return pool, calls, devices, set_device


@needs_cc
def test_every_task_runs_once_on_a_worker():
    pool, (schedule, run, wait, threads), devices, keep = _pool(4)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def body(thread_id, sample, context):
        with lock:
            seen.append((thread_id, sample))

    task = TASK(body)
    try:
        assert threads(pool.handle) == 4 and pool.desc.struct_type == S.ST_EXECUTOR
        for i in range(1000):
            assert schedule(pool.handle, 3, i, None, C.cast(task, C.c_void_p)) == 0
        assert run(pool.handle, 3) == 0
        assert wait(pool.handle, 3) == 0
        assert sorted(s for _, s in seen) == list(range(1000))  # each once, all done when wait returns
        assert {t for t, _ in seen} <= {0, 1, 2, 3}
        assert pool.tasks_done() == 1000
        assert devices == [3, 3, 3, 3]  # each worker made the decoder's device current
    finally:
        pool.close()
    assert pool.tasks_done() == 0 and pool.handle is None
    pool.close()  # twice is harmless


@needs_cc
def test_the_queue_grows_and_keeps_the_order():
    pool, (schedule, run, wait, _), _, keep = _pool(1)
    gate, order = threading.Event(), []

    def body(thread_id, sample, context):
        if sample == 0:
            gate.wait(5)  # holds the only worker while 600 more are queued
        order.append(sample)

    task = TASK(body)
    try:
        for i in range(601):
            schedule(pool.handle, 0, i, None, C.cast(task, C.c_void_p))
        gate.set()
        run(pool.handle, 0)
        wait(pool.handle, 0)
        assert order == list(range(601))
    finally:
        pool.close()


@needs_cc
def test_destroy_finishes_what_is_queued():
    pool, (schedule, _, _, _), _, keep = _pool(2)
    ran = []
    task = TASK(lambda t, s, c: ran.append(s))
    for i in range(50):
        schedule(pool.handle, 0, i, None, C.cast(task, C.c_void_p))
    pool.close()
    assert sorted(ran) == list(range(50))


def test_the_environment_chooses(monkeypatch):
    monkeypatch.delenv("PIXELPIPE_NVIMGCODEC_EXECUTOR", raising=False)
    assert executor.wanted() is False
    monkeypatch.setenv("PIXELPIPE_NVIMGCODEC_EXECUTOR", "pixelpipe")
    assert executor.wanted() is True
    monkeypatch.setenv("PIXELPIPE_NVIMGCODEC_EXECUTOR", "dali")
    with pytest.raises(ValueError, match="nvimgcodec.*pixelpipe"):
        executor.wanted()
