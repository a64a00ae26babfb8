"""What an Engine does to its process for steady throughput: glibc's malloc kept from returning
and re-mapping memory per batch (`keep_host_memory`), and the garbage collector kept from
walking, again and again, the objects that live as long as the process (`freeze_garbage`).

## Host memory

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

The CPU path's pixel ops (engine.pixels) make several tensors of a few MiB per piece of a
batch: measured on 2 cores (64-image SimCLR, DeiT and RandAugment batches), 9-12k page faults
and 20-25 ms of system time per batch, against 0-6k and 2-11 ms with the thresholds fixed.

`keep_host_memory()` fixes M_MMAP_THRESHOLD at 64 MiB and M_TRIM_THRESHOLD at 1 GiB with
mallopt: the process keeps the memory it had at its busiest (a few hundred MiB for a pipeline)
instead of returning it between batches. It acts once per process, only with glibc, and only
when an Engine with `GpuDecoding(keep_host_memory=True)` (the default) makes a GPU decoder or
first runs pixel ops on the CPU.

## The garbage collector

A pipeline's threads make and drop many small containers per batch (lists, dicts, arrays,
items), so CPython's collector runs often, and now and then a full collection walks every
object the process holds: with torch imported, hundreds of thousands, for about 100 ms, all
of it under the GIL, while the planning, decoding and launching threads wait. That was the
slow rounds' cause: on an H100 (rn50, 3,600 ImageNet JPEGs from memory, batch 256, 8 threads,
benchmarks/gpu_slow_batches.py) the slowest tenth of the batches waited 53 ms for their GPU
decode and the 99th percentile of the consumer's wait was 125 ms, against 20 and 22 ms after
`gc.freeze()` (and 16 / 17 ms with the collector off); the Pipeline delivered 13.0k images/s
against 19.2k. `freeze_garbage()` collects once and freezes what survives (gc.freeze): later
collections skip those objects (torch's modules, the model, the dataset's file list), and
the objects made later are collected as before. Frozen objects that later become cyclic
garbage are not freed until `gc.unfreeze()`; objects without cycles are freed as always.
An Engine made with `freeze_gc=True` (the default) calls it at its first batch; each call
freezes what was made since the last one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading

__all__ = ["freeze_garbage", "keep_host_memory"]

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


def freeze_garbage() -> None:
    """Collect, then freeze what survives (see the module docstring)."""
    gc.collect()
    gc.freeze()
