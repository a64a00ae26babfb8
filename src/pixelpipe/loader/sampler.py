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

Streaming readers (tar shards, iterables) get a shuffled shard order per epoch; with several
ranks (the shard sizes are then known) rank r reads the r-th of `world` equal spans of the
samples of the shards in that order: a shard may be split between two ranks (the second one
skips the first one's part), so the ranks' samples differ by at most one however uneven the
shards are, and no rank pads whole batches or drops an epoch while another reads on. A shard
that breaks off mid-way (corrupt, truncated since it was counted, a stream that raises) gives
each sample it lost as a `readers.Unreadable`, for the on_error policy: nothing is dropped
silently. Then a shuffle buffer. How well a buffer mixes: a sample can move at
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
from ..readers import Unreadable

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


def rank_span(n: int, rank: int, world: int) -> tuple[int, int]:
    """[lo, hi): rank's contiguous share of n samples; the shares differ by at most one."""
    return rank * n // world, (rank + 1) * n // world


def stream_rank_totals(counts: list[int], world: int, batch: int, drop_last: bool) -> list[tuple[int, int]]:
    """(samples, batches) of every rank in an epoch of a streaming reader whose shards hold
    `counts` samples: each rank reads its span of the epoch's shards (rank_span), so the ranks'
    samples differ by at most one, whatever the shard sizes; every rank gets the same number
    of batches (the fewest with drop_last). The same every epoch."""
    n = sum(counts)
    totals = [hi - lo for lo, hi in (rank_span(n, r, world) for r in range(world))]
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


def interleaved(pieces: list[Callable[[], Iterator]], width: int) -> Iterator:
    """Samples of `pieces` (each a callable opening one), read `width` at a time, round robin
    (a finished piece is replaced by the next one in the list)."""
    todo = list(pieces)
    live: list[Iterator] = []
    while todo or live:
        while todo and len(live) < max(1, width):
            live.append(iter(todo.pop(0)()))
        still = []
        for it in live:
            try:
                yield next(it)
                still.append(it)
            except StopIteration:
                pass
        live = still


def shard_piece(iter_shard: Callable[[int, int], Iterator], shard: int, skip: int, take: int | None,
                index_of: Callable[[int, int], int], name: str) -> Iterator:
    """Samples skip .. skip + take of a shard (take None: to its end). A shard that raises or
    ends before `take` loses the rest: each lost sample comes out as an Unreadable naming the
    shard, where it broke off and how many samples went with it, for the on_error policy (a
    shard of unknown size gives one Unreadable for the rest)."""
    got, error = 0, None
    it = iter_shard(shard, skip)
    try:
        while take is None or got < take:
            try:
                sample = next(it)
            except StopIteration:
                break
            except Exception as e:  # a broken shard, or any failure of a user's stream
                error = f"{type(e).__name__}: {e}"
                break
            yield sample
            got += 1
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if take is None:
        if error is not None:
            yield Unreadable(name, index_of(shard, skip + got), f"the shard broke off after {skip + got} samples "
                                                                f"({error}); the rest of it is lost (how many is unknown)")
        return
    why = error or "it ended early: changed or truncated since the reader counted it"
    for k in range(got, take):
        yield Unreadable(name, index_of(shard, skip + k), f"lost with the rest of the shard, which broke off after "
                                                          f"{skip + got} samples ({why}): {take - got} samples lost")


def stream_epoch(iter_shard: Callable[[int, int], Iterator], names: list[str], counts: list[int] | None,
                 seed: int, epoch: int, shuffle: bool, rank: int, world: int, buffer: int,
                 interleave: int = 4) -> Iterator:
    """This rank's samples of one epoch from a streaming reader: shards in a shuffled order,
    this rank's span of them (rank_span; with several ranks the counts are known), `interleave`
    pieces read round robin, then through a shuffle buffer of `buffer` samples."""
    order = shard_order(len(names), seed, epoch, shuffle)
    width = interleave if shuffle else 1
    offsets = np.concatenate([[0], np.cumsum(counts)]).tolist() if counts is not None else None

    def index_of(shard: int, position: int) -> int:  # the readers' numbering (readers._tar)
        return offsets[shard] + position if offsets is not None else (shard << 32) | position

    def piece(shard: int, skip: int, take: int | None) -> Callable[[], Iterator]:
        return lambda: shard_piece(iter_shard, shard, skip, take, index_of, names[shard])

    if counts is None:
        pieces = [piece(s, 0, None) for s in order]
    else:
        lo, hi = rank_span(sum(counts), rank, world)
        pieces, start = [], 0
        for s in order:
            a, b = max(lo, start), min(hi, start + counts[s])
            if a < b:
                pieces.append(piece(s, a - start, b - a))
            start += counts[s]

    def raw() -> Iterator:
        yield from interleaved(pieces, width)

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
