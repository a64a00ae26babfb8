"""Shuffling: the epoch order of indexable readers is a permutation that is a pure function of
(seed, epoch); streaming readers (tar shards, iterables) shuffle their shard order per epoch and
mix samples in a buffer, so shards sorted by class still give mixed first batches; streams are
sharded over ranks with every sample seen once per epoch.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from corpus import Item, samples, write_tars

from pixelpipe import Pipeline, Resize
from pixelpipe.readers import Iterable, Memory, TarShards

OPS = [Resize((8, 8))]


def order(pipe: Pipeline) -> list[int]:
    """The valid indices of the next epoch, in the order the batches give them."""
    return [i for b in pipe for i in b["index"][b["valid"]].tolist()]


def first_labels(pipe: Pipeline, batches: int) -> list[int]:
    """Labels of the first batches of the next epoch (the rest is not read)."""
    out: list[int] = []
    for k, b in enumerate(pipe):
        out += b["label"].tolist()
        if k + 1 == batches:
            break
    return out


@pytest.fixture(scope="module")
def memory() -> Memory:
    return Memory([(it.data, it.label) for it in samples(37)])


# ----------------------------------------------------------------------------- indexable
def test_each_epoch_is_a_permutation_fixed_by_seed_and_epoch(memory: Memory) -> None:
    runs = []
    for _ in range(2):  # two pipelines compute the same orders on their own
        with Pipeline(memory, OPS, batch_size=4, seed=9, num_threads=1) as pipe:
            runs.append([order(pipe) for _ in range(3)])
    assert runs[0] == runs[1]
    epochs = runs[0]
    assert all(sorted(e) == list(range(37)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3  # a fresh order every epoch
    assert epochs[0] != list(range(37))
    with Pipeline(memory, OPS, batch_size=4, seed=10, num_threads=1) as other:
        assert order(other) != epochs[0]  # and another one for another seed


def test_the_order_does_not_depend_on_batch_size_or_threads(memory: Memory) -> None:
    orders = []
    for batch, threads, prefetch in ((4, 1, 1), (7, 2, 3), (37, 2, 1)):
        with Pipeline(memory, OPS, batch_size=batch, seed=9, num_threads=threads, prefetch=prefetch) as pipe:
            orders.append([order(pipe) for _ in range(2)])
    assert orders[0] == orders[1] == orders[2]


def test_no_shuffle_reads_in_index_order(memory: Memory) -> None:
    with Pipeline(memory, OPS, batch_size=5, shuffle=False, num_threads=1) as pipe:
        assert order(pipe) == order(pipe) == list(range(37))


# ----------------------------------------------------------------------------- streams
@pytest.fixture(scope="module")
def by_class(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[Item]]:
    """128 samples of 8 classes in 8 tar shards, one class per shard, shards in class order."""
    paths, items = write_tars(tmp_path_factory.mktemp("tars"), samples(128, classes=8), shards=8)
    return paths, items


def mix(labels: list[int]) -> tuple[int, int]:
    """(distinct classes, count of the most frequent one)."""
    counts = collections.Counter(labels)
    return len(counts), max(counts.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tar_shards_sorted_by_class_give_mixed_first_batches(by_class: tuple[list[str], list[Item]],
                                                             seed: int) -> None:
    paths, _ = by_class
    with Pipeline(paths, OPS, batch_size=16, seed=seed, num_threads=2) as pipe:
        classes, top = mix(first_labels(pipe, 2))
    assert classes >= 6 and top <= 10  # of 32 samples; 8 classes of 4 on average
    # a small buffer: shards read 4 at a time, round robin, still mix the first batches
    with Pipeline(paths, OPS, batch_size=16, seed=seed, shuffle_buffer=32, num_threads=2) as pipe:
        classes, top = mix(first_labels(pipe, 2))
    assert classes >= 4 and top <= 16
    # without shuffling the first batch is one class: the checks above can fail
    with Pipeline(paths, OPS, batch_size=16, seed=seed, shuffle=False, num_threads=2) as pipe:
        assert mix(first_labels(pipe, 1)) == (1, 16)


class Sorted:
    """A re-iterable stream of samples sorted by class (a streaming Iterable, one pseudo-shard)."""

    def __init__(self, items: list[Item]) -> None:
        self.items = sorted(items, key=lambda it: it.label)

    def __iter__(self) -> Iterator[tuple[bytes, int]]:
        return ((it.data, it.label) for it in self.items)


def test_a_stream_sorted_by_class_is_mixed_by_the_buffer() -> None:
    reader = Iterable(Sorted(samples(96, classes=8)))
    assert not reader.indexable
    with Pipeline(reader, OPS, batch_size=16, seed=4, num_threads=2) as pipe:
        classes, top = mix(first_labels(pipe, 2))
        assert classes >= 6 and top <= 10
        epoch = order(pipe)  # the next epoch: the whole stream, once
    assert sorted(epoch) == list(range(96))


def test_stream_epochs_are_permutations_fixed_by_seed_and_epoch(by_class: tuple[list[str], list[Item]]) -> None:
    paths, items = by_class
    runs = []
    for _ in range(2):
        with Pipeline(paths, OPS, batch_size=32, seed=3, shuffle_buffer=24, num_threads=2) as pipe:
            runs.append([order(pipe) for _ in range(2)])
    assert runs[0] == runs[1]
    assert all(sorted(e) == list(range(128)) for e in runs[0])
    assert runs[0][0] != runs[0][1]
    # the labels are those of the samples the indices name
    with Pipeline(paths, OPS, batch_size=16, seed=3, num_threads=2) as pipe:
        for b in pipe:
            assert b["label"].tolist() == [items[i].label for i in b["index"].tolist()]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("shards", [3, 5])
def test_tar_shards_are_sharded_over_ranks(tmp_path: Path, world: int, shards: int) -> None:
    """Every sample once per epoch across ranks, and the same number of batches on each,
    with fewer shards than ranks too (then every rank reads every shard)."""
    n, batch = 29, 3
    paths, items = write_tars(tmp_path, samples(n), shards=shards)
    assert sum(TarShards(paths).counts) == n
    pipes = [Pipeline(paths, OPS, batch_size=batch, seed=6, shard=(r, world), shuffle_buffer=16,
                      num_threads=1) for r in range(world)]
    for _ in range(2):
        epochs = []
        for p in pipes:
            it = iter(p)
            announced = len(p)  # for the epoch that iter() started
            epochs.append(list(it))
            assert len(epochs[-1]) == announced
        assert len({len(e) for e in epochs}) == 1
        seen = [i for e in epochs for b in e for i in b["index"][b["valid"]].tolist()]
        assert sorted(seen) == list(range(n))
        for e in epochs:
            for b in e:
                assert b["image"].shape[0] == batch
                assert b["label"].tolist() == [items[i].label for i in b["index"].tolist()]
    for p in pipes:
        p.close()


def test_iterating_a_stream_again_reads_it_again() -> None:
    items = samples(10)
    with Pipeline(Iterable(Sorted(items)), OPS, batch_size=4, seed=1, num_threads=1) as pipe:
        epochs = [order(pipe), order(pipe)]
        assert pipe.epoch == 1
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert epochs[0] != epochs[1]
    images = {}
    with Pipeline(Iterable(Sorted(items)), OPS, batch_size=4, seed=1, num_threads=1) as pipe:
        for b in pipe:
            images.update(zip(b["index"].tolist(), b["image"]))
    expected = torch.stack([images[i] for i in range(10)])
    with Pipeline(Memory([(it.data, it.label) for it in Sorted(items).items]), OPS, batch_size=10,
                  shuffle=False, num_threads=1) as pipe:
        assert torch.equal(next(iter(pipe))["image"], expected)  # index i is the i-th streamed


def test_a_stream_of_known_length_gives_every_rank_the_same_batches() -> None:
    items = samples(10)
    pipes = [Pipeline(Iterable(Sorted(items), length=10), OPS, batch_size=3, seed=1, shard=(r, 3),
                      num_threads=1) for r in range(3)]
    epochs = [order_and_count(p) for p in pipes]
    assert sorted(i for seen, _ in epochs for i in seen) == list(range(10))
    assert [count for _, count in epochs] == [2, 2, 2]  # rank 0 holds 4 samples: 2 batches
    assert [len(p) for p in pipes] == [2, 2, 2]
    for p in pipes:
        p.close()


def order_and_count(pipe: Pipeline) -> tuple[list[int], int]:
    batches = list(pipe)
    return [i for b in batches for i in b["index"][b["valid"]].tolist()], len(batches)
