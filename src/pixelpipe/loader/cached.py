"""A Pipeline's batches of cached samples, planned several at a time.

Once every sample of the next batches is in the device cache (later epochs), nothing is read
or decoded: a batch is the cache's pixels, a plan, one kernel launch and its labels. Made one
sample at a time, the bookkeeping (a slot, an item and a cache lookup per sample) and planning
(numpy's per-call overhead, nearly the same for 256 numbers as for 2,048) cost more than the launch.
So these batches are planned PLAN_AHEAD at a time from the epoch's order arrays
(`_prefetch.ArraySlots`), split (`Compose.prepare_split`) and handed out one per call, each
with the run state the general path would have left (slots taken, cursor, batches made). A
batch with a sample that is not cached, or an epoch with failed samples, takes the general
path (Pipeline._make). The numbers do not change: every draw is a function of the sample and
its epoch.

When the epoch ends inside the window, the window goes on into the next epochs (each sample
planned with its own epoch): a small cached dataset has few batches per epoch, and would
otherwise plan at most that many at once. Those epochs' orders and planned batches wait in
the producer's `later` map (`Planned`) until their runs open.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..engine.stats import BatchDecode
from .collate import as_batch, labels_tensor, placed
from .producer import ArraySlots, Made, Run

__all__ = ["PLAN_AHEAD", "Planned", "cached_batch", "planned_epoch"]

# batches planned in one go. A cached Pipeline on an H100 (500 images, batch 256, 4 alternating
# rounds, docs/benchmarks-history.md, session 9): 8 against 4 gave rn50 253-327k against 188-248k
# images/s (8 faster in every round) and rich 149-183k against 133-188k (even on average)
PLAN_AHEAD = 8


@dataclass
class Planned:
    """An epoch planned from the run before it: its order (sampler.EpochOrder) and its first
    batches, as run.ahead holds them."""

    order: Any
    batches: list[Any] = field(default_factory=list)


def planned_epoch(later: dict[int, Planned] | None, epoch: int, start: int, made: int) -> Planned | None:
    """What the run before planned of `epoch`, taken out of `later`, for a run that starts at
    the epoch's beginning (None otherwise, or when nothing was planned). Entries of earlier
    epochs are dropped (left over when a run was rewound)."""
    if later is None:
        return None
    for stale in [k for k in later if k < epoch]:
        del later[stale]
    return later.pop(epoch, None) if start == 0 and made == 0 else None


def cached_batch(pipe: Any, run: Run, side: Any, make_items: Callable[[np.ndarray, np.ndarray], list[Any]]) -> Made | None:
    """The next batch of run's epoch when its samples are all cached (planned ahead with the
    ones after it), or None: the general path makes it. pipe: the Pipeline (its cache,
    transforms, labels and settings); make_items(index, valid) gives the batch as the
    general path's items, only if a short tail must be padded from it."""
    if not run.ahead and not _plan_ahead(pipe, run, side):
        return None
    index, valid, prepared, tensors = run.ahead.popleft()
    saved = run.save()
    b = len(index)
    run.slots.skip(b)
    run.cursor += b
    run.made += 1
    run.last = lambda: make_items(index, valid)

    def work() -> dict[str, Any]:
        return as_batch(pipe.transforms.finish(prepared), *tensors)

    record = BatchDecode(cached=b)
    return Made(run, work, saved, run.cursor, run.made, run.take_errors(), record=lambda: record)


def _plan_ahead(pipe: Any, run: Run, side: Any) -> bool:
    """Plan up to PLAN_AHEAD whole batches from the slots into run.ahead (and, past the end of
    the epoch, into run.later); whether any."""
    slots = run.slots
    if pipe._cache is None or run.pending or run.failed or not isinstance(slots, ArraySlots):
        return False
    b = pipe.batch_size
    left = PLAN_AHEAD if run.total is None else min(PLAN_AHEAD, run.total - run.made)
    index, valid = slots.peek(left * b)
    epoch = np.full(len(index), run.epoch, dtype=np.int64)
    if run.later is not None and left < PLAN_AHEAD and slots.position + len(index) == len(slots.order):
        index, valid, epoch = _next_epochs(pipe, run, PLAN_AHEAD - left, index, valid, epoch)
    rows = pipe._cache.rows_of(index)
    missing = rows < 0
    k = (int(np.argmax(missing)) if missing.any() else len(index)) // b  # whole batches before one
    if k == 0:
        return False
    index, valid, rows, epoch = index[: k * b], valid[: k * b], rows[: k * b], epoch[: k * b]
    with torch.cuda.stream(side) if side is not None else nullcontext():
        parts = pipe.transforms.prepare_split(pipe._cache.batch_rows(rows), pipe.seed, epoch, index, k)
        tensors = _placed_ahead(pipe, index, valid, k)
    for j, prepared in enumerate(parts):
        rows_j = slice(j * b, (j + 1) * b)
        batch = (index[rows_j], valid[rows_j], prepared, tensors[j])
        e = int(epoch[j * b])
        (run.ahead if e == run.epoch else run.later[e].batches).append(batch)  # type: ignore[index]
    return True


def _next_epochs(pipe: Any, run: Run, wanted: int, index: np.ndarray, valid: np.ndarray,
                 epoch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window (index, valid, epoch arrays) continued past run's epoch by up to `wanted`
    whole batches of the epochs after it; each such epoch's order goes into run.later, for its
    run to start from."""
    assert run.later is not None
    b = pipe.batch_size
    parts = [(index, valid, epoch)]
    e = run.epoch
    while wanted > 0:
        e += 1
        planned = run.later.get(e)
        if planned is None:
            planned = run.later[e] = Planned(pipe._slots(e, run.stop))
        if planned.batches:  # its first batches are planned already (a run rewound after planning them)
            break
        k = min(wanted, len(planned.order) // b)
        if k == 0:
            break
        order = planned.order
        parts.append((order.index[: k * b], order.valid[: k * b], np.full(k * b, e, dtype=np.int64)))
        wanted -= k
    return tuple(np.concatenate(a) for a in zip(*parts))  # type: ignore[return-value]


def _placed_ahead(pipe: Any, index: np.ndarray, valid: np.ndarray, k: int) -> list[tuple[torch.Tensor, ...]]:
    """Per batch of the window, its (label, index, valid) tensors on the pipeline's device,
    made for all k batches at once (on CUDA one pinned upload, each at a 64-byte aligned
    offset, instead of one per batch)."""
    b = len(index) // k
    labels = _labels(pipe, index).numpy()
    arrays = [a[j * b : (j + 1) * b] for j in range(k) for a in (labels, index, valid)]
    tensors = placed(arrays, pipe.device)
    return [tuple(tensors[3 * j : 3 * j + 3]) for j in range(k)]


def _labels(pipe: Any, index: np.ndarray) -> torch.Tensor:
    """The batch's labels: gathered from the reader's label table, or those its samples had
    when they were read (kept with the cache)."""
    if pipe._labels is not None:
        return pipe._labels[torch.from_numpy(index)]
    return labels_tensor([pipe._cached[i][0] for i in index.tolist()])
