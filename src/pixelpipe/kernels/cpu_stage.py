"""One stage on the CPU: per-sample fast paths on worker threads, the reference for the rest.

Measured on a 2-core machine (batch 64, 224x224 float16 NCHW output): the batched pointwise
pass in generic torch ops took ~64 ms a batch, the same work per sample ~0.23 ms an image
(15 ms a batch) and it runs on the decoding threads. So on the CPU each eligible sample is
warped (warp_cpu's "window" or "separable" path) and finished (colour, clamp, normalise, cast,
layout) by one call on a worker thread, writing its slot of the output; samples that need the
general warp are gathered and run through the vectorised reference, batched. When a colour op
needs the warped image's mean (contrast), the warp and the pointwise pass are two phases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..batch import ImageBatch
from .pointwise_torch import GREY, channel_means, pointwise_reference
from .spec import PointwiseSpec, WarpSpec
from .warp_cpu import REFERENCE, WINDOW, classify, warp_sample
from .warp_torch import warp_reference

MapFn = Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]]


def output_tensor(n: int, out_size: tuple[int, int], spec: PointwiseSpec) -> torch.Tensor:
    H, W = out_size
    c = spec.channels
    shape = (n, c, H, W) if spec.layout == "NCHW" else (n, H, W, c)
    return torch.empty(shape, dtype=spec.dtype)


def _post(spec: PointwiseSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel scale and bias after the clamp, as float32 tensors."""
    k, b = spec.scale_bias()
    return torch.tensor(k, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


_TABLES: dict[tuple[Any, ...], torch.Tensor] = {}


def _table(k: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[3, 256] in `dtype`: v * k + b for every uint8 value v (cached per scale and bias)."""
    key = (tuple(k.tolist()), tuple(b.tolist()), dtype)
    if key not in _TABLES:
        v = torch.arange(256, dtype=torch.float32).view(1, 256)
        _TABLES[key] = (v * k.view(3, 1) + b.view(3, 1)).to(dtype).contiguous()
    return _TABLES[key]


def finish_sample(x: torch.Tensor, spec: PointwiseSpec, i: int, slot: torch.Tensor,
                  post: tuple[torch.Tensor, torch.Tensor]) -> None:
    """The pointwise pass for one warped sample x [H, W, 3] (uint8 or float32) into its slot."""
    chw = spec.layout == "NCHW"
    k, b = post
    if spec.color is None and spec.channels == 3 and x.dtype == torch.uint8 and spec.dtype != torch.uint8:
        # a 256-entry table per channel (v * k + b in float32, rounded once): half the time of
        # computing it per pixel
        lut = _table(k, b, spec.dtype)
        dst = slot if chw else torch.empty(3, *x.shape[:2], dtype=spec.dtype)
        for c in range(3):
            torch.index_select(lut[c], 0, x[..., c].reshape(-1).long(), out=dst[c].view(-1))
        if not chw:
            slot.copy_(dst.permute(1, 2, 0))
        return
    y = x.to(torch.float32)
    if spec.color is not None:
        a = spec.color[i].to(torch.float32)
        y = y @ a[:, :3].T + a[:, 3]
    y = y.clamp(0.0, 255.0)
    if spec.channels == 1:
        y = (y * torch.tensor(GREY)).sum(-1, keepdim=True)
    y = y * k + b
    if spec.dtype == torch.uint8:
        y = torch.round(y)
    (slot if not chw else slot.permute(1, 2, 0)).copy_(y)


def _subset_spec(spec: WarpSpec, rows: torch.Tensor) -> WarpSpec:
    return WarpSpec(spec.inverse[rows], spec.image_size[rows], spec.origin[rows], spec.clip[rows],
                    spec.out_size, spec.interpolation, spec.border, spec.fill, spec.antialias)


def _reference(load: Callable[[int], torch.Tensor], spec: WarpSpec, rows: torch.Tensor,
               map_fn: MapFn) -> torch.Tensor:
    images = list(map_fn(load, rows.tolist()))
    sub = ImageBatch.from_list(images) if images[0].dtype == torch.uint8 else None
    if sub is None:  # float sources (between stages): pack by hand
        flat = torch.cat([im.reshape(-1) for im in images])
        sizes = [im.shape for im in images]
        offs = torch.tensor([0] + [h * w * c for h, w, c in sizes]).cumsum(0)[:-1]
        table = torch.tensor([[int(o), h, w, c] for o, (h, w, c) in zip(offs, sizes)], dtype=torch.int64)
        return warp_reference(flat, table, _subset_spec(spec, rows))
    return warp_reference(sub.data, sub.table, _subset_spec(spec, rows))


def run_cpu_stage(load: Callable[[int], torch.Tensor], spec: WarpSpec,
                  make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], needs_means: bool,
                  map_fn: MapFn = map, uint8: bool = True) -> torch.Tensor:
    """Warp + pointwise: the stage's tensor. load(i) gives sample i's stored HWC pixels (a view,
    or a region decoded right then, on the worker thread); uint8 says whether they are uint8
    (the fast paths need it) or float32 (between stages)."""
    n = len(spec)
    H, W = spec.out_size
    kind = classify(spec) if n and uint8 else torch.full((n,), REFERENCE)
    kinds = kind.tolist()
    fast = [i for i in range(n) if kinds[i] != REFERENCE]
    rest = (kind == REFERENCE).nonzero().flatten()
    if needs_means:
        dtype = torch.uint8 if bool((kind == WINDOW).all()) else torch.float32
        warped = torch.empty(n, H, W, 3, dtype=dtype)

        def warp_one(i: int) -> None:
            warped[i].copy_(warp_sample(load(i), spec, i, kinds[i]))

        for _ in map_fn(warp_one, fast):
            pass
        if len(rest):
            warped[rest] = _reference(load, spec, rest, map_fn).to(dtype)
        pspec = make_pointwise(channel_means(warped))
        return pointwise_reference(warped, pspec)
    pspec = make_pointwise(None)
    out = output_tensor(n, (H, W), pspec)
    post = _post(pspec)

    def one(i: int) -> None:
        finish_sample(warp_sample(load(i), spec, i, kinds[i]), pspec, i, out[i], post)

    for _ in map_fn(one, fast):
        pass
    if len(rest):
        sub = PointwiseSpec(None if pspec.color is None else pspec.color[rest], pspec.mean, pspec.std,
                            pspec.dtype, pspec.layout, pspec.channels)
        out[rest] = pointwise_reference(_reference(load, spec, rest, map_fn), sub)
    return out
