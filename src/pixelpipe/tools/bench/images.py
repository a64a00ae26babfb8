"""The bench's images: the image files of a --data folder, the encoded images every
contender gets (the folder's, or the built-in synthetic set), and file lists of them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ...readers._base import IMAGE_EXTENSIONS as READER_EXTENSIONS

IMAGE_EXTENSIONS = tuple(f".{e}" for e in READER_EXTENSIONS)


def image_files(data: str) -> list[Path]:
    """The image files under a folder (recursive), sorted."""
    root = Path(data)
    if not root.is_dir():
        raise SystemExit(f"pixelpipe bench: --data {data}: not a folder")
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise SystemExit(f"pixelpipe bench: --data {data}: no images ({', '.join(IMAGE_EXTENSIONS)})")
    return files


def load_images(data: str | None, n: int = 256, seed: int = 0) -> tuple[list[bytes], str]:
    """Encoded images from a folder (recursive) or, with no folder, the synthetic dataset."""
    if data is None:
        from ..datasets import synthetic

        return [b for b, _ in synthetic(n, seed)], f"synthetic ({n} JPEGs)"
    files = image_files(data)
    return [p.read_bytes() for p in files], f"{data} ({len(files)} files)"


def temporary_folder(prefix: str) -> str:
    """A new temporary folder (named pixelpipe-bench-PREFIX-...) removed with what it holds
    when the process exits: where the bench writes the files it makes."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"pixelpipe-bench-{prefix}-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def written(blobs: Sequence[bytes], suffix: str = ".jpg") -> list[str]:
    """The blobs written as files (image00000.jpg, ...) in a temporary folder removed at exit,
    their paths in order: the built-in set read from disk, as users' files are."""
    folder = temporary_folder("images")
    paths = []
    for i, blob in enumerate(blobs):
        path = os.path.join(folder, f"image{i:05d}{suffix}")
        with open(path, "wb") as f:
            f.write(blob)
        paths.append(path)
    return paths


def write_file_list(paths: Sequence[str]) -> str:
    """A DALI-style file list ("path 0" per line) of `paths` in a temporary file, read by
    pixelpipe's FileList and DALI's fn.readers.file alike (removed at exit)."""
    import atexit
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".txt", prefix="pixelpipe-bench-")
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{os.path.abspath(p)} 0\n" for p in paths)
    atexit.register(lambda: os.path.exists(name) and os.unlink(name))
    return name
