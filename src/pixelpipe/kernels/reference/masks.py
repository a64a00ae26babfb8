"""The nearest-neighbour warp of label images (masks), in plain torch on any device.

A mask follows its image through the same per-sample inverse matrices, but is never blended:
each output pixel takes the label of the source pixel its centre maps into (`floor` of the
source point, as the image warp's "nearest" does), with the stage's border rule; beyond a
"constant" border it takes `fill` (e.g. 0, or an ignore index such as 255). No antialiasing: a
shrinking warp picks labels, it does not average them. Nearest resampling is a gather, so one
vectorised index computation serves every dtype and channel count, on the CPU and the GPU:
the source points are computed in float64 as the reference image warp computes them.
"""

from __future__ import annotations

import numpy as np
import torch

from ...data.transfer import to_device
from ..deform import Deformation, displaced
from ..filters import border_index

__all__ = ["warp_masks"]


def warp_masks(masks: list[torch.Tensor], inverse: np.ndarray, image_sizes: np.ndarray, out_size: tuple[int, int],
               border: str, fill: int, device: torch.device | str, deform: Deformation | None = None) -> torch.Tensor:
    """Resample per-sample label images [H_i, W_i, C] (one dtype, one C) to [N, H, W, C].

    inverse: float64 [N, 3, 3] output -> mask coordinates; image_sizes: [N, 2] (h, w) of the
    masks (the border rule applies beyond them); border: "constant", "reflect", "replicate" or
    "wrap"; fill: the label read beyond a "constant" border; deform: the stage's displacement
    field (kernels.deform), whose source points then replace the inverse's."""
    n = len(masks)
    H, W = out_size
    device = torch.device(device)
    if n == 0:
        return torch.zeros(0, H, W, 1, dtype=torch.uint8, device=device)
    c, dtype = masks[0].shape[2], masks[0].dtype
    sizes = [m.shape[0] * m.shape[1] * c for m in masks]
    if all(m.device.type == "cpu" for m in masks):  # joined on the host, one asynchronous copy
        flat = to_device(torch.cat([m.reshape(-1) for m in masks]), device)
    else:
        flat = torch.cat([m.reshape(-1).to(device) for m in masks])
    offsets = to_device(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64), device)
    inv = to_device(np.ascontiguousarray(inverse, dtype=np.float64), device).reshape(n, 9, 1, 1)
    ys = torch.arange(H, device=device, dtype=torch.float64) + 0.5
    xs = torch.arange(W, device=device, dtype=torch.float64) + 0.5
    y, x = torch.meshgrid(ys, xs, indexing="ij")
    pz = inv[:, 6] * x + inv[:, 7] * y + inv[:, 8]
    u = (inv[:, 0] * x + inv[:, 1] * y + inv[:, 2]) / pz
    v = (inv[:, 3] * x + inv[:, 4] * y + inv[:, 5]) / pz
    if deform is not None:
        u, v = displaced(deform, x.expand(n, H, W), y.expand(n, H, W))
    limit = float(1 << 30)  # far points (a perspective's other side) held where int64 cannot overflow
    iu = torch.floor(u.nan_to_num(limit).clamp(-limit, limit)).to(torch.int64)
    iv = torch.floor(v.nan_to_num(limit).clamp(-limit, limit)).to(torch.int64)
    hw = to_device(np.round(image_sizes).astype(np.int64), device)
    mh, mw = hw[:, 0].view(n, 1, 1), hw[:, 1].view(n, 1, 1)
    ku, out_u = border_index(iu, mw, border)
    kv, out_v = border_index(iv, mh, border)
    outside = out_u | out_v
    index = offsets.view(n, 1, 1) + (kv * mw + ku) * c  # [N, H, W], first channel
    gathered = flat[(index.unsqueeze(-1) + torch.arange(c, device=device)).clamp_(0, max(flat.numel() - 1, 0))]
    if border == "constant":
        gathered = torch.where(outside.unsqueeze(-1), torch.tensor(fill, dtype=dtype, device=device), gathered)
    return gathered
