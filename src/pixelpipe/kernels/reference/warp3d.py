"""The reference volume warp in plain torch: per sample one 5-D `grid_sample` (trilinear for the
image, nearest for the label map, the same grid), with the border rules of kernels.spec3d.

This is also the CPU path: grid_sample is vectorised over the voxels, and the per-sample loop
only hands it samples of different sizes; on the CPU the samples run on worker threads
(kernels.cpu.volumes says why), through the `map_fn` the caller passes. The Triton kernel must
agree with it (tests/test_volumes_gpu.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...data.volumes import VolumeBatch
from ..spec3d import Deformation, Warp3DSpec

__all__ = ["blur_volume", "sample_grid", "source_volume", "warp3d_reference"]

_PADDING = {"constant": "zeros", "replicate": "border", "reflect": "reflection"}


def _gaussian(sigma: float, device: torch.device) -> torch.Tensor:
    radius = max(1, math.ceil(3.0 * sigma))
    x = torch.arange(-radius, radius + 1, dtype=torch.float64, device=device)
    w = torch.exp(-0.5 * (x / sigma) ** 2)
    return (w / w.sum()).to(torch.float32)


def blur_volume(vol: torch.Tensor, sigmas: np.ndarray) -> torch.Tensor:
    """float32 [C, D, H, W] blurred along each axis a with sigmas[a] > 0 (separable Gaussian,
    truncated at 3 sigma, edges replicated): the antialiasing pre-filter."""
    for axis in range(3):
        s = float(sigmas[axis])
        if s <= 0:
            continue
        w = _gaussian(s, vol.device)
        r = (len(w) - 1) // 2
        x = vol.movedim(axis + 1, -1)  # [C, ..., L]
        shape = x.shape
        flat = x.reshape(-1, 1, shape[-1])
        flat = F.pad(flat, (r, r), mode="replicate")
        flat = F.conv1d(flat, w.view(1, 1, -1))
        vol = flat.reshape(shape).movedim(-1, axis + 1)
    return vol.contiguous()


def source_volume(batch: VolumeBatch, n: int, sigmas: np.ndarray | None) -> torch.Tensor:
    """Sample n as float32 [C, D, H, W], antialias-blurred where `sigmas` ([3]) asks."""
    vol = batch.volume(n).permute(3, 0, 1, 2).to(torch.float32)
    if sigmas is not None and (sigmas > 0).any():
        vol = blur_volume(vol, sigmas)
    return vol


def sample_grid(inverse: np.ndarray, in_size: np.ndarray, out_size: tuple[int, int, int],
                device: torch.device) -> torch.Tensor:
    """float32 [1, D, H, W, 3]: grid_sample's normalised source points (x = axis 2 first) of one
    sample. theta = N_in @ inverse @ N_out^-1 with N(size): p -> 2 p / size - 1 per axis, then
    axes reversed (grid_sample orders them W, H, D), built by affine_grid."""
    def norm(size: np.ndarray) -> np.ndarray:
        m = np.eye(4)
        m[[0, 1, 2], [0, 1, 2]] = 2.0 / np.asarray(size, dtype=np.float64)
        m[:3, 3] = -1.0
        return m

    theta = norm(in_size) @ inverse @ np.linalg.inv(norm(np.array(out_size, dtype=np.float64)))
    rev = [2, 1, 0]
    t = np.zeros((3, 4))
    t[:, :3] = theta[rev][:, rev]
    t[:, 3] = theta[rev, 3]
    # affine_grid's arithmetic written as three broadcast sums (float32, the same grid; on the
    # CPU several times faster than its batched matrix product over every voxel)
    th = torch.from_numpy(t).to(device=device, dtype=torch.float32)
    axes = [(torch.arange(s, dtype=torch.float32, device=device) * 2 + 1) / s - 1 for s in out_size]  # D, H, W
    zs, ys, xs = axes[0].view(-1, 1, 1, 1), axes[1].view(1, -1, 1, 1), axes[2].view(1, 1, -1, 1)
    grid = xs * th[:, 0] + ys * th[:, 1] + zs * th[:, 2] + th[:, 3]
    return grid.unsqueeze(0)


def deformed_grid(deform: Deformation, i: int, in_size: np.ndarray, out_size: tuple[int, int, int],
                  device: torch.device) -> torch.Tensor:
    """float32 [1, D, H, W, 3]: grid_sample's source points of sample i through the elastic
    deformation (spec3d.Deformation): y = inner @ p, plus the field at y, then outer."""
    f32 = torch.float32
    axes = [torch.arange(s, dtype=f32, device=device) + 0.5 for s in out_size]
    p = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1)  # [D, H, W, 3] continuous, array order
    t = lambda m: torch.from_numpy(np.ascontiguousarray(m)).to(device=device, dtype=f32)
    inner, outer = t(deform.inner[i]), t(deform.outer[i])
    y = p @ inner[:3, :3].T + inner[:3, 3]
    frame = t(deform.frame[i])
    g = (2.0 * y / frame - 1.0).flip(-1).unsqueeze(0)  # control points on the faces: align_corners=True
    field = t(deform.field[i]).unsqueeze(0)  # [1, 3, c0, c1, c2]
    d = F.grid_sample(field, g, mode="bilinear", padding_mode="border", align_corners=True)[0]  # [3, D, H, W]
    q = (y + d.permute(1, 2, 3, 0)) @ outer[:3, :3].T + outer[:3, 3]
    size = t(np.asarray(in_size, dtype=np.float64))
    return (2.0 * q / size - 1.0).flip(-1).unsqueeze(0)


def source_box(inverse: np.ndarray, in_size: np.ndarray, out_size: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) int64 [3]: the whole voxels of the input that the warp can read, the box around
    the source points of the output's 8 corner voxel centres (an affine map sends the box's
    corners to the extreme points) widened by the trilinear taps, clipped to the volume. Where
    it is clipped its face is the volume's own, so every border rule reads the same from the
    box as from the whole volume; elsewhere no tap leaves it."""
    corners = np.array([[a, b, c, 1.0] for a in (0.5, out_size[0] - 0.5) for b in (0.5, out_size[1] - 0.5)
                        for c in (0.5, out_size[2] - 0.5)])
    idx = (corners @ inverse.T)[:, :3] - 0.5  # index coordinates of the corners' source points
    lo = np.floor(idx.min(0)) - 1
    hi = np.floor(idx.max(0)) + 3
    size = np.asarray(in_size, dtype=np.int64)
    lo = np.clip(lo, 0, size - 1).astype(np.int64)
    hi = np.clip(hi, lo + 1, size).astype(np.int64)
    return lo, hi


def warp3d_reference(batch: VolumeBatch, spec: Warp3DSpec,
                     map_fn: Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]] = map,
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(image float32 [N, C, D, H, W] in input units, label map int64 [N, 1, D, H, W] or None).

    Every sample must have the same number of channels (a batched tensor). `map_fn` runs the
    samples (each writes its own slot of the outputs): the builtin map, or a thread pool's."""
    n = len(spec)
    D, H, W = spec.out_size
    dev = batch.device
    c = batch.common_channels()
    image = torch.empty(n, c, D, H, W, dtype=torch.float32, device=dev)
    label = None if batch.labels is None else torch.empty(n, 1, D, H, W, dtype=torch.int64, device=dev)
    padding = _PADDING[spec.border]
    const = spec.border == "constant"
    sizes = batch.table[:, 1:4].numpy()

    def one(i: int) -> None:
        # only the box of voxels the warp reads is converted and sampled (a crop reads a
        # fraction of its volume); a blurred sample is taken whole (the blur reaches further)
        blur = bool((spec.sigmas[i] > 0).any())
        whole = blur or spec.deform is not None  # a deformation may reach anywhere
        lo, hi = (np.zeros(3, np.int64), sizes[i]) if whole else source_box(spec.inverse[i], sizes[i], spec.out_size)
        moved = np.eye(4)
        moved[:3, 3] = -lo
        if spec.deform is not None:
            grid = deformed_grid(spec.deform, i, sizes[i], spec.out_size, dev)
        else:
            grid = sample_grid(moved @ spec.inverse[i], hi - lo, spec.out_size, dev)
        box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))
        vol = (source_volume(batch, i, spec.sigmas[i]) if blur
               else batch.volume(i)[box].permute(3, 0, 1, 2).to(torch.float32))
        if const and spec.fill != 0.0:  # taps beyond the faces read 0 - fill + fill = fill
            vol = vol - spec.fill
        out = F.grid_sample(vol.unsqueeze(0), grid, mode="bilinear", padding_mode=padding, align_corners=False)
        image[i] = out[0] + spec.fill if const and spec.fill != 0.0 else out[0]
        if label is not None:
            lab = batch.label(i)[box].to(torch.float32)  # integer labels below 2**24 are exact
            if const and spec.label_fill != 0:
                lab = lab - spec.label_fill
            got = F.grid_sample(lab[None, None], grid, mode="nearest", padding_mode=padding, align_corners=False)
            label[i] = (got[0] + (spec.label_fill if const else 0)).round().to(torch.int64)

    for _ in map_fn(one, range(n)):  # a pool's map raises the first failing sample's error here
        pass
    return image, label
