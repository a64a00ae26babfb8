"""Which samples each rank sees in each epoch: global shuffling, sharding, padding.

Everything here is a pure function of (seed, epoch, rank, world size), so every rank computes
the same global order without talking to the others, and a resumed run recomputes exactly the
order it was in.

Indexable readers get a full permutation of the dataset per epoch (argsort of a per-sample
hash). Rank r takes every world-th sample of it. All ranks yield the same number of batches:
with drop_last=False the shorter ranks and the last batch are filled by repeating samples,
marked invalid; with drop_last=True the tail that does not fill a batch on every rank is left
out of this epoch (a different tail each epoch).

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

import torch

from .random import hash32

_SHUFFLE = 0x51F7  # op ids of the sampler's own draws (distinct from op positions)
_SHARDS = 0x5A4D
_BUFFER = 0xB0FF
_REPLACE = 0x4E71


class Entry(NamedTuple):
    """One slot of an epoch: a dataset index (indexable readers) and whether it is real. A
    named tuple: an epoch makes one per sample, and a tuple is made in a third of a frozen
    dataclass's time."""

    index: int
    valid: bool


def permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """A permutation of range(n), a pure function of (seed, epoch)."""
    keys = hash32(seed, epoch, torch.arange(n, dtype=torch.int64), _SHUFFLE)
    return torch.argsort(keys * n + torch.arange(n), stable=True)


def indexable_epoch(n: int, seed: int, epoch: int, shuffle: bool, rank: int, world: int, batch: int,
                    drop_last: bool) -> list[Entry]:
    """This rank's slots for one epoch: num_batches * batch entries."""
    order = permutation(n, seed, epoch) if shuffle else torch.arange(n)
    mine = order[rank::world].tolist()
    per_rank_min = n // world
    per_rank_max = -(-n // world)
    if drop_last:
        batches = per_rank_min // batch
        return [Entry(i, True) for i in mine[: batches * batch]]
    batches = -(-per_rank_max // batch)
    entries = [Entry(i, True) for i in mine]
    k = 0
    while len(entries) < batches * batch:
        entries.append(Entry(mine[k % len(mine)] if mine else int(order[0]), False))
        k += 1
    return entries


def batches_per_epoch(n: int, world: int, batch: int, drop_last: bool) -> int:
    if drop_last:
        return (n // world) // batch
    per_rank = -(-n // world)  # ceil
    return -(-per_rank // batch)


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
