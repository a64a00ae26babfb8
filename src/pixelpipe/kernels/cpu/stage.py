"""One stage on the CPU: per-sample fast paths on worker threads, the reference for the rest.

Each sample is decoded, warped (warp_cpu's "window", "separable" or "general" path) and finished
(colour, clamp, normalise, cast, layout) by one call on a worker thread, writing its slot of the
output. The "general" path (rotations, shears, perspective, borders: warp.c) does the warp and
the pointwise pass in one C call that releases the GIL. Samples that need the reference warp
(float sources between stages, or no warp.c where the C helpers were not built) are gathered
and run through the vectorised reference, batched. Samples an ElasticTransform displaces take
the "general" path through its field (pp_warp_deformed). When a colour op needs the warped
image's mean (contrast), the warp and the pointwise pass are two phases (_two_phases), both on the
workers. Otherwise the workers start decoding as soon as the batch arrives: the batch's set-up
(which path each sample takes, the output tensor) is made by the calling thread meanwhile, and
the reference samples' regions are kept for the batched warp. The workers take the samples
longest first (longest_first), so that a batch ends on short ones.

Where the time goes (rn50 training pipeline on the ImageNet sample, 224x224 float16 NCHW, per
image, one thread of a 2-core machine): TurboJPEG region decode ~0.95 ms (mostly Huffman
decoding, which no crop or DCT scale skips), antialiased resize ~0.1-0.2 ms (read from the
decoded region in place, written into a channels-last tensor: see warp_cpu.resize_window),
pointwise ~0.09 ms. A rotated crop (RandomRotate(10) after the crop) adds the general warp,
~0.5-0.7 ms with the pointwise pass fused (AVX2), against ~0.15 ms for resize + pointwise; its
decoded region is larger too. Before warp.c those samples went through the batched reference:
3.6 s of a 3.7 s call for 64 images (cProfile; 20 images/s against 1,400 unrotated). It loops
over the batch's largest tap count (4 x 5, where the median sample needs 3 x 3), each tap pair
a dozen passes over [64, 224, 224, 3] tensors (int64 index arithmetic, clamps, a gather, a
where, a multiply-add per channel), and keeps int64 index tensors per tap: 2.7 GB peak for the
rich pipeline's bench against 0.45 GB for rn50's.
The plain case ("window" path, no colour matrix) runs with the fewest
passes: the resized window is not mirrored by a copy; the pointwise pass reads it mirrored
(numpy views take negative strides) while turning HWC bytes into the slot's layout: by warp.c's
pointwise pass where it was built (finish_window_c: one call, the GIL released), else in this
thread's reused buffers (finish_uint8's numpy and torch form: five calls, each taking the GIL
back, about 40% of its time in the rn50 pipeline spent waiting for it; the pipeline ran 2-26%
faster the first way, median 8%, over nine alternating runs on 2 threads). Every fast path
computes the same numbers as its general twin (finish_sample's float branch, warp_sample) and
tests/test_cpu_stage.py checks them equal; the general path agrees with the reference within
the tolerance tests/test_warp_cpu.py states.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ...data.batch import ImageBatch
from ...data.errors import SampleError
from ..reference.pointwise import GREY, channel_means, pointwise_reference
from ..reference.warp import warp_reference
from ..spec import PointwiseSpec, WarpSpec
from . import warp as cpu_warp
from .warp import (
    GENERAL,
    REFERENCE,
    WINDOW,
    channel_sums,
    classify,
    finish_general,
    finish_warped,
    general_sample,
    resize_window,
    sample_rows,
    warp_sample,
    with_general,
)

MapFn = Callable[[Callable[[int], Any], Iterable[int]], Iterable[Any]]
# tasks for_each hands to map_fn: one per worker thread is enough; extra ones (for pools with
# more threads than cores) start after the items ran out and return at once
_TASKS = max(8, os.cpu_count() or 1)


def output_tensor(n: int, out_size: tuple[int, int], spec: PointwiseSpec) -> torch.Tensor:
    H, W = out_size
    c = spec.channels
    shape = (n, c, H, W) if spec.layout == "NCHW" else (n, H, W, c)
    return torch.empty(shape, dtype=spec.dtype)


def _post(spec: PointwiseSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel scale and bias after the clamp, as float32 tensors."""
    k, b = spec.scale_bias()
    return torch.tensor(k, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


_scratch = threading.local()


def _planes(c: int, h: int, w: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """This thread's [c, h, w] uint8 (as numpy) and float32 work planes, and the uint8 as a
    tensor; kept between samples: no allocation per image."""
    got = getattr(_scratch, "planes", None)
    if got is None or got[1].shape != (c, h, w):
        u8 = torch.empty(c, h, w, dtype=torch.uint8)
        got = (u8.numpy(), u8, torch.empty(c, h, w, dtype=torch.float32))
        _scratch.planes = got
    return got


def finish_uint8(x: np.ndarray, spec: PointwiseSpec, slot: torch.Tensor, post: tuple[torch.Tensor, torch.Tensor]) -> None:
    """The pointwise pass without a colour matrix for one uint8 [H, W, C] sample (C = 1 or 3,
    any strides: a mirrored view costs nothing here) into its slot of a 3-channel output.

    The same numbers as finish_sample's general branch: float32 v * k, then + b, rounded once
    to the output dtype (the clamp does nothing on uint8). A float output goes through warp.c's
    pointwise pass (finish_window_c) where it was built; what follows is the form without it.
    Its memory traffic per 224x224 image: one strided pass over the HWC bytes into CHW uint8
    planes (numpy: it reads negative strides), three contiguous float32 passes in this
    thread's buffers, and the write of the slot: ~0.1 ms, against ~0.3 ms for the 256-entry
    lookup tables this replaced (torch's gather wanted int64 indices: a conversion pass per
    channel) plus a mirroring copy."""
    chw = spec.layout == "NCHW"
    planes = x.transpose(2, 0, 1)
    if spec.dtype == torch.uint8:  # k = 1, b = 0: a copy
        np.copyto(slot.numpy(), planes if chw else x, casting="no")
        return
    if finish_window_c(x, spec, slot, post):
        return
    k, b = post
    u8n, u8, f32 = _planes(3, x.shape[0], x.shape[1])
    np.copyto(u8n, planes, casting="no")  # a grey sample broadcasts to the 3 planes
    f32.copy_(u8)
    f32.mul_(k.view(3, 1, 1)).add_(b.view(3, 1, 1))
    slot.copy_(f32 if chw else f32.permute(1, 2, 0))  # rounded once, to the slot's dtype


def finish_window_c(x: np.ndarray, spec: PointwiseSpec, slot: torch.Tensor, post: tuple[torch.Tensor, torch.Tensor]) -> bool:
    """finish_uint8's pass by warp.c's pointwise pass (cpu_warp.finish_warped: one call, the
    GIL released, 8 pixels at a time with AVX2; without a colour matrix its numbers are the
    twin's); False where warp.c was not built (the caller runs the numpy and torch form)."""
    if cpu_warp.general_library() is None:
        return False
    cpu_warp.finish_warped(x, None, spec, None, (post[0].numpy(), post[1].numpy()), slot)
    return True


def finish_sample(x: torch.Tensor, spec: PointwiseSpec, i: int, slot: torch.Tensor,
                  post: tuple[torch.Tensor, torch.Tensor]) -> None:
    """The pointwise pass for one warped sample x [H, W, 3] (uint8 or float32) into its slot."""
    chw = spec.layout == "NCHW"
    k, b = post
    if spec.color is None and spec.channels == 3 and x.dtype == torch.uint8:
        finish_uint8(x.numpy(), spec, slot, post)
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


def for_each(fn: Callable[[int], None], items: list[int], map_fn: MapFn,
             meanwhile: Callable[[], None] | None = None) -> None:
    """fn(i) for every item, on the threads behind map_fn, raising the error of the first
    failing item in `items` (as iterating map_fn(fn, items) would; for a sorted list, the
    lowest failing one). A sample that cannot be read (SampleError) does not stop the others:
    when such are the only failures, one SampleError reports them all, so that a pipeline
    skipping them makes the batch again once (run_cpu_stage hands the other samples' finished
    slots over with it, as `partial`, so that only the failed ones need making again). meanwhile(), if given, runs on the caller's
    thread once the tasks are handed out (before the first item with a lazy map such as the
    builtin one); it must not raise.

    One task per worker rather than per item: each task takes items from a shared iterator
    until none are left (as balanced as one task per item). With a task per item the caller's
    thread woke for every finished item and competed for the GIL and the cores with the
    workers (measured, rn50 on 2 cores: ~0.09 ms of CPU per image more); here it wakes once
    per task."""
    if not items:
        if meanwhile is not None:
            meanwhile()
        return
    it = enumerate(items)  # next() on it is atomic under the GIL: each item goes once
    failed: list[tuple[int, BaseException]] = []
    unreadable: list[SampleError] = []  # samples that could not be read: the others go on

    def work(_: int) -> None:
        # every item taken is run, and none is taken after a failure other than a sample's:
        # all items before the first failing one were taken before it, so it is found
        while not failed:
            k, i = next(it, (None, None))
            if k is None:
                return
            try:
                fn(i)
            except SampleError as e:  # every unreadable sample of the batch is reported at once
                unreadable.append(e)
            except BaseException as e:  # re-raised below, in the caller's thread
                failed.append((k, e))

    tasks = map_fn(work, range(min(len(items), _TASKS)))  # a pool's map submits them here
    if meanwhile is not None:
        meanwhile()
    for _ in tasks:
        pass
    if failed:
        raise min(failed, key=lambda f: f[0])[1]
    if unreadable:
        raise SampleError.of([f for e in unreadable for f in e.failures])


def _reference(load: Callable[[int], torch.Tensor], spec: WarpSpec, rows: torch.Tensor,
               map_fn: MapFn) -> torch.Tensor:
    images = list(map_fn(load, rows.tolist()))
    sub = ImageBatch.from_list(images) if images[0].dtype == torch.uint8 else None
    if sub is None:  # float sources (between stages): pack by hand
        flat = torch.cat([im.reshape(-1) for im in images])
        sizes = [im.shape for im in images]
        offs = torch.tensor([0] + [h * w * c for h, w, c in sizes]).cumsum(0)[:-1]
        table = torch.tensor([[int(o), h, w, c] for o, (h, w, c) in zip(offs, sizes)], dtype=torch.int64)
        return warp_reference(flat, table, spec[rows.numpy()])
    return warp_reference(sub.data, sub.table, spec[rows.numpy()])


def run_cpu_stage(load: Callable[[int], torch.Tensor], spec: WarpSpec,
                  make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], needs_means: bool,
                  map_fn: MapFn = map, uint8: bool = True) -> torch.Tensor:
    """Warp + pointwise: the stage's tensor. load(i) gives sample i's stored HWC pixels (a view,
    or a region decoded right then, on the worker thread); uint8 says whether they are uint8
    (the fast paths need it) or float32 (between stages)."""
    if needs_means:
        return _two_phases(load, spec, make_pointwise, map_fn, uint8)
    # Decoding needs nothing from the rest of the batch's set-up: the workers start on their
    # first regions at once, while this thread classifies the samples and makes the output
    # (_Once: or the first worker that needs it, with a lazy map_fn). Reference samples are
    # decoded by the workers too and kept for the batched reference warp.
    setup = _Once(lambda: _Setup(spec, make_pointwise, uint8))
    kept: dict[int, torch.Tensor] = {}

    def one(i: int) -> None:
        img = load(i)
        s = setup()
        kind = s.rows.kinds[i]
        if kind == REFERENCE:
            kept[i] = img
        elif s.plain and kind == WINDOW:  # resize, then mirror + pointwise in one pass
            x = resize_window(img, spec, s.rows, i).numpy().transpose(1, 2, 0)
            my, mx = s.rows.mirror_y[i], s.rows.mirror_x[i]
            finish_uint8(x[:: -1 if my else 1, :: -1 if mx else 1], s.pspec, s.out[i], s.post)
        elif kind == GENERAL:  # warp + pointwise in one C call, into the output slot
            finish_general(img, spec, s.rows, i, s.pspec, None if s.color is None else s.color[i], s.post_np, s.out[i])
        else:
            finish_sample(warp_sample(img, spec, s.rows, i), s.pspec, i, s.out[i], s.post)

    unreadable: SampleError | None = None
    try:
        for_each(one, longest_first(spec), map_fn, meanwhile=setup.prime)
    except SampleError as e:  # the others are done: finish them, then say which failed
        unreadable = e
    s = setup()
    if kept:
        rest = torch.tensor(sorted(kept), dtype=torch.int64)
        pspec = s.pspec
        sub = PointwiseSpec(None if pspec.color is None else pspec.color[rest], pspec.mean, pspec.std,
                            pspec.dtype, pspec.layout, pspec.channels)
        s.out[rest] = pointwise_reference(_reference(kept.__getitem__, spec, rest, map), sub)
    if unreadable is not None:
        unreadable.partial = s.out  # every slot but the failed samples' is written
        raise unreadable
    return s.out


def _two_phases(load: Callable[[int], torch.Tensor], spec: WarpSpec,
                make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], map_fn: MapFn,
                uint8: bool) -> torch.Tensor:
    """A stage whose colour ops need the warped images' mean colours (contrast): every sample
    warped first, then the pointwise pass with the means.

    With warp.c, both phases run per sample on the workers: each sample is warped into a buffer
    of its own (a "window" sample's resize is kept unmirrored, in uint8; the pointwise pass
    reads it mirrored in place) and its channel sums taken, then, once the means are known, the
    pointwise pass (warp.c's, as the "general" path fuses it) writes its slot. Measured on the
    rich pipeline (2 cores): the batched plain-torch pass and means on the calling thread took
    ~4 ms per image while the workers waited; ~0.1 ms per image here. Without warp.c the means
    and the pass are the reference's, on one batch of warped images (uint8 when every sample
    takes the "window" path, float32 otherwise)."""
    if cpu_warp.general_library() is None:
        return _two_phases_reference(load, spec, make_pointwise, map_fn, uint8)
    n = len(spec)
    H, W = spec.out_size
    kind = _kinds(spec, uint8)
    rows = sample_rows(spec, kind)
    rest = (kind == REFERENCE).nonzero().flatten()
    warped: list[Any] = [None] * n
    sums = np.zeros((n, 3))

    def warp_one(i: int) -> None:
        img = load(i)
        k = rows.kinds[i]
        if k == WINDOW:  # HWC bytes as resized; mirrored by the view's strides
            x = resize_window(img, spec, rows, i).numpy().transpose(1, 2, 0)
            sums[i] = channel_sums(x)
            warped[i] = x[:: -1 if rows.mirror_y[i] else 1, :: -1 if rows.mirror_x[i] else 1]
            return
        warped[i] = general_sample(img, spec, rows, i) if k == GENERAL else warp_sample(img, spec, rows, i)
        sums[i] = channel_sums(warped[i])

    for_each(warp_one, [i for i in longest_first(spec) if rows.kinds[i] != REFERENCE], map_fn)
    if len(rest):
        for i, x in zip(rest.tolist(), _reference(load, spec, rest, map_fn)):
            warped[i] = x
            sums[i] = channel_sums(x)
    pspec = make_pointwise(torch.from_numpy(sums / (H * W)))
    out = output_tensor(n, (H, W), pspec)
    color = None if pspec.color is None else pspec.color.detach().cpu().numpy().astype(np.float32)
    k, b = _post(pspec)
    post = (k.numpy(), b.numpy())

    def finish_one(i: int) -> None:
        finish_warped(warped[i], spec, pspec, None if color is None else color[i], post, out[i])

    for_each(finish_one, list(range(n)), map_fn)
    return out


def _two_phases_reference(load: Callable[[int], torch.Tensor], spec: WarpSpec,
                          make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec], map_fn: MapFn,
                          uint8: bool) -> torch.Tensor:
    """_two_phases without warp.c: the per-sample fast paths on the workers into one batch, the
    reference for the rest, then the reference's means and pointwise pass."""
    n = len(spec)
    H, W = spec.out_size
    kind = _kinds(spec, uint8)
    rows = sample_rows(spec, kind)
    fast = [i for i in range(n) if rows.kinds[i] != REFERENCE]
    rest = (kind == REFERENCE).nonzero().flatten()
    dtype = torch.uint8 if bool((kind == WINDOW).all()) else torch.float32
    warped = torch.empty(n, H, W, 3, dtype=dtype)

    def warp_one(i: int) -> None:
        warped[i].copy_(warp_sample(load(i), spec, rows, i))

    for_each(warp_one, fast, map_fn)
    if len(rest):
        warped[rest] = _reference(load, spec, rest, map_fn).to(dtype)
    return pointwise_reference(warped, make_pointwise(channel_means(warped)))


def longest_first(spec: WarpSpec) -> list[int]:
    """The samples in decreasing order of an estimate of their decode + warp time (ties in
    index order), so that a batch ends on short items: with items of 0.3 to 3 ms, the worker
    that finished first waited ~2 ms per batch of 64 for the other (2 cores) in index order.
    The estimate, from the spec alone: the entropy decoding of every row down to the region's
    last (its image's width times the region's bottom) plus the region's area (IDCT, colour
    conversion, resize), in decoded pixels."""
    clip = spec.clip
    width = spec.image_size[:, 1]
    cost = clip[:, 2] * width + (clip[:, 2] - clip[:, 0]) * (clip[:, 3] - clip[:, 1])
    return np.argsort(-cost, kind="stable").tolist()


def _kinds(spec: WarpSpec, uint8: bool) -> torch.Tensor:
    """classify(spec) with the rest and the "separable" samples "general" where warp.c was
    built, or every sample REFERENCE when the pixels are not uint8. Samples a displacement
    field moves take "general" (warp.c reads the field; the reference without it); those it
    leaves in place (p) keep their path."""
    if not (len(spec) and uint8):
        return torch.full((len(spec),), REFERENCE)
    kind = classify(spec)
    if spec.deform is not None:
        kind = torch.from_numpy(np.where(spec.deform.active(), REFERENCE, kind.numpy()))
    return with_general(kind)


class _Setup:
    """What every sample of a non-means batch needs besides its pixels: per-sample paths and
    parameters, the pointwise spec, the output tensor."""

    def __init__(self, spec: WarpSpec, make_pointwise: Callable[[torch.Tensor | None], PointwiseSpec],
                 uint8: bool) -> None:
        self.rows = sample_rows(spec, _kinds(spec, uint8))
        self.pspec = make_pointwise(None)
        self.out = output_tensor(len(spec), spec.out_size, self.pspec)
        self.post = _post(self.pspec)
        self.plain = self.pspec.color is None and self.pspec.channels == 3
        # what finish_general hands warp.c: float32 colour matrices and scale, bias as arrays
        color = self.pspec.color
        self.color = None if color is None else color.detach().cpu().numpy().astype(np.float32)
        self.post_np = (self.post[0].numpy(), self.post[1].numpy())


class _Once:
    """f() made once, by the first thread that asks (prime() or a call); the others wait for
    it. A call returns the value or raises f's error, in every thread that asks."""

    def __init__(self, f: Callable[[], Any]) -> None:
        self._f = f
        self._lock = threading.Lock()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def prime(self) -> None:
        if self._done:
            return
        with self._lock:
            if not self._done:
                try:
                    self._value = self._f()
                except BaseException as e:  # raised by every call
                    self._error = e
                self._done = True

    def __call__(self) -> Any:
        self.prime()
        if self._error is not None:
            raise self._error
        return self._value
