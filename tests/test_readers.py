"""Readers in general: Sample, Iterable, Memory, open_reader, and the real sample images."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import need_sample

from pixelpipe.readers import (
    FileList,
    Folder,
    IndexableReader,
    Iterable,
    Memory,
    ReaderError,
    Sample,
    StreamingReader,
    TarShards,
    open_reader,
)


class CudaLike:
    """An array stand-in exposing only __cuda_array_interface__ (like a CuPy array)."""

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (2, 2, 3), "typestr": "|u1", "data": (0, False), "version": 3}


# ------------------------------------------------------------------------------ Sample
def test_sample_is_a_slotted_dataclass() -> None:
    s = Sample(b"x", 3, "a.jpg", 7)
    assert dataclasses.astuple(s) == (b"x", 3, "a.jpg", 7, None)  # no targets
    with pytest.raises(AttributeError):
        s.extra = 1  # type: ignore[attr-defined]
    assert issubclass(ReaderError, ValueError)


def test_dict_samples_carry_their_targets() -> None:
    boxes = np.array([[1.0, 2.0, 3.0, 4.0]])
    r = Memory([{"image": b"x", "label": 2, "boxes": boxes, "caption": "a cat"}, {"image": b"y", "label": 0}])
    s = r.read(0)
    assert (s.data, s.label) == (b"x", 2) and s.targets["caption"] == "a cat" and s.targets["boxes"] is boxes
    assert r.read(1).targets is None and r.read(1).label == 0
    assert r.labels.tolist() == [2, 0]
    with pytest.raises(ValueError, match="'image'"):
        Memory([{"label": 1}])


# ---------------------------------------------------------------------------- Iterable
def test_iterable_over_a_generator_streams() -> None:
    r = Iterable((bytes([i]), i % 3, "extra") for i in range(5))
    assert not r.indexable and r.shards == ["iterable"]
    assert isinstance(r, StreamingReader)
    samples = list(r.iter_shard(0))
    assert [s.data for s in samples] == [bytes([i]) for i in range(5)]
    assert [s.label for s in samples] == [0, 1, 2, 0, 1]
    assert [s.source for s in samples][3] == "iterable[3]"
    with pytest.raises(TypeError, match="length"):
        len(r)
    with pytest.raises(RuntimeError, match="already iterated"):
        r.iter_shard(0)
    with pytest.raises(TypeError, match="streaming"):
        r.read(0)


def test_iterable_skip_on_a_reiterable_source() -> None:
    class Source:
        def __iter__(self):
            return iter([(b"a", 0), (b"b", 1), (b"c", 2), (b"d", 3)])

    r = Iterable(Source(), length=4)
    assert len(r) == 4
    full = [(s.data, s.label, s.index) for s in r.iter_shard(0)]
    rest = [(s.data, s.label, s.index) for s in r.iter_shard(0, skip=2)]
    assert rest == full[2:] == [(b"c", 2, 2), (b"d", 3, 3)]


def test_iterable_over_a_list_is_indexable_and_not_copied() -> None:
    items = [(b"a", [1, 0]), (b"b", (0, 1)), (b"c", np.array([1, 1]))]
    r = Iterable(items)
    assert r.indexable and len(r) == 3 and isinstance(r, IndexableReader)
    assert r.labels.tolist() == [[1, 0], [0, 1], [1, 1]]
    assert r.read(2).label == (1, 1) and r.sources(1) == "iterable[1]"
    items[0] = (b"z", [0, 0])
    assert r.read(0).data == b"z"
    with pytest.raises(TypeError, match="indexable"):
        r.iter_shard(0)


def test_iterable_over_a_callable() -> None:
    calls = []

    def make(i: int) -> tuple[bytes, int]:
        calls.append(i)
        return bytes([i]), i * 2

    r = Iterable(make, length=10)
    assert r.indexable and len(r) == 10 and r.labels is None and calls == []
    s = r.read(7)
    assert (s.data, s.label, s.index, s.source) == (b"\x07", 14, 7, "iterable[7]")
    assert calls == [7]
    with pytest.raises(IndexError):
        r.read(10)
    with pytest.raises(ReaderError, match="length"):
        Iterable(make)


def test_iterable_over_map_style_datasets() -> None:
    class Dataset:  # torch.utils.data.Dataset style: __getitem__ and __len__, no __iter__
        def __getitem__(self, i: int) -> tuple[bytes, int]:
            return b"img%d" % i, i % 2

        def __len__(self) -> int:
            return 3

    r = Iterable(Dataset())
    assert r.indexable and len(r) == 3 and r.labels is None  # labels would need the images
    assert (r.read(2).data, r.read(2).label) == (b"img2", 0)
    stack = np.arange(2 * 4 * 5 * 3, dtype=np.uint8).reshape(2, 4, 5, 3)
    s = Iterable(stack).read(1)
    assert np.shares_memory(s.data, stack) and s.data.shape == (4, 5, 3)


def test_arrays_pass_through_untouched() -> None:
    arr = np.zeros((4, 5, 3), np.uint8)
    ten = torch.zeros(6, 2, 3, dtype=torch.uint8)
    view = arr[::2]  # non-contiguous: must not be copied into a contiguous one
    cuda_like = CudaLike()
    items = [(arr, 0), (ten, 1), (view, 2), (cuda_like, 3), (memoryview(b"abc"), 4)]
    for r, read in [(Memory(items), None), (Iterable(items), None),
                    (Iterable(iter(items)), "stream")]:
        got = list(r.iter_shard(0)) if read else [r.read(i) for i in range(len(items))]
        assert got[0].data is arr and got[1].data is ten and got[2].data is view
        assert got[2].data.__array_interface__["data"][0] == view.__array_interface__["data"][0]
        assert got[3].data is cuda_like and got[4].data is items[4][0]


@pytest.mark.parametrize("bad", [np.zeros((2, 2, 3), np.float32), torch.zeros(2, dtype=torch.uint8),
                                 "a.jpg", 12])
def test_bad_images_are_refused_naming_the_sample(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match=r"memory\[1\]"):
        Memory([b"ok", bad])
    r = Iterable([b"ok", bad])
    with pytest.raises((TypeError, ValueError), match=r"iterable\[1\]"):
        r.read(1)


def test_iterable_refuses_non_collections() -> None:
    for bad in (b"bytes", "text", 3):
        with pytest.raises(ReaderError):
            Iterable(bad)
    with pytest.raises(ReaderError, match="empty"):
        Iterable([])


# ------------------------------------------------------------------------------ Memory
def test_memory_pairs_and_bare_images() -> None:
    r = Memory([(b"a", 3), (b"b", 1)])
    assert r.indexable and len(r) == 2 and r.labels.tolist() == [3, 1]
    s = r.read(1)
    assert (s.data, s.label, s.source, s.index) == (b"b", 1, "memory[1]", 1)
    bare = Memory(iter([b"x", b"y"]))
    assert bare.labels is None and bare.read(0).label is None


def test_memory_copies_the_list() -> None:
    items = [(b"a", 0)]
    r = Memory(items)
    items.append((b"b", 1))
    assert len(r) == 1


def test_memory_refuses_mixed_labels_and_empty() -> None:
    with pytest.raises(ReaderError, match="sample 1"):
        Memory([(b"a", 0), (b"b", (1, 2))])
    with pytest.raises(ReaderError, match="sample 1"):
        Memory([(b"a", 0), b"b"])
    with pytest.raises(ReaderError, match="no samples"):
        Memory([])
    with pytest.raises(TypeError, match="label"):
        Memory([(b"a", "cat")])


# ------------------------------------------------------------------------- open_reader
def test_open_reader_dispatch(tmp_path: Path) -> None:
    (tmp_path / "tree" / "c").mkdir(parents=True)
    (tmp_path / "tree" / "c" / "x.jpg").write_bytes(b"x")
    (tmp_path / "l.txt").write_text("tree/c/x.jpg 0\n")
    (tmp_path / "l.csv").write_text("path,label\ntree/c/x.jpg,0\n")
    with tarfile.open(tmp_path / "s-0.tar", "w") as tar:
        info = tarfile.TarInfo("k.jpg")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    assert isinstance(open_reader(tmp_path / "tree"), Folder)
    assert isinstance(open_reader(str(tmp_path / "l.txt")), FileList)
    assert isinstance(open_reader(tmp_path / "l.csv"), FileList)
    assert isinstance(open_reader(tmp_path / "s-0.tar"), TarShards)
    assert open_reader(str(tmp_path / "s-*.tar")).shards == [str(tmp_path / "s-0.tar")]
    assert isinstance(open_reader([str(tmp_path / "s-0.tar")]), TarShards)
    assert isinstance(open_reader([(b"a", 1)]), Memory)
    assert not open_reader(x for x in [b"a"]).indexable
    memory = Memory([b"a"])
    assert open_reader(memory) is memory
    with pytest.raises(ReaderError, match="does not exist"):
        open_reader(tmp_path / "nope.jpg")
    with pytest.raises(ReaderError, match="length"):
        open_reader(lambda i: b"x")
    with pytest.raises(ReaderError, match="neither"):
        open_reader(3.5)
    with pytest.raises(ReaderError, match="cannot tell"):
        open_reader(tmp_path / "tree" / "c" / "x.jpg")


def test_readers_survive_pickling_for_worker_processes(tmp_path: Path) -> None:
    (tmp_path / "tree" / "c").mkdir(parents=True)
    (tmp_path / "tree" / "c" / "x.jpg").write_bytes(b"img")
    (tmp_path / "l.txt").write_text("tree/c/x.jpg 4\n")
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        tar.add(tmp_path / "tree" / "c" / "x.jpg", arcname="k.jpg")
    readers = [Folder(tmp_path / "tree"), FileList(tmp_path / "l.txt"),
               Memory([(b"img", 4)]), Iterable([(b"img", 4)])]
    for r in readers:
        copy = pickle.loads(pickle.dumps(r))
        assert copy.read(0).data == b"img" and copy.read(0).label == r.read(0).label
        assert torch.equal(copy.labels, r.labels)
    tar_copy = pickle.loads(pickle.dumps(TarShards(tmp_path / "s.tar")))
    assert [s.data for s in tar_copy.iter_shard(0)] == [b"img"]


# ----------------------------------------------------------------- real sample images
@pytest.fixture
def imagenet() -> list[Path]:
    return sorted(need_sample().glob("*.JPEG"))[:40]


def test_real_images_through_folder_filelist_and_tar(tmp_path: Path, imagenet: list[Path]) -> None:
    tree = tmp_path / "tree"
    for k, src in enumerate(imagenet):
        cls = tree / f"class{k % 4}"
        cls.mkdir(parents=True, exist_ok=True)
        os.symlink(src, cls / src.name)
    with pytest.raises(ReaderError, match="40 symlinks leaving the root.*follow_symlinks='any'"):
        Folder(tree)  # links out of the root are not followed by default
    folder = Folder(tree, follow_symlinks="any")
    assert len(folder) == len(imagenet) and folder.labels.bincount().tolist() == [10] * 4
    lines = [f"{p} {k % 4}" for k, p in enumerate(imagenet)]
    filelist = FileList(_write(tmp_path / "l.txt", "\n".join(lines)))
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        for k, p in enumerate(imagenet):
            tar.add(p, arcname=f"{k:04d}.jpg")
            info = tarfile.TarInfo(f"{k:04d}.cls")
            info.size = 1
            tar.addfile(info, io.BytesIO(str(k % 4).encode()))
    streamed = list(TarShards(tmp_path / "s.tar").iter_shard(0))
    for k, p in enumerate(imagenet):
        data = p.read_bytes()
        assert data[:2] == b"\xff\xd8"  # JPEG start-of-image marker
        assert filelist.read(k).data == data and filelist.read(k).label == k % 4
        assert streamed[k].data == data and streamed[k].label == k % 4
    by_name = {os.path.basename(folder.sources(i)): folder.read(i).data for i in range(len(folder))}
    assert all(by_name[p.name] == p.read_bytes() for p in imagenet)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
