"""Work ahead of the consumer: the producer goes on into the next epoch when one ends, and makes
batch k+1 (reading, headers, planning) while a finisher thread finishes batch k, on the CPU
too. None of it may show: every epoch equals a fresh pipeline started at that epoch, bit for
bit; errors and exceptions of an epoch reach the consumer in that epoch; load_state_dict,
break and close discard what was made ahead.

The hooks that make the overlap visible are a reader function that records the indices it is
asked for and a Lambda at the end of the transforms (it runs in the finish of each batch).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from corpus import Item, assert_same, assert_script_exits_cleanly, samples, take, within, write_folder, write_tars

from pixelpipe import Lambda, Pipeline, RandomFlip, RandomResizedCrop, Resize, SampleError
from pixelpipe.loader import pipeline as pipeline_module
from pixelpipe.loader.producer import Replay
from pixelpipe.readers import Iterable

SEED = 7
LIMIT = 20  # seconds a call may take before it counts as a hang
OPS = [RandomResizedCrop(12, scale=(0.3, 1.0)), RandomFlip()]
GOOD = [it.data for it in samples(8)]
TRUNCATED = GOOD[3][: len(GOOD[3]) // 2]  # its header reads; decoding it fails (in the finish)
TEXT = b"not an image at all\n" * 4  # fails at the header (in the first half)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Recorder:
    """An indexable reader function over GOOD (label i % 3) that records every index read;
    `bad` maps an index to the bytes it gives instead, from the read numbered `from_read` on."""

    def __init__(self, bad: dict[int, bytes] | None = None, from_read: int = 0) -> None:
        self.reads: list[int] = []
        self.bad = bad or {}
        self.from_read = from_read

    def __call__(self, i: int) -> tuple[bytes, int]:
        self.reads.append(i)
        if i in self.bad and len(self.reads) > self.from_read:
            return self.bad[i], i % 3
        return GOOD[i], i % 3


class Calls:
    """A Lambda's function that counts the batches it sees (and can run a hook first)."""

    def __init__(self, hook: Callable[[int], None] | None = None) -> None:
        self.count = 0
        self.hook = hook

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.hook is not None:
            self.hook(self.count)
        self.count += 1
        return x


def recorded(rec: Recorder, calls: Calls, **kw: object) -> Pipeline:
    args: dict = {"batch_size": 4, "seed": SEED, "num_threads": 1}
    args.update(kw)
    return Pipeline(Iterable(rec, length=len(GOOD)), [Resize((8, 8)), Lambda(calls)], **args)


def epoch_start(epoch: int, pipe: Pipeline) -> dict:
    """The state of a pipeline that has just finished epoch - 1 (for epoch 0: a fresh one)."""
    return {"epoch": epoch - 1, "cursor": 0, "batches": 0, "finished": True, "seed": pipe.seed,
            "batch_size": pipe.batch_size, "shard": (pipe.rank, pipe.world), "errors": []}


# ----------------------------------------------------------------------------- ahead
def test_the_next_epoch_is_made_before_it_is_asked_for() -> None:
    rec, calls = Recorder(), Calls()
    with recorded(rec, calls, prefetch=2) as pipe:
        first = list(pipe)
        assert len(first) == 2 and pipe.epoch == 0
        # epoch 1's first batch is read and finished while the consumer has not asked for it
        assert wait_for(lambda: calls.count >= 3)
        assert pipe.epoch == 0 and sorted(rec.reads[:8]) == list(range(8))
        ahead = list(rec.reads[8:12])
        second = list(pipe)
        assert pipe.epoch == 1
        assert ahead == second[0]["index"].tolist()
    with recorded(Recorder(), Calls(), prefetch=2) as fresh:
        fresh.load_state_dict(epoch_start(1, fresh))
        assert_same(list(fresh), second)


def test_the_next_batch_is_read_while_the_one_before_is_finished() -> None:
    """On the CPU, the finish of batch k (here: its Lambda) runs while the producer reads batch
    k+1, and across the epoch boundary: epoch 1's first batch is read while epoch 0's last is
    finished (2 batches of 4 per epoch)."""
    rec = Recorder()
    overlapped: list[bool] = []

    def wait_for_next_read(k: int) -> None:  # the k-th finish waits for batch k+1's reads
        overlapped.append(wait_for(lambda: len(rec.reads) >= 4 * (k + 2), seconds=2))

    with recorded(rec, Calls(wait_for_next_read), shuffle=False, prefetch=2) as pipe:
        epochs = [within(LIMIT, lambda: list(pipe)) for _ in range(2)]
    assert overlapped[:4] == [True] * 4
    assert [b["index"].tolist() for e in epochs for b in e] == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2


def folder_or_tars(tmp_path: Path, kind: str, bad_at: int) -> object:
    """22 samples of 3 classes, sample `bad_at` truncated (decoding it fails in the finish);
    with bad_at=20 (Folder: the last file of the last class) or 21 (tars) it has the last index."""
    items = samples(22, classes=3)
    items[bad_at] = Item(items[bad_at].data[: len(items[bad_at].data) // 2], items[bad_at].label)
    if kind == "folder":
        write_folder(tmp_path / "data", items)
        return str(tmp_path / "data")
    paths, _ = write_tars(tmp_path, items, shards=3, sort=False)
    return paths


@pytest.mark.parametrize("kind, shuffle, on_error", [
    ("folder", False, "skip"), ("folder", False, "replace"), ("folder", True, "skip"),
    ("folder", True, "replace"), ("tars", False, "skip"), ("tars", True, "skip"),
])
@pytest.mark.parametrize("prefetch", [1, 3])
def test_epochs_made_ahead_equal_fresh_pipelines_at_each_epoch(tmp_path: Path, kind: str, shuffle: bool,
                                                               on_error: str, prefetch: int) -> None:
    # without shuffling the bad sample is in each epoch's last batch: its finish fails after
    # the next epoch's first batch was made, and the producer goes back into the epoch before
    reader = folder_or_tars(tmp_path, kind, bad_at=21 if kind == "tars" else 20)

    def build() -> Pipeline:
        return Pipeline(reader, list(OPS), batch_size=4, seed=SEED, shuffle=shuffle, on_error=on_error,
                        num_threads=2, prefetch=prefetch, shuffle_buffer=8)

    reference, errors = [], []
    for epoch in range(3):
        with build() as fresh:
            fresh.load_state_dict(epoch_start(epoch, fresh))
            reference.append(within(LIMIT, lambda: list(fresh)))
            errors.append(list(fresh.errors))
    assert all(e == errors[0] and len(e) == 1 for e in errors)
    with build() as pipe:
        for epoch in range(3):
            assert_same(within(LIMIT, lambda: list(pipe)), reference[epoch])
            assert pipe.errors == pipe.epoch_errors == errors[0]  # each epoch meets it; listed once


# ----------------------------------------------------------------------------- state, errors
def test_load_state_dict_discards_what_was_made_ahead() -> None:
    def build(rec: Recorder) -> Pipeline:
        return recorded(rec, Calls(), prefetch=3)

    with build(Recorder()) as full:
        reference = [list(full) for _ in range(3)]
    with build(Recorder()) as cut:
        take(cut, 1)
        mid = cut.state_dict()  # after epoch 0's first batch
    with build(Recorder()) as cut:
        list(cut)
        end = cut.state_dict()  # after epoch 0's last batch
        assert end["finished"] and end["epoch"] == 0
    rec = Recorder()
    with build(rec) as pipe:
        assert_same(list(pipe), reference[0])
        assert wait_for(lambda: len(rec.reads) >= 16)  # epoch 1 is made ahead
        pipe.load_state_dict(mid)
        assert pipe.epoch == 0
        assert_same(list(pipe), reference[0][1:])
        assert_same(list(pipe), reference[1])
        assert wait_for(lambda: len(rec.reads) >= 16 + 8 + 8)  # and now epoch 2
        pipe.load_state_dict(end)
        assert_same(list(pipe), reference[1])
        pipe.load_state_dict(epoch_start(0, pipe))
        assert_same(list(pipe), reference[0])
        assert pipe.epoch == 0


@pytest.mark.parametrize("bad", [TRUNCATED, TEXT], ids=["fails_in_finish", "fails_in_prepare"])
def test_errors_of_the_next_epoch_are_listed_when_its_batches_arrive(bad: bytes) -> None:
    rec, calls = Recorder({1: bad}), Calls()
    with recorded(rec, calls, shuffle=False, on_error="skip", prefetch=2) as pipe:
        # the short last batch is padded with the epoch's first readable sample
        assert [b["index"].tolist() for b in pipe] == [[0, 2, 3, 4], [5, 6, 7, 0]]
        assert [e[0] for e in pipe.errors] == [1]
        assert wait_for(lambda: calls.count >= 3)  # epoch 1's first batch, with its error, is made
        time.sleep(0.05)
        assert [e[0] for e in pipe.errors] == [1]
        assert pipe.state_dict()["errors"] == pipe.errors
        it = iter(pipe)
        assert next(it)["index"].tolist() == [0, 2, 3, 4]
        assert [e[0] for e in pipe.errors] == [1]  # once, though each epoch meets it
        assert [e[0] for e in pipe.epoch_errors] == [1]  # epoch 1's, arrived with its batch


def test_an_error_of_the_next_epoch_is_raised_in_it() -> None:
    # sample 2 turns bad from its second read on: in epoch 1, made while epoch 0 is consumed
    rec = Recorder({2: TEXT}, from_read=len(GOOD))
    with recorded(rec, Calls(), shuffle=False, on_error="raise", prefetch=2) as pipe:
        assert len(within(LIMIT, lambda: list(pipe))) == 2
        assert wait_for(lambda: len(rec.reads) > len(GOOD))
        time.sleep(0.05)
        assert pipe.errors == []
        it = iter(pipe)
        with pytest.raises(SampleError, match="iterable\\[2\\]"):
            within(LIMIT, lambda: next(it))
        assert [e[0] for e in pipe.errors] == [2]
        assert pipe.epoch == 1


@pytest.mark.parametrize("on_error, expected", [
    ("skip", [[0, 1], [2, 4], None]), ("raise", [[0, 1], "sample 3: iterable\\[3\\]"]),
])
def test_a_failed_finish_is_made_again_before_a_stream_error_read_ahead(on_error: str, expected: list) -> None:
    """Sample 3's decode fails in its batch's finish, after the producer read on into the
    stream's error: the batch is made again in one piece (the policy applies) and the stream
    error, replayed, comes after it, as when every batch is made in one piece (under "skip"
    it is listed: the stream broke off at sample 5)."""

    class Failing:
        def __iter__(self):
            yield from ((d, 0) for d in [GOOD[0], GOOD[1], GOOD[2], TRUNCATED, GOOD[4]])
            raise OSError("connection reset after 5")

    with Pipeline(Iterable(Failing()), [Resize((8, 8))], batch_size=2, shuffle=False, on_error=on_error,
                  num_threads=1, prefetch=2) as pipe:
        it = iter(pipe)
        for want in expected[:-1]:
            assert within(LIMIT, lambda: next(it))["index"].tolist() == want
        if expected[-1] is None:
            assert within(LIMIT, lambda: next(it, None)) is None
            assert [e[0] for e in pipe.errors] == [3, 5] and "connection reset" in pipe.errors[1][2]
            return
        with pytest.raises(SampleError, match=expected[-1]):
            within(LIMIT, lambda: next(it))
        assert [e[0] for e in pipe.errors] == [3]


def test_replay_gives_items_and_the_source_error_again() -> None:
    def source():
        yield from "abc"
        raise OSError("gone")

    r = Replay(source())
    assert [next(r), next(r)] == ["a", "b"]
    mark = r.position
    assert next(r) == "c"
    with pytest.raises(OSError):
        next(r)
    r.rewind(mark)
    assert next(r) == "c"
    with pytest.raises(OSError):
        next(r)
    r.forget(mark)
    with pytest.raises(ValueError):
        r.rewind(mark - 1)
    r.rewind(mark)
    assert next(r) == "c"


# ----------------------------------------------------------------------------- leaving early
def test_leaving_an_epoch_early_discards_what_was_made_ahead(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_folder(root, samples(18, classes=2))

    def build() -> Pipeline:
        return Pipeline(str(root), list(OPS), batch_size=4, seed=SEED, num_threads=2, prefetch=3)

    with build() as full:
        reference = [list(full) for _ in range(5)]
    with build() as pipe:
        assert_same(list(pipe), reference[0])
        assert_same(take(pipe, 2), reference[1][:2])  # epoch 1, made ahead, left after 2 batches
        assert_same(take(pipe, len(pipe)), reference[2])  # every batch, but not the end of the epoch
        assert pipe.epoch == 2
        with pytest.raises(KeyError):
            for _ in pipe:  # the consumer raises in epoch 3
                raise KeyError("the training step failed")
        assert_same(list(pipe), reference[4])
        assert pipe.epoch == 4


THREADS = ("pixelpipe-prefetch", "pixelpipe-read-ahead", "pixelpipe-finish", "pixelpipe-decode", "pixelpipe-read")


def ours() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(THREADS) and t.is_alive()}


def test_close_after_an_epoch_stops_every_thread(tmp_path: Path) -> None:
    paths, _ = write_tars(tmp_path, samples(20, classes=2), shards=2)
    before = ours()
    pipe = Pipeline(paths, [Resize((8, 8))], batch_size=4, num_threads=2, prefetch=2)
    list(pipe)
    assert wait_for(lambda: any(t.name == "pixelpipe-read-ahead" for t in ours() - before))  # epoch 1's
    pipe.close()
    assert wait_for(lambda: ours() - before == set(), seconds=5)
    # a closed pipeline can be iterated again (the threads start afresh)
    assert len(within(LIMIT, lambda: list(pipe))) == len(pipe)
    pipe.close()


@pytest.mark.parametrize("kind", ["tars", "folder"])
def test_a_pipeline_dropped_after_an_epoch_lets_its_threads_go(tmp_path: Path, kind: str, monkeypatch) -> None:
    """Without close(): the producer runs into the next epoch, waits AHEAD_IDLE_S for the loop
    to come back, then stops, and the dropped pipeline goes with its threads."""
    monkeypatch.setattr(pipeline_module, "AHEAD_IDLE_S", 0.2)
    if kind == "tars":
        source: object = write_tars(tmp_path, samples(20, classes=2), shards=2)[0]
    else:  # files: read ahead on reader threads too
        write_folder(tmp_path, samples(20, classes=2))
        source = str(tmp_path)
    before = ours()
    for _ in range(2):
        pipe = Pipeline(source, [Resize((8, 8))], batch_size=4, num_threads=2, prefetch=2)
        assert len(list(pipe)) == len(pipe)
        del pipe
    assert wait_for(lambda: gc.collect() >= 0 and ours() - before == set(), seconds=10)


def test_the_epoch_after_the_producer_gave_up_equals_one_made_ahead(monkeypatch) -> None:
    monkeypatch.setattr(pipeline_module, "AHEAD_IDLE_S", 0.1)
    with recorded(Recorder(), Calls(), prefetch=2) as pipe:
        list(pipe)
        assert wait_for(lambda: pipe._producer is not None and pipe._producer.expired)
        second = list(pipe)
        assert pipe.epoch == 1
    with recorded(Recorder(), Calls(), prefetch=2) as fresh:
        fresh.load_state_dict(epoch_start(1, fresh))
        assert_same(list(fresh), second)


def test_with_a_cache_the_epochs_after_the_producer_gave_up_are_the_same(monkeypatch) -> None:
    data = [(it.data, it.label) for it in samples(20)]

    def epochs(idle: float) -> list[list[dict]]:
        monkeypatch.setattr(pipeline_module, "AHEAD_IDLE_S", idle)
        with Pipeline(data, OPS, batch_size=4, seed=SEED, cache="device", num_threads=2) as pipe:
            out = [list(pipe)]
            if idle < 1:
                assert wait_for(lambda: pipe._producer is not None and pipe._producer.expired)
            out += [list(pipe), list(pipe)]
        return out

    gave_up, went_on = epochs(0.05), epochs(100.0)
    for a, b in zip(gave_up, went_on):
        assert_same(a, b)


def test_a_consumer_slower_than_the_idle_limit_within_an_epoch_gets_every_batch(monkeypatch) -> None:
    monkeypatch.setattr(pipeline_module, "AHEAD_IDLE_S", 0.05)
    with recorded(Recorder(), Calls(), prefetch=1) as pipe:
        got = []
        for batch in pipe:
            time.sleep(0.15)  # the producer waits this long for room, mid-epoch: it does not give up
            got.append(batch)
    with recorded(Recorder(), Calls(), prefetch=1) as reference:
        assert_same(got, list(reference))


def test_an_iterator_replaced_by_a_new_one_says_so() -> None:
    """One epoch at a time: iter() again starts the next epoch, and the iterator it replaced
    raises a RuntimeError that says why (two threads iterating one pipeline got an internal
    assertion before)."""
    with recorded(Recorder(), Calls(), prefetch=2) as pipe:
        first = iter(pipe)
        next(first)
        assert len(list(pipe)) == len(pipe) and pipe.epoch == 1
        with pytest.raises(RuntimeError, match="iter\\(pipe\\) was called again"):
            next(first)


def test_close_ends_an_iterator_quietly() -> None:
    with recorded(Recorder(), Calls(), prefetch=2) as pipe:
        running = iter(pipe)
        next(running)
        pipe.close()
        assert list(running) == []


_EXIT_SCRIPT = """
    data = [(jpeg(i % 8), i % 3) for i in range(40)]
    pipes = [pp.Pipeline(data, [pp.RandomResizedCrop(24)], batch_size=4, num_threads=2,
                         prefetch=8, seed=s) for s in range(3)]
    for pipe in pipes:
        for batch in pipe:  # a whole epoch: the producer goes on into the next one
            pass
    print("done")  # and the script ends without pipe.close()
"""


def test_a_script_that_ends_after_an_epoch_exits_cleanly() -> None:
    assert_script_exits_cleanly(_EXIT_SCRIPT)
