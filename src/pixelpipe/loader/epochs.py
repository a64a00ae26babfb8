"""A Pipeline's epochs on this rank (`Epochs`): how many batches every epoch has, how many
slots this rank reads in it, and the slots themselves (an indexable reader's order arrays, or
a stream's samples read ahead on a thread). The dataset is checked here at construction: an
empty one, a stream of unknown length over several ranks, or a drop_last that would leave an
epoch without a batch fail before the first batch, naming the numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from .producer import read_ahead
from .sampler import EpochOrder, batches_per_epoch, indexable_epoch, stream_epoch, stream_rank_totals

__all__ = ["Epochs"]


class Epochs:
    """The epochs of `reader` on rank `rank` of `world` (see pixelpipe.loader.sampler).

    Args:
        reader: an indexable or streaming reader.
        seed, shuffle, batch_size, drop_last, fixed_shards, shuffle_buffer: the Pipeline's.
        rank, world: this process's shard.
    """

    def __init__(self, reader: Any, seed: int, shuffle: bool, rank: int, world: int, batch_size: int,
                 drop_last: bool, fixed_shards: bool, shuffle_buffer: int) -> None:
        self.reader, self.seed, self.shuffle, self.rank, self.world = reader, seed, shuffle, rank, world
        self.batch_size, self.drop_last, self.fixed_shards = batch_size, drop_last, fixed_shards
        self.shuffle_buffer = shuffle_buffer
        self.counts = None if reader.indexable else _stream_counts(reader)
        if reader.indexable:
            n = len(reader)
            if n == 0:
                raise ValueError("the dataset is empty")
        elif self.counts is not None:
            n = sum(self.counts)
            if n == 0:
                raise ValueError(f"the dataset is empty: {len(self.counts)} shard(s) hold no samples")
        elif world > 1:
            raise ValueError("a stream of unknown length cannot be sharded over several ranks: they would get "
                             "different numbers of batches; give the reader its length (Iterable(source, length=N)) "
                             "or use tar shards with counts")
        else:
            return
        if drop_last and self.total() == 0:
            raise ValueError(f"drop_last=True leaves no batch: the {n} samples give each of the {world} rank(s) "
                             f"{n // world}, fewer than batch_size={batch_size}; use drop_last=False or a smaller "
                             "batch_size")

    def total(self, epoch: int = 0) -> int | None:
        """Batches of an epoch on every rank (the same every epoch); None for a stream of
        unknown length."""
        if self.reader.indexable:
            return batches_per_epoch(len(self.reader), self.world, self.batch_size, self.drop_last)
        if self.counts is None:
            return None
        return stream_rank_totals(self.counts, self.world, self.batch_size, self.drop_last)[self.rank][1]

    def slots(self, epoch: int = 0) -> int | None:
        """Slots of an epoch on this rank (an indexable reader's order, a stream's samples)."""
        if self.reader.indexable:
            total = self.total()
            assert total is not None
            return total * self.batch_size
        if self.counts is None:
            return None
        return stream_rank_totals(self.counts, self.world, self.batch_size, self.drop_last)[self.rank][0]

    def order(self, epoch: int, stop: threading.Event) -> EpochOrder | Iterator[Any]:
        """This rank's epoch: the order arrays of an indexable reader, or a stream's samples."""
        if self.reader.indexable:
            return indexable_epoch(len(self.reader), self.seed, epoch, self.shuffle, self.rank, self.world,
                                   self.batch_size, self.drop_last, self.fixed_shards)
        names = [str(s) for s in self.reader.shards]
        stream = stream_epoch(self.reader.iter_shard, names, self.counts, self.seed, epoch, self.shuffle,
                              self.rank, self.world, self.shuffle_buffer)
        return read_ahead(stream, 2 * self.batch_size, stop)


def _stream_counts(reader: Any) -> list[int] | None:
    """Samples per shard of a streaming reader, when known."""
    counts = getattr(reader, "counts", None)
    if counts is not None:
        return list(counts)
    try:
        n = len(reader)
    except TypeError:
        return None
    shards = getattr(reader, "shards", [None])
    return [n] if len(shards) == 1 else None
