"""A Pipeline's device cache and its batches of cached samples, planned several at a time
(`CachedBatches`).

Once every sample of the next batches is in the device cache (later epochs), nothing is read
or decoded: a batch is the cache's pixels, a plan, one kernel launch and its labels. Made one
sample at a time, the bookkeeping (a slot, an item and a cache lookup per sample) and planning
(numpy's per-call overhead, nearly the same for 256 numbers as for 2,048) cost more than the launch.
So these batches are planned PLAN_AHEAD at a time from the epoch's order arrays
(`producer.ArraySlots`), split (`Engine.prepare_split`) and handed out one per call, each
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

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data.targets import Targets, targets_of
from ..engine import Engine
from ..engine.stats import BatchDecode
from ..plan import Program
from .cache import DeviceCache
from .collate import labels_tensor, placed
from .producer import ArraySlots, Made, Run
from .reading import Item, Record

__all__ = ["PLAN_AHEAD", "CachedBatches", "Planned", "planned_epoch"]

# batches planned in one go. A cached Pipeline on an H100 (500 images, batch 256, 4 alternating
# rounds): 8 against 4 gave rn50 253-327k against 188-248k images/s (8 faster in every round)
# and rich 149-183k against 133-188k (even on average)
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


class CachedBatches:
    """A Pipeline's device cache (`cache`), the records of its samples (`records`, shared with
    the Pipeline's Reading: cached samples are not read again), and its batches planned ahead.

    Args:
        cache: the DeviceCache.
        engine, program: what runs the batches (the Pipeline's engine and planned transforms).
        seed, batch_size, device: the Pipeline's.
        labels: an indexable reader's label table, or None (labels come from the records).
        records: index -> reading.Record of every cached sample.
        epoch_order: epoch -> that epoch's order (sampler.EpochOrder) on this rank.
        indexable: whether an index names the same sample every epoch (not so for streams).
    """

    def __init__(self, cache: DeviceCache, engine: Engine, program: Program, seed: int, batch_size: int,
                 device: torch.device, labels: Any, records: dict[int, Record],
                 epoch_order: Callable[[int, Any], Any], indexable: bool) -> None:
        self.cache, self.engine, self.program = cache, engine, program
        self.seed, self.batch_size, self.device = seed, batch_size, device
        self.labels, self.records, self.epoch_order, self.indexable = labels, records, epoch_order, indexable

    def next_batch(self, run: Run, side: Any, wrap: Callable[..., dict[str, Any]]) -> Made | None:
        """The next batch of run's epoch when its samples are all cached (planned ahead with
        the ones after it), or None: the general path makes it. wrap(batch, tensors, targets)
        finishes the batch dict (the Pipeline's collate and batch ops)."""
        if not run.ahead and not self._plan_ahead(run, side):
            return None
        index, valid, prepared, tensors = run.ahead.popleft()
        saved = run.save()
        b = len(index)
        run.slots.skip(b)
        run.cursor += b
        run.made += 1
        engine = self.engine

        def work() -> dict[str, Any]:
            return wrap(engine.finish(prepared), tensors, index, prepared.epoch)

        record = BatchDecode(cached=b)
        return Made(run, work, saved, run.cursor, run.made, run.take_errors(), record=lambda: record)

    def items(self, index: np.ndarray, valid: np.ndarray) -> list[Item]:
        """A batch of cached samples as items, from their records."""
        out = []
        for i, v in zip(index.tolist(), valid.tolist()):
            r = self.records[i]
            out.append(Item(None, r.label, i, r.source, v, targets=r.targets))
        return out

    def batch_for(self, items: Sequence[Item]) -> tuple[Any, BatchDecode]:
        """The batch as a view of the device cache, decoding (whole images) what is missing,
        with nvImageCodec on CUDA, and how its samples were decoded (samples given decoded
        count as neither decoded nor cached)."""
        engine = self.engine
        decoder = engine.gpu_decoder(self.device) if self.device.type == "cuda" else None
        if self.cache.max_side is not None:
            for it in items:
                if it.targets:
                    raise ValueError(f"{it.source}: cache_max_side shrinks cached images, and its boxes, keypoints "
                                     "or masks would not follow; leave cache_max_side unset for samples with targets")

        def decode_many(blobs: list[bytes]) -> tuple[list[torch.Tensor], list[int], list[str]]:
            batch, fallback, reasons = decoder.decode_regions(blobs)
            return batch.tolist(), fallback, reasons

        batch, record = self.cache.batch_for(items, engine.executor().map, engine.max_pixels,
                                             decode_many if decoder is not None else None)
        if self.indexable:  # an index names the same sample every epoch (not so for streams)
            for it in items:
                if it.data is not None:
                    self.records[it.index] = Record(it.label, it.source, it.targets)
        return batch, record

    def clear(self) -> None:
        self.cache.clear()
        self.records.clear()

    # ----------------------------------------------------------------------------- planning ahead
    def _plan_ahead(self, run: Run, side: Any) -> bool:
        """Plan up to PLAN_AHEAD whole batches from the slots into run.ahead (and, past the end
        of the epoch, into run.later); whether any."""
        slots = run.slots
        if run.pending or run.failed or not isinstance(slots, ArraySlots):
            return False
        b = self.batch_size
        left = PLAN_AHEAD if run.total is None else min(PLAN_AHEAD, run.total - run.made)
        index, valid = slots.peek(left * b)
        epoch = np.full(len(index), run.epoch, dtype=np.int64)
        if run.later is not None and left < PLAN_AHEAD and slots.position + len(index) == len(slots.order):
            index, valid, epoch = self._next_epochs(run, PLAN_AHEAD - left, index, valid, epoch)
        rows = self.cache.rows_of(index)
        missing = rows < 0
        k = (int(np.argmax(missing)) if missing.any() else len(index)) // b  # whole batches before one
        if k == 0:
            return False
        index, valid, rows, epoch = index[: k * b], valid[: k * b], rows[: k * b], epoch[: k * b]
        targets = self._targets(index)
        with torch.cuda.stream(side) if side is not None else nullcontext():
            parts = self.engine.prepare_split(self.program, self.cache.batch_rows(rows), self.seed, epoch, index, k,
                                              targets)
            tensors = self._placed_ahead(index, valid, k)
        for j, prepared in enumerate(parts):
            rows_j = slice(j * b, (j + 1) * b)
            batch = (index[rows_j], valid[rows_j], prepared, tensors[j])
            e = int(epoch[j * b])
            (run.ahead if e == run.epoch else run.later[e].batches).append(batch)  # type: ignore[index]
        return True

    def _next_epochs(self, run: Run, wanted: int, index: np.ndarray, valid: np.ndarray,
                     epoch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The window (index, valid, epoch arrays) continued past run's epoch by up to `wanted`
        whole batches of the epochs after it; each such epoch's order goes into run.later, for
        its run to start from."""
        assert run.later is not None
        b = self.batch_size
        parts = [(index, valid, epoch)]
        e = run.epoch
        while wanted > 0:
            e += 1
            planned = run.later.get(e)
            if planned is None:
                planned = run.later[e] = Planned(self.epoch_order(e, run.stop))
            if planned.batches:  # its first batches are planned already (a run rewound after planning them)
                break
            k = min(wanted, len(planned.order) // b)
            if k == 0:
                break
            order = planned.order
            parts.append((order.index[: k * b], order.valid[: k * b], np.full(k * b, e, dtype=np.int64)))
            wanted -= k
        return tuple(np.concatenate(a) for a in zip(*parts))  # type: ignore[return-value]

    def _targets(self, index: np.ndarray) -> Targets | None:
        """The targets of these cached samples, from their records (None: none has any)."""
        return targets_of([self.records[i].targets for i in index.tolist()])

    def _placed_ahead(self, index: np.ndarray, valid: np.ndarray, k: int) -> list[tuple[torch.Tensor, ...]]:
        """Per batch of the window, its (label, index, valid) tensors on the pipeline's device,
        made for all k batches at once (on CUDA one pinned upload, each at a 64-byte aligned
        offset, instead of one per batch)."""
        b = len(index) // k
        labels = self._labels(index).numpy()
        arrays = [a[j * b : (j + 1) * b] for j in range(k) for a in (labels, index, valid)]
        tensors = placed(arrays, self.device)
        return [tuple(tensors[3 * j : 3 * j + 3]) for j in range(k)]

    def _labels(self, index: np.ndarray) -> torch.Tensor:
        """The batch's labels: gathered from the reader's label table, or those its samples had
        when they were read (kept with the cache)."""
        if self.labels is not None:
            return self.labels[torch.from_numpy(index)]
        return labels_tensor([self.records[i].label for i in index.tolist()])
