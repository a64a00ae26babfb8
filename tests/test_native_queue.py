"""native/queue.c and decode/nvimgcodec_queue.py: batches decode on the queue's own thread in the
order they were submitted, each followed by its event's record; a queued batch taken back never
runs, a running one is waited for; failures of the batch, of the event record and of making the
device current come back as their steps. Checked with stand-ins for the batch call, cudaSetDevice
and cudaEventRecord (no GPU needed). test_native_decode.py checks CDecoder through the queue
against its twin; test_decode_gpu_native.py decodes through it on a GPU."""

from __future__ import annotations

import ctypes as C
import threading
import time
from types import SimpleNamespace

import pytest

from pixelpipe.decode import nvimgcodec_queue as Q

LIB = Q.library()
pytestmark = pytest.mark.skipif(LIB is None, reason="no C compiler: native/queue.c cannot be built")

BATCH = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_void_p, C.c_int, C.c_void_p, C.POINTER(C.c_uint32),
                    C.POINTER(C.c_size_t), C.POINTER(C.c_double), C.POINTER(C.c_int))
SET_DEVICE = C.CFUNCTYPE(C.c_int, C.c_int)
RECORD = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)


class StandIns:
    """The three functions the queue calls, recording what they were called with; `gates`
    holds batches (by decoder) until their threading.Event is set; `started` is set per
    decoder when its batch begins."""

    def __init__(self, batch_rc: int = 0, record_rc: int = 0, device_rc: int = 0) -> None:
        self.calls: list[tuple] = []
        self.gates: dict[int, threading.Event] = {}
        self.started: dict[int, threading.Event] = {}
        self.rcs = (batch_rc, record_rc, device_rc)

        def batch(decoder, streams, images, n, params, status, count, times, failure):
            self.started.setdefault(decoder, threading.Event()).set()
            gate = self.gates.get(decoder)
            if gate is not None:
                gate.wait(10)
            self.calls.append(("batch", decoder, streams, images, n, params, threading.get_ident()))
            for i in range(n):
                status[i] = decoder * 10 + i
            count[0] = n
            times[0], times[1] = 1.0, 2.0
            if self.rcs[0]:
                failure[0] = 7
            return self.rcs[0]

        def set_device(device):
            self.calls.append(("set_device", device, threading.get_ident()))
            return self.rcs[2]

        def record(event, stream):
            self.calls.append(("record", event, stream))
            return self.rcs[1]

        self.fns = (BATCH(batch), SET_DEVICE(set_device), RECORD(record))  # kept alive here

    def queue(self, device: int = 3) -> Q.DecodeQueue:
        q = Q.DecodeQueue.start(LIB, *[C.cast(f, C.c_void_p) for f in self.fns], device)
        assert q is not None
        return q

    def gate(self, decoder: int) -> threading.Event:
        self.gates[decoder] = threading.Event()
        self.started[decoder] = threading.Event()
        return self.gates[decoder]

    def batches(self) -> list[int]:
        return [c[1] for c in self.calls if c[0] == "batch"]


def submit(q: Q.DecodeQueue, decoder: int, n: int = 3) -> Q.Ticket:
    params = C.c_int(0)
    ticket = q.submit(C.c_void_p(decoder), C.c_void_p(0x100 + decoder), C.c_void_p(0x200 + decoder), n, params,
                      event=SimpleNamespace(cuda_event=0xE00 + decoder), stream_handle=0x500 + decoder)
    assert ticket is not None
    return ticket


def test_batches_run_in_order_on_the_queues_thread_each_followed_by_its_record():
    s = StandIns()
    q = s.queue(device=3)
    tickets = [submit(q, d, n=d) for d in range(1, 6)]
    assert [t.wait() for t in tickets] == [0] * 5
    assert [list(t.status[:t.size.value]) for t in tickets] == [[d * 10 + i for i in range(d)] for d in range(1, 6)]
    assert (tickets[0].times[0], tickets[0].times[1]) == (1.0, 2.0)
    kinds = [c[0] for c in s.calls]
    assert kinds == ["set_device"] + ["batch", "record"] * 5  # the device first, once
    assert s.calls[0][1] == 3
    threads = {c[-1] for c in s.calls if c[0] in ("batch", "set_device")}
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert s.batches() == [1, 2, 3, 4, 5]
    batch3 = next(c for c in s.calls if c[0] == "batch" and c[1] == 3)
    assert batch3[2:6] == (0x103, 0x203, 3, batch3[5]) and batch3[5]  # the arrays and params passed on
    assert [c[1:] for c in s.calls if c[0] == "record"] == [(0xE00 + d, 0x500 + d) for d in range(1, 6)]
    for t in tickets:
        assert not t.retire()
    q.close()


def test_a_queued_batch_taken_back_never_runs():
    s = StandIns()
    gate = s.gate(1)
    q = s.queue()
    first, second, third = submit(q, 1), submit(q, 2), submit(q, 3)
    assert s.started[1].wait(10)
    assert second.retire() is True  # cancelled: it had not started
    assert second.wait() == Q.CANCELLED
    gate.set()
    assert first.wait() == 0 and third.wait() == 0
    assert s.batches() == [1, 3]
    first.retire(), third.retire()
    q.close()


def test_taking_back_a_running_batch_waits_for_it():
    s = StandIns()
    gate = s.gate(1)
    q = s.queue()
    ticket = submit(q, 1)
    assert s.started[1].wait(10)
    done: list[bool] = []
    retirer = threading.Thread(target=lambda: done.append(ticket.retire()))
    retirer.start()
    time.sleep(0.05)
    assert not done  # still decoding: retire waits
    gate.set()
    retirer.join(10)
    assert done == [False] and s.batches() == [1]
    q.close()


@pytest.mark.parametrize("rcs, step, failure, batches", [
    ((2, 0, 0), 2, 7, [1, 2]),  # the batch's own step; its event is still recorded
    ((0, 9, 0), 4, 9, [1, 2]),  # the record failed
    ((0, 0, 3), 5, 3, []),  # the device could not be made current: no batch runs
])
def test_failures_come_back_as_their_step(rcs, step, failure, batches):
    s = StandIns(*rcs)
    q = s.queue()
    tickets = [submit(q, 1), submit(q, 2)]
    assert [t.wait() for t in tickets] == [step, step]
    assert [t.failure.value for t in tickets] == [failure, failure]
    assert s.batches() == batches
    if batches:
        assert [c[0] for c in s.calls].count("record") == 2
    q.close()


def test_close_cancels_what_has_not_started_and_waits_for_what_has():
    s = StandIns()
    gate = s.gate(1)
    q = s.queue()
    tickets = [submit(q, d) for d in (1, 2, 3)]
    assert s.started[1].wait(10)
    closer = threading.Thread(target=q.close)
    closer.start()
    time.sleep(0.05)
    assert closer.is_alive()  # waiting for batch 1
    gate.set()
    closer.join(10)
    assert not closer.is_alive() and q.closed
    assert s.batches() == [1]
    assert [t.wait() for t in tickets] == [Q.CANCELLED] * 3  # retired by close
    assert q.submit(C.c_void_p(4), None, None, 1, C.c_int(0)) is None  # a closed queue takes nothing
    q.close()  # idempotent


def test_without_a_record_function_no_event_is_recorded():
    s = StandIns()
    q = Q.DecodeQueue.start(LIB, C.cast(s.fns[0], C.c_void_p), None, None, 0)
    assert q is not None
    ticket = submit(q, 1)
    assert ticket.wait() == 0
    assert [c[0] for c in s.calls] == ["batch"]
    ticket.retire()
    q.close()


def test_stop_cancels_the_queued_jobs_in_c():
    """pp_queue_stop (close's first step) marks queued jobs cancelled in the C state, which
    pp_queue_wait reports as -1; the running one finishes."""
    s = StandIns()
    gate = s.gate(1)
    q = s.queue()
    running, queued = submit(q, 1), submit(q, 2)
    assert s.started[1].wait(10)
    q.lib.pp_queue_stop(q.handle)
    assert q.lib.pp_queue_wait(q.handle, queued.job) == Q.CANCELLED
    gate.set()
    assert q.lib.pp_queue_wait(q.handle, running.job) == 0
    assert s.batches() == [1]
    assert running.retire() is False and queued.retire() is False  # cancelled by stop, not here
    q.close()


def test_close_retires_tickets_the_caller_no_longer_holds():
    """The queue holds its tickets until they are retired: close() retires every one before
    the C queue is freed, so that no ticket can reach freed memory afterwards (a garbage
    collection of a cycle clears weak references before it runs __del__)."""
    import gc

    s = StandIns()
    gate = s.gate(1)
    q = s.queue()
    kept = submit(q, 1)
    for d in (2, 3):
        submit(q, d)  # dropped at once
    gc.collect()
    assert len(q._live) == 3
    assert s.started[1].wait(10)
    gate.set()
    q.close()
    assert not q._live and kept.job is None
    assert kept.wait() == Q.CANCELLED and kept.retire() is False  # no C call on the freed queue
    # 2 and 3 may have started between gate.set() and close() (a busy machine): in order
    assert s.batches() in ([1], [1, 2], [1, 2, 3])
