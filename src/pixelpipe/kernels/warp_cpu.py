"""CPU fast path for axis-aligned warps (crops, resizes, flips): torch's SIMD uint8 resampler.

Most training and evaluation plans (RandomResizedCrop or Resize + crop, flips) map a whole-pixel
source window straight onto the output. For those samples the warp is exactly torch's
antialiased `interpolate` of the window (same filters and edge renormalisation as our reference,
computed in fixed point on uint8 with SIMD), optionally mirrored. That kernel is about 10x faster
than any composition of generic vectorised torch ops, so it is called once per eligible sample
(a C++ call per image, no Python arithmetic per pixel); the other samples go through the
reference warp together. Agreement with warp_reference is tested (max 2 grey levels, from the
fixed-point weights and the uint8 intermediate between the two separable passes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .spec import WarpSpec
from .warp_torch import warp_reference

_TOL = 1e-6


def fast_mask(spec: WarpSpec) -> torch.Tensor:
    """bool [N]: samples whose warp is an exact window-to-output scale, optionally mirrored."""
    n = len(spec)
    if n == 0 or spec.interpolation == "nearest" or not spec.antialias:
        return torch.zeros(n, dtype=torch.bool)
    inv = spec.inverse
    H, W = spec.out_size
    aligned = (inv[:, 0, 1].abs() < _TOL) & (inv[:, 1, 0].abs() < _TOL) & (inv[:, 2, 0].abs() < _TOL) \
        & (inv[:, 2, 1].abs() < _TOL) & ((inv[:, 2, 2] - 1).abs() < _TOL)
    # the output's edges map exactly onto the clip box's edges (in either direction)
    u0, u1 = inv[:, 0, 2], inv[:, 0, 0] * W + inv[:, 0, 2]
    v0, v1 = inv[:, 1, 2], inv[:, 1, 1] * H + inv[:, 1, 2]
    clip = spec.clip.to(torch.float64)
    lo_u, hi_u = torch.minimum(u0, u1), torch.maximum(u0, u1)
    lo_v, hi_v = torch.minimum(v0, v1), torch.maximum(v0, v1)
    exact = ((lo_u - clip[:, 1]).abs() < 1e-4) & ((hi_u - clip[:, 3]).abs() < 1e-4) \
        & ((lo_v - clip[:, 0]).abs() < 1e-4) & ((hi_v - clip[:, 2]).abs() < 1e-4)
    return aligned & exact


def warp_cpu(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec) -> torch.Tensor:
    """Same contract as warp_reference; returns uint8 [N, H, W, 3] when every sample takes the
    fast path, float32 otherwise."""
    n = len(spec)
    H, W = spec.out_size
    fast = fast_mask(spec) if data.dtype == torch.uint8 and not data.is_cuda else torch.zeros(n, dtype=torch.bool)
    if not bool(fast.any()):
        return warp_reference(data, table, spec)
    out = torch.empty(n, H, W, 3, dtype=torch.uint8)
    rows = table.tolist()
    clip = spec.clip.tolist()
    org = spec.origin.tolist()
    flip_x = (spec.inverse[:, 0, 0] < 0).tolist()
    flip_y = (spec.inverse[:, 1, 1] < 0).tolist()
    for i in fast.nonzero().flatten().tolist():
        off, bh, bw, c = rows[i]
        y0, x0, y1, x1 = clip[i]
        oy, ox = org[i]
        img = data[off : off + bh * bw * c].view(bh, bw, c)[y0 - oy : y1 - oy, x0 - ox : x1 - ox]
        src = img.permute(2, 0, 1).unsqueeze(0)  # channels-last memory, no copy
        res = F.interpolate(src, size=(H, W), mode=spec.interpolation, antialias=True)[0].permute(1, 2, 0)
        if flip_x[i]:
            res = res.flip(1)
        if flip_y[i]:
            res = res.flip(0)
        out[i] = res  # a grey sample broadcasts to three channels
    if bool(fast.all()):
        return out
    rest = (~fast).nonzero().flatten()
    sub = WarpSpec(spec.inverse[rest], spec.image_size[rest], spec.origin[rest], spec.clip[rest], spec.out_size,
                   spec.interpolation, spec.border, spec.fill, spec.antialias)
    result = out.to(torch.float32)
    result[rest] = warp_reference(data, table[rest], sub)
    return result
