"""Volumes in tar shards (webdataset's layout): members `KEY.image.nii.gz` (or `.nii`, `.npy`,
`.npz`; a bare `KEY.nii.gz` too) and, optionally, `KEY.label.nii.gz` (or `KEY.seg.*`) grouped by
key, indexed once so that the shards are read like files: by sample, in any order, sharded and
resumed by VolumePipeline.

Reading a member is one seek and one read. An uncompressed NIfTI (.nii) or .npy member of an
uncompressed shard is memory-mapped in place (its voxels lie contiguous in the tar), so as with
plain files only the box a warp needs is read from disk.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ._base import ReaderError
from ._tar_index import random_access_members, split_name
from ._volume_files import nibabel_module, volume_from_bytes

__all__ = ["TarMember", "load_member", "tar_volume_pairs"]

_VOLUME_EXTS = ("nii.gz", "nii", "npy", "npz")
_IMAGE_TAGS = ("image.", "img.", "")
_LABEL_TAGS = ("label.", "seg.", "mask.")


@dataclass(frozen=True)
class TarMember:
    """Where one volume file lies inside a tar shard."""

    shard: str
    name: str
    offset: int  # of the member's data in the shard
    size: int

    def __str__(self) -> str:
        return f"{self.shard}:{self.name}"


def _members(shard: str) -> list[tuple[str, int, int]]:
    """(name, data offset, size) of the shard's regular files (see random_access_members)."""
    return random_access_members(shard, "use an uncompressed shard (compress the members instead: .nii.gz)")


def _kind(ext: str) -> tuple[str, str] | None:
    """("image" or "label", the volume extension) of a member extension, or None."""
    for vol in _VOLUME_EXTS:
        for tag in _LABEL_TAGS:
            if ext == tag + vol:
                return "label", vol
        for tag in _IMAGE_TAGS:
            if ext == tag + vol:
                return "image", vol
    return None


def tar_volume_pairs(shards: Iterable[str | os.PathLike[str]]) -> list[tuple[TarMember, TarMember | None]]:
    """(image, label or None) members of every key of the shards, in shard then member order."""
    pairs: list[tuple[TarMember, TarMember | None]] = []
    for shard in (os.fspath(s) for s in shards):
        if not os.path.isfile(shard):
            raise ReaderError(f"no tar shard at {shard}")
        groups: dict[str, dict[str, TarMember]] = {}
        for name, offset, size in _members(shard):
            split = split_name(name)
            kind = None if split is None else _kind(split[1])
            if kind is None:
                continue
            slot = groups.setdefault(split[0], {})  # type: ignore[index]
            if kind[0] in slot:
                raise ReaderError(f"{shard}: key {split[0]} has two {kind[0]} volumes")  # type: ignore[index]
            slot[kind[0]] = TarMember(shard, name, offset, size)
        for key, slot in groups.items():
            if "image" not in slot:
                raise ReaderError(f"{shard}: key {key} has a label map but no image volume")
            pairs.append((slot["image"], slot.get("label")))
    if not pairs:
        raise ReaderError("the tar shards hold no volumes (KEY.image.nii.gz, KEY.nii, KEY.npy, ...)")
    return pairs


def _nifti_in_place(m: TarMember) -> tuple[np.ndarray, np.ndarray] | None:
    """An uncompressed, unscaled NIfTI member as a memory map of the shard, or None."""
    nib = nibabel_module()
    with open(m.shard, "rb") as f:
        f.seek(m.offset)
        head = f.read(min(m.size, 4096))
    try:
        header = nib.Nifti1Header.from_fileobj(io.BytesIO(head))
    except Exception:
        return None
    slope, inter = header.get_slope_inter()
    if (slope not in (None, 1.0)) or (inter not in (None, 0.0)):
        return None
    shape = header.get_data_shape()
    dtype = header.get_data_dtype()
    start = int(header.get_data_offset())
    if start + int(np.prod(shape)) * dtype.itemsize > m.size:
        return None
    data = np.memmap(m.shard, dtype=dtype, mode="r", offset=m.offset + start, shape=shape, order="F")
    return data, np.asarray(header.get_best_affine(), dtype=np.float64)


def load_member(m: TarMember, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(voxels, affine) of a volume member: memory-mapped in place where it can be (uncompressed
    .nii without scaling, .npy), else read with one seek and one read."""
    ext = split_name(m.name)[1]  # type: ignore[index]
    if mmap and ext.endswith("nii") and not ext.endswith("nii.gz"):
        got = _nifti_in_place(m)
        if got is not None:
            return got
    if mmap and ext.endswith("npy"):
        with open(m.shard, "rb") as f:
            f.seek(m.offset)
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            start = f.tell() - m.offset
        return (np.memmap(m.shard, dtype=dtype, mode="r", offset=m.offset + start, shape=shape,
                          order="F" if fortran else "C"), np.eye(4))
    with open(m.shard, "rb") as f:
        f.seek(m.offset)
        data = f.read(m.size)
    if len(data) != m.size:
        raise OSError(f"{m}: the shard ends inside the member ({len(data)} of {m.size} bytes)")
    if ext.endswith("nii.gz"):
        data, ext = gzip.decompress(data), "nii"
    return volume_from_bytes(data, ext, str(m))
