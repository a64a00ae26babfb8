"""The pointwise pass in plain torch: colour matrix, clamp, normalise, cast, layout.

One pass over a uniform batch, vectorised; also the twin of the fused GPU kernel's epilogue.
"""

from __future__ import annotations

import torch

from ..spec import PointwiseSpec

GREY = (0.299, 0.587, 0.114)


def channel_means(x: torch.Tensor) -> torch.Tensor:
    """float64 [N, 3] mean colour of a [N, H, W, 3] batch (what contrast blends towards)."""
    if x.shape[0] == 0:
        return torch.zeros(0, 3, dtype=torch.float64)
    return x.to(torch.float32).mean(dim=(1, 2), dtype=torch.float64).cpu()


def pointwise_reference(x: torch.Tensor, spec: PointwiseSpec) -> torch.Tensor:
    """x: [N, H, W, 3] (uint8 or float32, pixel units) -> the final tensor."""
    n, H, W, _ = x.shape
    dev = x.device
    y = x.to(torch.float32)
    if spec.color is not None:
        a = spec.color.to(dev, torch.float32)
        y = torch.einsum("nij,nhwj->nhwi", a[:, :, :3], y) + a[:, :, 3].view(n, 1, 1, 3)
    y = y.clamp(0.0, 255.0)
    if spec.channels == 1:
        y = (y * torch.tensor(GREY, device=dev)).sum(-1, keepdim=True)
    if spec.dtype == torch.uint8:
        y = torch.round(y).to(torch.uint8)
    else:
        y = y / 255.0
        if spec.mean is not None:
            c = spec.channels
            mean = torch.tensor(spec.mean[:c] if len(spec.mean) >= c else spec.mean * c, device=dev)
            std = torch.tensor(spec.std[:c] if len(spec.std) >= c else spec.std * c, device=dev)
            y = (y - mean) / std
        y = y.to(spec.dtype)
    if spec.layout == "NCHW":
        y = y.permute(0, 3, 1, 2).contiguous()
    return y
