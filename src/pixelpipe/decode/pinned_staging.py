"""Pinned host memory for a batch's JPEG bitstreams, reused across batches.

nvImageCodec's GPU decoders copy each code stream's bytes to the device. From ordinary
(pageable) memory that is a staged copy: the CUDA driver copies the bytes through a pinned
buffer of its own, chunk by chunk, on the decoding thread, and the copy shows as "Memcpy HtoD
(Pageable -> Device)" in a profile. From pinned memory it is one DMA the copy engines do alone.
native/open.c copies a batch's blobs into one of these arenas (without the GIL) and makes the
code streams over the copies.

An arena goes back to the pool when its batch is released, with the event that completes once
the batch is decoded (the decode queue's; else one recorded then on the batch's stream), and is
handed out again only once that event has completed (the device is done reading it). Arenas are
rounded up to GRAIN bytes; at most KEEP wait in the pool, and once KEEP are there and none is
done, a take waits for the oldest one that is large enough rather than pinning more memory. A
batch of more than LARGEST bytes of bitstreams is not staged (`staged_size` says None): pinning
that much host memory per batch would cost more than it saves.

Off by default (`PIXELPIPE_PINNED_BITSTREAMS=1` turns it on): the copy into the arena runs on
the planning thread, in the batch's critical path. On an H200 (rn50, 1,200 files, batch 256, 8
threads, alternating runs) a Pipeline delivered 15.6k and 15.7k images/s from files with it
against 17.5k and 18.6k without, and 18.8k / 19.3k against 19.8k / 20.6k from memory; beside a
ResNet-18 training loop it took 4.4 ms a step off the loop's idle time but moved training
images/s by +2% on average, within the machines' spread (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import torch

__all__ = ["PinnedStaging", "staged_size", "staging_wanted"]

GRAIN = 4 << 20
KEEP = 6
LARGEST = 256 << 20  # a batch of more bitstream bytes is read in place (its uploads staged by the driver)
ENV = "PIXELPIPE_PINNED_BITSTREAMS"


def staging_wanted(default: bool = False) -> bool:
    """Whether a decoder stages bitstreams in pinned memory: PIXELPIPE_PINNED_BITSTREAMS=0 or 1
    where set, else `default`."""
    value = os.environ.get(ENV, "").strip()
    if value in ("0", "1"):
        return value == "1"
    if value:
        raise ValueError(f"{ENV} must be 0 or 1, got {value!r}")
    return default


def staged_size(lengths: np.ndarray) -> int | None:
    """The arena bytes a batch of bitstreams of `lengths` needs (each rounded up to 64), or None
    when that is more than LARGEST."""
    need = int(((np.asarray(lengths, dtype=np.int64) + 63) // 64 * 64).sum())
    return need if need <= LARGEST else None


class PinnedStaging:
    """A pool of pinned uint8 arenas (see the module docstring); thread-safe."""

    def __init__(self, keep: int = KEEP) -> None:
        self._lock = threading.Lock()
        self._free: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self.keep = keep
        self.made = 0  # arenas allocated so far (a steady pipeline stops making them)

    def take(self, nbytes: int) -> torch.Tensor:
        """An arena of at least `nbytes` that no device work reads any more."""
        with self._lock:
            large = [k for k, (arena, _) in enumerate(self._free) if arena.numel() >= nbytes]
            for k in large:
                done = self._free[k][1]
                if done is None or done.query():
                    return self._free.pop(k)[0]
            if large and len(self._free) >= self.keep:  # enough pinned: wait for the oldest
                arena, done = self._free.pop(large[0])
                if done is not None:
                    done.synchronize()
                return arena
            self.made += 1
        size = max(GRAIN, -(-nbytes // GRAIN) * GRAIN)
        return torch.empty(size, dtype=torch.uint8, pin_memory=True)

    def give(self, arena: torch.Tensor, stream: torch.cuda.Stream | None,
             done: torch.cuda.Event | None = None) -> None:
        """Back to the pool, reusable once `done` has completed or, without it, once `stream`'s
        work queued so far is done (neither: at once)."""
        if done is None and stream is not None:
            done = torch.cuda.Event()
            done.record(stream)
        with self._lock:
            self._free.append((arena, done))
            while len(self._free) > self.keep:  # drop the smallest arena the device is done with
                idle = [k for k, (a, e) in enumerate(self._free) if e is None or e.query()]
                if not idle:
                    break
                del self._free[min(idle, key=lambda k: self._free[k][0].numel())]

    def __len__(self) -> int:
        with self._lock:
            return len(self._free)
