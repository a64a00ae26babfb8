"""The reference volume warp in plain torch: per sample one 5-D `grid_sample` (trilinear for the
image, nearest for the label map, the same grid), with the border rules of kernels.spec3d.

This is also the CPU path: grid_sample is vectorised over the voxels and multi-threaded, and
the per-sample loop only hands it samples of different sizes. The Triton kernel must agree
with it (tests/test_volumes_gpu.py).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...data.volumes import VolumeBatch
from ..spec3d import Warp3DSpec

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
    theta_t = torch.from_numpy(t).to(device=device, dtype=torch.float32).unsqueeze(0)
    return F.affine_grid(theta_t, [1, 1, *out_size], align_corners=False)


def warp3d_reference(batch: VolumeBatch, spec: Warp3DSpec) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(image float32 [N, C, D, H, W] in input units, label map int64 [N, 1, D, H, W] or None).

    Every sample must have the same number of channels (a batched tensor)."""
    n = len(spec)
    D, H, W = spec.out_size
    dev = batch.device
    chans = {int(c) for c in batch.channels.tolist()}
    if len(chans) > 1:
        raise ValueError(f"the volumes have different channel counts {sorted(chans)}; one batch needs one")
    c = chans.pop() if chans else 1
    image = torch.empty(n, c, D, H, W, dtype=torch.float32, device=dev)
    label = None if batch.labels is None else torch.empty(n, 1, D, H, W, dtype=torch.int64, device=dev)
    padding = _PADDING[spec.border]
    const = spec.border == "constant"
    sizes = batch.table[:, 1:4].numpy()
    for i in range(n):
        grid = sample_grid(spec.inverse[i], sizes[i], spec.out_size, dev)
        vol = source_volume(batch, i, spec.sigmas[i])
        if const and spec.fill != 0.0:  # taps beyond the faces read 0 - fill + fill = fill
            vol = vol - spec.fill
        out = F.grid_sample(vol.unsqueeze(0), grid, mode="bilinear", padding_mode=padding, align_corners=False)
        image[i] = out[0] + spec.fill if const and spec.fill != 0.0 else out[0]
        if label is not None:
            lab = batch.label(i).to(torch.float32)  # integer labels below 2**24 are exact
            if const and spec.label_fill != 0:
                lab = lab - spec.label_fill
            got = F.grid_sample(lab[None, None], grid, mode="nearest", padding_mode=padding, align_corners=False)
            label[i] = (got[0] + (spec.label_fill if const else 0)).round().to(torch.int64)
    return image, label
