"""Compose: a list of ops, planned into fused stages, applied to a batch."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .data.batch import ImageBatch
from .data.random import epochs
from .data.views import DeviceViews
from .engine.sources import EncodedSource, SampleError, as_source, sample_indices, tensor_source
from .engine.stats import BatchDecode, DecodeStats
from .engine.threads import one_torch_thread
from .kernels import PointwiseSpec, pack_ahead, run_stage
from .ops._base import Op
from .plan.stages import Stage, StagePlan, TensorStage, build_stages

__all__ = ["Compose", "SampleError"]


DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32)
LAYOUTS = ("NCHW", "NHWC")


class Compose:
    """A list of ops applied as a few fused passes.

    Args:
        ops: the ops, in order.
        dtype: output dtype: torch.uint8, float16, bfloat16 or float32. Floats are in [0, 1]
            (or normalised by a Normalize op).
        layout: "NCHW" or "NHWC".
        channels: 3 (grey images are replicated) or 1 (the grey of colour images).
        antialias: antialias every shrinking warp (default True).
        num_threads: decoding threads when called on encoded images (default: all cores).
        device: where the work and the output go; default: the input batch's device (the CPU
            for encoded images and lists of CPU arrays).
        max_pixels: encoded images whose header claims more pixels fail (SampleError) before
            anything is decoded.
        hw_fraction: on CUDA with nvImageCodec, the share of JPEGs for the hardware decoder
            (default 0.75); the rest go to the CUDA decoder, at the same time (None: the
            hardware decoder takes every JPEG it can). Measured in a Pipeline on an H100 (rn50,
            500 ImageNet JPEGs, batch 256, alternating rounds; docs/benchmarks-history.md, session 7):
            0.75 beat None in every round, by 8-25%; older single runs on an H200 had found no
            difference (docs/benchmarks-history-1-3.md and -4-5.md).
        gpu_fancy_upsampling: on CUDA, decode JPEG chroma with libjpeg's triangular filter so
            that pixels match the CPU decoder's (True), or by pixel replication (False,
            default, as DALI does): about 1.7x the decoding rate for 0.14 grey levels of mean
            difference (see pixelpipe.decode.gpu).
        gpu_roi_decode: let nvImageCodec decode only each sample's region (True), or decode
            whole images and let the warp read the region (False). "auto" (default): regions
            when a one-time probe in a child process decoded them cleanly on this GPU, since
            nvImageCodec 0.9.0 can crash on region decodes on H100 (NVIDIA/nvImageCodec#55).
        gpu_decode_lanes: on CUDA, how many nvImageCodec decoders there are (GpuDecoder's
            `lanes`). A Pipeline gives consecutive batches to alternate lanes and decodes them
            on as many threads, so that one batch decodes while the thread of the one before
            collects its results; a direct call splits its batch over the lanes. Default 1.

    Calling it: ``Compose(ops)(images, seed=0, epoch=0, indices=None)`` where images is an
    ImageBatch, a list of HWC uint8 tensors/arrays, or a list of encoded images (bytes). Encoded
    images are planned from their headers first and only the region each output needs is
    decoded. `indices` are the samples' global indices (default 0..N-1): with the seed and
    epoch they fix every random draw, so a sample gets the same augmentation in any batch.

    Example:
        >>> import torch, pixelpipe as pp
        >>> t = pp.Compose([pp.RandomResizedCrop(224), pp.RandomFlip(),
        ...                 pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])],
        ...                dtype=torch.float16)
        >>> t([torch.zeros(300, 400, 3, dtype=torch.uint8)]).shape
        torch.Size([1, 3, 224, 224])
    """

    def __init__(self, ops: Sequence[Op], dtype: torch.dtype = torch.float32, layout: str = "NCHW",
                 channels: int = 3, antialias: bool = True, num_threads: int | None = None,
                 device: str | torch.device | None = None, max_pixels: int = 100_000_000,
                 hw_fraction: float | None = 0.75, gpu_roi_decode: bool | str = "auto",
                 gpu_fancy_upsampling: bool = False, gpu_decode_lanes: int = 1) -> None:
        ops = list(ops)
        for i, op in enumerate(ops):
            if not isinstance(op, Op):
                raise TypeError(f"ops[{i}] is {type(op).__name__}, not a pixelpipe op")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {channels}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.ops = ops
        self.dtype, self.layout, self.channels = dtype, layout, channels
        self.antialias = bool(antialias)
        self.num_threads = num_threads or os.cpu_count() or 1
        self.device = None if device is None else torch.device(device)
        if max_pixels < 1:
            raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
        self.max_pixels = int(max_pixels)
        self.stages = build_stages(ops)
        last = self._last_warp_stage()
        if dtype == torch.uint8 and any(isinstance(s, Stage) and s.normalize for s in self.stages):
            raise ValueError("Normalize produces values outside uint8; use a float dtype or drop Normalize")
        for st in self.stages:
            norm = st.normalize if isinstance(st, Stage) else None
            if channels == 1 and norm is not None and (len(set(norm.mean)) > 1 or len(set(norm.std)) > 1):
                raise ValueError(f"channels=1 gives one grey channel: Normalize needs one mean and std for it "
                                 f"(e.g. Normalize([m], [s])), got mean={list(norm.mean)}, std={list(norm.std)}")
        if hw_fraction is not None and not 0.0 <= hw_fraction <= 1.0:
            raise ValueError(f"hw_fraction must be None or in [0, 1], got {hw_fraction}")
        if gpu_roi_decode not in (True, False, "auto"):
            raise ValueError(f'gpu_roi_decode must be True, False or "auto", got {gpu_roi_decode!r}')
        self._last = last
        self._pool: ThreadPoolExecutor | None = None
        self._decoder: Any = None
        self.hw_fraction = hw_fraction
        self.gpu_roi_decode = gpu_roi_decode
        self.gpu_fancy_upsampling = bool(gpu_fancy_upsampling)
        if isinstance(gpu_decode_lanes, bool) or not isinstance(gpu_decode_lanes, int) or gpu_decode_lanes < 1:
            raise ValueError(f"gpu_decode_lanes must be an int >= 1, got {gpu_decode_lanes!r}")
        self.gpu_decode_lanes = gpu_decode_lanes
        # every batch this Compose decoded (a Pipeline counts what it delivered: pipe.stats)
        self.decode_stats = DecodeStats()

    def eval(self, style: str = "center") -> Compose:
        """The deterministic evaluation form of these ops (random ops dropped or made
        central), for validation and serving; see pixelpipe.eval.eval_form."""
        from .eval import eval_form

        return eval_form(self, style)

    # ----------------------------------------------------------------------------- inspection
    def _last_warp_stage(self) -> int:
        return max(i for i, s in enumerate(self.stages) if isinstance(s, Stage))

    def plan(self) -> str:
        """The stages this list runs as, one line each."""
        lines = [f"Plan: {len(self.ops)} ops -> {len(self.stages)} stage(s); output {self.layout} "
                 f"{str(self.dtype).replace('torch.', '')}, {self.channels} channel(s)"]
        for k, s in enumerate(self.stages):
            lines.append(f"  stage {k}: {s.describe()}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        inner = ",\n".join(f"    {op!r}" for op in self.ops)
        extra = "".join(f", {k}={v!r}" for k, v, default in (
            ("channels", self.channels, 3), ("antialias", self.antialias, True),
            ("max_pixels", self.max_pixels, 100_000_000)) if v != default)
        return f"Compose([\n{inner}\n], dtype={self.dtype}, layout={self.layout!r}{extra})"

    # ----------------------------------------------------------------------------- running
    def __call__(self, images: Any, seed: int = 0, epoch: int = 0, indices: Any = None) -> torch.Tensor:
        return self.finish(self.prepare(images, seed, epoch, indices))

    def prepare(self, images: Any, seed: int = 0, epoch: int = 0, indices: Any = None,
                defer_decode: bool = False, decode_lane: int | None = None) -> Prepared:
        """The first half of a call: read headers, plan the first stage and, on CUDA, decode
        its regions (with defer_decode, `decode` or `finish` does that later). `finish` does
        the rest. A pipeline runs these steps of consecutive batches on separate threads, so
        that planning, decoding and the kernels of three batches overlap. decode_lane: the
        GPU decoder lane for the whole batch (in [0, gpu_decode_lanes); None: split)."""
        source = as_source(images, self.max_pixels)
        n = len(source)
        idx = sample_indices(indices, n)
        first = self.stages[0]
        assert isinstance(first, Stage)
        work = self._prepare_stage(first, source, seed, epoch, idx, self._last == 0, defer_decode, decode_lane)
        return Prepared(seed, epoch, idx, work)

    def prepare_split(self, images: ImageBatch, seed: int, epoch: Any, indices: Any, parts: int) -> list[Prepared]:
        """prepare() of `parts` consecutive batches of equal size, given as one decoded batch:
        the first stage is planned for all of them in one go and split. Planning costs numpy's
        per-call overhead more than arithmetic, so a Pipeline's cached epochs plan several
        batches at once; each part is what prepare() of its samples alone would give (every
        draw is a function of the sample index and epoch, not of the batch). epoch: an int, or
        int64 [N] per-sample epochs, one epoch per part (batches of consecutive epochs). On
        CUDA the parts' kernel inputs (colour maps, parameter rows) are made and uploaded here,
        once for all of them (kernels.pack_ahead), on the current stream."""
        if not isinstance(images, ImageBatch):
            raise TypeError("prepare_split takes a decoded ImageBatch")
        n = len(images)
        if parts < 1 or n % parts:
            raise ValueError(f"cannot split {n} samples into {parts} equal batches")
        size = n // parts
        per = epochs(epoch)
        if isinstance(per, np.ndarray):
            if per.shape != (n,):
                raise ValueError(f"per-sample epochs must have one entry per image ({n}), got shape {per.shape}")
            if n == 0:
                raise ValueError("per-sample epochs need samples; give an int epoch for an empty batch")
            firsts = per[::size]
            if (per != np.repeat(firsts, size)).any():
                raise ValueError("each part of prepare_split must belong to one epoch")
            part_epochs = [int(e) for e in firsts]
        else:
            part_epochs = [per] * parts
        whole = self.prepare(images, seed, per, indices)
        work = whole.first
        work.spec.max_scale()  # computed once, sliced with the spec
        packed = None
        if work.source.data.is_cuda:
            work.source.kernel_table()  # uploaded once (on the current stream), its rows shared
            # the kernel's inputs too: colours folded, rows packed and uploaded once, then sliced
            packed = pack_ahead(work.source, work.spec, lambda means: self._pointwise_spec(
                work.stage, work.plan, means, work.final), work.plan.needs_means)
        out = []
        for j in range(parts):
            rows = slice(j * size, (j + 1) * size)
            part = _StageWork(work.stage, work.plan[rows], work.source.rows(rows), work.spec[rows], work.final,
                              None if packed is None else packed.rows(rows))
            out.append(Prepared(seed, part_epochs[j], whole.idx[rows], part))
        return out

    def decode(self, prepared: Prepared) -> None:
        """The GPU decode a prepare(defer_decode=True) left to do (nothing otherwise).
        Raises SampleError for a sample neither decoder can read."""
        work = prepared.first
        if isinstance(work.source, _PendingDecode):
            work.source, work.decoded = work.source.run()

    def finish(self, prepared: Prepared) -> torch.Tensor:
        """The second half of a call: the first stage's passes, then every later stage."""
        self.decode(prepared)
        x: Any = self._finish_stage(prepared.first)
        for k, stage in enumerate(self.stages[1:], start=1):
            if isinstance(stage, TensorStage):
                x = stage.op(x)
                continue
            ps = self._prepare_stage(stage, x, prepared.seed, prepared.epoch, prepared.idx, k == self._last)
            x = self._finish_stage(ps)
        return x

    def _prepare_stage(self, stage: Stage, x: Any, seed: int, epoch: int, idx: np.ndarray, final: bool,
                       defer_decode: bool = False, decode_lane: int | None = None) -> _StageWork:
        if isinstance(x, torch.Tensor):  # output of a Lambda: float NCHW in [0, 1]
            x = tensor_source(x)
        encoded = isinstance(x, EncodedSource)
        sizes = x.sizes() if encoded else x.table.numpy()[:, 1:3].astype(np.float64)
        plan = stage.sample(seed, epoch, idx, sizes)
        out_size = plan.uniform_size() if len(idx) else _fixed_size(stage)
        if out_size is None:
            before_lambda = not final and isinstance(self.stages[self.stages.index(stage) + 1], TensorStage)
            raise ValueError(
                "the ops give images of different sizes; add a Resize((h, w)), CenterCrop or "
                "RandomResizedCrop so that every sample has the same size"
                + (" before the Lambda" if before_lambda else ""))
        regions = plan.regions()
        device = self.device or (torch.device("cpu") if encoded else x.device)
        source: Any
        decoded = None
        if encoded and device.type == "cuda" and self._gpu_decoder(device) is not None:
            spec = plan.warp_spec(out_size, regions, origin=regions[:, :2], antialias=self.antialias)
            source = _PendingDecode(self, x, regions, idx, decode_lane)
            if not defer_decode:
                source, decoded = source.run()
        elif encoded:  # the CPU decoder, at the DCT scale the headers allow
            mins = plan.min_decode_size(regions)
            scale = x.scales(regions, mins)
            spec = plan.warp_spec(out_size, regions, origin=regions[:, :2], scale=scale, antialias=self.antialias)
            source = x.loader(regions, mins, scale)
            if device.type != "cpu":
                images = list(self._executor().map(source, range(len(x))))
                source = ImageBatch.from_list(images).to(device, non_blocking=True)
            decoded = BatchDecode(cpu=len(x))  # on the CPU device the warp decodes them, all or an error
            self.decode_stats.add(decoded)
        else:
            source = x.to(device)
            spec = plan.warp_spec(out_size, regions, antialias=self.antialias)
        return _StageWork(stage, plan, source, spec, final, decoded=decoded)

    def _finish_stage(self, work: _StageWork) -> torch.Tensor:
        stage, plan, final = work.stage, work.plan, work.final
        out = run_stage(work.source, work.spec,
                        lambda means: self._pointwise_spec(stage, plan, means, final), plan.needs_means,
                        self._executor().map, work.packed)
        if isinstance(work.source, DeviceViews):  # the decoder's images live until the kernels ran
            work.source.retire(torch.cuda.current_stream(work.source.device))
        return out

    def _gpu_decoder(self, device: torch.device) -> Any:
        """The nvImageCodec decoder for `device`, or None (with a one-time notice) without it."""
        if self._decoder is not None:
            return self._decoder
        from .decode.gpu import GpuDecoder, gpu_decoder_available
        from .decode.on_device import cpu_decoding_notice

        if not gpu_decoder_available():
            cpu_decoding_notice()
            return None
        self._decoder = GpuDecoder(device, hw_fraction=self.hw_fraction, num_cpu_threads=self.num_threads,
                                   roi_decode=self.gpu_roi_decode, fancy_upsampling=self.gpu_fancy_upsampling,
                                   lanes=self.gpu_decode_lanes, max_pixels=self.max_pixels,
                                   steady_buffers=True)
        return self._decoder

    def _pointwise_spec(self, stage: Stage, plan: StagePlan, means: torch.Tensor | None, final: bool) -> PointwiseSpec:
        norm = stage.normalize
        return PointwiseSpec(
            color=plan.color_matrix(means),
            mean=norm.mean if norm else None,
            std=norm.std if norm else None,
            dtype=self.dtype if final else torch.float32,
            layout=self.layout if final else "NCHW",
            channels=self.channels if final else 3,
        )

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="pixelpipe-decode",
                                            initializer=one_torch_thread)  # per-sample work: see _threads
        return self._pool

    def close(self) -> None:
        """Stop the decoding threads and release the GPU decoder and the buffers it decoded
        into (all are made again on the next call)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._decoder is not None:
            from .data.views import release_retired

            release_retired()
            self._decoder.close()
            self._decoder = None

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


class _PendingDecode:
    """A batch planned for the GPU decoder, not decoded yet. The decoder's per-sample planning
    (checks, code streams) happens here, on the planning thread, so that the decoding thread
    (Pipeline's decode_thread) only decodes."""

    def __init__(self, compose: Compose, source: EncodedSource, regions: np.ndarray, idx: np.ndarray,
                 lane: int | None = None) -> None:
        self.compose, self.source, self.regions, self.idx = compose, source, regions, idx
        if lane is not None:  # the decoder may have fewer lanes (its Python binding has one)
            lane %= compose._decoder.lanes
        self.planned = compose._decoder.plan(source.blobs, [tuple(r) for r in regions.tolist()],
                                             source.jpeg_headers, lane=lane)

    def run(self) -> tuple[DeviceViews, BatchDecode]:
        """Decode the planned batch: its views, and how its samples were decoded (counted in
        the Compose's decode_stats)."""
        from .decode.gpu_fallback import SampleDecodeError

        compose, x = self.compose, self.source
        try:
            views, fallback, reasons = compose._decoder.decode_views(x.blobs, planned=self.planned)
        except SampleDecodeError as e:  # neither decoder could read it: the pipeline's policy decides
            raise SampleError(e.sample, e.reason) from e
        index = self.idx.tolist() if len(fallback) else []
        record = BatchDecode(gpu=len(x) - len(fallback), fallbacks=[(index[i], why) for i, why in zip(fallback, reasons)])
        compose.decode_stats.add(record)
        return views, record


@dataclass
class _StageWork:
    """A stage planned (and, on CUDA, its images decoded), ready for its two passes."""

    stage: Stage
    plan: StagePlan
    source: Any
    spec: Any
    final: bool
    packed: Any = None  # kernels.Packed: the kernel's inputs made ahead (prepare_split on CUDA)
    decoded: BatchDecode | None = None  # how its images were decoded (None: given decoded)


@dataclass
class Prepared:
    """What Compose.prepare hands to Compose.finish."""

    seed: int
    epoch: int
    idx: np.ndarray  # int64 [N] global sample indices
    first: _StageWork


def _fixed_size(stage: Stage) -> tuple[int, int]:
    """The output size of a stage whatever its input (for an empty batch): planned on two
    dummy images of different shapes; an input-dependent size has no answer."""
    probe = stage.sample(0, 0, np.arange(2), np.array([[97.0, 131.0], [240.0, 180.0]]))
    size = probe.uniform_size()
    if size is None:
        raise ValueError("an empty batch has no output size: these ops give sizes that depend on each image; "
                         "end them with a fixed-size op such as Resize((h, w)) or CenterCrop(size)")
    return size
