"""FileList reader: text and CSV lists, labels, roots, comments and malformed lines."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pixelpipe.readers import FileList, ReaderError


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(4):
        (folder / f"{i}.jpg").write_bytes(bytes([i]) * (i + 1))
    return folder


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_one_label_per_line(images: Path) -> None:
    lst = write(images / "list.txt", "0.jpg 5\n1.jpg 7\n2.jpg\t-1\n")
    r = FileList(lst)
    assert len(r) == 3
    assert r.labels.dtype == torch.int64 and r.labels.tolist() == [5, 7, -1]
    s = r.read(1)
    assert s.label == 7 and s.index == 1
    assert s.source == os.path.join(str(images), "1.jpg")
    assert s.data == b"\x01\x01"
    assert r.label_names is None and r.classes is None


def test_several_labels(images: Path) -> None:
    lst = write(images / "list.lst", "0.jpg 1 0 3\n1.jpg 2 1 4\n")
    r = FileList(lst)
    assert r.labels.shape == (2, 3)
    assert r.labels.tolist() == [[1, 0, 3], [2, 1, 4]]
    assert r.read(1).label == (2, 1, 4)


def test_comments_and_blank_lines(images: Path) -> None:
    text = "# path label\n\n0.jpg 3\n   \n  # indented comment\n1.jpg 4\r\n\n\n"
    r = FileList(write(images / "list.txt", text))
    assert r.labels.tolist() == [3, 4]
    assert [os.path.basename(r.sources(i)) for i in range(2)] == ["0.jpg", "1.jpg"]


def test_relative_root_and_absolute_paths(tmp_path: Path, images: Path) -> None:
    elsewhere = tmp_path / "lists"
    elsewhere.mkdir()
    lst = write(elsewhere / "l.txt", f"2.jpg 0\n{images / '3.jpg'} 1\n")
    r = FileList(lst, root=images)
    assert r.read(0).data == b"\x02" * 3
    assert r.read(1).data == b"\x03" * 4
    default = FileList(lst)  # default root: the list's own folder
    assert default.sources(0) == os.path.join(str(elsewhere), "2.jpg")
    assert default.sources(1) == str(images / "3.jpg")


def test_csv_with_header(images: Path) -> None:
    text = "path,species,colour\n0.jpg,1,2\n1.jpg, 3 ,4\n\n# skipped\n2.jpg,5,6\n"
    r = FileList(write(images / "l.csv", text))
    assert r.label_names == ["species", "colour"]
    assert r.labels.tolist() == [[1, 2], [3, 4], [5, 6]]
    assert r.read(2).label == (5, 6)


def test_csv_detected_by_comma_and_one_label_column(images: Path) -> None:
    r = FileList(write(images / "l.txt", "file,label\r\n0.jpg,9\r\n1.jpg,8\r\n"))
    assert r.label_names == ["label"]
    assert r.labels.shape == (2,) and r.labels.tolist() == [9, 8]
    assert r.read(0).data == b"\x00"


def test_csv_quoted_paths_with_commas_and_spaces(images: Path) -> None:
    (images / "a, b.jpg").write_bytes(b"ab")
    text = 'path,label\n"a, b.jpg",4\n0.jpg,5\n\n"1.jpg","6"\n'
    r = FileList(write(images / "l.csv", text))
    assert r.labels.tolist() == [4, 5, 6]
    assert r.read(0).data == b"ab"
    bad = write(images / "bad.csv", 'path,label\n"a, b.jpg",4\n\n"x.jpg",oops\n')
    with pytest.raises(ReaderError, match="line 4"):
        FileList(bad)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("0.jpg 1\n1.jpg\n", 2, "'1.jpg'"),  # missing label
        ("# c\n0.jpg 1\n\n1.jpg 2 3\n", 4, "'1.jpg 2 3'"),  # extra field
        ("0.jpg 1\n1.jpg one\n", 2, "'one'"),  # not an integer
        ("0.jpg 1\n1.jpg 99999999999999999999999\n", 2, "64-bit"),  # overflow
        ("0.jpg\n", 1, "path followed by integer labels"),  # no label on the first line
    ],
)
def test_malformed_line_names_file_and_line(images: Path, text: str, line: int,
                                            fragment: str) -> None:
    lst = write(images / "bad.txt", text)
    with pytest.raises(ReaderError) as info:
        FileList(lst)
    message = str(info.value)
    assert str(lst) in message and f"line {line}" in message and fragment in message


def test_malformed_csv_row(images: Path) -> None:
    lst = write(images / "bad.csv", "path,a,b\n0.jpg,1,2\n1.jpg,3\n")
    with pytest.raises(ReaderError, match=r"line 3: 2 fields, expected 3.*'1.jpg,3'"):
        FileList(lst)


def test_missing_and_empty_lists(tmp_path: Path) -> None:
    with pytest.raises(ReaderError, match="cannot read"):
        FileList(tmp_path / "none.txt")
    with pytest.raises(ReaderError, match="no samples"):
        FileList(write(tmp_path / "e.txt", "# only a comment\n\n"))
    with pytest.raises(ReaderError, match="no samples"):
        FileList(write(tmp_path / "e.csv", "path,label\n"))


def test_utf8_bom_and_non_ascii_paths(tmp_path: Path) -> None:
    (tmp_path / "éa.jpg").write_bytes(b"e")
    (tmp_path / "l.txt").write_bytes("\ufeffétoile/../éa.jpg 1\néa.jpg 2\n".encode())
    (tmp_path / "étoile").mkdir()
    r = FileList(tmp_path / "l.txt")
    assert r.labels.tolist() == [1, 2]
    assert r.sources(1).endswith("éa.jpg")
    assert r.read(0).data == r.read(1).data == b"e"


def test_vanished_file_names_the_path(images: Path) -> None:
    r = FileList(write(images / "l.txt", "0.jpg 0\ngone.jpg 1\n"))
    with pytest.raises(FileNotFoundError) as info:
        r.read(1)
    assert os.path.join(str(images), "gone.jpg") in str(info.value)


def test_big_list_matches_line_by_line_parse(tmp_path: Path) -> None:
    rows = [(f"d{i % 7}/f{i}.jpg", i % 1000, -i) for i in range(20_000)]
    lines = [f"{p} {a} {b}" for p, a, b in rows]
    lines[100] = "# a comment in the middle"
    lines[200] = ""
    text = "\n".join(lines)
    r = FileList(write(tmp_path / "big.txt", text))
    kept = [row for k, row in enumerate(rows) if k not in (100, 200)]
    assert len(r) == len(kept)
    assert r.labels[:, 0].tolist() == [a for _, a, _ in kept]
    assert r.labels[:, 1].tolist() == [b for _, _, b in kept]
    assert r.sources(150) == os.path.join(str(tmp_path), kept[150][0])


# ------------------------------------------------ property: fast parser == line-by-line parser
_PATH = st.text(alphabet="ab/._-09é", min_size=1, max_size=8)
_LABELS = st.integers(-(2**40), 2**40)


@st.composite
def list_files(draw: st.DrawFn, as_csv: bool) -> str:
    k = draw(st.integers(1, 3))
    rows = draw(st.lists(st.tuples(_PATH, st.lists(_LABELS, min_size=k, max_size=k)),
                         min_size=1, max_size=25))
    noise = ["", "\r", "# comment, 1", "#"] if as_csv else ["", "   ", "\t", "# a comment", " #x 1"]
    lines = ["path," + ",".join(f"l{j}" for j in range(k))] if as_csv else []
    for path, labels in rows:
        lines += draw(st.lists(st.sampled_from(noise), max_size=2))
        sep = "," if as_csv else draw(st.sampled_from([" ", "\t", "  ", " \t "]))
        end = draw(st.sampled_from(["", "\r", " "]))
        lines.append(sep.join([path, *map(str, labels)]) + end)
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n", "\r\n"]))


def reference_parse(text: str, as_csv: bool) -> tuple[list[str], list[list[int]]]:
    """The obvious line-by-line parser the fast one must agree with."""
    rows = []
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        rows.append(next(csv.reader(io.StringIO(line))) if as_csv else line.split())
    rows = rows[1:] if as_csv else rows
    return [r[0] for r in rows], [[int(x) for x in r[1:]] for r in rows]


@pytest.mark.parametrize("as_csv", [False, True])
def test_fast_parser_matches_line_by_line(tmp_path_factory: pytest.TempPathFactory,
                                          as_csv: bool) -> None:
    folder = tmp_path_factory.mktemp("lists")

    @settings(max_examples=60, deadline=None)
    @given(list_files(as_csv))
    def check(text: str) -> None:
        path = folder / ("l.csv" if as_csv else "l.txt")
        path.write_bytes(text.encode())
        paths, labels = reference_parse(text, as_csv)
        r = FileList(path, root="/r")
        assert [r.sources(i) for i in range(len(r))] == [os.path.join("/r", p) for p in paths]
        want = torch.tensor(labels)
        assert torch.equal(r.labels, want if want.shape[1] > 1 else want[:, 0])

    check()
