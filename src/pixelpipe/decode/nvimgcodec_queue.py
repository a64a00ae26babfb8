"""A decode queue per nvImageCodec decoder (native/queue.c): batches decode on a native thread
of their own, in the order they were planned, back to back, without waiting for Python.

Why: a Pipeline's decode thread called nvImageCodec once per batch without the GIL, but had to
take the GIL back after each batch before it could start the next, while the planning thread
(busy 70% of an epoch) held it for up to the interpreter's switch interval (5 ms). On an H100
(measured), nvImageCodec's call took 10.8-11.0 ms per batch of 256 alone
and 11.9-12.2 ms inside the rn50 Pipeline, yet the Pipeline ran at 15.7-15.9k images/s against
22.4-22.9k for the calls alone: between two batches the decoder stood idle for about 4 ms.
Beside a pure-Python busy loop the calls alone fell to 15.4-15.9k, with the calls themselves
no slower. Here the next batch starts as soon as the previous one is done. Measured after the
change: in alternating rounds the Pipeline was no faster with the queue than without
(13.5-15.9k either way), because the planning thread's own Python (4.7 ms of nvImageCodec calls
and 2.5 ms of header parses per batch, holding the GIL) was the real limit; with those moved to
C (native/open.c, native/jpeg_headers.c) the decoder runs 98-104% of the epoch.

How: `CDecoder(ahead=True)` (decode/nvimgcodec_c.py) submits each batch when `open` has made its
images (on the planning thread), and `run` waits for its ticket. The thread records a CUDA event
on the batch's stream when the batch is decoded; the caller's stream waits for that event (not
for the decoder's whole stream, where the next batch may already be decoding). The thread
makes the decoder's device current first (cudaSetDevice), as the calling thread had it.

Available where native/queue.c and native/decode.c are built (a C compiler) and torch's CUDA
runtime is found (`cudart.runtime()`); `start` gives None otherwise, and batches decode when the
decode thread asks for them, as before.
"""

from __future__ import annotations

import ctypes as C
import threading
from typing import Any

__all__ = ["CANCELLED", "DecodeQueue", "Ticket", "start"]

CANCELLED = -1  # queue.c: the job was taken back, or its queue stopped, before it ran
STEPS = {1: "decoding", 2: "waiting for the decode", 3: "reading the statuses",
         4: "recording the batch's CUDA event", 5: "making the device current on the decode queue's thread"}

_P = C.c_void_p
_SIGNATURES = {
    "pp_queue_create": (_P, [_P, _P, _P, C.c_int]),
    "pp_queue_submit": (_P, [_P, _P, _P, _P, C.c_int, _P, _P, _P, _P, _P, _P, _P]),
    "pp_queue_wait": (C.c_int, [_P, _P]),
    "pp_queue_retire": (C.c_int, [_P, _P]),
    "pp_queue_stop": (None, [_P]),
    "pp_queue_destroy": (None, [_P]),
}


def library() -> C.CDLL | None:
    """native/queue.c built and loaded (CDLL: its calls release the GIL), or None. Cached."""
    from .. import native

    return native.shared("queue.c", "batches decode when the decode thread asks for them, not ahead",
                         signatures=_SIGNATURES)


def start(batch: Any, device_index: int) -> DecodeQueue | None:
    """A queue whose thread decodes with `batch` (native/decode.c's pp_decode_batch, wired to
    nvImageCodec) on CUDA device `device_index`, or None where the queue, the batch call or the
    CUDA runtime is missing."""
    from . import cudart

    lib, rt = library(), cudart.runtime()
    if lib is None or batch is None or rt is None:
        return None
    try:
        set_device, record = C.cast(rt.cudaSetDevice, _P), C.cast(rt.cudaEventRecord, _P)
    except AttributeError:
        return None
    return DecodeQueue.start(lib, C.cast(batch, _P), set_device, record, device_index)


class Ticket:
    """One submitted batch: the job and the arrays it writes into (statuses, their count, the
    timestamps, a failing step's status). `wait` may be called by one thread at a time; `retire`
    (once the batch is not needed) cancels it if it has not started, or waits for it."""

    def __init__(self, queue: DecodeQueue, job: int, status: Any, size: C.c_size_t, times: Any,
                 failure: C.c_int, event: Any, keep: tuple[Any, ...]) -> None:
        self.queue, self.job = queue, job
        self.status, self.size, self.times, self.failure = status, size, times, failure
        self.event = event  # the CUDA event recorded once the batch is decoded (or None)
        self._keep = keep  # what the job points to: alive until it is retired
        self._lock = threading.Lock()  # retire waits for a wait in progress

    def wait(self) -> int:
        """0 once the batch is decoded, or queue.c's failing step (1-5), or CANCELLED (also
        once the ticket was retired)."""
        with self._lock:
            if self.job is None:
                return CANCELLED
            return self.queue.lib.pp_queue_wait(self.queue.handle, self.job)

    def retire(self) -> bool:
        """Take the job back (idempotent): True where it was cancelled before it ran."""
        with self._lock:
            if self.job is None:
                return False
            job, self.job = self.job, None
            cancelled = bool(self.queue.lib.pp_queue_retire(self.queue.handle, job))
            with self.queue._lock:
                self.queue._live.discard(self)
            self._keep = ()
            return cancelled


class DecodeQueue:
    """The C queue and its thread. Use `start` (module level) to make one."""

    def __init__(self, lib: C.CDLL, handle: int) -> None:
        self.lib, self.handle = lib, handle
        # submitted, not retired: held strongly, so that close() retires every one before the
        # queue is freed (a garbage collection of a cycle clears weak references before it
        # runs __del__, and a ticket retired after its queue was freed would lock freed memory)
        self._live: set[Ticket] = set()
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def start(cls, lib: C.CDLL, batch: Any, set_device: Any, record: Any, device_index: int) -> DecodeQueue | None:
        """A queue on `lib` (queue.c) calling `batch`, `set_device` and `record` (function
        pointers; the latter two may be None), or None where its thread cannot be started."""
        handle = lib.pp_queue_create(batch, set_device, record, device_index)
        return cls(lib, handle) if handle else None

    def submit(self, decoder: Any, streams: Any, images: Any, n: int, params: Any, event: Any = None,
               stream_handle: int | None = None) -> Ticket | None:
        """Queue the decode of n code streams into n images (C arrays, kept alive by the
        ticket), then the record of `event` (a torch.cuda.Event already made, or anything with
        its raw handle as `cuda_event`; None: no record) on the stream `stream_handle`. None
        where the queue is closed or out of memory."""
        event_handle = None if event is None else event.cuda_event
        status, size, times, failure = (C.c_uint32 * max(n, 1))(), C.c_size_t(n), (C.c_double * 2)(), C.c_int(0)
        with self._lock:
            if self.closed:
                return None
            job = self.lib.pp_queue_submit(self.handle, decoder, streams, images, n, C.byref(params), status,
                                           C.byref(size), times, C.byref(failure), event_handle, stream_handle)
            if not job:
                return None
            ticket = Ticket(self, job, status, size, times, failure, event, (decoder, streams, images, params))
            self._live.add(ticket)
        return ticket

    def close(self) -> None:
        """Cancel the batches not started, wait for the one decoding, retire every ticket and
        stop the thread. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            live = list(self._live)
        self.lib.pp_queue_stop(self.handle)
        for ticket in live:
            ticket.retire()
        self.lib.pp_queue_destroy(self.handle)
