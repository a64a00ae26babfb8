"""Resampling and pointwise passes: fast paths and their plain-torch twins.

`run_stage` picks the implementation for the data's device: on the CPU the fast uint8 warp (or
the reference warp) then the vectorised pointwise pass; on CUDA the Triton kernel, fused into
one launch unless the colour ops need the warped image's mean first. The `*_reference`
functions are the definitions every fast path is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..batch import ImageBatch
from .cpu_stage import run_cpu_stage
from .pointwise_torch import channel_means, pointwise_reference
from .spec import PointwiseSpec, WarpSpec
from .warp_torch import warp_reference

__all__ = ["WarpSpec", "PointwiseSpec", "run_stage", "gpu_kernels_available", "channel_means",
           "warp_reference", "pointwise_reference"]


def gpu_kernels_available() -> bool:
    """True when CUDA is usable and Triton imports."""
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def run_stage(source: ImageBatch | Callable[[int], torch.Tensor], spec: WarpSpec,
              make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], needs_means: bool,
              map_fn: Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]] = map) -> torch.Tensor:
    """One warp and one pointwise pass. make_pointwise(means) builds the pointwise spec from the
    per-sample mean colours of the warped images (None unless needs_means). map_fn runs the CPU
    per-sample fast paths (a thread pool's map spreads them over cores). source: a batch on any
    device, or load(i) giving CPU sample i as HWC uint8 (e.g. decoding its region right then,
    on the worker thread that warps it)."""
    if callable(source) and not isinstance(source, ImageBatch):
        return run_cpu_stage(source, spec, make_pointwise, needs_means, map_fn)
    data, table = source.data, source.table
    if data.is_cuda and gpu_kernels_available():
        from .warp_triton import warp_gpu, warp_pointwise_gpu

        if not needs_means:
            return warp_pointwise_gpu(data, table, spec, make_pointwise(None))
        warped, means = warp_gpu(data, table, spec, sums=True)
        return pointwise_reference(warped, make_pointwise(means.double().cpu()))
    if data.is_cuda:  # CUDA without Triton: the reference on the device
        warped = warp_reference(data, table, spec)
        return pointwise_reference(warped, make_pointwise(channel_means(warped) if needs_means else None))
    rows = table.tolist()
    images = [data[o : o + h * w * c].view(h, w, c) for o, h, w, c in rows]
    return run_cpu_stage(images.__getitem__, spec, make_pointwise, needs_means, map_fn,
                         uint8=data.dtype == torch.uint8)
