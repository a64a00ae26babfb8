"""Bad input, nothing lost silently: on_error="raise" | "skip" | "replace", `pipe.errors`, failures
in the background thread raised in the consumer (never a hang), and datasets refused at
construction.

The corpora are Folder trees and tar shards written by tests/corpus.py: good small JPEGs plus
truncated, corrupted, empty, text, vanished and oversized files. Every call that could hang
runs under `within` (a thread join with a time limit).
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from corpus import (
    Item,
    bad_files,
    bit_flips,
    encode,
    huge_png,
    picture,
    prefetch_threads,
    samples,
    truncations,
    within,
    write_filelist,
    write_folder,
    write_tars,
)
from PIL import Image

from pixelpipe import CenterCrop, Compose, Lambda, Pipeline, Resize, SampleError
from pixelpipe.readers import Iterable, ReaderError

LIMIT = 20  # seconds any single call may take before it counts as a hang
BAD = bad_files(samples(1)[0].data)


def folder_with(tmp_path: Path, bad: bytes | None, ext: str = "jpg", n: int = 12,
                at: int | None = None) -> tuple[Path, list[Item], int]:
    """n - 1 good images and one bad one at Folder index `at` (default n // 2), all in one
    class folder (n good ones when bad is None); the items in Folder order and the index of
    the bad file (-1 if none)."""
    good = samples(n - (bad is not None), classes=1)
    root = tmp_path / "data"
    items = write_folder(root, good)
    if bad is None:
        return root, items, -1
    at = n // 2 if at is None else at
    path = root / "class_00" / f"{at - 1:05d}~.{ext}"  # sorts right after good file at - 1
    path.write_bytes(bad)
    items = sorted(items + [Item(bad, 0, str(path))], key=lambda it: it.source)
    assert items[at].source == str(path)
    return root, items, at


def make(reader: object, on_error: str, **kw: object) -> Pipeline:
    args: dict = {"batch_size": 4, "seed": 3, "num_threads": 2, "on_error": on_error}
    args.update(kw)
    return Pipeline(reader, [Resize((16, 16))], **args)


def run(pipe: Pipeline) -> list[dict]:
    return within(LIMIT, lambda: list(pipe))


def valid(batches: list[dict]) -> list[int]:
    return [i for b in batches for i in b["index"][b["valid"]].tolist()]


# ----------------------------------------------------------------------------- construction
def test_a_missing_root_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ReaderError, match="nope.*does not exist"):
        make(str(tmp_path / "nope"), "raise")


def test_an_empty_dataset_fails_at_construction(tmp_path: Path) -> None:
    (tmp_path / "empty" / "class_a").mkdir(parents=True)
    (tmp_path / "empty" / "class_a" / "notes.txt").write_text("no images here")
    with pytest.raises(ReaderError, match="no images"):
        make(str(tmp_path / "empty"), "raise")
    with pytest.raises(ReaderError, match="no samples"):
        make([], "raise")


def test_empty_tar_shards_fail_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "empty.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("__meta__.json")  # a member, but no image: no sample
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(ValueError, match="empty"):
        make(str(path), "raise")


def test_a_malformed_file_list_line_fails_at_construction(tmp_path: Path) -> None:
    path, _ = write_filelist(tmp_path, samples(5))
    lines = path.read_text().splitlines()
    lines[3] = lines[3] + " extra"  # line 4: three fields where the others have two
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReaderError, match=r"list\.txt, line 4: 3 fields"):
        make(str(path), "raise")
    path.write_text("img/00000.jpg seven\n")
    with pytest.raises(ReaderError, match="line 1.*'seven' is not a 64-bit integer"):
        make(str(path), "raise")


@pytest.mark.parametrize("kw, name", [
    ({"batch_size": 0}, "batch_size"), ({"prefetch": 0}, "prefetch"),
    ({"on_error": "ignore"}, "on_error"), ({"shard": (2, 2)}, "shard"), ({"shard": (0, 0)}, "shard"),
    ({"max_pixels": 0}, "max_pixels"), ({"num_threads": 0}, "num_threads"),
])
def test_bad_arguments_fail_at_construction(kw: dict, name: str) -> None:
    args = {"on_error": "raise", **kw}
    with pytest.raises(ValueError, match=name):
        make([(it.data, it.label) for it in samples(4)], **args)


# ----------------------------------------------------------------------------- one bad file
KINDS = [*BAD, "vanished"]


def prepare(tmp_path: Path, kind: str) -> tuple[Path, list[Item], int]:
    if kind == "vanished":
        return folder_with(tmp_path, samples(12)[11].data)  # deleted after the listing
    data, ext = BAD[kind]
    return folder_with(tmp_path, data, ext)


def build(tmp_path: Path, kind: str, on_error: str, **kw: object) -> tuple[Pipeline, list[Item], int]:
    root, items, bad = prepare(tmp_path, kind)
    pipe = make(str(root), on_error, **kw)
    if kind == "vanished":
        Path(items[bad].source).unlink()
    return pipe, items, bad


@pytest.mark.parametrize("kind", KINDS)
def test_raise_names_the_file_and_the_sample(tmp_path: Path, kind: str) -> None:
    before = prefetch_threads()
    pipe, items, bad = build(tmp_path, kind, "raise", shuffle=False)
    it = iter(pipe)
    for _ in range(bad // 4):  # the batches before the bad file's batch are delivered
        within(LIMIT, lambda: next(it))
    with pytest.raises(SampleError) as info:
        within(LIMIT, lambda: next(it))
    message = str(info.value)
    assert items[bad].source in message and f"sample {bad}:" in message
    assert [(e[0], e[1]) for e in pipe.errors] == [(bad, items[bad].source)]
    assert pipe.errors[0][2] and pipe.errors[0][2] in message
    assert prefetch_threads() - before == set()
    pipe.close()


@pytest.mark.parametrize("kind", KINDS)
def test_skip_drops_the_sample_and_keeps_the_batch_size(tmp_path: Path, kind: str) -> None:
    pipe, items, bad = build(tmp_path, kind, "skip", shuffle=False)
    with pipe:
        batches = run(pipe)
    assert len(batches) == len(pipe) == 3
    assert all(b["image"].shape[0] == 4 for b in batches)
    # each good one once, the bad one's batch filled from the next ones, the last one padded
    assert valid(batches) == [i for i in range(12) if i != bad]
    assert batches[bad // 4]["index"].tolist() == [i for i in range(4 * (bad // 4), 13) if i != bad][:4]
    assert bad not in [i for b in batches for i in b["index"].tolist()]
    assert [(e[0], e[1]) for e in pipe.errors] == [(bad, items[bad].source)]


@pytest.mark.parametrize("kind", KINDS)
def test_replace_substitutes_another_sample(tmp_path: Path, kind: str) -> None:
    pipe, items, bad = build(tmp_path, kind, "replace")
    with pipe:
        batches = run(pipe)
    assert len(batches) == 3 and all(b["valid"].all() for b in batches)  # 12 slots, 12 valid
    seen = valid(batches)
    assert bad not in seen
    assert set(seen) == set(range(12)) - {bad}  # every good one, and one of them twice
    assert [(e[0], e[1]) for e in pipe.errors] == [(bad, items[bad].source)]
    # the stand-in's label and pixels are its own
    reference = Compose([Resize((16, 16))])
    for b in batches:
        for img, label, i in zip(b["image"], b["label"].tolist(), b["index"].tolist()):
            assert label == items[i].label
            assert torch.equal(img, reference([items[i].data], seed=3, epoch=0, indices=[i])[0])


def test_oversized_headers_are_refused_before_decoding(tmp_path: Path) -> None:
    data = [(it.data, 0) for it in samples(6)] + [(huge_png(), 0)]
    with make(data, "skip", shuffle=False) as pipe:
        batches = run(pipe)
    assert sorted(valid(batches)) == list(range(6))
    assert len(pipe.errors) == 1 and pipe.errors[0][0] == 6
    assert "100000x100000" in pipe.errors[0][2] and "max_pixels" in pipe.errors[0][2]
    # a lower limit refuses ordinary images too, naming the limit
    with make(data[:6], "raise", max_pixels=500) as pipe, pytest.raises(SampleError, match="max_pixels=500"):
        run(pipe)


BROKEN = {  # three samples that fail where the header is read, or where the pixels are decoded
    "header": lambda data: [b"not an image " + bytes([k]) * 40 for k in range(3)],
    "body": lambda data: [d[: len(d) // 3] for d in data[:3]],
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_every_failing_sample_of_a_batch_is_reported_at_once(kind: str) -> None:
    data = [it.data for it in samples(6)]
    blobs = data[:2] + BROKEN[kind](data) + data[2:]
    with pytest.raises(SampleError) as caught:
        Compose([Resize((16, 16))])(blobs)
    assert [p for p, _ in caught.value.failures] == [2, 3, 4] and caught.value.position == 2
    assert "2 more failing: samples 3, 4" in str(caught.value)


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_batch_with_several_failures_is_made_again_once(kind: str) -> None:
    """With every failure of a batch reported at once, "skip" makes a batch with three
    undecodable samples again once, not once per failing sample."""
    data = [it.data for it in samples(8)]
    mixed = [(d, 0) for d in data[:2] + BROKEN[kind](data) + data[2:]]
    with make(mixed, "skip", batch_size=8, shuffle=False, prefetch=1) as pipe:
        epochs: list[int] = []
        prepare = pipe.engine.prepare
        pipe.engine.prepare = lambda *a, **k: (epochs.append(a[3]), prepare(*a, **k))[1]
        batches = run(pipe)
    assert sorted(e[0] for e in pipe.errors) == [2, 3, 4], pipe.errors
    assert sorted(valid(batches)) == [0, 1, *range(5, 11)]
    made = epochs.count(0)  # the producer starts the next epoch ahead: those are not counted
    if kind == "header":  # found while planning: the first batch planned twice, the padding batch once
        assert made == len(batches) + 1, made
    else:  # found while decoding: the first batch split, then only the samples that take the
        # failed ones' places made (and the batch after it, planned ahead before the failure was
        # known, planned again)
        assert made == len(batches) + 2, made


def test_sample_error_lists_every_failure() -> None:
    e = SampleError.of([(7, "seven"), (2, "two"), (4, "four")])
    assert (e.position, e.reason) == (2, "two") and e.failures == [(2, "two"), (4, "four"), (7, "seven")]
    assert str(e).startswith("sample 2: two") and "2 more failing: samples 4, 7" in str(e)
    with pytest.raises(ValueError, match="no failures"):
        SampleError.of([])


# ----------------------------------------------------------------------------- generated corpus
def identity_pipeline(reader: object, h: int, w: int) -> Pipeline:
    return Pipeline(reader, Compose([CenterCrop((h, w))], dtype=torch.uint8, layout="NHWC"),
                    batch_size=5, seed=0, shuffle=False, on_error="skip", num_threads=2)


def pillow(data: bytes) -> np.ndarray | None:
    """Pillow's RGB decode, or None when Pillow refuses the file."""
    try:
        im = Image.open(io.BytesIO(data))
        im.load()
        return np.asarray(im.convert("RGB"))
    except (OSError, SyntaxError, ValueError):
        return None


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_generated_corpus_nothing_lost_silently(tmp_path: Path, fmt: str) -> None:
    """Truncations at many offsets, bit flips, zero bytes, a wrong extension: every sample is
    either in the output, with the pixels Pillow decodes from the same bytes, or in
    pipe.errors; a truncated file is never passed off with altered pixels."""
    h, w = 40, 48
    good = encode(picture(0, size=(h, w)), fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    intact = pillow(good)
    assert intact is not None and intact.shape == (h, w, 3)
    # bit flips after the first 2 bytes (the signature decides the format)
    bad = truncations(good, 40) + bit_flips(good, 30, seed=1, skip=2) + [b""]
    truncated = set(range(len(truncations(good, 40))))
    corpus = [good] + bad + [good]
    root = tmp_path / "corpus" / "c"
    root.mkdir(parents=True)
    ext = "png" if fmt == "JPEG" else "jpg"  # wrong extensions: the content decides
    for k, data in enumerate(corpus):
        (root / f"{k:04d}.{ext}").write_bytes(data)
    with identity_pipeline(str(root.parent), h, w) as pipe:
        batches = run(pipe)
    out = {i: img.numpy() for b in batches for img, i, ok
           in zip(b["image"], b["index"].tolist(), b["valid"].tolist()) if ok}
    failed = {e[0]: e[1] for e in pipe.errors}
    assert sorted([*failed, *out]) == list(range(len(corpus)))  # each sample in one of them
    assert 0 in out and len(corpus) - 1 in out
    for i, data in enumerate(corpus):
        ref = pillow(data)
        if i in out:
            assert ref is not None, f"sample {i}: Pillow refuses it, the pipeline decoded it"
            if ref.shape == (h, w, 3):
                assert np.array_equal(out[i], ref), f"sample {i}"
            if i - 1 in truncated:
                assert np.array_equal(out[i], intact), f"truncation {i - 1} changed the pixels"
        else:
            assert failed[i] == str(root / f"{i:04d}.{ext}")
    assert len(failed) >= len(truncated) // 2


def test_each_failure_is_listed_once_per_epoch(tmp_path: Path) -> None:
    # 10 files in batches of 4: the two padding slots repeat the epoch's first samples, and
    # the second one is the bad file
    root, items, bad = folder_with(tmp_path, BAD["truncated"][0], n=10, at=1)
    with make(str(root), "skip", shuffle=False) as pipe:
        batches = run(pipe)
    assert sorted(valid(batches)) == [i for i in range(10) if i != bad]
    assert pipe.errors == [(bad, items[bad].source, pipe.errors[0][2])]


# ----------------------------------------------------------------------------- tar shards
def corrupt_tar(tmp_path: Path) -> tuple[list[str], list[Item], int]:
    """Two shards of 10 samples; the fourth sample of the second shard is truncated."""
    items = samples(20, classes=2)
    broken = Item(items[13].data[:100], items[13].label)
    items = items[:13] + [broken] + items[14:]
    paths, written = write_tars(tmp_path, items, shards=2, sort=False)
    return paths, written, 13


def test_tar_member_errors_name_the_shard_member(tmp_path: Path) -> None:
    paths, items, bad = corrupt_tar(tmp_path)
    with make(paths, "raise", shuffle=False) as pipe, pytest.raises(SampleError) as info:
        run(pipe)
    assert f"sample {bad}:" in str(info.value) and items[bad].source in str(info.value)
    assert items[bad].source.endswith("shard-001.tar:000013.jpg")
    for policy in ("skip", "replace"):  # a stream has nothing to substitute: both drop it
        with make(paths, policy) as pipe:
            batches = run(pipe)
        assert sorted(valid(batches)) == [i for i in range(20) if i != bad]
        assert [(e[0], e[1]) for e in pipe.errors] == [(bad, items[bad].source)]


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
