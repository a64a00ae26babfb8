"""A Pipeline's reading of samples for a batch: slots to items, the on_error policy (a failed
sample is recorded once per epoch, then raised, skipped or replaced by a deterministic other
sample), and the padding of an epoch's short last batch. pipe: the Pipeline (its reader,
cache records, labels, policy and sizes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..compose import SampleError
from .producer import Run
from .sampler import Entry, replacement

__all__ = ["Item", "fail", "fill", "pad", "read"]


@dataclass
class Item:
    """A sample read for a batch (data None when its pixels are in the device cache)."""

    data: Any
    label: Any
    index: int
    source: str
    valid: bool
    attempt: int = 0  # how many replacements led here (on_error="replace")


def fill(pipe: Any, run: Run) -> bool:
    """Read slots until a batch is pending (reading errors go through the policy here);
    whether the slots ran out."""
    while len(run.pending) < pipe.batch_size:
        slot = next(run.slots, None)
        if slot is None:
            return True
        run.cursor += 1
        if isinstance(slot, Entry) and slot.index in run.failed:
            continue  # a padding repeat of a sample that already failed this epoch
        item = read(pipe, run, slot)
        if item is not None:
            run.pending.append(item)
    return False


def read(pipe: Any, run: Run, slot: Any, attempt: int = 0) -> Item | None:
    """One slot as an item: from the cache's records, the reader, or (a failure) the policy."""
    if isinstance(slot, Entry):
        if slot.index in run.failed:
            return substitute(pipe, run, slot.index, slot.valid, attempt)
        known = pipe._cached.get(slot.index)
        if known is not None:  # in the cache: nothing to read
            return Item(None, known[0], slot.index, known[1], slot.valid, attempt)
        try:
            s = pipe.reader.read(slot.index)
        except (OSError, ValueError) as e:
            return fail(pipe, run, slot.index, pipe.reader.sources(slot.index), str(e), slot.valid, attempt)
        label = pipe._labels[slot.index] if pipe._labels is not None else s.label
        return Item(s.data, label, slot.index, s.source, slot.valid, attempt)
    return Item(slot.data, slot.label, slot.index, slot.source, True)


def fail(pipe: Any, run: Run, index: int, source: str, reason: str, valid: bool, attempt: int) -> Item | None:
    """Record a failed sample once per epoch and apply the policy."""
    if index not in run.failed:
        run.failed.add(index)
        run.errors.append((index, source, reason))
    if pipe.on_error == "raise":
        raise SampleError(index, f"{source}: {reason}")
    return substitute(pipe, run, index, valid, attempt)


def substitute(pipe: Any, run: Run, index: int, valid: bool, attempt: int) -> Item | None:
    """on_error="replace": a deterministic other sample (at most 8 tries); else nothing."""
    if pipe.on_error != "replace" or not pipe.reader.indexable or attempt >= 8:
        return None
    other = replacement(index, len(pipe.reader), pipe.seed, run.epoch, attempt)
    return read(pipe, run, Entry(other, valid), attempt + 1)


def pad(pipe: Any, run: Run) -> None:
    """Fill the epoch's last batch by repeating samples (marked invalid)."""
    last = run.last() if callable(run.last) else run.last
    pool = [it for it in run.pending + last if it.index not in run.failed]
    if not pool:
        raise RuntimeError(f"rank {pipe.rank} has no readable samples left to fill its batches "
                           f"({len(run.failed)} failed this epoch; see pipe.errors)")
    k = 0
    while len(run.pending) < pipe.batch_size:
        it = pool[k % len(pool)]
        run.pending.append(Item(it.data, it.label, it.index, it.source, False))
        k += 1
