"""Resampling and pointwise passes: fast paths and their plain-torch twins.

`warp` and `pointwise` pick the implementation for the data's device; the `*_reference`
functions are the definitions the fast paths are tested against.
"""

from __future__ import annotations

import torch

from .pointwise_torch import channel_means, pointwise_fast, pointwise_reference
from .spec import PointwiseSpec, WarpSpec
from .warp_cpu import warp_cpu
from .warp_torch import warp_reference

__all__ = ["WarpSpec", "PointwiseSpec", "warp", "pointwise", "channel_means",
           "warp_reference", "pointwise_reference"]


def warp(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec) -> torch.Tensor:
    """Resample a ragged batch: [N, H, W, 3] uint8 or float32 in pixel units."""
    if data.is_cuda:
        from .gpu import gpu_available, warp_gpu

        if gpu_available():
            return warp_gpu(data, table, spec)
        return warp_reference(data, table, spec)
    return warp_cpu(data, table, spec)


def pointwise(x: torch.Tensor, spec: PointwiseSpec) -> torch.Tensor:
    """Colour, clamp, normalise, cast and layout of a uniform [N, H, W, 3] batch."""
    return pointwise_fast(x, spec)
