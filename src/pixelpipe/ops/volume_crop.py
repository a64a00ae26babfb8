"""Crops of volumes as translations: random, central, and around label voxels (MONAI's
RandCropByPosNegLabel).

A crop is the matrix "translate by minus the corner"; the warp reads only the voxels inside.
A crop larger than the volume along an axis is centred there and the border rule fills the
rest (MONAI would return a smaller crop; a batched tensor needs one size).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..data.random import Draws
from .checks import check_finite
from .volume_geometry import size3
from .volume_kinds import Params, VolumeGeometryOp, VolumeState, translation

__all__ = ["CenterCrop3D", "RandomCrop3D", "RandomCropByLabel"]


def _corner(low: np.ndarray, sizes: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Whole-voxel corners: `low` where the crop fits, clamped so that it stays inside; the
    centred (possibly half-voxel) corner where the volume is smaller than the crop."""
    fits = sizes >= size
    inside = np.clip(low, 0, np.maximum(sizes - size, 0))
    return np.where(fits, inside, (sizes - size) / 2)


class _Crop(VolumeGeometryOp):
    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size3("size", size)

    def _matrix(self, corner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return translation(-corner), np.tile(np.array(self.size, dtype=np.float64), (len(corner), 1))


class CenterCrop3D(_Crop):
    """Crop (D, H, W) = `size` voxels around each volume's centre (whole-voxel corner, rounded
    down where the margin is odd)."""

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        size = np.array(self.size, dtype=np.float64)
        return self._matrix(_corner(np.floor((state.sizes - size) / 2), state.sizes, size))


class RandomCrop3D(_Crop):
    """Crop (D, H, W) = `size` voxels at a corner uniform over the whole-voxel positions where
    it fits (MONAI's RandSpatialCrop with random_size=False)."""

    draws = 3

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        return {"u": draws.uniforms_np(3).astype(np.float64)}

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        size = np.array(self.size, dtype=np.float64)
        room = np.maximum(state.sizes - size, 0)
        low = np.minimum(np.floor(params["u"] * (room + 1)), room)
        return self._matrix(_corner(low, state.sizes, size))


def _kth_true(mask: torch.Tensor, k: int) -> int:
    """The flat position of the k-th (from 0) True of a flat bool tensor, without listing
    every True (a background holds millions): a running count, then a binary search."""
    count = mask.cumsum(0, dtype=torch.int32)
    return int(torch.searchsorted(count, torch.tensor([k + 1], dtype=torch.int32, device=mask.device)))


class RandomCropByLabel(VolumeGeometryOp):
    """Crop (D, H, W) = `size` voxels centred on a voxel drawn from the foreground (label >
    threshold) with probability pos / (pos + neg), else from the background, of each sample's
    label map (MONAI's RandCropByPosNegLabel with num_samples=1).

    The voxel is drawn uniformly among those of its class in the input label map, then moved
    by the geometric ops before this one, so the crop is centred on the same anatomy wherever
    it lands; the centre is then shifted so that the crop stays inside the volume (MONAI's
    correct_crop_centers). A sample without foreground (or background) voxels takes the other
    class. Finding the k-th voxel of a class is a per-sample reduction over its label map (a
    running count and a binary search), the only op that reads voxels while planning.

    Args:
        size: the crop, (D, H, W) voxels.
        pos, neg: the odds of a foreground and a background centre (>= 0, not both 0).
        threshold: label values above it are foreground.
    """

    draws = 2

    def __init__(self, size: int | Sequence[int], pos: float = 1.0, neg: float = 1.0, threshold: float = 0.0) -> None:
        self.size = size3("size", size)
        self.pos, self.neg = check_finite("pos", pos), check_finite("neg", neg)
        if self.pos < 0 or self.neg < 0 or self.pos + self.neg == 0:
            raise ValueError(f"pos and neg must be >= 0 and not both 0, got pos={pos}, neg={neg}")
        self.threshold = check_finite("threshold", threshold)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        batch = state.batch
        if batch is None or batch.labels is None:
            raise ValueError("RandomCropByLabel needs label maps: call the Compose3D with labels=...")
        want_fg = draws.bernoulli_np(0, self.pos / (self.pos + self.neg))
        u = draws.uniform_np(1).astype(np.float64)
        centres = np.empty((len(state), 3))
        for n in range(len(state)):  # the per-sample reduction: counting a class's voxels
            full = batch.label(n)
            d, h, w = full.shape
            lab = full.reshape(-1)
            fg = lab > self.threshold
            n_fg = int(fg.sum())
            take_fg = (bool(want_fg[n]) and n_fg > 0) or n_fg == lab.numel()
            mask = fg if take_fg else ~fg
            count = n_fg if take_fg else lab.numel() - n_fg
            flat = _kth_true(mask, min(int(u[n] * count), count - 1))
            centres[n] = (flat // (h * w), (flat // w) % h, flat % w)
        return {"centre": centres + 0.5}

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        size = np.array(self.size, dtype=np.float64)
        c = np.concatenate([params["centre"], np.ones((len(state), 1))], 1)
        here = np.einsum("nij,nj->ni", state.matrix, c)[:, :3]  # the voxel's centre in the current frame
        corner = _corner(np.floor(here - size / 2), state.sizes, size)
        return translation(-corner), np.tile(size, (len(state), 1))
