"""The bench's images: the image files of a --data folder, and the encoded images every
contender gets (the folder's, or the built-in synthetic set)."""

from __future__ import annotations

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
