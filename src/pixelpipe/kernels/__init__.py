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

import numpy as np
import torch

from ..data.batch import ImageBatch
from ..data.views import DeviceViews
from .cpu.stage import run_cpu_stage
from .reference.pointwise import channel_means, pointwise_reference
from .reference.warp import warp_reference
from .spec import PointwiseSpec, WarpSpec

__all__ = ["WarpSpec", "PointwiseSpec", "Packed", "pack_ahead", "run_stage", "gpu_kernels_available",
           "channel_means", "color_slopes", "warp_reference", "pointwise_reference"]


def gpu_kernels_available() -> bool:
    """True when CUDA is usable and Triton imports."""
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def color_slopes(n: int, make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec],
                 ) -> tuple[PointwiseSpec, np.ndarray]:
    """(the pointwise spec with the colour matrices at mean colour 0, the slopes float64
    [N, 3, 3]) of a chain that depends on the warped images' mean colour mu: the chain is
    affine in mu, out = A x + b0 + B mu, so evaluating it on the host at mu = 0 and at the
    three unit colours (one evaluation of four) gives A, b0 and B = slopes. The GPU kernel
    completes b0 + B mu from the sums of its first launch."""
    probes = np.zeros((4, n, 3))  # mu = 0, then the three unit colours
    for k in range(3):
        probes[k + 1, :, k] = 1.0
    folded = make_pointwise(probes)
    c = folded.color  # only colour ops need means: there is a chain
    assert c is not None
    c = c.detach().cpu().numpy()
    slopes = (c[1:, :, :, 3] - c[0, :, :, 3]).transpose(1, 2, 0)  # [N, 3 out, 3 mean channels]
    return dataclasses.replace(folded, color=torch.from_numpy(c[0])), np.ascontiguousarray(slopes)


@dataclasses.dataclass
class Packed:
    """The GPU kernel's per-sample inputs of a stage, made ahead for several batches at once
    (Compose.prepare_split) and sliced per batch: the pointwise spec, the colour slopes (None
    unless the chain needs the warped images' means) and the parameter rows, already on the
    device (warp_triton.pack_params). run_stage's slow twin makes the same per batch."""

    pointwise: PointwiseSpec
    slopes: np.ndarray | None
    params: torch.Tensor

    def rows(self, rows: slice) -> Packed:
        color = self.pointwise.color
        pointwise = dataclasses.replace(self.pointwise, color=None if color is None else color[rows])
        return Packed(pointwise, None if self.slopes is None else self.slopes[rows], self.params[rows])


def pack_ahead(source: ImageBatch, spec: WarpSpec, make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec],
               needs_means: bool) -> Packed | None:
    """The kernel inputs run_stage would make for `source` and `spec`, made and uploaded now
    (on the current stream), or None where the Triton kernels do not run (the CPU, CUDA
    without Triton). One evaluation, one packing and one upload for several batches instead
    of one each: per batch they cost more host time than the launch."""
    if not (source.data.is_cuda and gpu_kernels_available()):
        return None
    return _pack(spec, make_pointwise, needs_means, source.data.device)


def _pack(spec: WarpSpec, make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], needs_means: bool,
          device: torch.device) -> Packed:
    """The Triton kernels' inputs: the pointwise spec, and the parameter rows on `device`.
    A chain that needs the warped images' means is folded at mean colour 0 plus its slopes
    (color_slopes): the kernel completes the offsets from the sums of its first launch."""
    from ..data.transfer import to_device
    from .triton.warp import pack_params

    if needs_means:
        pointwise, slopes = color_slopes(len(spec), make_pointwise)
    else:
        pointwise, slopes = make_pointwise(None), None
    return Packed(pointwise, slopes, to_device(pack_params(spec, pointwise.color, slopes), device))


def run_stage(source: ImageBatch | DeviceViews | Callable[[int], torch.Tensor], spec: WarpSpec,
              make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], needs_means: bool,
              map_fn: Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]] = map,
              packed: Packed | None = None) -> torch.Tensor:
    """One warp and one pointwise pass. make_pointwise(means) builds the pointwise spec from the
    per-sample mean colours of the warped images (None unless needs_means). map_fn runs the CPU
    per-sample fast paths (a thread pool's map spreads them over cores). source: a batch on any
    device, the views of a GPU decoder's images (read in place by the kernel), or load(i) giving CPU sample i as HWC uint8 (e.g. decoding its region right then,
    on the worker thread that warps it). packed: the kernel inputs made ahead (pack_ahead), used
    where the Triton kernels run."""
    if isinstance(source, DeviceViews):
        if not gpu_kernels_available():  # the twin reads one buffer
            source = source.contiguous()
    elif callable(source) and not isinstance(source, ImageBatch):
        return run_cpu_stage(source, spec, make_pointwise, needs_means, map_fn)
    data, table = source.data, source.table
    if data.is_cuda and gpu_kernels_available():
        if not isinstance(source, DeviceViews):
            table = source.kernel_table()  # uploaded once per batch
        from .triton.warp import warp_pointwise_gpu

        if packed is None:  # made for this batch alone (prepare_split makes them for several)
            packed = _pack(spec, make_pointwise, needs_means, data.device)
        # with slopes, two launches, no intermediate image and no host synchronisation: the
        # sums, then warp + colour (offsets completed from the sums) + normalise + cast
        return warp_pointwise_gpu(data, table, spec, packed.pointwise, slopes=packed.slopes, params=packed.params)
    if data.is_cuda:  # CUDA without Triton: the reference on the device
        warped = warp_reference(data, table, spec)
        return pointwise_reference(warped, make_pointwise(channel_means(warped) if needs_means else None))
    rows = table.tolist()
    images = [data[o : o + h * w * c].view(h, w, c) for o, h, w, c in rows]
    return run_cpu_stage(images.__getitem__, spec, make_pointwise, needs_means, map_fn,
                         uint8=data.dtype == torch.uint8)
