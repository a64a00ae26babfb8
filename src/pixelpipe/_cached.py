"""A Pipeline's batches of cached samples, planned several at a time.

Once every sample of the next batches is in the device cache (later epochs), nothing is read
or decoded: a batch is the cache's pixels, a plan, one kernel launch and its labels. Made one
sample at a time, the bookkeeping (a slot, an item and a cache lookup per sample) and planning
(numpy's per-call overhead, the same for 256 numbers as for 2,048) cost more than the launch.
So these batches are planned PLAN_AHEAD at a time from the epoch's order arrays
(`_prefetch.ArraySlots`), split (`Compose.prepare_split`) and handed out one per call, each
with the run state the general path would have left (slots taken, cursor, batches made). A
batch with a sample that is not cached, or an epoch with failed samples, takes the general
path (Pipeline._make). The numbers do not change: every draw is a function of the sample.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from ._collate import collate, labels_tensor
from ._prefetch import ArraySlots, Made, Run

__all__ = ["PLAN_AHEAD", "cached_batch"]

PLAN_AHEAD = 8  # batches planned in one go


def cached_batch(pipe: Any, run: Run, side: Any, make_items: Callable[[np.ndarray, np.ndarray], list[Any]]) -> Made | None:
    """The next batch of run's epoch when its samples are all cached (planned ahead with the
    ones after it), or None: the general path makes it. pipe: the Pipeline (its cache,
    transforms, labels and settings); make_items(index, valid) gives the batch as the
    general path's items, only if a short tail must be padded from it."""
    if not run.ahead and not _plan_ahead(pipe, run, side):
        return None
    index, valid, prepared = run.ahead.popleft()
    saved = run.save()
    b = len(index)
    run.slots.skip(b)
    run.cursor += b
    run.made += 1
    run.last = lambda: make_items(index, valid)
    labels = _labels(pipe, index)
    device = pipe.device

    def work() -> dict[str, Any]:
        return collate(pipe.transforms.finish(prepared), index, valid, labels, device)

    return Made(run, work, saved, run.cursor, run.made, run.take_errors())


def _plan_ahead(pipe: Any, run: Run, side: Any) -> bool:
    """Plan up to PLAN_AHEAD whole batches from the slots into run.ahead; whether any."""
    slots = run.slots
    if pipe._cache is None or run.pending or run.failed or not isinstance(slots, ArraySlots):
        return False
    b = pipe.batch_size
    left = PLAN_AHEAD if run.total is None else min(PLAN_AHEAD, run.total - run.made)
    index, valid = slots.peek(left * b)
    rows = pipe._cache.rows_of(index)
    missing = rows < 0
    k = (int(np.argmax(missing)) if missing.any() else len(index)) // b  # whole batches before one
    if k == 0:
        return False
    index, valid, rows = index[: k * b], valid[: k * b], rows[: k * b]
    with torch.cuda.stream(side) if side is not None else nullcontext():
        parts = pipe.transforms.prepare_split(pipe._cache.batch_rows(rows), pipe.seed, run.epoch, index, k)
    for j, prepared in enumerate(parts):
        run.ahead.append((index[j * b : (j + 1) * b], valid[j * b : (j + 1) * b], prepared))
    return True


def _labels(pipe: Any, index: np.ndarray) -> torch.Tensor:
    """The batch's labels: gathered from the reader's label table, or those its samples had
    when they were read (kept with the cache)."""
    if pipe._labels is not None:
        return pipe._labels[torch.from_numpy(index)]
    return labels_tensor([pipe._cached[i][0] for i in index.tolist()])
