"""Pipeline: batch fields, labels and global indices, len, padding and drop_last, sharding,
per-sample augmentation whatever the batch size, epochs, exact resume, threads and close().

Expected images never come from the pipeline alone: a sample's image is checked against
Compose applied to that file's bytes with the same (seed, epoch, index), and a resumed run
against an uninterrupted one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from corpus import (
    Item,
    assert_same,
    assert_script_exits_cleanly,
    prefetch_threads,
    samples,
    take,
    within,
    write_filelist,
    write_folder,
    write_tars,
)

from pixelpipe import ColorJitter, Compose, Pipeline, RandomFlip, RandomResizedCrop, Resize
from pixelpipe.readers import FileList, Memory, TarShards

SEED = 5
OPS = (RandomResizedCrop(20, scale=(0.25, 1.0)), RandomFlip(), ColorJitter(0.4, 0.4, 0.4))


def make(reader: object, **kw: object) -> Pipeline:
    args: dict = {"batch_size": 4, "seed": SEED, "num_threads": 2}
    args.update(kw)
    return Pipeline(reader, Compose(list(OPS)), **args)


REFERENCE = Compose(list(OPS))


def expected(item: Item, index: int, epoch: int) -> torch.Tensor:
    """The augmented image of one sample, made by Compose alone, on its own."""
    return REFERENCE([item.data], seed=SEED, epoch=epoch, indices=[index])[0]


def ceil(a: int, b: int) -> int:
    return -(-a // b)


def valid(batches: list[dict]) -> list[int]:
    return [i for b in batches for i in b["index"][b["valid"]].tolist()]


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, list[Item]]:
    """30 images in 4 class folders, and the items in Folder index order."""
    root = tmp_path / "train"
    return root, write_folder(root, samples(30, classes=4))


# ----------------------------------------------------------------------------- batches
def test_folder_batches_hold_the_indexed_samples_and_their_class(folder: tuple[Path, list[Item]]) -> None:
    root, items = folder
    with make(str(root), batch_size=4) as pipe:
        batches = list(pipe)
    assert pipe.epoch == 0 and len(batches) == 8  # 30 samples -> 7 full batches and 2 padded
    for b in batches:
        assert b.keys() == {"image", "label", "index", "valid"}
        assert b["image"].dtype == torch.float32 and b["image"].shape == (4, 3, 20, 20)
        assert b["label"].dtype == torch.int64 and b["label"].shape == (4,)
        assert b["index"].dtype == torch.int64 and b["valid"].dtype == torch.bool
        for img, label, i in zip(b["image"], b["label"].tolist(), b["index"].tolist()):
            assert label == items[i].label  # the class folder the file lies in
            assert torch.equal(img, expected(items[i], i, epoch=0))
    assert sorted(valid(batches)) == list(range(30))
    assert sum((~b["valid"]).sum().item() for b in batches) == 2


def test_filelist_multilabel_gives_b_by_k_labels(tmp_path: Path) -> None:
    items = [Item(it.data, (k % 3, k % 5, 100 + k)) for k, it in enumerate(samples(13))]
    path, items = write_filelist(tmp_path, items)
    assert FileList(path).labels.shape == (13, 3)
    with make(str(path), batch_size=5) as pipe:
        batches = list(pipe)
    assert len(batches) == 3
    for b in batches:
        assert b["label"].shape == (5, 3) and b["label"].dtype == torch.int64
        for img, label, i in zip(b["image"], b["label"].tolist(), b["index"].tolist()):
            assert tuple(label) == items[i].label
            assert torch.equal(img, expected(items[i], i, epoch=0))
    assert sorted(valid(batches)) == list(range(13))


def test_samples_without_labels_get_minus_one() -> None:
    data = [it.data for it in samples(6)]
    with make(Memory(data), batch_size=3) as pipe:
        labels = torch.cat([b["label"] for b in pipe])
    assert labels.tolist() == [-1] * 6


@pytest.mark.parametrize("n, batch, drop_last, batches", [
    (29, 4, False, 8), (29, 4, True, 7), (32, 4, False, 8), (32, 4, True, 8), (3, 5, False, 1),
    (3, 5, True, 0),
])
def test_len_padding_and_drop_last(n: int, batch: int, drop_last: bool, batches: int) -> None:
    items = samples(n)
    if batches == 0:  # an epoch without a batch is refused, naming the numbers
        with pytest.raises(ValueError, match="drop_last=True leaves no batch.*batch_size=5"):
            Pipeline(Memory([(it.data, it.label) for it in items]), [Resize((8, 8))], batch_size=batch,
                     drop_last=drop_last)
        return
    with Pipeline(Memory([(it.data, it.label) for it in items]), [Resize((8, 8))], batch_size=batch,
                  seed=1, drop_last=drop_last, num_threads=1) as pipe:
        assert len(pipe) == batches
        for _ in range(2):  # every epoch
            out = list(pipe)
            assert len(out) == batches == len(pipe)
            assert all(b["image"].shape[0] == batch for b in out)
            seen = valid(out)
            assert len(seen) == len(set(seen))
            if drop_last:
                assert all(b["valid"].all() for b in out) and len(seen) == batches * batch
            else:
                assert sorted(seen) == list(range(n))
                pads = [i for b in out for i in b["index"][~b["valid"]].tolist()]
                assert len(pads) == batches * batch - n and set(pads) <= set(seen)


# ----------------------------------------------------------------------------- sharding
@pytest.mark.parametrize("cache", [None, "device"])
def test_fixed_shards_keep_each_ranks_samples(cache: str | None) -> None:
    """fixed_shards (the default with a cache): each rank sees the same samples every epoch,
    in a new order, all ranks together every sample once; so each rank caches its share only.
    Without it, the shares change from epoch to epoch."""
    n, batch, world = 40, 4, 4
    reader = Memory([(it.data, it.label) for it in samples(n)])
    for fixed in (True, False):
        pipes = [Pipeline(reader, [Resize((8, 8))], batch_size=batch, seed=2, shard=(r, world), num_threads=1,
                          cache=cache, fixed_shards=None if cache and fixed else fixed) for r in range(world)]
        assert all(p.fixed_shards is fixed for p in pipes)
        epochs = [[valid(list(p)) for p in pipes] for _ in range(3)]
        for per_rank in epochs:
            assert sorted(i for rank in per_rank for i in rank) == list(range(n))
        same = all(set(epochs[e][r]) == set(epochs[0][r]) for e in (1, 2) for r in range(world))
        assert same is fixed
        if fixed:
            assert any(epochs[1][r] != epochs[0][r] for r in range(world))  # reshuffled within
            if cache:
                assert all(len(p._cache.cache) == n // world for p in pipes)
        for p in pipes:
            p.close()


def test_a_state_saved_with_other_fixed_shards_is_refused() -> None:
    """fixed_shards changes every rank's order: resuming across it would not continue the
    same epoch."""
    reader = Memory([(it.data, it.label) for it in samples(12)])
    saved = Pipeline(reader, [Resize((8, 8))], batch_size=2, shard=(0, 2), num_threads=1, fixed_shards=True)
    take(saved, 1)
    state = saved.state_dict()
    saved.close()
    with Pipeline(reader, [Resize((8, 8))], batch_size=2, shard=(0, 2), num_threads=1) as other:
        with pytest.raises(ValueError, match="fixed_shards=True"):
            other.load_state_dict(state)
    with Pipeline(reader, [Resize((8, 8))], batch_size=2, shard=(0, 2), num_threads=1, fixed_shards=True) as same:
        same.load_state_dict(state)
        assert same.epoch == 0


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shards_see_every_sample_once(world: int, drop_last: bool) -> None:
    n, batch = 29, 3
    reader = Memory([(it.data, it.label) for it in samples(n)])
    pipes = [Pipeline(reader, [Resize((8, 8))], batch_size=batch, seed=2, shard=(r, world),
                      drop_last=drop_last, num_threads=1) for r in range(world)]
    dropped = []
    for _ in range(2):
        epochs = [list(p) for p in pipes]
        counts = {len(e) for e in epochs} | {len(p) for p in pipes}
        assert len(counts) == 1  # every rank makes len(pipe) batches, the same number
        per_rank = n // world // batch if drop_last else ceil(ceil(n, world), batch)
        assert counts == {per_rank}
        seen = [i for e in epochs for i in valid(e)]
        assert len(seen) == len(set(seen))  # no sample on two ranks, or twice on one
        if drop_last:
            assert all(b["valid"].all() for e in epochs for b in e)
            assert len(seen) == world * per_rank * batch
            dropped.append(set(range(n)) - set(seen))
        else:
            assert sorted(seen) == list(range(n))
    for p in pipes:
        p.close()
    if drop_last:
        assert dropped[0] != dropped[1]  # a different tail is left out each epoch


# ----------------------------------------------------------------------------- randomness
def test_same_augmentation_whatever_the_batch_size(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    images: list[dict[int, torch.Tensor]] = []
    for batch in (4, 7):
        with make(str(root), batch_size=batch) as pipe:
            list(pipe)  # epoch 0
            got = {}
            for b in pipe:  # epoch 1
                for img, i, ok in zip(b["image"], b["index"].tolist(), b["valid"].tolist()):
                    if ok:
                        got[i] = img
        images.append(got)
    assert images[0].keys() == images[1].keys() == set(range(30))
    for i in range(30):
        assert torch.equal(images[0][i], images[1][i]), f"sample {i}"


def test_epochs_change_the_augmentation(folder: tuple[Path, list[Item]]) -> None:
    root, items = folder
    with make(str(root), batch_size=6) as pipe:
        per_epoch = []
        for _ in range(2):
            per_epoch.append({i: img for b in pipe for img, i in zip(b["image"], b["index"].tolist())})
    differ = sum(not torch.equal(per_epoch[0][i], per_epoch[1][i]) for i in range(30))
    assert differ == 30
    assert torch.equal(per_epoch[1][3], expected(items[3], 3, epoch=1))


def test_threads_and_prefetch_do_not_change_the_bits(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    runs = []
    for threads, prefetch in ((1, 1), (2, 4)):
        with make(str(root), num_threads=threads, prefetch=prefetch) as pipe:
            runs.append(list(pipe) + list(pipe))
    assert_same(runs[0], runs[1])


# ----------------------------------------------------------------------------- resume
def resumed(build, batches_before: int, epochs_before: int = 0, epochs_after: int = 1) -> tuple[list, list]:
    """(what an uninterrupted pipeline yields after `epochs_before` epochs and
    `batches_before` batches, up to the end of `epochs_after` more epochs; what a fresh
    pipeline restored from the state saved at that point yields over the same span)."""
    with build() as full:
        for _ in range(epochs_before):
            list(full)
        first = list(full)
        reference = first[batches_before:] + [b for _ in range(epochs_after) for b in full]
    with build() as cut:
        for _ in range(epochs_before):
            list(cut)
        assert_same(take(cut, batches_before), first[:batches_before])
        state = cut.state_dict()
    with build() as restored:
        restored.load_state_dict(state)
        assert restored.epoch == epochs_before
        out = list(restored) + [b for _ in range(epochs_after) for b in restored]
    return reference, out


@pytest.mark.parametrize("k", [1, 3, 7])
def test_resume_mid_epoch_and_across_the_epoch_boundary(folder: tuple[Path, list[Item]], k: int) -> None:
    root, _ = folder
    reference, out = resumed(lambda: make(str(root), batch_size=4), k)
    assert len(reference) == (8 - k) + 8
    assert_same(out, reference)


def test_resume_in_a_later_epoch(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    reference, out = resumed(lambda: make(str(root), batch_size=7, drop_last=True), 2, epochs_before=2)
    assert len(reference) == 2 + 4
    assert_same(out, reference)


@pytest.mark.parametrize("shard", [(0, 1), (1, 2)])
@pytest.mark.parametrize("k", [1, 4])
def test_resume_tar_shards(tmp_path: Path, shard: tuple[int, int], k: int) -> None:
    paths, _ = write_tars(tmp_path, samples(40, classes=5), shards=5)
    reference, out = resumed(lambda: make(paths, batch_size=3, shard=shard, shuffle_buffer=8), k)
    assert len(reference) > 2
    assert_same(out, reference)


def test_resume_from_the_end_of_an_epoch_goes_on_with_the_next(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    with make(str(root)) as full:
        list(full)
        state = full.state_dict()  # a checkpoint written after the epoch's last batch
        reference = list(full)
    with make(str(root)) as restored:
        restored.load_state_dict(state)
        assert_same(list(restored), reference)


def test_resume_from_a_fresh_state(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    with make(str(root)) as full:
        state = full.state_dict()
        reference = list(full)
    with make(str(root)) as restored:
        restored.load_state_dict(state)
        assert_same(list(restored), reference)


def test_load_state_dict_refuses_other_settings(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    with make(str(root)) as pipe:
        take(pipe, 2)
        state = pipe.state_dict()
    for kw, name in (({"seed": SEED + 1}, "seed"), ({"batch_size": 5}, "batch_size"),
                     ({"shard": (1, 2)}, "shard")):
        with make(str(root), **kw) as other, pytest.raises(ValueError, match=name):
            other.load_state_dict(state)


# ----------------------------------------------------------------------------- epochs, threads
def test_breaking_off_an_epoch_then_iterating_starts_the_next(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    with make(str(root)) as full:
        reference = [list(full), list(full)]
    with make(str(root)) as pipe:
        assert pipe.epoch == -1
        assert_same(take(pipe, 3), reference[0][:3])
        assert pipe.epoch == 0
        assert_same(list(pipe), reference[1])
        assert pipe.epoch == 1


def test_close_and_with_stop_the_threads(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    before = prefetch_threads()
    decoders = {t for t in threading.enumerate() if t.name.startswith("pixelpipe-decode")}
    pipe = make(str(root), prefetch=1)
    it = iter(pipe)
    next(it)  # the producer now waits on the full queue
    assert len(prefetch_threads() - before) == 1
    pipe.close()
    assert prefetch_threads() - before == set()
    left = {t for t in threading.enumerate() if t.name.startswith("pixelpipe-decode")} - decoders
    assert left == set()
    with make(str(root), prefetch=1) as pipe:
        it = iter(pipe)
        next(it)
        next(it)
        assert len(prefetch_threads() - before) == 1
    assert prefetch_threads() - before == set()


def test_next_after_close_does_not_hang(folder: tuple[Path, list[Item]]) -> None:
    root, _ = folder
    pipe = make(str(root), prefetch=1)
    it = iter(pipe)
    next(it)
    pipe.close()
    rest = within(2, lambda: list(it))  # StopIteration or an error, never a hang
    assert isinstance(rest, list)


_EXIT_SCRIPT = """
    data = [(jpeg(i % 8), i % 3) for i in range(200)]
    pipes = [pp.Pipeline(data, [pp.RandomResizedCrop(24)], batch_size=2, num_threads=2,
                         prefetch=32, seed=s) for s in range(4)]
    for pipe in pipes:
        for batch in pipe:
            break  # e.g. max_steps reached; the script ends without pipe.close()
    print("done")
"""


def test_a_script_that_breaks_out_of_the_loop_exits_cleanly() -> None:
    assert_script_exits_cleanly(_EXIT_SCRIPT)


def test_len_of_tar_shards_is_the_next_epochs_batch_count(tmp_path: Path) -> None:
    # 3 shards of 9, 10 and 9 samples over 2 ranks: a rank gets 1 or 2 whole shards, so the
    # batches per epoch change with the epoch's shard order.
    paths, _ = write_tars(tmp_path, samples(28), shards=3)
    assert TarShards(paths).counts == [9, 10, 9]
    with Pipeline(paths, [Resize((8, 8))], batch_size=3, seed=1, shard=(0, 2), num_threads=1) as pipe:
        for _ in range(3):
            announced = len(pipe)  # what tqdm(pipe) or an LR schedule reads first
            assert len(list(pipe)) == announced


def test_batch_tensors_sit_in_aligned_memory():
    """Zero-copy exports (DLPack to JAX) need 64-byte aligned buffers; label, index and valid
    are collated through numpy, whose buffers may not be."""
    data = [(it.data, it.label) for it in samples(6)]
    for _ in range(3):  # several batches: an alignment that holds by chance once would not here
        with Pipeline(Memory(data), [Resize((8, 8))], 3, num_threads=1) as pipe:
            for b in pipe:
                for k in ("label", "index", "valid"):
                    assert b[k].data_ptr() % 64 == 0, k
