"""One volume file: NIfTI (.nii, .nii.gz, through nibabel), .npy or .npz, from a path or from
its bytes. nibabel is imported when a NIfTI file is first read (an ImportError names the
extra), so `import pixelpipe` stays light."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

__all__ = ["VOLUME_EXTENSIONS", "load_volume", "nibabel_module", "volume_extension", "volume_from_bytes"]

VOLUME_EXTENSIONS = (".nii", ".nii.gz", ".npy", ".npz")


def nibabel_module() -> Any:
    try:
        import nibabel
    except ImportError:
        raise ImportError('reading NIfTI files needs nibabel: pip install "pixelpipe[volumes]"') from None
    return nibabel


def volume_extension(path: str) -> str:
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
    ext = volume_extension(p)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no volume file at {p}")
    if ext in (".nii", ".nii.gz"):
        nib = nibabel_module()
        img = nib.load(p, mmap=mmap and ext == ".nii")
        data = np.asanyarray(img.dataobj)
        return data, np.asarray(img.affine, dtype=np.float64)
    if ext == ".npy":
        return np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False), np.eye(4)
    if ext == ".npz":
        with np.load(p, allow_pickle=False) as z:
            return _from_npz(z, p)
    raise ValueError(f"{p}: not a volume file (expected one of {', '.join(VOLUME_EXTENSIONS)})")


def volume_from_bytes(data: bytes, ext: str, source: str) -> tuple[np.ndarray, np.ndarray]:
    """(voxels, affine) of one volume file's bytes: ext "nii" (uncompressed NIfTI), "npy" or
    "npz" (as load_volume reads them)."""
    if ext.endswith("nii"):
        img = nibabel_module().Nifti1Image.from_bytes(data)
        return np.asanyarray(img.dataobj), np.asarray(img.affine, dtype=np.float64)
    if ext.endswith("npy"):
        return np.load(io.BytesIO(data), allow_pickle=False), np.eye(4)
    if ext.endswith("npz"):
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return _from_npz(z, source)
    raise ValueError(f"{source}: not a volume file (expected one of {', '.join(VOLUME_EXTENSIONS)})")


def _from_npz(z: Any, source: str) -> tuple[np.ndarray, np.ndarray]:
    keys = [k for k in z.files if k not in ("affine", "spacing")]
    key = "image" if "image" in z.files else (keys[0] if len(keys) == 1 else None)
    if key is None:
        raise ValueError(f"{source}: an .npz volume holds its voxels under 'image' (or one array only); "
                         f"it has {sorted(z.files)}")
    affine = np.eye(4)
    if "affine" in z.files:
        affine = np.asarray(z["affine"], dtype=np.float64).reshape(4, 4)
    elif "spacing" in z.files:
        affine[[0, 1, 2], [0, 1, 2]] = np.asarray(z["spacing"], dtype=np.float64).reshape(3)
    return np.asarray(z[key]), affine
