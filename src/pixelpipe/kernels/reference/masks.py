"""The nearest-neighbour warp of label images (masks), in plain torch on any device.

A mask follows its image through the same per-sample inverse matrices, but is never blended:
each output pixel takes the label of the source pixel its centre maps into (`floor` of the
source point, as the image warp's "nearest" does), with the stage's border rule; beyond a
"constant" border it takes `fill` (e.g. 0, or an ignore index such as 255). No antialiasing: a
shrinking warp picks labels, it does not average them. Nearest resampling is a gather, so one
vectorised index computation serves every dtype and channel count, on the CPU and the GPU:
the source points are computed in float64 as the reference image warp computes them. Where
every map of the batch is axis-aligned (a LetterBox, crop, resize or flip: no rotation, shear or
perspective) the source columns and rows are computed once per sample and combined only in
the gather's index: the same labels, without the [N, H, W] float64 planes of the general form
(a batch of 64 masks at 1024x1024 made about fifteen of them, 8 GB). The general form takes the
samples CHUNK_PIXELS output pixels at a time (about 2 GB of planes at most).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ...data.transfer import joined_to_device, to_device
from ..deform import Deformation, displaced
from ..filters import border_index

__all__ = ["joined_masks", "warp_masks"]

CHUNK_PIXELS = 1 << 24  # output pixels per pass of the general form: about 15 float64 planes of this many


def joined_masks(masks: Sequence[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """The label images flattened back to back on `device` (masks on the host joined there and
    copied once) and each one's first element, int64 [N] (its values counted as H * W * C of
    the first mask's C)."""
    c = masks[0].shape[2]
    if all(m.device.type == "cpu" for m in masks):
        flat = joined_to_device(list(masks), device)
    else:
        flat = torch.cat([m.reshape(-1).to(device) for m in masks])
    sizes = np.array([m.shape[0] * m.shape[1] * c for m in masks], dtype=np.int64)
    return flat, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


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
    flat, starts = joined_masks(masks, device)
    offsets = to_device(starts, device)
    hw = to_device(np.round(image_sizes).astype(np.int64), device)
    inverse = np.ascontiguousarray(inverse, dtype=np.float64).reshape(n, 3, 3)
    label = torch.tensor(fill, dtype=dtype, device=device)

    def gather(first: torch.Tensor, outside: torch.Tensor) -> torch.Tensor:
        got = flat[(first.unsqueeze(-1) + torch.arange(c, device=device)).clamp_(0, max(flat.numel() - 1, 0))]
        return torch.where(outside.unsqueeze(-1), label, got) if border == "constant" else got

    if deform is None and _axis_aligned(inverse):
        return gather(*_separable_index(inverse, hw, offsets, c, H, W, border, device))
    if deform is not None:
        return gather(*_general_index(inverse, hw, offsets, c, H, W, border, device, deform))
    out = torch.empty((n, H, W, c), dtype=dtype, device=device)
    step = max(1, CHUNK_PIXELS // max(1, H * W))  # samples at a time: the float64 planes stay bounded
    for a in range(0, n, step):
        b = min(n, a + step)
        out[a:b] = gather(*_general_index(inverse[a:b], hw[a:b], offsets[a:b], c, H, W, border, device, None))
    return out


def _axis_aligned(inverse: np.ndarray) -> bool:
    """Whether every map is a scale and shift per axis (no rotation, shear or perspective):
    then u depends on x alone and v on y alone, with the same floating-point operations as the
    general form (its other terms are exact zeros and a division by one)."""
    return bool((inverse[:, 0, 1] == 0).all() and (inverse[:, 1, 0] == 0).all()
                and (inverse[:, 2, :2] == 0).all() and (inverse[:, 2, 2] == 1).all())


def _floor_index(t: torch.Tensor) -> torch.Tensor:
    limit = float(1 << 30)  # far points (a perspective's other side) held where int64 cannot overflow
    return torch.floor(t.nan_to_num(limit).clamp(-limit, limit)).to(torch.int64)


def _separable_index(inverse: np.ndarray, hw: torch.Tensor, offsets: torch.Tensor, c: int, H: int, W: int,
                     border: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """_general_index for axis-aligned maps: the source columns [N, W] and rows [N, H] once
    each, combined only in the index (the masks of a LetterBox, crop, resize or flip)."""
    n = len(inverse)
    coef = to_device(inverse[:, [0, 0, 1, 1], [0, 2, 1, 2]].copy(), device)  # u = a x + b, v = d y + e
    xs = torch.arange(W, device=device, dtype=torch.float64) + 0.5
    ys = torch.arange(H, device=device, dtype=torch.float64) + 0.5
    iu = _floor_index(coef[:, 0:1] * xs + coef[:, 1:2])
    iv = _floor_index(coef[:, 2:3] * ys + coef[:, 3:4])
    mh, mw = hw[:, 0].view(n, 1), hw[:, 1].view(n, 1)
    ku, out_u = border_index(iu, mw, border)
    kv, out_v = border_index(iv, mh, border)
    first = offsets.view(n, 1, 1) + (kv.unsqueeze(2) * mw.unsqueeze(2) + ku.unsqueeze(1)) * c
    return first, out_v.unsqueeze(2) | out_u.unsqueeze(1)


def _general_index(inverse: np.ndarray, hw: torch.Tensor, offsets: torch.Tensor, c: int, H: int, W: int,
                   border: str, device: torch.device, deform: Deformation | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each output pixel's first channel in the joined masks [N, H, W] and whether it falls
    beyond a constant border [N, H, W]."""
    n = len(inverse)
    inv = to_device(inverse, device).reshape(n, 9, 1, 1)
    ys = torch.arange(H, device=device, dtype=torch.float64) + 0.5
    xs = torch.arange(W, device=device, dtype=torch.float64) + 0.5
    y, x = torch.meshgrid(ys, xs, indexing="ij")
    pz = inv[:, 6] * x + inv[:, 7] * y + inv[:, 8]
    u = (inv[:, 0] * x + inv[:, 1] * y + inv[:, 2]) / pz
    v = (inv[:, 3] * x + inv[:, 4] * y + inv[:, 5]) / pz
    if deform is not None:
        u, v = displaced(deform, x.expand(n, H, W), y.expand(n, H, W))
    iu, iv = _floor_index(u), _floor_index(v)
    mh, mw = hw[:, 0].view(n, 1, 1), hw[:, 1].view(n, 1, 1)
    ku, out_u = border_index(iu, mw, border)
    kv, out_v = border_index(iv, mh, border)
    return offsets.view(n, 1, 1) + (kv * mw + ku) * c, out_u | out_v
