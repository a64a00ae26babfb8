"""What the tests of bad input share (tests/test_pipeline_errors.py, tests/test_pipeline_remake.py):
Folder trees with one bad file among good ones, a small Pipeline over them, and a time limit
on every call that could hang. The bad files come from tests/corpus.py."""

from __future__ import annotations

from pathlib import Path

from corpus import Item, bad_files, samples, within, write_folder

from pixelpipe import Pipeline, Resize

__all__ = ["BAD", "BROKEN", "KINDS", "LIMIT", "build", "folder_with", "make", "prepare", "run", "valid"]

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


BROKEN = {  # three samples that fail where the header is read, or where the pixels are decoded
    "header": lambda data: [b"not an image " + bytes([k]) * 40 for k in range(3)],
    "body": lambda data: [d[: len(d) // 3] for d in data[:3]],
}
