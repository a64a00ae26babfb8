"""`pixelpipe show --volumes`: volumes of a dataset (or generated ones) beside augmented
versions of them, three orthogonal middle slices per version, label maps overlaid.

Each row is one volume: its original as read, then `columns` augmented versions, version k
being what epoch k of a run with `seed` gives that volume (the draws a VolumePipeline makes
for the same index). The transforms are one of VOLUME_TRANSFORMS, built for the volumes shown:
the crop is the largest cube up to 96 voxels that every one of them holds (or `size`), and the
window runs from the volumes' 0.5th to 99.5th percentile (the constant border reads its lower
end, so rotated corners look like the background).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..compose3d import Compose3D
from ..ops import volume_crop as _crop
from ..ops import volume_elastic as _elastic
from ..ops import volume_geometry as _geo
from ..ops import volume_intensity as _int
from ..ops.volume_kinds import VolumeOp
from .show import _render, grid_size
from .show_volumes import slice_tiles

if TYPE_CHECKING:
    from PIL import Image

    from ..readers import Volumes

__all__ = ["VOLUME_TRANSFORMS", "open_volumes", "show_volume_dataset", "volume_grid_size"]

DEFAULT_CROP = 96  # the crop's side when the volumes hold it and `size` is not given


def _affine(size: int, lo: float, hi: float) -> list[VolumeOp]:
    return [_geo.RandomAffine3D(degrees=15, scale=(0.9, 1.1), translate=0.05 * size), _geo.RandomFlip3D(0.5),
            _crop.RandomCrop3D(size), _int.ScaleIntensityRange(lo, hi, 0.0, 1.0)]


def _elastic_ops(size: int, lo: float, hi: float) -> list[VolumeOp]:
    return [_geo.RandomAffine3D(degrees=10, scale=(0.9, 1.1)), _elastic.ElasticDeformation3D(6, size / 16),
            _geo.RandomFlip3D(0.5), _crop.RandomCrop3D(size), _int.ScaleIntensityRange(lo, hi, 0.0, 1.0)]


def _flip(size: int, lo: float, hi: float) -> list[VolumeOp]:
    return [_geo.RandomFlip3D(0.5), _geo.RandomRotate90_3D(), _crop.RandomCrop3D(size),
            _int.ScaleIntensityRange(lo, hi, 0.0, 1.0)]


def _intensity(size: int, lo: float, hi: float) -> list[VolumeOp]:
    return [_crop.CenterCrop3D(size), _int.ScaleIntensityRange(lo, hi, 0.0, 1.0),
            _int.RandomGamma3D((0.5, 2.0), p=1.0), _int.RandomBiasField(0.5, p=1.0),
            _int.GaussianNoise3D(sigma=0.05, p=1.0)]


# name -> ops(crop side, window low, window high); the first is the default
VOLUME_TRANSFORMS: dict[str, Callable[[int, float, float], list[VolumeOp]]] = {
    "affine": _affine,  # rotation up to 15 degrees, scale 0.9..1.1, shift, flips, random crop, window
    "elastic": _elastic_ops,  # a milder affine, an elastic deformation, flips, random crop, window
    "flip": _flip,  # flips and quarter turns only (no interpolation), random crop, window
    "intensity": _intensity,  # centre crop, window, gamma, bias field, noise
}


def open_volumes(data: str) -> Volumes:
    """A Volumes reader for `data`: a folder holding imagesTr/ (and labelsTr/, the Medical
    Segmentation Decathlon's layout), a folder of volume files (no labels), a MONAI datalist
    .json (a list of {"image", "label"} dicts, or a dict holding one under "training"), a
    .txt / .csv file list (one "image[,| ]label" per line, paths relative to the list), tar
    shards (a path or a glob pattern), or one volume file. ReaderError when it cannot."""
    from ..readers import ReaderError, Volumes
    from ..readers._volume_files import VOLUME_EXTENSIONS, volume_extension

    if os.path.isdir(data):
        if os.path.isdir(os.path.join(data, "imagesTr")):
            has_labels = os.path.isdir(os.path.join(data, "labelsTr"))
            return Volumes.folder(data, labels="labelsTr" if has_labels else None)
        files = sorted(f for f in os.listdir(data) if volume_extension(f) and not f.startswith("."))
        if not files:
            raise ReaderError(f"{data} holds neither imagesTr/ nor volume files ({', '.join(VOLUME_EXTENSIONS)})")
        return Volumes([os.path.join(data, f) for f in files])
    low = data.lower()
    if low.endswith(".tar") or any(c in data for c in "*?["):
        shards = sorted(glob.glob(data)) if any(c in data for c in "*?[") else [data]
        if not shards or not all(os.path.isfile(s) for s in shards):
            raise ReaderError(f"no tar shards at {data}")
        return Volumes.tar(shards)
    if not os.path.isfile(data):
        raise ReaderError(f"{data} does not exist")
    root = os.path.dirname(os.path.abspath(data))
    if low.endswith(".json"):
        with open(data) as f:
            items = json.load(f)
        if isinstance(items, dict):
            items = items.get("training", items.get("data"))
        if not isinstance(items, list):
            raise ReaderError(f"{data}: expected a list of {{'image', 'label'}} dicts (or one under 'training')")
        return Volumes(items, root=root)
    if low.endswith((".txt", ".csv")):
        with open(data) as f:
            rows = [line.replace(",", " ").split() for line in f if line.strip() and not line.startswith("#")]
        return Volumes([r[0] if len(r) == 1 else (r[0], r[1]) for r in rows], root=root)
    if volume_extension(data):
        return Volumes([data])
    raise ReaderError(f"{data}: not a folder, datalist (.json), file list (.txt/.csv), tar shard or volume file")


@dataclass
class _Volume:
    image: np.ndarray  # [D, H, W] or [D, H, W, C]
    label: np.ndarray | None
    affine: np.ndarray
    index: int
    caption: str


def _pick(data: str | None, n: int) -> tuple[list[_Volume], list[tuple[str, str]]]:
    """n volumes spread evenly over the dataset (or n generated ones), and the (source,
    reason) of those that could not be read."""
    if data is None:
        from .datasets import synthetic_volumes

        return [_Volume(img, lab, np.eye(4), i, f"synthetic {i}  {'x'.join(map(str, img.shape))}")
                for i, (img, lab) in enumerate(synthetic_volumes(n))], []
    reader = open_volumes(data)
    total = len(reader)
    wanted = range(total) if n >= total else [k * total // n for k in range(n)]
    picked, skipped = [], []
    for i in wanted:
        try:
            s = reader.read(i)
            image = np.asarray(s.image)
            label = None if s.label is None else np.asarray(s.label)
        except Exception as e:  # nibabel's ImageFileError, zlib, OSError, ValueError: listed, as a VolumePipeline does
            skipped.append((reader.sources(i), f"cannot read: {e}"))
            continue
        name = os.path.basename(s.source.rsplit(":", 1)[-1])
        picked.append(_Volume(image, label, s.affine, i, f"{name}  {'x'.join(map(str, image.shape[:3]))}"))
    return picked, skipped


def _window(volumes: list[_Volume]) -> tuple[float, float]:
    """The 0.5th and 99.5th percentiles of the volumes' first channels (a strided sample)."""
    values = np.concatenate([np.asarray(v.image[::2, ::2, ::2, 0] if v.image.ndim == 4 else v.image[::2, ::2, ::2],
                                        dtype=np.float32).ravel() for v in volumes])
    lo, hi = (float(x) for x in np.percentile(values, [0.5, 99.5]))
    return lo, hi if hi > lo else lo + 1.0


def volume_grid_size(rows: int, columns: int, tile: int) -> tuple[int, int]:
    """(width, height) of the grid of `rows` volumes, each as its original and `columns`
    augmented versions of three tiles."""
    return grid_size(rows, 3 * (columns + 1), tile)


def show_volume_dataset(data: str | None, transforms: str = "affine", n: int = 4, columns: int = 3,
                        seed: int = 0, tile: int = 96, size: int | None = None,
                        alpha: float = 0.45) -> tuple[Image.Image, list[tuple[str, str]]]:
    """The grid of n volumes of `data` (see open_volumes; None: generated CT-like volumes),
    each beside `columns` augmented versions, and the (source, reason) of the volumes left out.

    Args:
        data: where the volumes are, or None.
        transforms: a VOLUME_TRANSFORMS name.
        n: volumes, one row each (spread evenly over the dataset).
        columns: augmented versions per volume (epochs 0..columns-1).
        seed: the run's seed.
        tile: each slice's square tile, pixels.
        size: the crop's side (default: the largest cube up to 96 voxels every volume holds).
        alpha: the label overlay's opacity.

    Raises a ValueError naming the argument when one is out of range, or when none of the
    picked volumes could be read.
    """
    if transforms not in VOLUME_TRANSFORMS:
        raise ValueError(f"transforms must be one of {', '.join(VOLUME_TRANSFORMS)}, got {transforms!r}")
    for name, value, least in (("n", n, 1), ("columns", columns, 1), ("tile", tile, 8)):
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    if size is not None and size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    picked, skipped = _pick(data, n)
    if not picked:
        reasons = "; ".join(f"{source}: {reason}" for source, reason in skipped[:3])
        raise ValueError(f"none of the {len(skipped)} volumes picked could be read ({reasons})")
    side = size or min(DEFAULT_CROP, *(min(v.image.shape[:3]) for v in picked))
    lo, hi = _window(picked)
    t = Compose3D(VOLUME_TRANSFORMS[transforms](side, lo, hi), fill=lo)
    rows, captions = [], []
    for v in picked:
        first = v.image if v.image.ndim == 3 else v.image[..., 0]
        row = slice_tiles(first, v.label, tile, alpha)
        labels = None if v.label is None else [v.label]
        for epoch in range(columns):
            out = t([v.image], labels=labels, affine=[v.affine], seed=seed, epoch=epoch, indices=[v.index])
            lab = None if "label" not in out else out["label"][0, 0].numpy()
            row += slice_tiles(out["image"][0, 0].float().numpy(), lab, tile, alpha)
        rows.append(row)
        captions.append([v.caption] + [""] * (len(row) - 1))  # the caption runs under the row
    titles = []
    for c in range(columns + 1):  # three tiles per version: slices across axis 0, 1 and 2
        titles += ["original ax0" if c == 0 else f"epoch {c - 1} ax0", "ax1", "ax2"]
    return _render(rows, captions, titles, tile), skipped
