"""The reference warp in plain torch: any per-sample homography, antialiased, every border rule.

Vectorised over all output pixels of the batch; loops only over the filter's taps. It computes
in float64 coordinates and float32 values and is the twin that every fast path must match. A
spec with a displacement field (kernels.deform) takes its source points through the field. It
is not fast for large shrink factors (taps grow with the footprint), which is what the CPU fast
path and the GPU kernel are for.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..deform import displaced
from ..filters import SUPPORT, border_index, filter_weight
from ..spec import WarpSpec


def _axis_taps(coord: torch.Tensor, scale: torch.Tensor, taps: int, interpolation: str,
               size: torch.Tensor, origin: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
               border: str, inside: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Per tap along one axis: buffer index, weight (0 when dropped), reads-fill mask.

    `inside` marks output pixels whose source point lies inside the image: for them a
    "constant" border drops taps beyond the image (Pillow's edge rule, so resizes keep their
    edges); for points outside, those taps read the fill colour (an antialiased edge)."""
    if interpolation == "nearest":
        first = torch.floor(coord)
    else:
        first = torch.floor(coord - 0.5 - SUPPORT[interpolation] * scale) + 1
    idx, wts, fills = [], [], []
    for t in range(taps):
        k = first + t
        if interpolation == "nearest":
            w = torch.ones_like(coord)
        else:
            w = filter_weight((k + 0.5 - coord) / scale, interpolation)
        k = k.to(torch.int64)
        kb, outside = border_index(k, size, border)
        fill = outside & ~inside
        keep = fill | (~outside & (kb >= lo) & (kb < hi))
        idx.append((kb - origin).clamp_min(0))
        wts.append(torch.where(keep, w, torch.zeros_like(w)))
        fills.append(fill)
    return idx, wts, fills


def warp_reference(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec) -> torch.Tensor:
    """Resample every sample of a ragged batch: float32 [N, H, W, 3] in pixel units.

    Args:
        data: flat buffer (uint8 or float32) holding the samples HWC (1 or 3 channels).
        table: int64 [N, 4] (offset, height, width, channels) into data.
        spec: the per-sample geometry and the filter settings (see WarpSpec).
    Grey samples are read as three equal channels.
    """
    n = len(spec)
    H, W = spec.out_size
    dev = data.device
    if n == 0:
        return torch.zeros(0, H, W, 3, dtype=torch.float32, device=dev)
    f64 = torch.float64
    t = lambda a: torch.from_numpy(a).to(dev)  # the spec's numpy arrays, on the data's device
    inv = t(spec.inverse)
    ys = torch.arange(H, device=dev, dtype=f64) + 0.5
    xs = torch.arange(W, device=dev, dtype=f64) + 0.5
    y, x = torch.meshgrid(ys, xs, indexing="ij")
    m = inv.reshape(n, 9, 1, 1)
    pz = m[:, 6] * x + m[:, 7] * y + m[:, 8]
    u = (m[:, 0] * x + m[:, 1] * y + m[:, 2]) / pz
    v = (m[:, 3] * x + m[:, 4] * y + m[:, 5]) / pz
    limit = t(spec.max_scale())
    if spec.antialias and spec.interpolation != "nearest":
        sx = torch.hypot((m[:, 0] - u * m[:, 6]) / pz, (m[:, 1] - u * m[:, 7]) / pz)
        sy = torch.hypot((m[:, 3] - v * m[:, 6]) / pz, (m[:, 4] - v * m[:, 7]) / pz)
        sx = torch.minimum(sx.clamp_min(1.0), limit[:, 1].view(n, 1, 1))
        sy = torch.minimum(sy.clamp_min(1.0), limit[:, 0].view(n, 1, 1))
    else:
        sx = sy = torch.ones_like(u)
    if spec.deform is not None:  # the source points through the field; the stretch stays the matrices'
        u, v = displaced(spec.deform, x.expand(n, H, W), y.expand(n, H, W))
    taps = spec.taps()
    col = lambda a: t(np.ascontiguousarray(a)).view(n, 1, 1)
    img_h, img_w = col(spec.image_size[:, 0]), col(spec.image_size[:, 1])

    oy, ox = col(spec.origin[:, 0]), col(spec.origin[:, 1])
    cy0, cx0, cy1, cx1 = (col(spec.clip[:, i]) for i in range(4))
    inside = (u >= 0) & (u < img_w) & (v >= 0) & (v < img_h)
    iy, wy, fy = _axis_taps(v, sy, int(taps[:, 0].max()), spec.interpolation,
                            img_h, oy, cy0, cy1, spec.border, inside)
    ix, wx, fx = _axis_taps(u, sx, int(taps[:, 1].max()), spec.interpolation,
                            img_w, ox, cx0, cx1, spec.border, inside)
    tab = table.to(dev)
    offset, bw, ch = col(tab[:, 0]), col(tab[:, 2]), col(tab[:, 3])
    src = data if data.dtype == torch.float32 else data.to(torch.float32)
    fill = torch.tensor(spec.fill, dtype=torch.float32, device=dev)
    acc = torch.zeros(n, H, W, 3, dtype=torch.float32, device=dev)
    wsum_y = sum(wy).to(torch.float32)
    wsum_x = sum(wx).to(torch.float32)
    for ky in range(len(iy)):
        row = offset + iy[ky] * bw * ch
        for kx in range(len(ix)):
            w = (wy[ky] * wx[kx]).to(torch.float32)
            base = row + ix[kx] * ch
            is_fill = (fy[ky] | fx[kx]).unsqueeze(-1)
            for c in range(3):
                cc = torch.minimum(torch.full_like(ch, c), ch - 1)
                val = src[(base + cc).clamp(0, src.numel() - 1)]
                acc[..., c] += w * torch.where(is_fill[..., 0], fill[c], val)
    norm = (wsum_y * wsum_x).unsqueeze(-1)
    out = torch.where(norm > 0, acc / norm.clamp_min(1e-12), fill.view(1, 1, 1, 3))
    return out


def axis_weights(a: float, b: float, n_out: int, limit: float, lo: int, hi: int, size: int,
                 spec: WarpSpec) -> torch.Tensor:
    """float32 [n_out, hi - lo]: the reference's normalised 1-D filter weights for the axis map
    coord = a * (i + 0.5) + b, over image pixels lo..hi-1 (the clip range) of an image `size` pixels long. For axis-aligned
    warps whose source points stay inside the image, the 2-D warp is exactly Wy @ img @ Wx^T."""
    f64 = torch.float64
    coord = a * (torch.arange(n_out, dtype=f64) + 0.5) + b
    if spec.antialias and spec.interpolation != "nearest":
        scale = torch.full_like(coord, min(max(abs(a), 1.0), limit))
    else:
        scale = torch.ones_like(coord)
    taps = 1 if spec.interpolation == "nearest" else int(math.ceil(2 * SUPPORT[spec.interpolation] * float(scale[0]) - 1e-9))
    t = lambda v: torch.tensor(v, dtype=torch.int64)
    idx, wts, _ = _axis_taps(coord, scale, max(taps, 1), spec.interpolation, t(size), t(lo), t(lo), t(hi),
                             spec.border, torch.ones_like(coord, dtype=torch.bool))
    dense = torch.zeros(n_out, hi - lo, dtype=f64)
    for k, w in zip(idx, wts):
        dense.scatter_add_(1, k.clamp(0, hi - lo - 1).view(-1, 1), w.view(-1, 1))
    return (dense / dense.sum(1, keepdim=True).clamp_min(1e-300)).to(torch.float32)
