"""Host memory for a GPU pipeline: glibc's malloc kept from returning and re-mapping memory
per batch (`keep_host_memory`).

glibc serves blocks of 128 KiB and more (the default M_MMAP_THRESHOLD, raised as blocks are
freed) with mmap, and gives freed memory at the top of its heaps back to the system (past
M_TRIM_THRESHOLD). A GPU pipeline allocates and frees such blocks every batch: its file bytes
(ImageNet JPEGs average 107 KiB, many are larger), nvImageCodec's host buffers for the JPEGs its
CUDA decoder decodes, numpy arrays of a batch's plan. Each fresh mapping costs page faults on
first touch, and each unmapping a TLB shootdown that interrupts every core running one of the
process's threads (planning, decoding, launching, reading, and the training loop itself).
Measured on an H100 host (16 cores; rn50, 3,600 ImageNet JPEGs, batch 256, 8 threads,
benchmarks/gpu_slow_batches.py): from memory 14.7k -> 17.1k images/s, from files 11.1k ->
12.7k, with both thresholds fixed high (the planning, launching and kernel-launch times per
batch fell 2-3x from files).

`keep_host_memory()` fixes M_MMAP_THRESHOLD at 64 MiB and M_TRIM_THRESHOLD at 1 GiB with
mallopt: the process keeps the memory it had at its busiest (a few hundred MiB for a pipeline)
instead of returning it between batches. It acts once per process, only with glibc, and only
when an Engine makes a GPU decoder with `GpuDecoding(keep_host_memory=True)` (the default).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

__all__ = ["keep_host_memory"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 1 << 30
_DONE: list[bool] = []
_LOCK = threading.Lock()


def keep_host_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring), once per process.
    Returns whether they are set (False where the C library is not glibc)."""
    with _LOCK:
        if not _DONE:
            _DONE.append(_set())
        return _DONE[0]


def _set() -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it: musl's mallopt does nothing)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
