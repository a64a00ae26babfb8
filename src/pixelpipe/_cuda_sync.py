"""CUDA event record and stream wait without releasing the GIL, for the decode thread.

torch's `Event.record` and `Stream.wait_event` release the GIL around the CUDA call and take
it back after. On a pipeline's decode thread each such hand-back waits for whichever thread
holds the GIL at the time (the planning thread runs numpy for up to a millisecond): a py-spy
profile of the rn50 pipeline on an H100 (native stacks, 100 Hz) had the decode thread waiting
for the GIL in 22% of its working samples, a quarter of them in these two calls. The driver's
cuEventRecord and cuStreamWaitEvent only enqueue work and return in microseconds, so calling
them through ctypes.PyDLL (which keeps the GIL) costs less than giving the GIL away.

Without libcuda (or when a call fails) the torch calls are used: the same synchronisation.
"""

from __future__ import annotations

import ctypes
import threading
from functools import lru_cache
from typing import Any

import torch

__all__ = ["record", "wait", "EventRing"]


@lru_cache(maxsize=1)
def _driver() -> Any:
    try:
        lib = ctypes.PyDLL("libcuda.so.1")
    except OSError:
        return None
    for name, args in (("cuEventRecord", [ctypes.c_void_p, ctypes.c_void_p]),
                       ("cuStreamWaitEvent", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint])):
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        fn.argtypes, fn.restype = args, ctypes.c_int
    return lib


def record(event: torch.cuda.Event, stream: torch.cuda.Stream) -> None:
    """event.record(stream), keeping the GIL when the event exists already."""
    lib = _driver()
    if lib is None or not event.cuda_event or lib.cuEventRecord(event.cuda_event, stream.cuda_stream) != 0:
        event.record(stream)


def wait(stream: torch.cuda.Stream, event: torch.cuda.Event) -> None:
    """stream.wait_event(event), keeping the GIL when the event was recorded."""
    lib = _driver()
    if lib is None or not event.cuda_event or lib.cuStreamWaitEvent(stream.cuda_stream, event.cuda_event, 0) != 0:
        stream.wait_event(event)


class EventRing:
    """Events made ahead and handed out in turn, so that a per-batch event costs no creation.

    An event handed out again after `size` others may be recorded again before someone waits
    on its previous recording; a wait then covers the later recording too, which comes after
    on the same stream: more waiting, never less. Keep `size` above the batches in flight."""

    def __init__(self, size: int, stream: torch.cuda.Stream) -> None:
        self._events = []
        for _ in range(size):
            e = torch.cuda.Event()
            e.record(stream)  # creates the CUDA event now, not on the decode thread
            self._events.append(e)
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> torch.cuda.Event:
        with self._lock:
            e = self._events[self._next]
            self._next = (self._next + 1) % len(self._events)
        return e
