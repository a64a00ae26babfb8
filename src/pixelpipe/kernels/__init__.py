"""Resampling and pointwise passes: fast paths and their plain-torch twins.

`run_stage` picks the implementation for the data's device: on the CPU the fast uint8 warp (or
the reference warp) then the vectorised pointwise pass; on CUDA the Triton kernel, fused into
one launch (two when the colour ops need the warped image's mean: the means first). The `*_reference`
functions are the definitions every fast path is tested against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..batch import ImageBatch
from ..views import DeviceViews
from ._device import to_device
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


def color_from_means(n: int, means: torch.Tensor, make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec],
                      ) -> tuple[PointwiseSpec, torch.Tensor]:
    """(the pointwise spec at mean 0, the colour matrices [N, 3, 4] float32 on the means' device
    for the given means): the chain is affine in the mean colour mu, out = A x + b0 + B mu, with
    A, b0, B from evaluating it on the host at mu = 0 and at the three unit colours."""
    probes = torch.zeros(4, n, 3, dtype=torch.float64)  # mu = 0, then the three unit colours
    for k in range(3):
        probes[k + 1, :, k] = 1.0
    folded = make_pointwise(probes)  # one evaluation of the chain at the four colours
    c = folded.color  # only colour ops need means: there is a chain
    assert c is not None
    slopes = (c[1:, :, :, 3] - c[0, :, :, 3]).permute(1, 2, 0)  # [N, 3 out, 3 mean channels]
    zero = dataclasses.replace(folded, color=c[0])
    packed = to_device(torch.cat([c[0].reshape(n, 12), slopes.reshape(n, 9)], 1), means.device,
                       torch.float32)
    a = packed[:, :12].view(n, 3, 4)
    b = packed[:, 12:].view(n, 3, 3)
    offset = a[:, :, 3] + (b @ means.to(torch.float32).unsqueeze(-1)).squeeze(-1)
    return zero, torch.cat([a[:, :, :3], offset.unsqueeze(-1)], 2)


def run_stage(source: ImageBatch | DeviceViews | Callable[[int], torch.Tensor], spec: WarpSpec,
              make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], needs_means: bool,
              map_fn: Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]] = map) -> torch.Tensor:
    """One warp and one pointwise pass. make_pointwise(means) builds the pointwise spec from the
    per-sample mean colours of the warped images (None unless needs_means). map_fn runs the CPU
    per-sample fast paths (a thread pool's map spreads them over cores). source: a batch on any
    device, the views of a GPU decoder's images (read in place by the kernel), or load(i) giving CPU sample i as HWC uint8 (e.g. decoding its region right then,
    on the worker thread that warps it)."""
    if isinstance(source, DeviceViews):
        if not gpu_kernels_available():  # the twin reads one buffer
            source = source.contiguous()
    elif callable(source) and not isinstance(source, ImageBatch):
        return run_cpu_stage(source, spec, make_pointwise, needs_means, map_fn)
    data, table = source.data, source.table
    if data.is_cuda and gpu_kernels_available():
        if not isinstance(source, DeviceViews):
            table = source.kernel_table()  # uploaded once per batch
        from .warp_triton import device_inputs, warp_means_gpu, warp_pointwise_gpu

        if not needs_means:
            return warp_pointwise_gpu(data, table, spec, make_pointwise(None))
        # two launches, no intermediate image: the means, then warp + colour (from the means,
        # on the device: no host synchronisation) + normalise + cast in one; the table and the
        # geometry go up once for both
        table, geom = device_inputs(table, spec, data.device)
        zero, color = color_from_means(len(spec), warp_means_gpu(data, table, spec, geom), make_pointwise)
        return warp_pointwise_gpu(data, table, spec, dataclasses.replace(zero, color=color), geom=geom)
    if data.is_cuda:  # CUDA without Triton: the reference on the device
        warped = warp_reference(data, table, spec)
        return pointwise_reference(warped, make_pointwise(channel_means(warped) if needs_means else None))
    rows = table.tolist()
    images = [data[o : o + h * w * c].view(h, w, c) for o, h, w, c in rows]
    return run_cpu_stage(images.__getitem__, spec, make_pointwise, needs_means, map_fn,
                         uint8=data.dtype == torch.uint8)
