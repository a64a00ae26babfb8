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

__all__ = ["VOLUME_EXTENSIONS", "VolumeSample", "Volumes", "load_volume"]

VOLUME_EXTENSIONS = (".nii", ".nii.gz", ".npy", ".npz")


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


def _nibabel() -> Any:
    try:
        import nibabel
    except ImportError:
        raise ImportError('reading NIfTI files needs nibabel: pip install "pixelpipe[volumes]"') from None
    return nibabel


def _extension(path: str) -> str:
    low = path.lower()
    for ext in VOLUME_EXTENSIONS:
        if low.endswith(ext) and not (ext == ".nii" and low.endswith(".nii.gz")):
            return ext
    return ""


def load_volume(path: str | os.PathLike[str], mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(voxels, affine float64 [4, 4]) of one file. .nii / .nii.gz: nibabel's data (scaled by
    the header's slope and intercept when it has them; otherwise the stored dtype, memory-mapped
    for .nii) and affine. .npy: the array (memory-mapped), identity affine. .npz: the array
    under "image" (else the only array), "affine" if present, else diag("spacing") if present."""
    p = os.fspath(path)
    ext = _extension(p)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no volume file at {p}")
    if ext in (".nii", ".nii.gz"):
        nib = _nibabel()
        img = nib.load(p, mmap=mmap and ext == ".nii")
        data = np.asanyarray(img.dataobj)
        return data, np.asarray(img.affine, dtype=np.float64)
    if ext == ".npy":
        return np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False), np.eye(4)
    if ext == ".npz":
        with np.load(p, allow_pickle=False) as z:
            keys = [k for k in z.files if k not in ("affine", "spacing")]
            key = "image" if "image" in z.files else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise ValueError(f"{p}: an .npz volume holds its voxels under 'image' (or one array only); "
                                 f"it has {sorted(z.files)}")
            affine = np.eye(4)
            if "affine" in z.files:
                affine = np.asarray(z["affine"], dtype=np.float64).reshape(4, 4)
            elif "spacing" in z.files:
                affine[[0, 1, 2], [0, 1, 2]] = np.asarray(z["spacing"], dtype=np.float64).reshape(3)
            return np.asarray(z[key]), affine
    raise ValueError(f"{p}: not a volume file (expected one of {', '.join(VOLUME_EXTENSIONS)})")


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
        self.items, self.mmap = pairs, bool(mmap)

    @classmethod
    def folder(cls, root: str | os.PathLike[str], images: str = "imagesTr", labels: str | None = "labelsTr",
               mmap: bool = True) -> Volumes:
        """The volume files of root/images, each paired with the file of the same name (any
        volume extension) in root/labels when labels is given; sorted by name."""
        img_dir = Path(root) / images
        if not img_dir.is_dir():
            raise ReaderError(f"no folder {img_dir}")
        files = sorted(f for f in os.listdir(img_dir) if _extension(f) and not f.startswith("."))
        if not files:
            raise ReaderError(f"{img_dir} holds no volume files ({', '.join(VOLUME_EXTENSIONS)})")
        if labels is None:
            return cls([str(img_dir / f) for f in files], mmap=mmap)
        lab_dir = Path(root) / labels
        if not lab_dir.is_dir():
            raise ReaderError(f"no folder {lab_dir}")
        by_stem = {_stem(f): f for f in os.listdir(lab_dir) if _extension(f)}
        missing = [f for f in files if _stem(f) not in by_stem]
        if missing:
            raise ReaderError(f"{len(missing)} images have no label map in {lab_dir}, e.g. {missing[0]}")
        return cls([(str(img_dir / f), str(lab_dir / by_stem[_stem(f)])) for f in files], mmap=mmap)

    def __len__(self) -> int:
        return len(self.items)

    def sources(self, i: int) -> str:
        return self.items[check_index(i, len(self), "Volumes")][0]

    def read(self, i: int) -> VolumeSample:
        i = check_index(i, len(self), "Volumes")
        image_path, label_path = self.items[i]
        image, affine = load_volume(image_path, self.mmap)
        if image.ndim not in (3, 4):
            raise ValueError(f"{image_path}: a volume is [D, H, W] or [D, H, W, C], got shape {image.shape}")
        label = None
        if label_path is not None:
            label, _ = load_volume(label_path, self.mmap)
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
