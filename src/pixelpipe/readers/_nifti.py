"""Volume readers: NIfTI (.nii, .nii.gz, through nibabel), NumPy (.npy, .npz), as a list of
(image, label) files, MONAI's list of dicts, or a folder of image / label pairs.

Uncompressed NIfTI and .npy files are memory-mapped: opening one reads its header only, and
the voxels come from the page cache as they are copied into a batch. A .nii.gz is decompressed
whole (gzip has no random access). nibabel is imported when a NIfTI file is first read, so
`import pixelpipe` stays light and the extra is needed only for NIfTI.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._base import ReaderError, check_index
from ._volume_files import VOLUME_EXTENSIONS, load_volume, volume_extension, volume_from_bytes

__all__ = ["VOLUME_EXTENSIONS", "VolumeSample", "Volumes", "load_volume", "volume_from_bytes"]

@dataclass(slots=True)
class VolumeSample:
    """One volume as a reader produces it.

    Attributes:
        image: [D, H, W] or [D, H, W, C] array (a memory map where the file allows).
        label: the integer label map [D, H, W], or None.
        affine: float64 [4, 4] voxel index -> world (mm), as nibabel's `img.affine`.
        source: the image's path, for error messages.
        index: the sample's index in the reader.
    """

    image: np.ndarray
    label: np.ndarray | None
    affine: np.ndarray
    source: str
    index: int


def _stem(name: str) -> str:
    low = name.lower()
    for ext in sorted(VOLUME_EXTENSIONS, key=len, reverse=True):
        if low.endswith(ext):
            return name[: -len(ext)]
    return name


class Volumes:
    """An indexable reader of volume files with optional label maps.

    Args:
        items: one entry per sample: a path (no label), an (image, label) pair of paths, or a
            dict {"image": path, "label": path} (MONAI's datalist; other keys are ignored).
            Relative paths are taken from `root` when given.
        root: the folder relative paths start from.
        mmap: memory-map uncompressed files (.nii, .npy).

    `Volumes.folder(root, images="imagesTr", labels="labelsTr")` pairs the files of two
    subfolders by name (the Medical Segmentation Decathlon's layout). Files are checked to
    exist at construction (a ReaderError names the first missing one); `read(i)` opens sample
    i then, and a label map whose spatial size differs from its image raises a ValueError
    naming both files.

    Example:
        >>> reader = Volumes([{"image": "a.nii.gz", "label": "a_seg.nii.gz"}], root="/data")  # doctest: +SKIP
    """

    indexable = True

    def __init__(self, items: Sequence[Any], root: str | os.PathLike[str] | None = None, mmap: bool = True) -> None:
        base = Path(root) if root is not None else None
        pairs: list[tuple[str, str | None]] = []
        for k, item in enumerate(items):
            if isinstance(item, dict):
                if "image" not in item:
                    raise ReaderError(f"item {k}: a dict names its image under 'image'; got keys {sorted(item)}")
                image, label = item["image"], item.get("label")
            elif isinstance(item, (tuple, list)):
                if len(item) != 2:
                    raise ReaderError(f"item {k}: expected (image, label), got {len(item)} entries")
                image, label = item
            else:
                image, label = item, None
            full = [None if p is None else os.fspath(base / p if base is not None else p) for p in (image, label)]
            for p in full:
                if p is not None and not os.path.isfile(p):
                    raise ReaderError(f"item {k}: no file at {p}")
            pairs.append((full[0], full[1]))  # type: ignore[arg-type]
        if not pairs:
            raise ReaderError("Volumes: no items")
        self.items: list[tuple[Any, Any]] = list(pairs)
        self.mmap = bool(mmap)

    @classmethod
    def folder(cls, root: str | os.PathLike[str], images: str = "imagesTr", labels: str | None = "labelsTr",
               mmap: bool = True) -> Volumes:
        """The volume files of root/images, each paired with the file of the same name (any
        volume extension) in root/labels when labels is given; sorted by name."""
        img_dir = Path(root) / images
        if not img_dir.is_dir():
            raise ReaderError(f"no folder {img_dir}")
        files = sorted(f for f in os.listdir(img_dir) if volume_extension(f) and not f.startswith("."))
        if not files:
            raise ReaderError(f"{img_dir} holds no volume files ({', '.join(VOLUME_EXTENSIONS)})")
        if labels is None:
            return cls([str(img_dir / f) for f in files], mmap=mmap)
        lab_dir = Path(root) / labels
        if not lab_dir.is_dir():
            raise ReaderError(f"no folder {lab_dir}")
        by_stem = {_stem(f): f for f in os.listdir(lab_dir) if volume_extension(f)}
        missing = [f for f in files if _stem(f) not in by_stem]
        if missing:
            raise ReaderError(f"{len(missing)} images have no label map in {lab_dir}, e.g. {missing[0]}")
        return cls([(str(img_dir / f), str(lab_dir / by_stem[_stem(f)])) for f in files], mmap=mmap)

    @classmethod
    def tar(cls, shards: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], mmap: bool = True) -> Volumes:
        """The volumes of uncompressed tar shards (webdataset's layout: `KEY.image.nii.gz` or
        `KEY.nii.gz` / `.nii` / `.npy` / `.npz`, with `KEY.label.*` or `KEY.seg.*` beside), indexed
        at construction, then read by sample like files (uncompressed .nii and .npy members
        memory-mapped in place)."""
        from ._volume_tar import tar_volume_pairs

        paths = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
        self = cls.__new__(cls)
        self.items, self.mmap = list(tar_volume_pairs(paths)), bool(mmap)
        return self

    def __len__(self) -> int:
        return len(self.items)

    def sources(self, i: int) -> str:
        return str(self.items[check_index(i, len(self), "Volumes")][0])

    def _load(self, ref: Any) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(ref, str):
            return load_volume(ref, self.mmap)
        from ._volume_tar import load_member

        return load_member(ref, self.mmap)

    def read(self, i: int) -> VolumeSample:
        i = check_index(i, len(self), "Volumes")
        image_ref, label_ref = self.items[i]
        image_path, label_path = str(image_ref), None if label_ref is None else str(label_ref)
        image, affine = self._load(image_ref)
        if image.ndim not in (3, 4):
            raise ValueError(f"{image_path}: a volume is [D, H, W] or [D, H, W, C], got shape {image.shape}")
        label = None
        if label_ref is not None:
            label, _ = self._load(label_ref)
            if label.ndim == 4 and label.shape[3] == 1:
                label = label[..., 0]
            if label.shape != image.shape[:3]:
                raise ValueError(f"{label_path}: label map of shape {label.shape}, its image {image_path} has "
                                 f"{image.shape[:3]}")
            if label.dtype.kind == "f":  # NIfTI label maps are often stored as floats
                label = label.astype(np.int64)
        return VolumeSample(image, label, affine, image_path, i)

    def __repr__(self) -> str:
        labelled = sum(lab is not None for _, lab in self.items)
        return f"Volumes({len(self)} volumes, {labelled} with label maps)"
