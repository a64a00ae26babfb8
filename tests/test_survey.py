"""survey(): counts, formats, colour kinds, sizes and unreadable files, for every reader kind."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from corpus import crafted_tars, within
from PIL import Image

from pixelpipe.readers import Folder, ReaderError
from pixelpipe.tools.survey import check_sample, open_data, survey


def encode(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def noise(h: int, w: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Image.fromarray(a).convert(mode)


def jpeg(h: int, w: int, **kw: object) -> bytes:
    return encode(noise(h, w), "JPEG", **kw)


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    """cat: 3 colour JPEGs (one progressive); dog: grey JPEG, CMYK JPEG, RGBA PNG, 16-bit PNG;
    fish: empty class folder."""
    root = tmp_path / "clean"
    for name in ("cat", "dog", "fish"):
        (root / name).mkdir(parents=True)
    (root / "cat" / "a.jpg").write_bytes(jpeg(40, 60))
    (root / "cat" / "b.JPEG").write_bytes(jpeg(100, 50, progressive=True))
    (root / "cat" / "c.jpg").write_bytes(jpeg(300, 400))
    (root / "dog" / "g.jpg").write_bytes(encode(noise(70, 70, "L"), "JPEG"))
    (root / "dog" / "k.jpg").write_bytes(encode(noise(64, 80, "CMYK"), "JPEG"))
    (root / "dog" / "r.png").write_bytes(encode(noise(20, 30, "RGBA"), "PNG"))
    wide = Image.fromarray(np.arange(32 * 48, dtype=np.uint16).reshape(32, 48) * 40)  # 16-bit grey
    (root / "dog" / "w.png").write_bytes(encode(wide, "PNG"))
    (root / "dog" / "notes.txt").write_text("not an image")
    return root


def test_clean_folder(clean: Path) -> None:
    s = survey(str(clean), num_threads=2)
    assert s.ok and s.problems == []
    assert s.reader == "Folder" and s.samples == 7
    assert s.class_counts == {"cat": 3, "dog": 4, "fish": 0}
    assert s.formats == {"jpeg": 5, "png": 2}
    assert s.progressive == 1
    assert dict(s.colour) == {"colour": 3, "grayscale": 2, "cmyk": 1, "alpha": 1}
    assert s.high_bit_depth == 1
    assert sorted(zip(s.heights, s.widths)) == sorted([(40, 60), (100, 50), (300, 400), (70, 70), (64, 80),
                                                       (20, 30), (32, 48)])
    assert s.smallest == (20, 30, str(clean / "dog" / "r.png"))
    assert s.largest == (300, 400, str(clean / "cat" / "c.jpg"))
    # shorter sides 40, 50, 300, 70, 64, 20, 32 -> bins 0-63: 4, 64-127: 2, 128-255: 0, 256-511: 1
    assert s.size_histogram() == [("    0 - 63   ", 4), ("   64 - 127  ", 2), ("  128 - 255  ", 0),
                                  ("  256 - 511  ", 1)]
    text = s.report()
    assert "samples      7" in text and "1 empty: fish" in text and "ok: every sample is readable" in text
    assert "jpeg 5, png 2 (1 progressive or interlaced)" in text
    json.dumps(s.to_dict())  # plain values only


def test_header_scan_and_decode_find_broken_files(clean: Path) -> None:
    full = jpeg(120, 90)
    (clean / "cat" / "cut.jpg").write_bytes(full[: len(full) // 2])  # truncated: no end marker
    (clean / "cat" / "gif.jpg").write_bytes(encode(noise(8, 8), "GIF"))  # wrong format
    (clean / "dog" / "empty.png").write_bytes(b"")
    png = encode(noise(64, 64), "PNG")
    (clean / "dog" / "cut.png").write_bytes(png[: len(png) // 2])  # header fine, data cut
    fast = survey(str(clean), num_threads=2)
    reasons = dict(fast.problems)
    assert set(reasons) == {str(clean / "cat" / "cut.jpg"), str(clean / "cat" / "gif.jpg"),
                            str(clean / "dog" / "empty.png")}
    assert "truncated JPEG" in reasons[str(clean / "cat" / "cut.jpg")]
    assert "GIF" in reasons[str(clean / "cat" / "gif.jpg")]
    assert "empty" in reasons[str(clean / "dog" / "empty.png")]
    assert not fast.ok and fast.samples == 11
    full_decode = survey(str(clean), decode=True, num_threads=1)
    assert set(dict(full_decode.problems)) == set(reasons) | {str(clean / "dog" / "cut.png")}
    text = full_decode.report()
    assert "unreadable   4 (decoded in full)" in text
    assert f"{clean / 'dog' / 'cut.png'}: " in text and "problems: 4 unreadable file(s)" in text


def test_max_pixels_and_missing_files(clean: Path, tmp_path: Path) -> None:
    s = survey(str(clean), max_pixels=300 * 399)
    assert [src for src, _ in s.problems] == [str(clean / "cat" / "c.jpg")]
    assert "max_pixels=119,700" in s.problems[0][1]
    listing = tmp_path / "list.txt"
    listing.write_text(f"{clean / 'cat' / 'a.jpg'} 0\nmissing.jpg 2\n{clean / 'dog' / 'g.jpg'} 2\n")
    s = survey(str(listing))
    assert s.reader == "FileList" and s.samples == 3
    assert s.class_counts == {"0": 1, "2": 2}  # from the list's labels, the missing file included
    assert len(s.problems) == 1 and s.problems[0][0] == str(tmp_path / "missing.jpg")
    assert "cannot read" in s.problems[0][1]


def make_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_tar_shards(tmp_path: Path) -> None:
    good = [(f"k{i}.jpg", jpeg(30 + i, 40)) for i in range(3)]
    labels = [(f"k{i}.cls", str(i % 2).encode()) for i in range(3)]
    members = [m for pair in zip(good, labels) for m in pair] + [("k9.png", b"\x89PNG\r\n\x1a\nnope")]
    make_tar(tmp_path / "a-0.tar", members)
    make_tar(tmp_path / "a-1.tar", [("z.jpg", jpeg(50, 50)), ("z.cls", b"1")])
    s = survey(str(tmp_path / "a-*.tar"))
    assert s.reader == "TarShards" and s.samples == 5
    assert s.class_counts == {"0": 2, "1": 2}
    assert s.unlabelled == 1
    assert [src for src, _ in s.problems] == [f"{tmp_path / 'a-0.tar'}:k9.png"]
    # a shard cut short: its lost sample is a problem and the shard a warning; the other shard
    # is still scanned
    raw = (tmp_path / "a-1.tar").read_bytes()
    (tmp_path / "a-1.tar").write_bytes(raw[:700])
    s = survey(str(tmp_path / "a-*.tar"))
    assert s.samples == 5 and not s.ok
    assert [src for src, _ in s.problems] == [f"{tmp_path / 'a-0.tar'}:k9.png", f"{tmp_path / 'a-1.tar'}:z.jpg"]
    assert "truncated" in s.problems[1][1]
    assert [src for src, _ in s.warnings] == [str(tmp_path / "a-1.tar")] and "truncated" in s.warnings[0][1]
    assert "ok:" not in s.report() and "problems: 2 unreadable file(s), 1 warning(s)" in s.report()


def test_tar_members_of_no_sample_are_listed_with_why(tmp_path: Path) -> None:
    path = make_tar(tmp_path / "t.tar", [("a.jpg", jpeg(10, 12)), ("a.cls", b"1"),
                                         ("b.gif", encode(noise(8, 8), "GIF")), ("b.cls", b"2"),
                                         ("__meta__.json", b"{}"), ("README", b"notes")])
    s = survey(str(path))
    assert s.samples == 1 and s.ok
    assert dict(s.ignored) == {
        f"{path}:b": "no image member: .gif, .cls, none of bmp, jpeg, jpg, png, webp",
        f"{path}:__meta__": "no image member: .json, none of bmp, jpeg, jpg, png, webp",
        f"{path}:README": "no extension: a member of no sample (a sample's members are <key>.<extension>)"}
    assert "ignored      3 files, not samples: 2 no image member; 1 no extension" in s.report()


def test_flat_folder_and_open_errors(tmp_path: Path) -> None:
    (tmp_path / "x.jpg").write_bytes(jpeg(20, 20))
    (tmp_path / "y.png").write_bytes(encode(noise(10, 12), "PNG"))
    (tmp_path / ".hidden.jpg").write_bytes(b"")
    reader = open_data(str(tmp_path))
    assert isinstance(reader, Folder) and len(reader) == 2 and reader.labels is None
    s = survey(tmp_path)
    assert s.reader == "Folder" and s.samples == 2 and s.ok
    assert "none (the samples have no labels)" in s.report()
    with pytest.raises(ReaderError, match="does not exist"):
        survey(str(tmp_path / "nope"))
    (tmp_path / "sub").mkdir()
    with pytest.raises(ReaderError):  # a class folder layout with no images in it
        survey(str(tmp_path))
    with pytest.raises(ReaderError):
        open_data(str(tmp_path / "empty-*.tar"))


def test_ignored_files_are_listed_with_why(clean: Path) -> None:
    (clean / "stray.jpg").write_bytes(jpeg(10, 10))
    (clean / "cat" / "valid.gif").write_bytes(encode(noise(8, 8), "GIF"))
    s = survey(str(clean))
    assert s.samples == 7 and s.ignored_files == 3
    assert dict(s.ignored) == {
        str(clean / "stray.jpg"): "an image beside the class folders, in no class",
        str(clean / "cat" / "valid.gif"): "not an image: extension .gif, not one of bmp, jpeg, jpg, png, webp",
        str(clean / "dog" / "notes.txt"): "not an image: extension .txt, not one of bmp, jpeg, jpg, png, webp"}
    text = s.report()
    assert "ignored      3 files, not samples: 2 not an image; 1 an image beside the class folders" in text
    assert f"{clean / 'cat' / 'valid.gif'}: not an image" in text
    assert s.to_dict()["ignored"][0] == {"path": str(clean / "cat" / "valid.gif"), "reason": dict(s.ignored)[
        str(clean / "cat" / "valid.gif")]}


def test_check_sample() -> None:
    info, problem = check_sample(jpeg(12, 16))
    assert problem is None and (info.height, info.width, info.format) == (12, 16, "jpeg")
    info, problem = check_sample(np.zeros((5, 7, 3), np.uint8))
    assert problem is None and (info.format, info.height, info.width, info.channels) == ("array", 5, 7, 3)
    assert check_sample(b"GIF89a....")[1].startswith("unsupported")
    with pytest.raises(ValueError, match="num_threads"):
        survey(".", num_threads=0)


def test_special_files_and_symlinks_neither_hang_nor_leak(clean: Path) -> None:
    os.mkfifo(clean / "cat" / "fifo.jpg")
    os.symlink("/dev/zero", clean / "cat" / "zero.jpg")
    os.symlink("/etc/passwd", clean / "cat" / "passwd.jpg")
    os.symlink("..", clean / "dog" / "loop")
    s = within(30, lambda: survey(str(clean), num_threads=2))
    assert s.samples == 7 and s.ok  # none of them is a sample, and each is listed with why
    why = dict(s.ignored)
    assert "not a regular file" in why[str(clean / "cat" / "fifo.jpg")]
    assert "leaving the root" in why[str(clean / "cat" / "zero.jpg")]
    assert "leaving the root" in why[str(clean / "cat" / "passwd.jpg")]
    assert "already listed" in why[str(clean / "dog" / "loop")]
    assert "root:" not in s.report()  # nothing of /etc/passwd


@pytest.mark.parametrize("name", ["checksum", "cut_header", "cut_boundary", "cut_data", "no_end", "huge_member",
                                  "repeated_key"])
def test_damaged_tar_shards_are_reported_never_ok(tmp_path: Path, name: str) -> None:
    path, items, known = crafted_tars(tmp_path)[name]
    s = survey(str(path), num_threads=2)
    assert not s.ok and "ok:" not in s.report() and s.samples == len(items)
    assert [src for src, _ in s.warnings][:1] == [str(path) if name != "repeated_key" else f"{path}:000003"]
    assert len(s.problems) == len(known["bad"])
