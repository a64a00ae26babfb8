"""Folder reader: class order, labels, extensions, nesting, flat (unlabeled) folders, images
beside class folders, construction errors."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch
from PIL import Image

import pixelpipe as pp
from pixelpipe.readers import Folder, ReaderError, open_reader


def jpeg(value: int = 0) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (value, 0, 0)).save(buf, format="JPEG")
    return buf.getvalue()


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "data", {
        "dog/b.jpg": jpeg(1),
        "dog/a.JPG": jpeg(2),
        "cat/z.png": b"png-ish",
        "cat/nested/deeper/y.jpeg": jpeg(3),
        "cat/notes.txt": b"not an image",
        "cat/.hidden.jpg": b"ignored",
        "bird/x.WebP": b"webp-ish",
        "stray.jpg": b"not in a class folder",
    })


def test_classes_sorted_and_labels_follow_them(tree: Path) -> None:
    r = Folder(tree)
    assert r.classes == ["bird", "cat", "dog"]
    assert r.class_to_idx == {"bird": 0, "cat": 1, "dog": 2}
    assert r.labels.dtype == torch.int64
    assert r.labels.tolist() == [0, 1, 1, 2, 2]
    for i in range(len(r)):
        s = r.read(i)
        assert s.index == i and s.label == r.labels[i].item()
        assert os.path.basename(os.path.dirname(s.source)) in r.classes or "nested" in s.source


def test_case_insensitive_extensions_and_non_images_ignored(tree: Path) -> None:
    names = [os.path.basename(Folder(tree).sources(i)) for i in range(5)]
    assert sorted(names) == ["a.JPG", "b.jpg", "x.WebP", "y.jpeg", "z.png"]
    assert "notes.txt" not in names and ".hidden.jpg" not in names


def test_nested_subfolders_and_sorted_order(tree: Path) -> None:
    r = Folder(tree)
    cat = [r.sources(i) for i in range(len(r)) if r.labels[i] == 1]
    assert cat == sorted(cat)
    assert any(p.endswith(os.path.join("nested", "deeper", "y.jpeg")) for p in cat)
    dog = [os.path.basename(r.sources(i)) for i in range(len(r)) if r.labels[i] == 2]
    assert dog == ["a.JPG", "b.jpg"]


def test_read_returns_the_file_bytes(tree: Path) -> None:
    r = Folder(tree)
    for i in range(len(r)):
        s = r.read(i)
        assert s.data == Path(s.source).read_bytes()
        assert s.source == r.sources(i)


def test_custom_extensions(tree: Path) -> None:
    r = Folder(tree, extensions=(".PNG", "webp"))
    assert len(r) == 2
    assert [os.path.basename(r.sources(i)) for i in range(2)] == ["x.WebP", "z.png"]


def test_empty_class_keeps_its_label(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"a/1.jpg": b"x", "c/2.jpg": b"y"})
    (root / "b").mkdir()
    r = Folder(root)
    assert r.classes == ["a", "b", "c"]
    assert r.labels.tolist() == [0, 2]


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(ReaderError, match="does not exist"):
        Folder(tmp_path / "nope")


def test_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f.jpg").write_bytes(b"x")
    with pytest.raises(ReaderError, match="not a folder"):
        Folder(tmp_path / "f.jpg")


def test_flat_folder_is_an_unlabeled_dataset(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "flat", {"b.jpg": jpeg(1), "a.PNG": b"png-ish", "c.jpeg": jpeg(3),
                                        "notes.txt": b"x", ".hidden.jpg": b"x"})
    (root / ".ipynb_checkpoints").mkdir()  # a hidden folder is not a class
    r = Folder(root)
    assert r.classes == [] and r.class_to_idx == {}
    assert r.ignored == [(str(root / "notes.txt"), "not an image: extension .txt, not one of bmp, jpeg, jpg, png, webp")]
    assert r.labels is None
    assert [os.path.basename(r.sources(i)) for i in range(len(r))] == ["a.PNG", "b.jpg", "c.jpeg"]
    for i in range(len(r)):
        s = r.read(i)
        assert s.label is None and s.index == i and s.data == Path(s.source).read_bytes()
    assert repr(r) == f"Folder({str(root)!r}, samples=3, unlabeled, ignored=1)"
    assert "unlabeled" not in repr(Folder(make_tree(tmp_path / "tree", {"a/1.jpg": b"x"})))


def test_flat_folder_through_open_reader(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"1.jpg": jpeg(1), "2.jpg": jpeg(2)})
    r = open_reader(root)
    assert isinstance(r, Folder) and len(r) == 2 and r.labels is None


def test_flat_folder_through_the_pipeline_gives_label_minus_one(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {f"{i}.jpg": jpeg(20 * i) for i in range(6)})
    pipe = pp.Pipeline(str(root), [pp.Resize((32, 32))], batch_size=4)
    try:
        batches = list(pipe)
    finally:
        pipe.close()
    assert [tuple(b["image"].shape) for b in batches] == [(4, 3, 32, 32)] * 2
    valid = torch.cat([b["valid"] for b in batches])
    assert sorted(torch.cat([b["index"] for b in batches])[valid].tolist()) == list(range(6))
    assert torch.cat([b["label"] for b in batches]).tolist() == [-1] * 8


def test_images_beside_class_folders_are_ignored_and_listed(tree: Path) -> None:
    (tree / "b_stray.PNG").write_bytes(b"png-ish")
    (tree / "readme.txt").write_bytes(b"not an image")
    r = Folder(tree)
    assert r.classes == ["bird", "cat", "dog"] and len(r) == 5
    beside = "an image beside the class folders, in no class"
    other = "not an image: extension .txt, not one of bmp, jpeg, jpg, png, webp"
    assert r.ignored == [(str(tree / "b_stray.PNG"), beside), (str(tree / "cat" / "notes.txt"), other),
                         (str(tree / "readme.txt"), other), (str(tree / "stray.jpg"), beside)]
    assert all("stray" not in r.sources(i) for i in range(len(r)))
    assert repr(r) == f"Folder({str(tree)!r}, samples=5, classes=3, ignored=4)"


def test_class_folders_only_have_nothing_ignored(tmp_path: Path) -> None:
    r = Folder(make_tree(tmp_path, {"a/1.jpg": b"x"}))
    assert r.ignored == [] and "ignored" not in repr(r)


def test_images_only_beside_empty_class_folders(tmp_path: Path) -> None:
    # a flat folder that also holds a subfolder without images (say, annotations)
    make_tree(tmp_path, {"1.jpg": b"x", "2.jpg": b"y", "annotations/1.json": b"{}"})
    with pytest.raises(ReaderError, match=r"no images .* 1 class folders.*2 images directly "
                                          r"under root \(such as '1.jpg'\)"):
        Folder(tmp_path)


def test_no_images_and_no_class_folders(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_bytes(b"x")
    with pytest.raises(ReaderError, match="no images .* and no class subfolders"):
        Folder(tmp_path)


def test_no_images(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a/readme.md": b"x", "b/c/d.txt": b"y"})
    with pytest.raises(ReaderError, match="no images"):
        Folder(tmp_path)


def test_vanished_file_names_the_path(tree: Path) -> None:
    r = Folder(tree)
    victim = r.sources(3)
    os.remove(victim)
    with pytest.raises(FileNotFoundError) as info:
        r.read(3)
    assert victim in str(info.value)
    assert r.read(2).index == 2  # the others still read


def test_index_out_of_range(tree: Path) -> None:
    r = Folder(tree)
    with pytest.raises(IndexError, match="out of range"):
        r.read(len(r))
    with pytest.raises(IndexError):
        r.sources(-1)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_loop_is_walked_once(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"a/1.jpg": b"x", "a/sub/2.jpg": b"y"})
    os.symlink(root / "a", root / "a" / "sub" / "loop")
    r = Folder(root)
    assert len(r) == 2


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
@pytest.mark.parametrize("target", ["..", "../c0", ".", "../c1"])
def test_links_back_to_the_root_or_another_class_are_not_followed(tmp_path: Path, target: str) -> None:
    """c1/loop -> .. (or to a class folder, c1's own or c0's, a symlink to c1 inside c0): each
    real folder is walked once, as the class it is, whichever class sorts first."""
    root = make_tree(tmp_path / "data", {"c0/1.jpg": jpeg(1), "c0/2.jpg": jpeg(2), "c1/3.jpg": jpeg(3)})
    inside = "c0" if target == "../c1" else "c1"
    os.symlink(target, root / inside / "loop")
    r = Folder(root)
    assert [os.path.relpath(r.sources(i), root) for i in range(len(r))] == ["c0/1.jpg", "c0/2.jpg", "c1/3.jpg"]
    assert r.labels.tolist() == [0, 0, 1]
    ((path, why),) = r.ignored
    assert path == str(root / inside / "loop") and "already listed" in why


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinks_leaving_the_root_are_listed_not_followed_unless_asked(tmp_path: Path) -> None:
    outside = make_tree(tmp_path / "elsewhere", {"x.jpg": jpeg(5), "d/y.jpg": jpeg(6)})
    root = make_tree(tmp_path / "data", {"c0/1.jpg": jpeg(1), "shared/2.jpg": jpeg(2)})
    os.symlink(outside / "x.jpg", root / "c0" / "x.jpg")
    os.symlink(outside / "d", root / "c0" / "d")
    os.symlink("/etc/passwd", root / "c0" / "passwd.jpg")
    os.symlink("/dev/zero", root / "c0" / "zero.jpg")
    os.symlink(root / "shared" / "2.jpg", root / "c0" / "inside.jpg")  # inside the root: followed
    os.symlink(root / "nothing.jpg", root / "c0" / "broken.jpg")
    r = Folder(root)
    assert sorted(os.path.relpath(r.sources(i), root) for i in range(len(r))) == ["c0/1.jpg", "c0/inside.jpg",
                                                                                 "shared/2.jpg"]
    why = dict(r.ignored)
    for name in ("x.jpg", "d", "passwd.jpg", "zero.jpg"):
        assert "a symlink leaving the root" in why[str(root / "c0" / name)]
    assert "broken symlink" in why[str(root / "c0" / "broken.jpg")]
    anywhere = Folder(root, follow_symlinks="any")  # /dev/zero is followed, and is no regular file
    names = sorted(os.path.relpath(anywhere.sources(i), root) for i in range(len(anywhere)))
    assert names == ["c0/1.jpg", "c0/d/y.jpg", "c0/inside.jpg", "c0/passwd.jpg", "c0/x.jpg", "shared/2.jpg"]
    assert "not a regular file" in dict(anywhere.ignored)[str(root / "c0" / "zero.jpg")]
    none = Folder(root, follow_symlinks="none")
    assert len(none) == 2 and "follow_symlinks='none'" in dict(none.ignored)[str(root / "c0" / "inside.jpg")]
    with pytest.raises(ReaderError, match="follow_symlinks"):
        Folder(root, follow_symlinks=True)


def test_special_files_are_listed_never_opened(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "data", {"c0/1.jpg": jpeg(1)})
    os.mkfifo(root / "c0" / "fifo.jpg")
    r = Folder(root)
    assert len(r) == 1 and r.ignored == [(str(root / "c0" / "fifo.jpg"), "not a regular file (a FIFO, a socket or a device)")]


def test_files_above_max_bytes_are_errors_naming_both_sizes(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "data", {"c0/small.jpg": jpeg(1), "c0/big.jpg": b"x" * 5000, "c0/tiny.jpg": b"x" * 10})
    r = Folder(root, max_bytes=1000)
    assert r.read(r._paths.index(str(root / "c0" / "small.jpg"))).data == jpeg(1)
    for name, size in (("big.jpg", "5,000"), ):
        with pytest.raises(OSError, match=f"holds {size} bytes, more than max_bytes=1,000") as info:
            r.read(r._paths.index(str(root / "c0" / name)))
        assert info.value.filename == str(root / "c0" / name)
    assert Folder(root).read(0).data == b"x" * 5000  # the default is generous
    with pytest.raises(ReaderError, match="max_bytes"):
        Folder(root, max_bytes=0)
