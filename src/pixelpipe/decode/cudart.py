"""The CUDA runtime library this process has loaded (torch's libcudart), for pixelpipe's native
helpers: nvImageCodec's allocators (`nvimgcodec_alloc`) and the decode queue's thread
(`nvimgcodec_c`, native/queue.c) call its functions. Found in /proc/self/maps after torch has
initialised CUDA, so that pixelpipe uses the very copy torch uses (a wheel's, or the system's),
with ctypes.util.find_library("cudart") as the last resort."""

from __future__ import annotations

import ctypes as C
import ctypes.util
import threading
from pathlib import Path

__all__ = ["path", "runtime"]

_LOCK = threading.Lock()
_LOADED: list[C.CDLL | None] = []


def path(maps: str = "/proc/self/maps") -> str | None:
    """The path of the CUDA runtime library in this process's memory map `maps`, or None."""
    try:
        with open(maps) as f:
            for line in f:
                found = line.rstrip("\n").split(" ", 5)[-1].strip()
                if Path(found).name.startswith("libcudart.so"):
                    return found
    except OSError:
        pass
    return None


def runtime() -> C.CDLL | None:
    """torch's CUDA runtime, loaded with ctypes (calls release the GIL), or None where torch
    has no CUDA or the library cannot be found or loaded. Initialises torch's CUDA. Cached."""
    with _LOCK:
        if not _LOADED:
            _LOADED.append(_load())
        return _LOADED[0]


def _load() -> C.CDLL | None:
    import torch

    try:
        torch.cuda.init()  # loads the runtime
    except (RuntimeError, AssertionError):
        return None
    found = path() or ctypes.util.find_library("cudart")
    if found is None:
        return None
    try:
        return C.CDLL(found)
    except OSError:
        return None
