"""Nothing lost, nothing hung, nothing mislabelled: a generated corpus of broken inputs, every
on_error policy, resume from every batch boundary, and every way of sharding uneven shards.

The corpus (`write_corpus`) is a Folder of class folders holding good images, truncations at
many offsets, bit flips, zeroed blocks, every format, a 60000 x 60000 header, text and empty
files, files with other extensions (GIF, TIFF) and special files (a FIFO, symlinks to
/dev/zero and /etc/passwd, a symlink loop), read as a Folder and as one tar shard of its regular
files; tests/corpus.py's `crafted_tars` gives tar shards broken in every way the tar reader meets. Every pipeline run is under `within` (a thread join
with a time limit): a hang fails the test instead of stalling the suite.

What is asserted, for each policy: "raise" raises a SampleError naming a failing sample and
lists that one; "skip" and "replace" run to the end, and per epoch every sample dealt is in a
batch (valid, with its own label and pixels) or in `pipe.epoch_errors` (count in = yielded +
reported), each failure listed once with its path, index and reason, however many epochs.
"""

from __future__ import annotations

import io
import os
import tarfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from corpus import (
    bit_flips,
    crafted_tars,
    encode,
    format_files,
    huge_png,
    images,
    picture,
    truncations,
    within,
    write_tars,
)

from pixelpipe import Compose, Pipeline, Resize, SampleError
from pixelpipe.readers import Folder, Memory, TarShards

LIMIT = 60  # seconds a whole epoch may take before it counts as a hang
OPS = [Resize((12, 12))]
REFERENCE = Compose(OPS)


# ----------------------------------------------------------------------------- the corpus
def write_corpus(root: Path) -> Path:
    """Class folders c0..c3 of good and broken images, other files and special files."""
    good = images(24, seed=9)
    jpeg = encode(picture(1, size=(40, 48)), "JPEG", quality=90)
    png = encode(picture(2, size=(36, 30)), "PNG")
    files: dict[str, bytes] = {f"c{k % 4}/good{k:03d}.jpg": b for k, b in enumerate(good)}
    for k, cut in enumerate(truncations(jpeg, 12)):
        files[f"c{k % 4}/cut{k:02d}.jpg"] = cut
    for k, cut in enumerate(truncations(png, 8)):
        files[f"c{k % 4}/cutpng{k:02d}.png"] = cut
    for k, flipped in enumerate(bit_flips(jpeg, 8, seed=3, skip=2)):
        files[f"c{k % 4}/flip{k:02d}.jpg"] = flipped
    for k in range(4):
        zeroed = bytearray(jpeg)
        start = len(jpeg) * (k + 1) // 6
        zeroed[start : start + 64] = bytes(64)
        files[f"c{k}/zero{k}.jpg"] = bytes(zeroed)
    for k, (name, (data, ext)) in enumerate(format_files(picture(3, size=(32, 40))).items()):
        files[f"c{k % 4}/fmt_{name}.{ext}"] = data
    files["c0/huge.png"] = huge_png(60000)
    files["c1/text.jpg"] = b"root:x:0:0:this is text, not an image\n"
    files["c2/empty.jpg"] = b""
    files["c3/valid.gif"] = encode(picture(4), "GIF")
    files["c3/valid.tif"] = encode(picture(5), "TIFF")
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    os.mkfifo(root / "c0" / "fifo.jpg")
    os.symlink("/dev/zero", root / "c1" / "zero.jpg")
    os.symlink("/etc/passwd", root / "c2" / "passwd.jpg")
    os.symlink("..", root / "c1" / "loop")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "data")


def reference(data: bytes, index: int) -> torch.Tensor | None:
    """The pixels of one sample made alone (Resize draws nothing), or None if it fails."""
    try:
        return REFERENCE([data], seed=0, epoch=0, indices=[index])[0]
    except (SampleError, ValueError):
        return None


def build(reader: Any, on_error: str, **kw: Any) -> Pipeline:
    args: dict[str, Any] = {"batch_size": 8, "seed": 7, "num_threads": 2, "prefetch": 2, "on_error": on_error}
    args.update(kw)
    return Pipeline(reader, list(OPS), **args)


def check_epoch(batches: list[dict], pipe: Pipeline, truth: dict[int, tuple[bytes, int]], dealt: set[int]) -> None:
    """Every sample dealt is in a batch (its own label and pixels) or in epoch_errors, not both;
    under skip no valid sample twice; a batch of padding only after the last batch with a
    sample; each error names its sample's source."""
    flags = [bool(b["valid"].any()) for b in batches]
    assert flags == sorted(flags, reverse=True), "a batch of padding only while samples remain"
    seen: list[int] = []
    for b in batches:
        for img, i, label, ok in zip(b["image"], b["index"].tolist(), b["label"].tolist(), b["valid"].tolist()):
            data, want = truth[i]
            assert label == want, f"sample {i}: label {label}, written {want}"
            ref = reference(data, i)
            assert ref is not None and torch.equal(img, ref), f"sample {i}: pixels differ from its own"
            if ok:
                seen.append(i)
    failed = {e[0] for e in pipe.epoch_errors}
    assert not failed & set(seen), "a sample both yielded and reported"
    assert set(seen) | failed == dealt, f"lost silently: {sorted(dealt - set(seen) - failed)}"
    if pipe.on_error == "skip":
        assert len(seen) == len(set(seen))
    for index, source, reason in pipe.errors:
        assert reason and source.startswith(str(truth_source(pipe, index)))


def truth_source(pipe: Pipeline, index: int) -> str:
    reader = pipe.reader
    return reader.sources(index) if reader.indexable else ""


# ----------------------------------------------------------------------------- folder corpus
def test_the_corpus_lists_every_file_that_is_not_a_sample(corpus: Path) -> None:
    r = Folder(corpus)
    why = dict(r.ignored)
    assert "not a regular file" in why[str(corpus / "c0" / "fifo.jpg")]
    assert "leaving the root" in why[str(corpus / "c1" / "zero.jpg")]
    assert "leaving the root" in why[str(corpus / "c2" / "passwd.jpg")]
    assert "already listed" in why[str(corpus / "c1" / "loop")]
    assert "extension .gif" in why[str(corpus / "c3" / "valid.gif")]
    assert "extension .tif" in why[str(corpus / "c3" / "valid.tif")]
    for i in range(len(r)):  # no file twice, each under its own class
        path = r.sources(i)
        assert int(Path(path).parent.name[1:]) == int(r.labels[i])
    assert len({os.path.realpath(r.sources(i)) for i in range(len(r))}) == len(r)


@pytest.mark.parametrize("on_error", ["raise", "skip", "replace"])
def test_every_policy_on_the_corpus(corpus: Path, on_error: str) -> None:
    reader = Folder(corpus)
    truth = {i: (Path(reader.sources(i)).read_bytes(), int(reader.labels[i])) for i in range(len(reader))}
    with build(reader, on_error) as pipe:
        if on_error == "raise":
            with pytest.raises(SampleError) as info:
                within(LIMIT, lambda: list(pipe))
            ((index, source, reason),) = pipe.errors
            assert source == reader.sources(index) and source in str(info.value) and reason in str(info.value)
            assert f"sample {index}:" in str(info.value)
            return
        sizes = []
        for _ in range(3):
            batches = within(LIMIT, lambda: list(pipe))
            assert len(batches) == len(pipe)
            check_epoch(batches, pipe, truth, set(range(len(reader))))
            if on_error == "replace":  # every slot dealt holds a readable sample: its own or a stand-in
                assert sum(int(b["valid"].sum()) for b in batches) == len(reader)
            sizes.append(len(repr(pipe.state_dict())))
        errors = pipe.errors
    assert len({e[0] for e in errors}) == len(errors) >= 20  # each failure once, however many epochs
    assert {e[0] for e in pipe.epoch_errors} == {e[0] for e in errors}
    assert sizes[0] == sizes[1] == sizes[2]  # a state does not grow epoch after epoch
    for index, source, reason in errors:
        assert source == reader.sources(index)


def test_no_error_quotes_a_files_contents(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.jpg").write_bytes(b"root:x:0:0:secret\n" * 4)
    with build(str(tmp_path), "skip", batch_size=1) as pipe:
        with pytest.raises(RuntimeError):
            within(LIMIT, lambda: list(pipe))
    assert pipe.errors and all("root:x" not in reason for _, _, reason in pipe.errors)


def corpus_tar(root: Path, corpus: Path) -> tuple[str, dict[int, tuple[bytes, int]], set[str]]:
    """The corpus's regular files in one tar shard, webdataset layout (<key>.<ext> + <key>.cls,
    the class folder's number as label, in path order): the shard, the truth by TarShards
    index, and the keys whose image is in a format the reader does not take."""
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and not p.is_symlink())
    path, truth, others, index = root / "corpus.tar", {}, set(), 0
    with tarfile.open(path, "w") as tar:
        for k, f in enumerate(files):
            key, label = f"{k:04d}", int(f.parent.name[1:])
            for name, data in ((f"{key}{f.suffix.lower()}", f.read_bytes()), (f"{key}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            if f.suffix.lower() in (".gif", ".tif"):
                others.add(f"{path}:{key}")
            else:
                truth[index] = (f.read_bytes(), label)
                index += 1
    return str(path), truth, others


@pytest.mark.parametrize("on_error", ["skip", "replace"])
def test_every_policy_on_the_corpus_in_a_tar_shard(corpus: Path, tmp_path: Path, on_error: str) -> None:
    """The same files as one tar shard: each sample a batch gives has its own label and pixels,
    each failure is listed once, nothing is lost (count in = yielded + reported), and the
    members in other formats are listed in the reader's ignored."""
    path, truth, others = corpus_tar(tmp_path, corpus)
    reader = TarShards(path)
    assert {src for src, _ in reader.ignored} == others and len(reader) == len(truth)
    with build(reader, on_error) as pipe:
        for _ in range(2):
            batches = within(LIMIT, lambda: list(pipe))
            assert len(batches) == len(pipe)
            check_epoch(batches, pipe, truth, set(truth))
        assert len({e[0] for e in pipe.errors}) == len(pipe.errors) >= 20


# ----------------------------------------------------------------------------- tar shards
@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return crafted_tars(tmp_path_factory.mktemp("tars"))


@pytest.mark.parametrize("on_error", ["raise", "skip", "replace"])
def test_every_policy_on_damaged_tar_shards(crafted: dict, on_error: str) -> None:
    names = sorted(crafted)
    paths = [str(crafted[n][0]) for n in names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader = TarShards(paths)
    truth, sources = {}, {}
    for s, name in enumerate(names):
        _, items, known = crafted[name]
        for k, it in enumerate(items):
            truth[reader._offsets[s] + k] = (it.data, it.label)
            sources[reader._offsets[s] + k] = it.source
        assert reader.counts[s] == len(items)
    with build(reader, on_error) as pipe:
        if on_error == "raise":
            with pytest.raises(SampleError, match=r"\.tar"):
                within(LIMIT, lambda: list(pipe))
            assert len(pipe.errors) == 1
            return
        for _ in range(2):
            batches = within(LIMIT, lambda: list(pipe))
            assert len(batches) == len(pipe)
            seen = [i for b in batches for i in b["index"][b["valid"]].tolist()]
            for b in batches:
                assert [truth[i][1] for i in b["index"].tolist()] == b["label"].tolist()
            failed = {e[0] for e in pipe.epoch_errors}
            assert sorted(seen + sorted(failed)) == list(range(len(reader)))  # count in = yielded + reported
        bad = {reader._offsets[names.index(n)] + k for n in names for k in crafted[n][2]["bad"]}
        assert {e[0] for e in pipe.errors} == bad
        for index, source, reason in pipe.errors:  # the member, or the shard (a corrupt header's name may be too)
            assert reason and source.startswith(sources[index].split(":")[0])


def test_a_shard_truncated_after_the_pipeline_was_built_goes_through_the_policy(tmp_path: Path) -> None:
    items = [(b, k % 3) for k, b in enumerate(images(30, seed=2))]
    from corpus import Item

    paths, written = write_tars(tmp_path, [Item(d, lab) for d, lab in items], shards=3, sort=False)
    with build(paths, "skip", batch_size=4, shuffle=False) as pipe:
        raw = Path(paths[1]).read_bytes()
        Path(paths[1]).write_bytes(raw[: len(raw) // 3])
        batches = within(LIMIT, lambda: list(pipe))
    seen = [i for b in batches for i in b["index"][b["valid"]].tolist()]
    failed = [e[0] for e in pipe.errors]
    assert sorted(seen + failed) == list(range(30)) and len(failed) >= 6
    assert all(e[1].startswith(paths[1]) for e in pipe.errors)


# ----------------------------------------------------------------------------- sharding, padding
def uneven_tars(root: Path, sizes: list[int]) -> tuple[list[str], int]:
    from corpus import Item

    total = sum(sizes)
    data = images(total, seed=4)
    paths, start = [], 0
    for s, n in enumerate(sizes):
        got, _ = write_tars(root / f"s{s}", [Item(d, k % 3) for k, d in enumerate(data[start : start + n])], shards=1)
        paths += got
        start += n
    return paths, total


@pytest.fixture(scope="module")
def uneven(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], int]:
    return uneven_tars(tmp_path_factory.mktemp("uneven"), [1, 9, 2, 14, 3, 0, 5])


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("drop_last", [False, True])
def test_no_empty_epoch_and_no_padding_batch_while_samples_remain(uneven: tuple[list[str], int], world: int,
                                                                  drop_last: bool) -> None:
    """Uneven tar shards on 1-6 ranks: every rank has the same number of batches, never 0 while
    the dataset has samples (or the Pipeline refuses to be built, naming the numbers); a batch
    of padding only comes after the rank's last sample; without drop_last each sample once."""
    paths, total = uneven
    for batch in (2, 3, 5):
        ranks = []
        for rank in range(world):
            try:
                pipe = Pipeline(paths, list(OPS), batch_size=batch, seed=1, shard=(rank, world), drop_last=drop_last,
                                num_threads=1, prefetch=1)
            except ValueError as e:
                assert drop_last and total // world < batch and "leaves no batch" in str(e)
                break
            with pipe:
                epochs = [within(LIMIT, lambda pipe=pipe: list(pipe)) for _ in range(2)]
            ranks.append([[b["valid"].tolist() for b in e] for e in epochs])
            for e in epochs:
                assert len(e) == len(pipe) > 0
                flags = [b["valid"].any().item() for b in e]
                assert flags == sorted(flags, reverse=True), "a batch of padding before the rank's last sample"
            if not drop_last:
                for e in epochs:
                    assert sum(int(b["valid"].sum()) for b in e) in (total // world, -(-total // world))
            ranks[-1] = [[i for b in e for i in b["index"][b["valid"]].tolist()] for e in epochs]
        if len(ranks) == world:
            for epoch in range(2):
                seen = [i for r in ranks for i in r[epoch]]
                assert len(seen) == len(set(seen))
                if not drop_last:
                    assert sorted(seen) == list(range(total))


# ----------------------------------------------------------------------------- resume
def run_with_states(pipe: Pipeline, epochs: int) -> tuple[list[dict], list[dict]]:
    """Every batch of `epochs` epochs and the state after each (states[k]: after batch k)."""
    batches, states = [], []
    for _ in range(epochs):
        for b in pipe:
            batches.append(b)
            states.append(pipe.state_dict())
    return batches, states


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in ("index", "valid", "label", "image"))


def failing_folder(root: Path, n: int = 14, bad: tuple[int, ...] = (1, 5, 6, 12)) -> Path:
    data = images(n, seed=8)
    for k in range(n):
        path = root / f"c{k % 2}" / f"{k:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[k][: len(data[k]) // 3] if k in bad else data[k])
    return root


@pytest.fixture(scope="module")
def resume_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("resume")
    folder = failing_folder(root / "folder")
    from corpus import Item

    data = images(17, seed=10)
    broken = [Item(d[: len(d) // 3] if k in (2, 9, 10) else d, k % 3) for k, d in enumerate(data)]
    sizes, tars, start = [2, 8, 1, 6], [], 0
    for s, n in enumerate(sizes):
        got, _ = write_tars(root / f"t{s}", broken[start : start + n], shards=1, sort=False)
        tars += got
        start += n
    corrupt = failing_folder(root / "corrupt", n=9, bad=(0, 1, 2, 3, 4, 5, 7, 8))  # one good file
    return {"folder": str(folder), "tars": tars, "corrupt": str(corrupt)}


@pytest.mark.parametrize("on_error", ["skip", "replace"])
@pytest.mark.parametrize("kind, world", [("folder", 1), ("folder", 2), ("folder", 3), ("tars", 1), ("tars", 2),
                                         ("tars", 3), ("tars", 4), ("corrupt", 1), ("corrupt", 2)])
def test_resume_from_every_batch_boundary(resume_data: dict[str, Any], kind: str, world: int, on_error: str) -> None:
    """3 epochs with failing files (uneven tar shards, or a folder of nearly only corrupt files
    whose epochs end in padding), on every rank of 1-4: a pipeline restored from the state after
    any batch, padding included, gives exactly the remaining batches, and lists each error once."""
    for rank in range(world):
        def make(rank: int = rank) -> Pipeline:
            return Pipeline(resume_data[kind], list(OPS), batch_size=3, seed=5, shard=(rank, world),
                            on_error=on_error, num_threads=1, prefetch=2)

        with make() as pipe:
            reference, states = within(LIMIT, lambda: run_with_states(pipe, 3))
            errors = pipe.errors
        assert len(reference) == 3 * len(pipe)
        for e in range(3):  # a batch of padding only once the rank has nothing left to read
            flags = [bool(b["valid"].any()) for b in reference[e * len(pipe) : (e + 1) * len(pipe)]]
            assert flags == sorted(flags, reverse=True), f"rank {rank}, epoch {e}: {flags}"
        for k in range(len(reference) - 1):
            with make() as restored:
                restored.load_state_dict(states[k])
                rest: list[dict] = []
                while len(rest) < len(reference) - k - 1:
                    rest += within(LIMIT, lambda: list(restored))
                assert all(same(x, y) for x, y in zip(rest, reference[k + 1 :])), f"rank {rank}, after batch {k}"
                assert len(rest) == len(reference) - k - 1
                assert sorted(restored.errors) == sorted(errors), f"rank {rank}, after batch {k}"


def test_replace_fills_every_slot_with_a_readable_sample(resume_data: dict[str, Any]) -> None:
    with Pipeline(resume_data["folder"], list(OPS), batch_size=3, seed=5, on_error="replace", num_threads=1) as pipe:
        for _ in range(2):
            batches = within(LIMIT, lambda: list(pipe))
            valid = sum(int(b["valid"].sum()) for b in batches)
            assert valid == 14  # 14 slots, each a sample or its stand-in
            assert all(i not in {e[0] for e in pipe.errors} for b in batches for i in b["index"].tolist())


def test_indexable_data_with_few_readable_samples_pads_from_them() -> None:
    data = images(10, seed=12)
    broken = [(d if k in (3, 7) else d[:50], 0) for k, d in enumerate(data)]
    with Pipeline(Memory(broken), list(OPS), batch_size=4, seed=0, on_error="skip", num_threads=1) as pipe:
        batches = within(LIMIT, lambda: list(pipe))
    assert len(batches) == 3 and sorted(i for b in batches for i in b["index"][b["valid"]].tolist()) == [3, 7]
    assert {i for b in batches for i in b["index"].tolist()} == {3, 7}
    assert np.array_equal([int(b["valid"].sum()) for b in batches], [2, 0, 0])


def test_the_loss_recipe_of_the_training_docs_is_safe_on_a_batch_of_padding_only() -> None:
    """docs/training.md's weighted loss, run as written: on a batch whose valid is all False
    (a rank's epoch may end with one) it is 0 with zero gradients, never NaN; on a mixed batch
    it is the mean over the valid rows."""
    import re

    import torch.nn.functional as F

    text = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text()
    recipe = [line.strip() for line in text.splitlines() if line.strip().startswith(("w = ", "loss = "))][:2]
    assert [r.split(" = ")[0] for r in recipe] == ["w", "loss"], recipe
    model = torch.nn.Linear(4, 3)
    x, y = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0])
    for valid in (torch.zeros(5, dtype=torch.bool), torch.tensor([True, False, True, True, False])):
        model.zero_grad()
        scope = {"F": F, "logits": model(x), "y": y, "valid": valid}
        for line in recipe:
            exec(re.sub(r"\s+#.*$", "", line), scope)  # the docs' lines, comments cut
        loss = scope["loss"]
        loss.backward()
        grad = model.weight.grad
        assert grad is not None and torch.isfinite(loss) and torch.isfinite(grad).all()
        if valid.any():
            want = F.cross_entropy(model(x)[valid], y[valid])
            assert torch.allclose(loss, want, atol=1e-6)
        else:
            assert loss.item() == 0 and not grad.any()
