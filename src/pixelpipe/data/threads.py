"""One torch intra-op thread inside pixelpipe's own threads, and how many threads pixelpipe
takes by default.

torch runs CPU ops on an OpenMP team as large as the machine. pixelpipe's threads run either
small planning ops (a few hundred numbers per batch) while other threads keep the cores busy
(nvImageCodec's decoding threads, the other pipeline threads), or per-sample work on pools that
already use every core. A team on top of that waits at its barriers for cores someone else holds:
measured on an H200 host with 16 cores, planning a batch of 256 for the rn50 pipeline took 4 to
45 ms while nvImageCodec decoded, against under 1 ms with one thread, and the pipeline ran at
4.1k instead of 5.9k images/s.

`torch.set_num_threads` both sets the calling thread's count and the default that threads
started later take. `one_torch_thread` keeps the first and puts the second back, so the user's
threads (the main thread included) keep theirs. With torch's OpenMP builds the count is per
thread; with a build whose pool is shared by all threads, nothing can be changed for one thread
alone and the call leaves everything as it was.

`default_threads()` is the thread count an Engine, a Pipeline, the video and volume loaders and
the CPU decoder take when none is given: the cores this process may run on, shared out between
the processes that torchrun starts on one host (LOCAL_WORLD_SIZE), since each rank's Pipeline
would otherwise start a thread per core of the whole machine and the ranks would run G times
as many threads as cores. `default_gpu_threads()` is what an Engine or a Pipeline on a GPU
takes (`default_threads_for(device)` picks between the two): at most 8 of those, since there the threads feed nvImageCodec's host side (headers,
Huffman decoding of the share not on the hardware decoder) and more of them contend with the
Pipeline's own threads and the training loop. Measured on an H200 with 16 cores
(`benchmarks/gpu_decoding_ab.py --settings threads=8 threads=16`, docs/benchmarks.md): 8 threads
at or above 16 on generated images, re-encoded photographs and the developers' sample, up to
13% faster.
"""

from __future__ import annotations

import os
import threading

import torch

__all__ = ["GPU_THREADS", "default_gpu_threads", "default_threads", "default_threads_for", "one_torch_thread",
           "torch_threads_here"]

_LOCK = threading.Lock()


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity where the system has one, else the
    machine's), divided by LOCAL_WORLD_SIZE (torchrun's processes on this host) when the
    process may run on every core of the machine; a process whose affinity already holds fewer
    cores (a launcher that pinned each rank) keeps them all. At least 1."""
    machine = os.cpu_count() or 1
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else machine
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local = 1
    if local > 1 and mine >= machine:
        mine //= local
    return max(1, mine)


GPU_THREADS = 8  # the most threads a GPU Engine takes by default (see the module docstring)


def default_gpu_threads() -> int:
    """The thread count of an Engine or a Pipeline on a GPU when none is given:
    default_threads(), at most GPU_THREADS."""
    return min(GPU_THREADS, default_threads())


def default_threads_for(device: str | torch.device | None) -> int:
    """The default thread count of work on `device`: default_gpu_threads() on a CUDA device
    ("cuda", "cuda:N" or a torch.device), default_threads() otherwise (None: the CPU's)."""
    on_gpu = device is not None and str(device).split(":")[0] == "cuda"
    return default_gpu_threads() if on_gpu else default_threads()


def one_torch_thread() -> bool:
    """Give the calling thread one torch intra-op thread, leave every other thread's count as
    it was. Returns whether the calling thread now has one (False with a shared pool)."""
    return torch_threads_here(1)


def torch_threads_here(k: int) -> bool:
    """Give the calling thread k torch intra-op threads (k >= 1), leave every other thread's
    count as it was: for worker threads that split the cores between them. Returns whether the
    calling thread now has k (False with a shared pool)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if torch.get_num_threads() == k:
        return True
    with _LOCK:
        default = torch.get_num_threads()
        torch.set_num_threads(k)
        # put the default for threads started later back, from a thread whose own count is moot
        restore = threading.Thread(target=torch.set_num_threads, args=(default,), name="pixelpipe-threads")
        restore.start()
        restore.join()
    return torch.get_num_threads() == k
