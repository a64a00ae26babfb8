"""The CPU volume warp's threads: the samples of a batch run on worker threads, the cores split
between them.

Why: the reference warp (kernels.reference.warp3d) loops over the samples because they differ
in size, and torch's CPU grid_sample for 5-D inputs parallelises over the batch dimension only,
so each call (one sample) ran on one core whatever the machine had: on a 16-core host the
benchmark batch (8 int16 volumes of 160x192x160 -> 96^3) took 741 ms, more than the 442 ms of a
2-core machine. The per-sample work (box conversion to float32, the grid, two grid_samples)
releases the GIL inside torch, so threads overlap it: min(samples, cores) workers, each with
cores // workers torch threads (workers x threads <= cores, no oversubscription). Each sample
computes exactly what it computed alone, so the output is the same bit for bit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import torch

from ...data.threads import torch_threads_here

__all__ = ["sample_map"]

_LOCK = threading.Lock()
# (workers, torch threads each) -> its pool; pools are kept (a few splits at most), so a
# caller holding one never finds it shut down by another thread's batch
_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _pool(workers: int, threads: int) -> ThreadPoolExecutor:
    """The shared pool of `workers` threads with `threads` torch threads each."""
    with _LOCK:
        pool = _POOLS.get((workers, threads))
        if pool is None:
            pool = ThreadPoolExecutor(workers, thread_name_prefix="pixelpipe-volumes",
                                      initializer=partial(torch_threads_here, threads))
            _POOLS[workers, threads] = pool
        return pool


def sample_map(n: int) -> Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]]:
    """A map over n samples: the builtin one when there is one sample or one core (no thread to
    gain), else the pool's, splitting the calling thread's torch threads between
    min(n, threads) workers."""
    cores = torch.get_num_threads()
    workers = min(n, cores)
    if workers <= 1:
        return map
    return _pool(workers, max(1, cores // workers)).map
