"""Which samples each rank sees in each epoch: global shuffling, sharding, padding.

Everything here is a pure function of (seed, epoch, rank, world size), so every rank computes
the same global order without talking to the others, and a resumed run recomputes exactly the
order it was in.

Indexable readers get a full permutation of the dataset per epoch (argsort of a per-sample
hash). Rank r takes every world-th sample of it. All ranks yield the same number of batches:
with drop_last=False the shorter ranks and the last batch are filled by repeating samples,
marked invalid; with drop_last=True the tail that does not fill a batch on every rank is left
out of this epoch (a different tail each epoch). With fixed shards (a Pipeline's default when
it caches), rank r instead keeps every world-th sample of one permutation that does not depend
on the epoch, and each epoch shuffles only within it: each rank sees the same samples every
epoch, so each rank's cache holds its share of the dataset, not, after a few epochs, most of it.

Streaming readers (tar shards, iterables) get a shuffled shard order per epoch, whole shards
dealt to ranks when there are enough of them (else every rank reads every shard and keeps
every world-th sample), and a shuffle buffer. How well a buffer mixes: a sample can move at
most about `buffer` positions earlier and, in expectation, `buffer` positions later, so with
shards sorted by class a buffer smaller than a class's run still yields long runs of one class;
the shuffled shard order and round-robin reading of `interleave` shards at a time break
those runs
(see tests/test_pipeline_shuffle.py for the measured class mix of the first batches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import torch

from ..data.random import hash32

_SHUFFLE = 0x51F7  # op ids of the sampler's own draws (distinct from op positions)
_SHARDS = 0x5A4D
_BUFFER = 0xB0FF
_REPLACE = 0x4E71
_PARTITION = 0x9A27


class Entry(NamedTuple):
    """One slot of an epoch: a dataset index (indexable readers) and whether it is real. A
    named tuple: an epoch makes one per sample, and a tuple is made in a third of a frozen
    dataclass's time."""

    index: int
    valid: bool


def permutation(n: int, seed: int, epoch: int, op: int = _SHUFFLE) -> torch.Tensor:
    """A permutation of range(n), a pure function of (seed, epoch, op)."""
    keys = hash32(seed, epoch, torch.arange(n, dtype=torch.int64), op)
    return torch.argsort(keys * n + torch.arange(n), stable=True)


def indexable_epoch(n: int, seed: int, epoch: int, shuffle: bool, rank: int, world: int, batch: int,
                    drop_last: bool, fixed_shards: bool = False) -> EpochOrder:
    """This rank's slots for one epoch: num_batches * batch entries, as arrays. fixed_shards:
    the same samples on this rank every epoch (see the module docstring)."""
    if fixed_shards and world > 1:
        order = permutation(n, seed, 0, _PARTITION).numpy()  # one partition, whatever the epoch
        mine = np.sort(order[rank::world])
        if shuffle:
            mine = mine[permutation(len(mine), seed, epoch).numpy()]
    else:
        order = (permutation(n, seed, epoch) if shuffle else torch.arange(n)).numpy()
        mine = order[rank::world]
    per_rank_min = n // world
    per_rank_max = -(-n // world)
    if drop_last:
        batches = per_rank_min // batch
        mine = mine[: batches * batch]
        return EpochOrder(mine, np.ones(len(mine), dtype=bool))
    batches = -(-per_rank_max // batch)
    pad = batches * batch - len(mine)
    fill = np.resize(mine, pad) if len(mine) else np.full(pad, order[0])  # repeats from the start
    valid = np.concatenate([np.ones(len(mine), dtype=bool), np.zeros(pad, dtype=bool)])
    return EpochOrder(np.concatenate([mine, fill]), valid)


class EpochOrder:
    """An indexable reader's slots for one epoch: sample indices and whether each is real (a
    padding repeat is not), as int64 and bool arrays (a whole epoch is two arrays, not an
    object per sample). Iterating gives Entry items; slicing the arrays gives many at once."""

    def __init__(self, index: np.ndarray, valid: np.ndarray) -> None:
        self.index = np.ascontiguousarray(index, dtype=np.int64)
        self.valid = np.ascontiguousarray(valid, dtype=bool)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k: int) -> Entry:
        return Entry(int(self.index[k]), bool(self.valid[k]))

    def __iter__(self) -> Iterator[Entry]:
        return map(Entry, self.index.tolist(), self.valid.tolist())


def batches_per_epoch(n: int, world: int, batch: int, drop_last: bool) -> int:
    if drop_last:
        return (n // world) // batch
    per_rank = -(-n // world)  # ceil
    return -(-per_rank // batch)


def stream_rank_totals(counts: list[int], seed: int, epoch: int, shuffle: bool, world: int, batch: int,
                       drop_last: bool) -> list[tuple[int, int]]:
    """(samples, batches) of every rank in an epoch of a streaming reader whose shards hold
    `counts` samples: whole shards dealt to ranks when there are enough, else every world-th
    sample; every rank gets the same number of batches (the fewest with drop_last)."""
    order = shard_order(len(counts), seed, epoch, shuffle)
    if len(counts) >= world:
        totals = [sum(counts[s] for s in order[r::world]) for r in range(world)]
    else:
        n = sum(counts)
        totals = [len(range(r, n, world)) for r in range(world)]
    batches = min(t // batch for t in totals) if drop_last else max(-(-t // batch) for t in totals)
    return [(t, batches) for t in totals]


def replacement(index: int, n: int, seed: int, epoch: int, attempt: int) -> int:
    """A deterministic stand-in for a sample that failed (on_error="replace")."""
    h = int(hash32(seed, epoch, index, _REPLACE, attempt))
    other = h % max(n - 1, 1)
    return other + 1 if other >= index else other


def shard_order(n_shards: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    if not shuffle:
        return list(range(n_shards))
    keys = hash32(seed, epoch, torch.arange(n_shards, dtype=torch.int64), _SHARDS)
    return torch.argsort(keys, stable=True).tolist()


def interleaved(iter_shard: Callable[[int, int], Iterator], shards: list[int], width: int) -> Iterator:
    """Samples of `shards`, read `width` shards at a time, round robin (a closed shard is
    replaced by the next one in the list)."""
    todo = list(shards)
    live: list[Iterator] = []
    while todo or live:
        while todo and len(live) < max(1, width):
            live.append(iter(iter_shard(todo.pop(0), 0)))
        still = []
        for it in live:
            try:
                yield next(it)
                still.append(it)
            except StopIteration:
                pass
        live = still


def stream_epoch(iter_shard: Callable[[int, int], Iterator], n_shards: int, seed: int, epoch: int,
                 shuffle: bool, rank: int, world: int, buffer: int, interleave: int = 4) -> Iterator:
    """This rank's samples of one epoch from a streaming reader: shards in a shuffled order,
    `interleave` of them read round robin, then through a shuffle buffer of `buffer` samples."""
    shards = shard_order(n_shards, seed, epoch, shuffle)
    width = interleave if shuffle else 1
    if n_shards >= world:
        def raw() -> Iterator:
            yield from interleaved(iter_shard, shards[rank::world], width)
    else:
        def raw() -> Iterator:
            for k, sample in enumerate(interleaved(iter_shard, shards, width)):
                if k % world == rank:
                    yield sample
    if not shuffle or buffer <= 1:
        yield from raw()
        return
    pool: list = []
    draws = _draw_stream(seed, epoch, rank)
    for sample in raw():
        if len(pool) < buffer:
            pool.append(sample)
            continue
        j = next(draws) % buffer
        out, pool[j] = pool[j], sample
        yield out
    while pool:
        j = next(draws) % len(pool)
        pool[j], pool[-1] = pool[-1], pool[j]
        yield pool.pop()


def _draw_stream(seed: int, epoch: int, rank: int, block: int = 1024) -> Iterator[int]:
    """The shuffle buffer's draws (step k -> hash of (seed, epoch, rank, k)), hashed a block
    at a time: one tensor evaluation per 1024 samples instead of one per sample."""
    start = 0
    while True:
        steps = torch.arange(start, start + block, dtype=torch.int64)
        yield from hash32(seed, epoch, rank, _BUFFER, steps).tolist()
        start += block
