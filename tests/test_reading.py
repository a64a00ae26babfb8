"""A Pipeline over files reads them ahead on threads (loader.reading): the same batches, the
same errors and policy, as reading them one by one on the producer thread."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch
from PIL import Image

import pixelpipe as pp
import pixelpipe.loader.pipeline as pipeline_module


def _folder(tmp_path, n=23, broken=(5, 17)):
    rng = np.random.default_rng(0)
    for i in range(n):
        (tmp_path / f"c{i % 3}").mkdir(exist_ok=True)
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (20 + i, 30, 3), dtype=np.uint8)).save(buf, "JPEG")
        data = buf.getvalue()[:50] if i in broken else buf.getvalue()
        (tmp_path / f"c{i % 3}" / f"{i:03d}.jpg").write_bytes(data)
    return str(tmp_path)


def _epochs(root, policy, monkeypatch, threads):
    monkeypatch.setattr(pipeline_module, "READ_THREADS", threads)
    with pp.Pipeline(root, [pp.RandomResizedCrop(16)], 4, seed=3, on_error=policy, num_threads=2) as pipe:
        assert (pipe._reading._threads > 0) == (threads > 0)
        out = [[{k: v for k, v in b.items()} for b in pipe] for _ in range(2)]
        return out, list(pipe.errors)


@pytest.mark.parametrize("policy", ["skip", "replace"])
def test_reading_ahead_changes_nothing(tmp_path, monkeypatch, policy):
    root = _folder(tmp_path)
    ahead, errors_ahead = _epochs(root, policy, monkeypatch, 4)
    alone, errors_alone = _epochs(root, policy, monkeypatch, 0)
    assert errors_ahead == errors_alone
    assert sorted({e[1].rsplit("/", 1)[1] for e in errors_ahead}) == ["005.jpg", "017.jpg"]
    for ea, eb in zip(ahead, alone):
        assert len(ea) == len(eb)
        for a, b in zip(ea, eb):
            assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_file_gone_after_listing_is_an_error_where_it_is_read(tmp_path, monkeypatch):
    root = _folder(tmp_path, broken=())
    monkeypatch.setattr(pipeline_module, "READ_THREADS", 4)
    with pp.Pipeline(root, [pp.Resize((8, 8))], 4, shuffle=False, on_error="skip") as pipe:
        (tmp_path / "c1" / "007.jpg").unlink()
        n = sum(int(b["valid"].sum()) for b in pipe)
    assert n == 22 and len(pipe.errors) == 1
    assert pipe.errors[0][1].endswith("007.jpg") and "No such file" in pipe.errors[0][2]


# ----------------------------------------------------------------------------- readers._files
def test_the_pointer_tables_point_where_ctypes_says_the_bytes_are():
    import ctypes as C

    from pixelpipe.native import pointers

    assert pointers._DATA is not None  # CPython: the numpy tables are in use
    objs = [b"a" * 70, None, os.fsencode("/tmp/x.jpg"), bytes(300_000)]
    address, table = pointers.bytes_pointers(objs)
    assert address == table.ctypes.data
    want = [0 if o is None else C.cast(C.c_char_p(o), C.c_void_p).value for o in objs]
    assert table.tolist() == want
    # anything but bytes goes through a ctypes array, which refuses it: never an address
    # computed for an object that is laid out otherwise
    with pytest.raises(TypeError):
        pointers.bytes_pointers([b"ab", bytearray(b"cd")])


@pytest.mark.parametrize("tables", ["numpy", "ctypes"])
def test_read_files_equals_reading_each_file_and_refuses_what_is_no_regular_file(tmp_path, monkeypatch, tables):
    """The C reader (one call per chunk) gives each file's bytes or an OSError naming it, as
    reading in Python does; a FIFO is refused without being opened (it would block). The same
    with the pointer tables made by numpy or, where the bytes layout is not confirmed, by ctypes."""
    import os

    from pixelpipe.native import pointers
    from pixelpipe.readers._files import _read_python, read_files

    if tables == "ctypes":
        monkeypatch.setattr(pointers, "_DATA", None)

    rng = np.random.default_rng(1)
    paths = []
    for i, size in enumerate([0, 1, 63, 64, 65, 4096, 300_000]):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(str(p))
    os.mkfifo(tmp_path / "fifo.jpg")
    (tmp_path / "dir.jpg").mkdir()
    odd = [str(tmp_path / n) for n in ("fifo.jpg", "dir.jpg", "missing.jpg")]
    got = read_files(paths + odd)
    assert got[: len(paths)] == [open(p, "rb").read() for p in paths]
    assert all(type(g) is bytes for g in got[: len(paths)])
    for g, p in zip(got[len(paths):], odd):
        assert isinstance(g, OSError) and g.filename == p, g
    assert "not a regular file" in str(got[-3]) and "not a regular file" in str(got[-2])
    assert isinstance(_read_python(odd[0]), OSError)  # the twin refuses the FIFO too
    usual = paths[3:]  # every file of a size read in C: the chunk's path without a look at each size
    assert read_files(usual) == [open(p, "rb").read() for p in usual]
    assert read_files([p.encode() for p in usual]) == read_files(usual)
    over = read_files(usual, max_bytes=4096)  # one file over the limit: refused, the others read
    assert over[:3] == [open(p, "rb").read() for p in usual[:3]]
    assert isinstance(over[3], OSError) and "more than max_bytes=4,096" in str(over[3])


def test_a_pipeline_over_a_folder_with_a_fifo_does_not_hang(tmp_path):
    import os

    root = _folder(tmp_path, n=8, broken=())
    os.mkfifo(tmp_path / "c0" / "zz.jpg")
    with pp.Pipeline(root, [pp.Resize((8, 8))], 4, shuffle=False, on_error="skip", num_threads=2) as pipe:
        n = sum(int(b["valid"].sum()) for b in pipe)
    # the FIFO is no sample: listed with why, never opened
    assert n == 8 and pipe.errors == []
    assert pipe.reader.ignored == [(str(tmp_path / "c0" / "zz.jpg"), "not a regular file (a FIFO, a socket or a device)")]


# ----------------------------------------------------------------------------- the bulk path
def _items(pipe, batches):
    import threading

    run = pipe._open(0, 0, 0, threading.Event())
    out = []
    for _ in range(batches):
        pipe._reading.fill(run)
        out += [(it.index, it.label, it.source, it.valid, bytes(it.data), it.attempt) for it in run.pending[:4]]
        run.pending = run.pending[4:]
    return out, list(run.errors)


@pytest.mark.parametrize("policy", ["skip", "replace"])
def test_items_read_ahead_in_bulk_equal_items_read_one_by_one(tmp_path, monkeypatch, policy):
    """fill's bulk path (files read ahead) gives the items, labels (ints, tuples for several),
    sources and errors the slot-by-slot path gives, around a file gone after listing and with
    relative and absolute paths in the list."""
    root = _folder(tmp_path, broken=())
    files = sorted(p for p in (tmp_path).rglob("*.jpg"))
    lines = [f"{p.relative_to(tmp_path) if k % 2 else p} {k % 3} {k}" for k, p in enumerate(files)]
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    (files[6]).unlink()
    got = {}
    for threads in (4, 0):
        monkeypatch.setattr(pipeline_module, "READ_THREADS", threads)
        with pp.Pipeline(pp.readers.FileList(str(tmp_path / "list.txt"), root=root), [pp.Resize((8, 8))], 4,
                         seed=1, on_error=policy, num_threads=2) as pipe:
            assert (pipe._reading._threads > 0) == (threads > 0)
            got[threads] = _items(pipe, 5)
    assert got[4] == got[0]
    items, errors = got[4]
    assert len(items) == 20 and [e[0] for e in errors] == [6]
    assert all(type(label) is tuple and len(label) == 2 for _, label, *_ in items)
    assert all(source == str(files[i]) for i, _, source, *_ in items)


@pytest.mark.parametrize("labels", ["ints", "lists", "none"])
def test_memory_items_taken_in_bulk_equal_items_taken_one_by_one(monkeypatch, labels):
    """fill's bulk path for a Memory reader gives the items, labels, sources, validity and
    targets the slot-by-slot path gives, over epochs whose last batch is padded, and stops
    before a sample that failed this epoch (the slot-by-slot path takes it from there)."""
    from pixelpipe.loader import reading

    blobs = [bytes([k]) * (100 + k) for k in range(11)]
    samples = {"ints": [(b, k % 3) for k, b in enumerate(blobs)], "lists": [(b, [k, 2 * k]) for k, b in enumerate(blobs)],
               "none": [(b, None) for b in blobs]}[labels]
    got = {}
    for bulk in (True, False):
        with pp.Pipeline(pp.readers.Memory(samples), [pp.Resize((8, 8))], 4, seed=3, num_threads=2) as pipe:
            pipe._reading._items = bulk
            import threading

            out = []
            for epoch in range(2):
                run = pipe._open(epoch, 0, 0, threading.Event())
                if epoch == 1:
                    run.failed.add(int(run.slots.peek(3)[0][2]))  # failed earlier this epoch
                for _ in range(3):
                    pipe._reading.fill(run)
                    out += [(it.index, it.label, it.source, it.valid, it.data, it.attempt, it.targets)
                            for it in run.pending[:4]]
                    run.pending = run.pending[4:]
            got[bulk] = out
    assert got[True] == got[False] and len(got[True]) >= 20
    assert reading.Reading(pp.readers.Memory(samples), "raise", 0, 4, 0, None)._items

    class Shifted(pp.readers.Memory):  # a subclass whose read differs: read_items no longer agrees
        def read(self, i):
            return super().read((i + 1) % len(self))

    assert not reading.Reading(Shifted(samples), "raise", 0, 4, 0, None)._items


def test_filelist_read_many_joins_paths_as_read_does(tmp_path):
    """read_many's bytes joining equals os.path.join: a root with and without its slash, an
    absolute path in the list, one label per line; an index out of range is an IndexError."""
    (tmp_path / "a").mkdir()
    for name in ("x.jpg", "y.jpg"):
        (tmp_path / "a" / name).write_bytes(name.encode() * 40)
    (tmp_path / "l.txt").write_text(f"a/x.jpg 3\n{tmp_path / 'a' / 'y.jpg'} 4\n")
    for root in (str(tmp_path), str(tmp_path) + "/"):
        reader = pp.readers.FileList(str(tmp_path / "l.txt"), root=root)
        many = reader.read_many([1, 0, 1])
        listed = ["a/x.jpg", str(tmp_path / "a" / "y.jpg")]
        assert [s.source for s in many] == [os.path.join(root, listed[i]) for i in (1, 0, 1)]
        assert [(s.data, s.label, s.index) for s in many] == [(b"y.jpg" * 40, 4, 1), (b"x.jpg" * 40, 3, 0),
                                                              (b"y.jpg" * 40, 4, 1)]
        assert type(many[1].label) is int
    with pytest.raises(IndexError, match="out of range"):
        reader.read_many([0, 2])


def test_filelist_sources_are_the_paths_os_fsdecode_gives(tmp_path):
    """A list without a root and a name that is not UTF-8: each chunk's sources (read_raw, as
    the read-ahead takes them) are what os.fsdecode gives for the listed bytes, and read names
    them the same way."""
    name = b"caf\xe9.jpg"  # Latin-1, not UTF-8: a surrogate escape in the str
    path = os.fsencode(str(tmp_path)) + b"/" + name
    with open(path, "wb") as f:
        f.write(b"x" * 100)
    (tmp_path / "ok.jpg").write_bytes(b"y" * 100)
    listed = tmp_path / "l.txt"
    listed.write_bytes(path + b" 0\n" + os.fsencode(str(tmp_path / "ok.jpg")) + b" 1\n")
    reader = pp.readers.FileList(str(listed))
    datas, sources = reader.read_raw([0, 1, 0])
    assert sources == [os.fsdecode(path), str(tmp_path / "ok.jpg"), os.fsdecode(path)]
    assert datas == [b"x" * 100, b"y" * 100, b"x" * 100]
    assert reader.read(0).source == sources[0] == reader.sources(0)


def test_a_subclass_that_changes_read_many_keeps_it_on_the_read_ahead(tmp_path, monkeypatch):
    """The read-ahead takes FileList's bytes and paths without Samples (read_raw) only where
    read_many is FileList's own: a subclass's read_many (here adding a target) is what it reads."""
    from pixelpipe.loader.reading import _reads_raw

    class Tagged(pp.readers.FileList):
        def read_many(self, indices):
            out = super().read_many(indices)
            for s in out:
                if not isinstance(s, OSError):
                    s.targets = {"tag": s.index * 10}
            return out

    assert _reads_raw(pp.readers.FileList) and _reads_raw(pp.readers.Folder) and not _reads_raw(Tagged)
    root = _folder(tmp_path, broken=())
    files = sorted(p for p in tmp_path.rglob("*.jpg"))
    (tmp_path / "list.txt").write_text("".join(f"{p} {k}\n" for k, p in enumerate(files)))
    monkeypatch.setattr(pipeline_module, "READ_THREADS", 4)
    with pp.Pipeline(Tagged(str(tmp_path / "list.txt"), root=root), [pp.Resize((8, 8))], 4, seed=1,
                     num_threads=2) as pipe:
        assert pipe._reading._threads > 0
        batch = next(iter(pipe))
    assert batch["tag"] == [i * 10 for i in batch["index"].tolist()]
