"""Bad input, nothing lost silently: on_error="raise" | "skip" | "replace", `pipe.errors`, every
failing sample of a batch reported at once, and datasets refused at construction (failures in
the background threads, resuming and remaking: tests/test_pipeline_remake.py).

The corpora are Folder trees and tar shards written by tests/corpus.py: good small JPEGs plus
truncated, corrupted, empty, text, vanished and oversized files. Every call that could hang
runs under `within` (a thread join with a time limit).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from corpus import (
    Item,
    bit_flips,
    encode,
    huge_png,
    picture,
    prefetch_threads,
    samples,
    truncations,
    within,
    write_filelist,
    write_tars,
)
from PIL import Image
from pipeline_faults import BAD, BROKEN, KINDS, LIMIT, build, folder_with, make, run, valid

from pixelpipe import CenterCrop, Compose, Pipeline, Resize, SampleError
from pixelpipe.readers import ReaderError


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
