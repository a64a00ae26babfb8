"""TarShards reader: grouping, labels, shard patterns, counts, resume with skip."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from corpus import within

from pixelpipe.readers import ReaderError, TarShards, Unreadable
from pixelpipe.readers._tar_index import member_names


def make_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def png_mask(h: int = 6, w: int = 8, mode: str = "L") -> bytes:
    """A label image as PNG: value 2 in a block, 0 elsewhere."""
    import numpy as np
    from PIL import Image

    a = np.zeros((h, w), np.uint8)
    a[1:4, 2:5] = 2
    im = Image.fromarray(a) if mode == "L" else Image.fromarray(np.stack([a] * 3, -1))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def shard_members(shard: int, n: int) -> list[tuple[str, bytes]]:
    out = []
    for k in range(n):
        key = f"s{shard}/{k:04d}"
        out += [(f"{key}.jpg", f"img {shard} {k}".encode()), (f"{key}.cls", str(k % 5).encode())]
    return out


@pytest.fixture
def shards(tmp_path: Path) -> list[Path]:
    sizes = [3, 5, 4]
    return [make_tar(tmp_path / f"train-{i:02d}.tar", shard_members(i, n))
            for i, n in enumerate(sizes)]


def test_grouping_and_label_sources(tmp_path: Path) -> None:
    members = [
        ("a/0001.jpg", b"J1"), ("a/0001.cls", b"3\n"),
        ("a/0002.png", b"P2"), ("a/0002.txt", b"7"),
        ("a/0003.json", json.dumps({"label": 4, "w": 10}).encode()), ("a/0003.jpeg", b"J3"),
        ("a/0004.webp", b"W4"), ("a/0004.json", b"[1, 0, 2]"),
        ("a/0005.bmp", b"B5"), ("a/0005.txt", b"a caption, not a label"),
        ("a/0006.seg.png", png_mask()), ("a/0006.JPG", b"J6"), ("a/0006.json", b'{"cls": 8}'),
        ("__meta__.json", b"{}"),  # no image: not a sample
        ("b/0001.png", b"P7"), ("b/0001.jpg", b"J7"), ("b/0001.cls", b"1 5"),
    ]
    r = TarShards(make_tar(tmp_path / "x.tar", members))
    samples = list(r.iter_shard(0))
    assert len(r) == r.counts[0] == len(samples) == 7
    assert [s.data for s in samples] == [b"J1", b"P2", b"J3", b"W4", b"B5", b"J6", b"J7"]
    assert [s.label for s in samples] == [3, 7, 4, (1, 0, 2), None, 8, (1, 5)]
    assert [s.index for s in samples] == list(range(7))
    assert samples[0].source == f"{tmp_path / 'x.tar'}:a/0001.jpg"
    assert samples[5].source.endswith(":a/0006.JPG")  # the JPG, not the seg.png, name as stored
    assert samples[5].targets["masks"].shape == (6, 8) and samples[0].targets is None


def test_glob_is_sorted_and_indices_run_across_shards(tmp_path: Path, shards: list[Path]) -> None:
    r = TarShards(str(tmp_path / "train-*.tar"))
    assert r.shards == [str(p) for p in shards]
    assert r.counts == [3, 5, 4] and len(r) == 12
    indices = [s.index for i in range(3) for s in r.iter_shard(i)]
    assert indices == list(range(12))
    assert next(r.iter_shard(1)).data == b"img 1 0"


def test_list_order_is_kept_and_brace_ranges(tmp_path: Path, shards: list[Path]) -> None:
    r = TarShards([shards[2], str(shards[0])])
    assert r.shards == [str(shards[2]), str(shards[0])]
    assert [s.index for s in r.iter_shard(1)] == [4, 5, 6]
    braces = TarShards(str(tmp_path / "train-{00..01}.tar"))
    assert braces.shards == [str(shards[0]), str(shards[1])]


@pytest.mark.parametrize("skip", [0, 1, 3, 5, 9])
def test_skip_resumes_with_the_same_samples(shards: list[Path], skip: int) -> None:
    r = TarShards(shards)
    full = list(r.iter_shard(1))
    rest = list(r.iter_shard(1, skip=skip))
    assert [(s.data, s.label, s.source, s.index) for s in rest] == \
        [(s.data, s.label, s.source, s.index) for s in full[skip:]]


def test_uncounted_shards_use_shard_position_indices(shards: list[Path]) -> None:
    r = TarShards(shards, count=False)
    assert r.counts is None
    with pytest.raises(TypeError, match="count=True"):
        len(r)
    got = [s.index for s in r.iter_shard(2, skip=1)]
    assert got == [(2 << 32) | k for k in (1, 2, 3)]


def test_compressed_tar(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "z.tar.gz", shard_members(0, 4), mode="w:gz")
    r = TarShards(path)
    assert len(r) == 4
    assert [s.label for s in r.iter_shard(0, skip=2)] == [2, 3]


@pytest.mark.parametrize("direct", [True, False])
def test_member_counts_read_headers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool) -> None:
    """Counting reads headers only, and streaming loads only the members of the samples kept:
    through the direct header reader (plain tars) and through tarfile (its fallback)."""
    from pixelpipe.readers import _tar

    path = make_tar(tmp_path / "x.tar", shard_members(0, 6))
    calls = []
    original = tarfile.TarFile.extractfile
    monkeypatch.setattr(tarfile.TarFile, "extractfile",
                        lambda self, m: calls.append(m) or original(self, m))
    direct_members = _tar._direct_members

    def counted(path: str, table: list) -> object:
        for name, size, load in direct_members(path, table):
            yield name, size, (lambda load=load, name=name: calls.append(name) or load())

    monkeypatch.setattr(_tar, "_direct_members", counted)
    r = TarShards(path)
    assert r.counts == [6] and calls == []
    if not direct:
        monkeypatch.setattr(_tar, "member_table", lambda path: None)
    samples = list(r.iter_shard(0, skip=4))
    assert len(calls) == 4  # jpg + cls of the 2 samples kept; skipped ones are not loaded
    assert [s.label for s in samples] == [4, 0]  # labels are k % 5


def test_direct_reader_equals_tarfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain tars read through the header table give exactly the samples tarfile gives."""
    from pixelpipe.readers import _tar

    paths = [make_tar(tmp_path / f"s{k}.tar", shard_members(k, 5)) for k in range(2)]
    r = TarShards(paths)
    direct = [(s.index, s.label, s.data, s.source) for k in range(2) for s in r.iter_shard(k)]
    monkeypatch.setattr(_tar, "member_table", lambda path: None)
    slow = [(s.index, s.label, s.data, s.source) for k in range(2) for s in r.iter_shard(k)]
    assert direct == slow and len(direct) == 10


def test_missing_files_and_empty_globs(tmp_path: Path, shards: list[Path]) -> None:
    with pytest.raises(ReaderError, match="does not exist"):
        TarShards([shards[0], tmp_path / "missing.tar"])
    with pytest.raises(ReaderError, match="no file matches"):
        TarShards(str(tmp_path / "nothing-*.tar"))
    with pytest.raises(ReaderError, match="no shard paths"):
        TarShards([])
    (tmp_path / "junk.tar").write_bytes(b"this is not a tar file" * 100)
    with pytest.raises(ReaderError, match="not a readable tar"):
        TarShards(tmp_path / "junk.tar")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("direct", [True, False])
def test_a_shard_that_is_no_regular_file_is_refused_never_opened(tmp_path: Path, direct: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO (or a device) named like a shard is refused at construction, saying what it is;
    one put in a shard's place after construction is a lost shard, not a read that waits
    forever for a writer."""
    if not direct:
        from pixelpipe.readers import _tar

        monkeypatch.setattr(_tar, "member_table", lambda path: None)
    os.mkfifo(tmp_path / "fifo.tar")
    with pytest.raises(ReaderError, match="fifo.tar' is not a regular file"):
        TarShards(tmp_path / "fifo.tar")
    with pytest.raises(ReaderError, match="nothing.tar' does not exist"):
        TarShards(tmp_path / "nothing.tar")
    path = make_tar(tmp_path / "s.tar", shard_members(0, 3))
    r = TarShards(path)
    path.unlink()
    os.mkfifo(path)
    got = within(20, lambda: list(r.iter_shard(0)))
    assert [s.index for s in got] == [0, 1, 2] and all(isinstance(s, Unreadable) for s in got)
    assert "not a regular file" in got[0].reason and got[0].source.startswith(str(path))


def test_members_of_no_sample_are_listed_in_ignored(tmp_path: Path) -> None:
    """Nothing left out silently: a key without an image (another format, a label alone,
    metadata) and a member without an extension are listed with why; uncounted shards list
    nothing (their members are never scanned ahead)."""
    path = make_tar(tmp_path / "i.tar", [("k.jpg", b"1"), ("k.cls", b"0"), ("g.tif", b"2"), ("g.cls", b"1"),
                                         ("lone.cls", b"3"), ("NOTES", b"4"), ("m.png", b"5")])
    r = TarShards(path)
    assert r.counts == [2] and [s.source for s in r.iter_shard(0)] == [f"{path}:k.jpg", f"{path}:m.png"]
    assert [(src.split(":")[-1], why.split(":")[0]) for src, why in r.ignored] == [
        ("g", "no image member"), ("lone", "no image member"), ("NOTES", "no extension")]
    assert ".tif, .cls, none of bmp, jpeg, jpg, png, webp" in r.ignored[0][1]
    assert TarShards(path, count=False).ignored == []


def test_duplicate_member_is_refused(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "d.tar", [("k.jpg", b"1"), ("k.jpg", b"2")])
    with pytest.raises(ReaderError, match="second '.jpg'"):
        TarShards(path)


def test_bad_cls_label_is_an_unreadable_sample_naming_the_member(tmp_path: Path) -> None:
    r = TarShards(make_tar(tmp_path / "c.tar", [("k.jpg", b"1"), ("k.cls", b"dog"), ("m.jpg", b"2"),
                                                 ("m.cls", b"4")]))
    bad, good = r.iter_shard(0)  # the stream goes on after it
    assert isinstance(bad, Unreadable) and bad.index == 0 and bad.source == f"{tmp_path / 'c.tar'}:k.jpg"
    assert "not an integer" in bad.reason and "dog" not in bad.reason  # no contents echoed
    assert (good.index, good.label) == (1, 4)


def test_bad_shard_id_and_skip(shards: list[Path]) -> None:
    r = TarShards(shards)
    with pytest.raises(IndexError, match="3 shards"):
        r.iter_shard(3)
    with pytest.raises(ValueError, match="skip"):
        r.iter_shard(0, skip=-1)
    assert list(r.iter_shard(0, skip=10)) == []


def test_shard_that_grew_after_counting_is_an_error(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "g.tar", shard_members(0, 2))
    r = TarShards(path)
    make_tar(path, shard_members(0, 3))
    with pytest.raises(ValueError, match="more samples than were counted"):
        list(r.iter_shard(0))


def test_shard_truncated_after_counting_gives_its_lost_samples(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "t.tar", [("j.jpg", b"y" * 100), ("j.cls", b"0"), ("k.jpg", b"x" * 5000),
                                         ("k.cls", b"1")])
    r = TarShards(path)
    assert r.counts == [2] and r.problems == []
    path.write_bytes(path.read_bytes()[:3000])  # cut after the counts were taken, inside k.jpg
    good, lost = r.iter_shard(0)
    assert (good.index, good.label) == (0, 0)
    assert isinstance(lost, Unreadable) and lost.index == 1 and lost.source.endswith("t.tar:k.jpg")
    assert "truncated tar" in lost.reason and "5,000 bytes" in lost.reason


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_header_scan_agrees_with_tarfile(tmp_path: Path, fmt: int) -> None:
    long_dir = "d" * 70 + "/" + "e" * 60  # over 100 characters: prefix, L record or pax path
    path = tmp_path / "f.tar"
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, kind, data in [
            (f"{long_dir}/0001.jpg", tarfile.REGTYPE, b"x" * 700),
            ("plain/0001.cls", tarfile.REGTYPE, b"1"),
            ("plain", tarfile.DIRTYPE, b""),
            ("plain/link.jpg", tarfile.SYMTYPE, b""),
            ("plain/hard.jpg", tarfile.LNKTYPE, b""),
            ("empty.jpg", tarfile.REGTYPE, b""),
            (("ünï" if fmt != tarfile.USTAR_FORMAT else "uni") + "/0002.png", tarfile.REGTYPE,
             b"y" * 512),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data)
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = "empty.jpg"
            tar.addfile(info, io.BytesIO(data) if data else None)
    with tarfile.open(path) as tar:
        expected = [m.name for m in tar if m.isfile()]
    assert member_names(str(path)) == expected
    assert len(expected) == 4 and expected[0].startswith(long_dir)
    assert TarShards(path).counts == [3]
    assert [s.source.split(":", 1)[1] for s in TarShards(path).iter_shard(0)] == \
        [n for n in expected if n.endswith((".jpg", ".png"))]


def test_header_scan_falls_back_for_compressed_and_truncated(tmp_path: Path) -> None:
    gz = make_tar(tmp_path / "z.tar.gz", shard_members(0, 2), mode="w:gz")
    assert member_names(str(gz)) is None
    cut = make_tar(tmp_path / "cut.tar", [("k.jpg", b"x" * 5000)])
    cut.write_bytes(cut.read_bytes()[:2048])
    assert member_names(str(cut)) == []  # its one member is cut: told, not a tarfile fallback
    with pytest.warns(UserWarning, match="cut.tar.*truncated"):
        r = TarShards(cut)
    assert r.counts == [1] and [type(s) for s in r.iter_shard(0)] == [Unreadable]


# ----------------------------------------------------------------------------- damaged shards
@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from corpus import crafted_tars

    return crafted_tars(tmp_path_factory.mktemp("crafted"))


@pytest.mark.parametrize("name", ["checksum", "cut_header", "cut_boundary", "cut_data", "no_end", "huge_member",
                                  "bad_label", "repeated_key"])
def test_a_damaged_shard_says_what_it_lost(crafted: dict, name: str) -> None:
    """Read up to the damage, then an Unreadable for each sample lost (counted at construction,
    told as a warning and in `problems`); every sample read is the one written, with its label."""
    import warnings

    path, items, known = crafted[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = TarShards(path)
    assert r.counts == [len(items)]
    got = list(r.iter_shard(0))
    assert [s.index for s in got] == list(range(len(items)))
    assert [s.index for s in got if isinstance(s, Unreadable)] == known["bad"]
    for s in got:
        if isinstance(s, Unreadable):
            assert s.source.startswith(str(path)) and s.reason
        else:
            assert (s.data, s.label, s.source) == (items[s.index].data, items[s.index].label, items[s.index].source)
    if name == "bad_label":
        assert r.problems == [] and not caught
    else:
        assert r.problems and str(path) in str(caught[0].message)
    if known["lost"]:
        assert r.problems[0][0] == str(path) and f"counted as {known['lost']}" in r.problems[0][1] \
            or f"{known['lost']} sample(s) of the shard lost" in r.problems[0][1]
    if name == "repeated_key":
        assert r.problems == [(f"{path}:000003", r.problems[0][1])] and "comes back" in r.problems[0][1]


def test_members_above_max_bytes_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_tar(tmp_path / "m.tar", [("a.jpg", b"x" * 100), ("a.cls", b"1"), ("b.jpg", b"y" * 5000),
                                         ("b.cls", b"2"), ("c.jpg", b"z" * 10), ("c.cls", b"3")])
    for direct in (True, False):
        if not direct:
            from pixelpipe.readers import _tar

            monkeypatch.setattr(_tar, "member_table", lambda path: None)
        a, b, c = TarShards(path, max_bytes=1000).iter_shard(0)
        assert (a.data, a.label, c.data, c.label) == (b"x" * 100, 1, b"z" * 10, 3)
        assert isinstance(b, Unreadable) and b.index == 1 and b.source.endswith("m.tar:b.jpg")
        assert "5,000 bytes, more than max_bytes=1,000" in b.reason
    with pytest.raises(ReaderError, match="max_bytes"):
        TarShards(path, max_bytes=0)


def test_a_compressed_shard_cut_short_counts_its_loss(tmp_path: Path) -> None:
    gz = make_tar(tmp_path / "z.tar.gz", shard_members(0, 40), mode="w:gz")
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    with pytest.warns(UserWarning, match="corrupt or truncated tar after"):
        r = TarShards(gz)
    assert "counted as 1" in r.problems[0][1]
    got = list(r.iter_shard(0))  # the samples it gives, then its counted loss
    assert [s.index for s in got] == list(range(r.counts[0])) and isinstance(got[-1], Unreadable)
    assert all(not isinstance(s, Unreadable) for s in got[:-1]) and got[-1].source == str(gz)
    uncounted = TarShards(gz, count=False)
    assert len([s for s in uncounted.iter_shard(0)]) == r.counts[0] - 1  # no count: nothing to tell


def test_targets_from_json_and_seg_png(tmp_path: Path) -> None:
    import numpy as np
    import torch
    from PIL import Image

    import pixelpipe as pp

    buf = io.BytesIO()
    Image.fromarray(np.full((6, 8, 3), 90, np.uint8)).save(buf, "JPEG")
    jpeg = buf.getvalue()
    meta = {"boxes": [[0.25, 0.5, 0.5, 1.0 / 3]], "box_format": "cxcywhn", "labels": [7],
            "keypoints": [[2, 3, 2]], "label": 1}
    members = [("0.jpg", jpeg), ("0.json", json.dumps(meta).encode()), ("0.seg.png", png_mask()),
               ("1.jpg", jpeg), ("1.json", b'{"boxes": [[1, 2]]}'),
               ("2.jpg", jpeg), ("2.seg.png", png_mask(mode="RGB")),
               ("3.jpg", jpeg), ("3.mask.png", b"not a png")]
    samples = list(TarShards(make_tar(tmp_path / "t.tar", members)).iter_shard(0))
    t = samples[0].targets
    np.testing.assert_allclose(t["boxes"], [[0.0, 2.0, 4.0, 4.0]])  # centre (2, 3), 4 x 2 pixels
    assert t["labels"].tolist() == [7] and t["keypoints"].tolist() == [[2, 3, 2]] and samples[0].label == 1
    assert t["masks"].dtype == np.uint8 and int(t["masks"][2, 3]) == 2
    reasons = [s.reason for s in samples[1:]]
    assert all(isinstance(s, Unreadable) for s in samples[1:]), samples
    assert "boxes must be [K, 4]" in reasons[0] and "single-channel" in reasons[1] and "does not decode" in reasons[2]
    # a Pipeline moves them with the image (a flip: x -> 8 - x)
    pipe = pp.Pipeline(TarShards(make_tar(tmp_path / "u.tar", members[:3])),
                       pp.Compose([pp.RandomFlip(horizontal=1.0)], dtype=torch.uint8), batch_size=1, shuffle=False)
    batch = next(iter(pipe))
    assert batch["boxes"][0].tolist() == [[4.0, 2.0, 8.0, 4.0]] and batch["labels"][0].tolist() == [7]
    assert int(batch["masks"][0, 2, 8 - 1 - 3]) == 2
    pipe.close()
