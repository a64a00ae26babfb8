"""Failures in a Pipeline's background threads raised in the consumer (never a hang), resuming
with errors on record, and a failed batch made again once, for its failed samples only.

The corpora are Folder trees written by tests/corpus.py (see tests/pipeline_faults.py); every
call that could hang runs under `within` (a thread join with a time limit).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from corpus import (
    encode,
    picture,
    prefetch_threads,
    samples,
    within,
)
from pipeline_faults import BAD, BROKEN, LIMIT, folder_with, make, run, valid

from pixelpipe import Lambda, Pipeline, Resize, SampleError
from pixelpipe.readers import Iterable


# ----------------------------------------------------------------------------- background failures
def test_a_failing_transform_is_raised_in_the_consumer() -> None:
    calls = []

    def explode(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 3:
            raise ZeroDivisionError("boom in batch 3")
        return x

    before = prefetch_threads()
    pipe = Pipeline([(it.data, 0) for it in samples(20)], [Resize((8, 8)), Lambda(explode)],
                    batch_size=4, shuffle=False, num_threads=2, prefetch=1)
    it = iter(pipe)
    first = [within(LIMIT, lambda: next(it)) for _ in range(2)]
    assert [b["index"].tolist() for b in first] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ZeroDivisionError, match="boom in batch 3"):
        within(LIMIT, lambda: next(it))
    assert prefetch_threads() - before == set()  # the producer is gone, nothing left running
    pipe.close()


def test_whatever_a_reader_raises_goes_through_the_policy() -> None:
    """A map-style dataset or a stream raising anything (not only OSError/ValueError): "raise"
    raises it in the consumer naming the sample, "skip" lists it and goes on."""
    data = [it.data for it in samples(10)]

    def read(i: int) -> tuple[bytes, int]:
        if i == 6:
            raise RuntimeError("storage went away at 6")
        return data[i], 0

    with make(Iterable(read, length=10), "raise", shuffle=False) as pipe, \
            pytest.raises(SampleError, match="sample 6: iterable.6.: RuntimeError: storage went away at 6"):
        run(pipe)
    with make(Iterable(read, length=10), "skip", shuffle=False) as pipe:
        assert sorted(valid(run(pipe))) == [i for i in range(10) if i != 6]
    assert [e[:2] for e in pipe.errors] == [(6, "iterable[6]")]

    def stream():  # a streaming reader failing mid-way
        yield from ((d, 0) for d in data[:5])
        raise OSError("connection reset after 5")

    class Restartable:
        def __iter__(self):
            return stream()

    with make(Iterable(Restartable()), "raise") as pipe, pytest.raises(SampleError, match="connection reset"):
        run(pipe)
    with make(Iterable(Restartable()), "skip") as pipe:
        assert sorted(valid(run(pipe))) == list(range(5))
    ((index, source, reason),) = pipe.errors
    assert (index, source) == (5, "iterable") and "broke off after 5 samples" in reason and "connection reset" in reason
    with make(Iterable(Restartable(), length=8), "skip") as pipe:  # known length: each lost sample listed
        assert sorted(valid(run(pipe))) == list(range(5))
    assert [e[0] for e in pipe.errors] == [5, 6, 7] and "3 samples lost" in pipe.errors[0][2]


def test_skip_with_nothing_decodable_raises_instead_of_hanging() -> None:
    pipe = make([(b"this is not an image", 0)] * 6, "skip")
    try:
        with pytest.raises(RuntimeError, match="no readable samples left"):
            within(LIMIT, lambda: list(pipe))
    finally:
        pipe.close()  # stops a spinning producer
    assert len(pipe.errors) == 6


def test_replace_with_nothing_decodable_raises_instead_of_hanging() -> None:
    pipe = make([(BAD["truncated"][0], 0)] * 8, "replace")
    try:
        with pytest.raises(RuntimeError):
            within(LIMIT, lambda: list(pipe))
    finally:
        pipe.close()
    assert len(pipe.errors) <= 8 * 9  # each sample and at most 8 stand-ins


# ----------------------------------------------------------------------------- resume
def resume_with_error(tmp_path: Path, at: int) -> tuple[list[dict], list, list[dict], list]:
    """23 files, the one at index `at` truncated, batches of 3 in file order, on_error="skip".
    Returns the uninterrupted run's batches after the first 5 and its errors (two epochs), then
    the same for a pipeline restored from the state saved after 5 batches, once the producer
    (up to `prefetch` batches ahead) has met the bad file."""
    root, _, bad = folder_with(tmp_path, BAD["truncated"][0], n=23, at=at)

    def build() -> Pipeline:
        return make(str(root), "skip", batch_size=3, shuffle=False, prefetch=2)

    with build() as full:
        reference = run(full) + run(full)
        errors = list(full.errors)
    assert [e[0] for e in errors] == [bad]  # once, though both epochs met it
    with build() as cut:
        it = iter(cut)
        for _ in range(5):
            next(it)
        deadline = time.monotonic() + LIMIT
        while not cut.errors and time.monotonic() < deadline:  # the producer reaches it
            time.sleep(0.01)
        state = cut.state_dict()
    with build() as restored:
        restored.load_state_dict(state)
        out = run(restored) + run(restored)
        return reference[5:], errors, out, list(restored.errors)


def test_resume_with_skipped_errors(tmp_path: Path) -> None:
    tail, errors, out, restored_errors = resume_with_error(tmp_path, at=4)  # in batch 1
    assert len(out) == len(tail) == 3 + 8
    for x, y in zip(out, tail):
        assert all(torch.equal(x[key], y[key]) for key in x)
    assert restored_errors == errors


def test_resume_lists_each_error_once_when_the_producer_is_ahead(tmp_path: Path) -> None:
    tail, errors, out, restored_errors = resume_with_error(tmp_path, at=16)  # in batch 5
    assert len(out) == len(tail)
    for x, y in zip(out, tail):
        assert all(torch.equal(x[key], y[key]) for key in x)
    assert restored_errors == errors


def settled(decoded: list[int], quiet: float = 0.3) -> int:
    """len(decoded) once no decode has been added for `quiet` seconds (at most LIMIT): the
    producer runs on into the next epoch after the last batch is taken, and how far it has got
    when the epoch's loop ends depends on the threads' timing; once it waits on its full queue
    both runs of a comparison have made the same batches ahead."""
    end = time.monotonic() + LIMIT
    seen, since = len(decoded), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.02)
        if len(decoded) != seen:
            seen, since = len(decoded), time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return seen


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_only_the_failed_samples_are_made_again(on_error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose decode fails on some samples keeps the rows it made: only stand-ins (or the
    samples read to fill it) are decoded again, and the batches equal those of a Pipeline that
    makes the batch again in one piece."""
    import pixelpipe.engine.sources as sources

    data = [it.data for it in samples(16)]
    mixed = [(d, 0) for d in data[:2] + BROKEN["body"](data) + data[2:]]
    decoded: list[int] = []
    real = sources.EncodedSource.loader

    def counting(self, *a, **k):  # type: ignore[no-untyped-def]
        load = real(self, *a, **k)
        return lambda i: (decoded.append(i), load(i))[1]

    monkeypatch.setattr(sources.EncodedSource, "loader", counting)
    with make(mixed, on_error, batch_size=8, shuffle=False, prefetch=1, drop_last=True) as pipe:
        kept = run(pipe)
        reused = settled(decoded)
    decoded.clear()
    with make(mixed, on_error, batch_size=8, shuffle=False, prefetch=1, drop_last=True) as pipe:
        finish = pipe.engine.finish
        pipe.engine.finish = lambda prepared, partial=False: finish(prepared)  # the whole batch again
        whole = run(pipe)
        settled(decoded)
    assert len(kept) == len(whole) >= 2
    for a, b in zip(kept, whole):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["valid"], b["valid"])
        assert torch.equal(a["image"], b["image"])
    assert sorted(e[0] for e in pipe.errors) == [2, 3, 4]
    # the whole remake decodes the first batch twice (split, then in one piece with the stand-ins:
    # the failures the split finish named are not looked for again); keeping the made rows
    # decodes it once and then only the 3 samples that take their places
    assert reused <= len(decoded) - 5, (reused, len(decoded))


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_failures_a_finish_names_are_not_decoded_again(on_error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a failed finish makes no rows (a batch with targets; every GPU batch), the failures
    it names go through the policy at once: each undecodable sample is decoded once, not again
    in a one-piece try that only finds it again, and the batches are those of that try."""
    import pixelpipe.engine.sources as sources
    import pixelpipe.loader.pipeline as pipeline

    data = [it.data for it in samples(16)]
    broken = BROKEN["body"](data)
    blobs = data[:2] + broken + data[2:]
    mixed = [{"image": d, "label": 0, "boxes": np.array([[1.0, 2.0, 9.0, 12.0]])} for d in blobs]
    decoded: list[bytes] = []  # the blobs decoded in epoch 0 (the producer may begin epoch 1)
    epoch_of: list[int] = [0]  # the epoch of the batch being prepared
    real = sources.EncodedSource.loader

    def counting(self, *a, **k):  # type: ignore[no-untyped-def]
        load, first = real(self, *a, **k), epoch_of[0] == 0
        return lambda i: (first and decoded.append(self.blobs[i]), load(i))[1]

    monkeypatch.setattr(sources.EncodedSource, "loader", counting)

    def epoch() -> tuple[list[dict], list[bytes]]:
        decoded.clear()
        with make(mixed, on_error, batch_size=8, shuffle=False, prefetch=1, drop_last=True) as pipe:
            prepare = pipe.engine.prepare
            pipe.engine.prepare = lambda *a, **k: (epoch_of.__setitem__(0, a[3]), prepare(*a, **k))[1]
            batches = run(pipe)
            got = list(decoded)
        assert sorted(e[0] for e in pipe.errors) == [2, 3, 4]
        return batches, got

    at_once, once = epoch()
    monkeypatch.setattr(pipeline, "told", lambda finish, items: finish)  # the failures found again
    again, twice = epoch()
    assert len(at_once) == len(again) == 2
    for a, b in zip(at_once, again):
        assert a.keys() == b.keys()
        for key in ("index", "valid", "label", "image"):
            assert torch.equal(a[key], b[key]), key
        assert all(torch.equal(x, y) for x, y in zip(a["boxes"], b["boxes"]))
    assert [once.count(bad) for bad in broken] == [1, 1, 1]
    assert [twice.count(bad) for bad in broken] == [2, 2, 2]
    assert len(once) == len(twice) - 8  # the first batch decoded twice, not three times


def test_made_rows_are_never_handed_to_another_item() -> None:
    """A batch padded again makes new padding items and drops the old ones; an item freed that
    way must not pass its row to a new object that CPython puts at the same address (id)."""
    from dataclasses import replace

    from pixelpipe.loader.reading import Item
    from pixelpipe.loader.remake import MadeRows

    rows = MadeRows()
    made = torch.arange(6.0).reshape(3, 2)
    kept = [Item(None, 0, k, "", True) for k in range(3)]
    for j, it in enumerate(kept):
        rows.add(it, made, j)
    del kept[1:]  # dropped, as pad() drops the padding items it makes again
    # new padding items, made as pad() makes them: with bare ids kept, one lands where a dropped one was
    new = [replace(kept[0], index=100 + k, valid=False) for k in range(200)]
    assert all(rows.get(it) is None for it in new)
    assert rows.get(kept[0]) is not None
    fresh = [Item(None, 0, 7, "", True), kept[0]]
    image = rows.assemble(fresh, [0], torch.full((1, 2), -1.0))
    assert image.tolist() == [[-1.0, -1.0], [0.0, 1.0]]


@pytest.mark.parametrize("decode_thread", [True, False])
def test_a_gpu_batch_failing_in_the_decoder_is_decoded_twice_not_three_times(
        decode_thread: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA (nvImageCodec) a batch whose decode fails on a sample is made again with its
    stand-in, the failure taken from the failed decode: the bad file is decoded once per epoch,
    not once more in a one-piece try that only finds it again; the same batches either way."""
    from pixelpipe.decode.gpu import gpu_decoder_available

    if not gpu_decoder_available():
        pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")')
    import pixelpipe.engine.work as work
    import pixelpipe.loader.pipeline as pipeline

    data = [it.data for it in samples(10)]
    whole = encode(picture(4, size=(160, 200)), "JPEG", quality=90)
    bad = whole[: len(whole) // 3]  # its headers are whole (tables, scan header): it fails in the decoder
    mixed = [(d if k != 4 else bad, 0) for k, d in enumerate(data)]
    tries: list[int] = []  # decodes of batches holding the bad file, in epoch 0
    epoch_of = [0]
    init, decode = work.PendingDecode.__init__, work.PendingDecode.run

    def tagged(self, *a, **k):  # type: ignore[no-untyped-def]
        init(self, *a, **k)
        self.first_epoch = epoch_of[0] == 0

    def counted(self):  # type: ignore[no-untyped-def]
        if self.first_epoch and any(b is bad for b in self.source.blobs):
            tries.append(len(self.source.blobs))
        return decode(self)

    monkeypatch.setattr(work.PendingDecode, "__init__", tagged)
    monkeypatch.setattr(work.PendingDecode, "run", counted)

    def epoch() -> tuple[list[dict], list[int]]:
        tries.clear()
        with Pipeline(mixed, [Resize((16, 16))], batch_size=4, device="cuda", shuffle=False, on_error="skip",
                      decode_thread=decode_thread, prefetch=1) as pipe:
            prepare = pipe.engine.prepare
            pipe.engine.prepare = lambda *a, **k: (epoch_of.__setitem__(0, a[3]), prepare(*a, **k))[1]
            batches = run(pipe)
            assert [e[0] for e in pipe.errors] == [4]
        return batches, list(tries)

    at_once, once = epoch()
    monkeypatch.setattr(pipeline, "told", lambda finish, items: finish)  # the failure found again
    again, twice = epoch()
    for a, b in zip(at_once, again, strict=True):
        for key in ("index", "valid", "label", "image"):
            assert torch.equal(a[key].cpu(), b[key].cpu()), key
    assert once == [4]  # decoded in its batch, then only batches without it
    assert twice == ([4, 4] if decode_thread else [4])  # the decode thread's failure looked for again
