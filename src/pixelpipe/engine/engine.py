"""The Engine: runs a planned Compose (a `plan.Program`) on a batch, with its threads, decoders
and device.

A Compose is only a spec; an Engine owns what running it needs: the decoding thread pool, the
GPU decoder (nvImageCodec) and its lanes, the device, and the count of how samples were decoded.
`Compose.__call__` runs on a process-wide default engine per device (engine.defaults), a
Pipeline on its own. A run is two halves: `prepare` reads headers, plans the first stage and,
on CUDA, decodes its regions (or leaves that to `decode`, on another thread); `finish` runs the
passes of every stage, the pixel ops and the targets. A Pipeline runs these halves of
consecutive batches on separate threads, so that planning, decoding and the kernels of three
batches overlap.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..data.batch import ImageBatch
from ..data.devices import check_device
from ..data.keypoint_pairs import mirror_keypoints
from ..data.mask_boxes import boxes_from_masks
from ..data.random import epochs
from ..data.targets import Targets
from ..data.threads import default_threads_for, one_torch_thread
from ..data.views import DeviceViews
from ..kernels import pack_ahead, run_stage
from ..kernels.masks import warp_masks
from ..plan import Program, Stage, fast
from .cuda_queues import queues_notice
from .options import GpuDecoding
from .pixels import pixel_pieces, pixel_prefixes, run_pixels
from .sources import EncodedSource, SampleError, as_source, sample_indices, tensor_source
from .stats import BatchDecode, DecodeStats
from .work import PendingDecode, Prepared, StageWork

__all__ = ["Engine"]


class Engine:
    """Threads, decoders and a device to run Composes on.

    Args:
        device: where the work and the output go; None: the input batch's device (the CPU for
            encoded images and lists of CPU arrays).
        num_threads: decoding threads for encoded images (default: the cores available, at most
            8 on a CUDA device: data.threads.default_gpu_threads).
        max_pixels: encoded images whose header claims more pixels fail (SampleError) before
            anything is decoded.
        gpu: how JPEGs are decoded on a GPU (`GpuDecoding`; defaults when None).
        freeze_gc: at its first batch, collect garbage once and freeze what survives
            (engine.process.freeze_garbage), so that the garbage collector's full collections
            skip the process's long-lived objects instead of stalling every thread for about
            100 ms now and then (the cause of a GPU pipeline's slow rounds). False leaves the
            collector as it is.

    `decode_stats` counts how every batch it ran was decoded. `close()` stops its threads and
    releases its GPU decoder (both are made again when needed); an Engine is a context manager.

    Example:
        >>> import torch, pixelpipe as pp
        >>> t = pp.Compose([pp.Resize((8, 8))])
        >>> with pp.Engine(num_threads=2) as engine:
        ...     t([torch.zeros(10, 12, 3, dtype=torch.uint8)], engine=engine).shape
        torch.Size([1, 3, 8, 8])
    """

    def __init__(self, device: str | torch.device | None = None, num_threads: int | None = None,
                 max_pixels: int = 100_000_000, gpu: GpuDecoding | None = None, freeze_gc: bool = True) -> None:
        if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                        or num_threads < 1):
            raise ValueError(f"num_threads must be an int >= 1, got {num_threads!r}")
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
            raise ValueError(f"max_pixels must be an int >= 1, got {max_pixels!r}")
        if gpu is not None and not isinstance(gpu, GpuDecoding):
            raise TypeError(f"gpu must be a pixelpipe.GpuDecoding, got {type(gpu).__name__}")
        self.device = None if device is None else torch.device(device)
        check_device(self.device)
        self.num_threads = num_threads or default_threads_for(self.device)
        self.max_pixels = max_pixels
        self.gpu = gpu or GpuDecoding()
        self.freeze_gc = bool(freeze_gc)
        self._started = False  # a first batch was prepared (freeze_gc acts then)
        self.decode_stats = DecodeStats()
        self._pool: ThreadPoolExecutor | None = None
        self._decoder: Any = None
        self._lanes: Any = None

    def __repr__(self) -> str:
        return (f"Engine(device={self.device}, num_threads={self.num_threads}, max_pixels={self.max_pixels}, "
                f"gpu={self.gpu})")

    # ----------------------------------------------------------------------------- running
    def run(self, program: Program, images: Any, seed: int = 0, epoch: Any = 0, indices: Any = None,
            targets: Targets | None = None, frames: Any = None) -> dict[str, Any]:
        """Both halves: the batch dict ("image", and the targets moved, if given)."""
        return self.finish(self.prepare(program, images, seed, epoch, indices, targets, frames=frames))

    def prepare(self, program: Program, images: Any, seed: int = 0, epoch: Any = 0, indices: Any = None,
                targets: Targets | None = None, defer_decode: bool = False,
                decode_lane: int | None = None, frames: Any = None) -> Prepared:
        """The first half: read headers, plan the first stage and, on CUDA, decode its regions
        (with defer_decode, `decode` or `finish` does that later). decode_lane: the GPU decoder
        lane for the whole batch (in [0, gpu.lanes); None: split). frames: int64 [N], each
        image's frame number in its clip, for the ops with per_frame=True (augment_clips gives
        them); None for images."""
        if not self._started:
            self._started = True
            if self.freeze_gc:
                from .process import freeze_garbage

                freeze_garbage()
        source = as_source(images, self.max_pixels)
        idx = sample_indices(indices, len(source))
        if targets:
            sizes = source.sizes() if isinstance(source, EncodedSource) else source.table.numpy()[:, 1:3].astype(np.float64)
            if targets.masks is not None:
                targets.masks.check_sizes(sizes)
            if targets.boxes is not None:  # the Compose's box_format, as (x0, y0, x1, y1) pixels
                targets = replace(targets, boxes=targets.boxes.in_pixels(program.targets.box_format, sizes))
        if frames is not None:
            frames = np.asarray(frames, dtype=np.int64).reshape(-1)
            if frames.shape != idx.shape:
                raise ValueError(f"frames must give one frame number per image ({len(idx)}), got {frames.shape[0]}")
        work = self._prepare_stage(program, 0, source, seed, epoch, idx, defer_decode, decode_lane, targets or None,
                                   frames)
        return Prepared(program, seed, epoch, idx, work, targets or None, frames)

    def prepare_split(self, program: Program, images: ImageBatch, seed: int, epoch: Any, indices: Any,
                      parts: int, targets: Targets | None = None) -> list[Prepared]:
        """prepare() of `parts` consecutive batches of equal size, given as one decoded batch:
        the first stage is planned for all of them in one go and split. Planning costs numpy's
        per-call overhead more than arithmetic, so a Pipeline's cached epochs plan several
        batches at once; each part is what prepare() of its samples alone would give (every
        draw is a function of the sample index and epoch, not of the batch). epoch: an int, or
        int64 [N] per-sample epochs, one epoch per part. On CUDA the parts' kernel inputs are
        made and uploaded here, once for all of them (kernels.pack_ahead)."""
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
            part_epochs: list[Any] = [int(e) for e in firsts]
        else:
            part_epochs = [per] * parts
        whole = self.prepare(program, images, seed, per, indices, targets)
        work = whole.first
        work.spec.max_scale()  # computed once, sliced with the spec
        packed = None
        if work.source.data.is_cuda:
            work.source.kernel_table()  # uploaded once (on the current stream), its rows shared
            form = program.form(0)
            packed = pack_ahead(work.source, work.spec, lambda means: work.plan.pointwise(means, form),
                                work.plan.needs_means)
        out = []
        for j in range(parts):
            rows = slice(j * size, (j + 1) * size)
            part = StageWork(program, 0, work.plan[rows], work.source.rows(rows), work.spec[rows],
                             None if packed is None else packed.rows(rows))
            out.append(Prepared(program, seed, part_epochs[j], whole.idx[rows], part,
                                None if whole.targets is None else whole.targets.rows(rows)))  # images: no frames
        return out

    def decode(self, prepared: Prepared) -> None:
        """The GPU decode a prepare(defer_decode=True) left to do (nothing otherwise).
        Raises SampleError for a sample neither decoder can read."""
        work = prepared.first
        if isinstance(work.source, PendingDecode):
            work.source, work.decoded = work.source.run()

    def finish(self, prepared: Prepared, partial: bool = False) -> dict[str, Any]:
        """The second half: every stage's passes and pixel ops, the targets moved with them.
        Returns the batch dict: "image", and "boxes", "keypoints", "masks" where given. With
        partial, a batch without targets whose first stage could not decode some samples on the
        CPU is finished all the same and its SampleError raised with the dict as `batch` (the
        failing samples' rows unset)."""
        self.decode(prepared)
        work = prepared.first
        targets = prepared.targets
        x: Any = None
        unreadable: SampleError | None = None
        for k in range(len(prepared.program.stages)):
            if k:
                work = self._prepare_stage(prepared.program, k, x, prepared.seed, prepared.epoch, prepared.idx,
                                           targets=targets, frames=prepared.frames)
            try:
                x = self._finish_stage(work, prepared, targets is not None)
            except SampleError as e:
                if not partial or targets is not None or e.partial is None:
                    raise
                unreadable, x = e, e.partial  # the other samples' pixels go on through the stages
                if work.stage.pixels:
                    x = self._pixels(work, x, prepared, False)
            if targets is not None:
                targets = self._move(targets, work, x.device)
        batch: dict[str, Any] = {"image": x}
        if targets is not None:
            batch.update(_outputs(targets, prepared.program, x))
        if unreadable is not None:
            unreadable.partial, unreadable.batch = None, batch
            raise unreadable
        return batch

    # ----------------------------------------------------------------------------- stages
    def _prepare_stage(self, program: Program, k: int, x: Any, seed: int, epoch: Any, idx: np.ndarray,
                       defer_decode: bool = False, decode_lane: int | None = None,
                       targets: Targets | None = None, frames: np.ndarray | None = None) -> StageWork:
        stage = program.stages[k]
        if isinstance(x, torch.Tensor):  # a stage after pixel ops: float NCHW in [0, 1]
            x = tensor_source(x)
        encoded = isinstance(x, EncodedSource)
        sizes = x.sizes() if encoded else x.table.numpy()[:, 1:3].astype(np.float64)
        plan = stage.sample(seed, epoch, idx, sizes, targets, frames)  # targets: for ops that look at them
        out_size = plan.uniform_size() if len(idx) else _fixed_size(stage)
        if out_size is None:
            hint = f" before {type(stage.pixels[0][1]).__name__}" if stage.pixels and k + 1 < len(program.stages) else ""
            raise ValueError("the ops give images of different sizes; add a Resize((h, w)), CenterCrop or "
                             f"RandomResizedCrop so that every sample has the same size{hint}")
        regions = plan.regions()
        device = self.device or (torch.device("cpu") if encoded else x.device)
        antialias = program.output.antialias
        source: Any
        decoded = None
        if encoded and device.type == "cuda" and self.gpu_decoder(device) is not None:
            spec = plan.warp_spec(out_size, regions, origin=regions[:, :2], antialias=antialias)
            source = PendingDecode(self._decoder, self.decode_stats, x, regions, idx, decode_lane)
            if not defer_decode:
                source, decoded = source.run()
        elif encoded:  # the CPU decoder, at the DCT scale the headers allow
            mins = plan.min_decode_size(regions)
            if program.output.exact_resize:  # at least the region itself: full size
                mins = np.maximum(mins, regions[:, 2:4] - regions[:, 0:2])
            scale = x.scales(regions, mins)
            spec = plan.warp_spec(out_size, regions, origin=regions[:, :2], scale=scale, antialias=antialias)
            source = x.loader(regions, mins, scale)
            if device.type != "cpu":
                images = list(self.executor().map(source, range(len(x))))
                source = ImageBatch.from_list(images).to(device, non_blocking=True)
            decoded = BatchDecode(cpu=len(x))  # on the CPU device the warp decodes them, all or an error
            self.decode_stats.add(decoded)
        else:
            source = x.to(device)
            spec = plan.warp_spec(out_size, regions, antialias=antialias)
        return StageWork(program, k, plan, source, spec, decoded=decoded)

    def _finish_stage(self, work: StageWork, prepared: Prepared, targets: bool) -> torch.Tensor:
        form = work.program.form(work.k)
        plan = work.plan
        out = run_stage(work.source, work.spec, lambda means: plan.pointwise(means, form), plan.needs_means,
                        self.executor().map, work.packed)
        if isinstance(work.source, DeviceViews):  # the decoder's images live until the kernels ran
            work.source.retire(torch.cuda.current_stream(work.source.device))
        if work.stage.pixels:
            out = self._pixels(work, out, prepared, targets)
        return out

    def _pixels(self, work: StageWork, x: torch.Tensor, prepared: Prepared, targets: bool) -> torch.Tensor:
        """The stage's pixel ops on its warped float image, Normalize where it stands among them,
        then (last stage) the output form: on the CPU in pieces of samples over the decoding
        threads (engine.pixels), on a GPU as one batch."""
        output = work.program.output if work.final else None
        if x.device.type == "cpu":
            if self.gpu.keep_host_memory:  # the pieces' temporaries: see engine.process
                from .process import keep_host_memory

                keep_host_memory()
            # x is the stage's new warped batch, read by nothing after the pixel ops
            return pixel_pieces(work.stage, x, prepared.seed, prepared.epoch, prepared.idx, output, targets,
                                self.executor().map, frames=prepared.frames, owned=True)
        # there too: the ops write into it (apply_owned, kernels.pixel_forms) instead of copies
        prefixes = pixel_prefixes(work.stage, prepared.seed, prepared.epoch, prepared.idx, prepared.frames)
        return run_pixels(work.stage, x, prepared.seed, epochs(prepared.epoch), prepared.idx, prefixes, output,
                          targets, owned=True)

    def _move(self, targets: Targets, work: StageWork, device: torch.device) -> Targets:
        """The targets through stage work's matrices: boxes and keypoints on the host, masks by
        the nearest warp on the image's device."""
        plan = work.plan
        if plan.elastic is None:
            moved = fast.move_targets(targets, plan.matrix, plan.out_sizes)
        else:  # through the displacement field (plan.deform says how)
            moved = plan.elastic.move(targets, plan.matrix, plan.out_sizes)
        pairs = work.program.targets.flip_pairs
        if pairs and moved.keypoints is not None:
            moved.keypoints = mirror_keypoints(moved.keypoints, plan.matrix, pairs)
        if targets.masks is not None:
            stage = work.stage
            out_size = work.spec.out_size
            warped = warp_masks(targets.masks.items, plan.inverse(), plan.in_sizes, out_size, stage.border,
                                work.program.output.mask_fill, device,
                                None if plan.elastic is None else plan.deformation())
            moved.masks = type(targets.masks)(warped, targets.masks.planar)
            if work.program.targets.boxes_from_masks and moved.boxes is not None:
                moved.boxes = boxes_from_masks(moved.boxes, moved.masks)
        return moved

    # ----------------------------------------------------------------------------- resources
    def gpu_decoder(self, device: torch.device) -> Any:
        """The nvImageCodec decoder for `device`, or None (with a one-time notice) without it."""
        if self._decoder is not None:
            return self._decoder
        from ..decode.gpu import GpuDecoder, gpu_decoder_available
        from ..decode.on_device import cpu_decoding_notice

        if not gpu_decoder_available():
            cpu_decoding_notice()
            return None
        queues_notice()
        g = self.gpu
        if g.keep_host_memory:
            from .process import keep_host_memory

            keep_host_memory()
        self._decoder = GpuDecoder(device, hw_fraction=g.hw_fraction, num_cpu_threads=self.num_threads,
                                   roi_decode=g.roi, fancy_upsampling=g.fancy_upsampling, options=g.options,
                                   lanes=g.lanes, max_pixels=self.max_pixels, steady_buffers=True,
                                   lane_fractions=g.lane_fractions)
        return self._decoder

    def executor(self) -> ThreadPoolExecutor:
        """The decoding thread pool (per-sample work: one torch thread each, see threads)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="pixelpipe-decode",
                                            initializer=one_torch_thread)
        return self._pool

    @property
    def lanes(self) -> Any:
        """The GPU decode lanes (engine.lanes.DecodeLanes) a Pipeline decodes on."""
        if self._lanes is None:
            from .lanes import DecodeLanes

            self._lanes = DecodeLanes(self)
        return self._lanes

    def close(self) -> None:
        """Stop the threads and release the GPU decoder and the buffers it decoded into (all are
        made again on the next call)."""
        if self._lanes is not None:
            self._lanes.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._decoder is not None:
            from ..data.views import release_retired

            release_retired()
            self._decoder.close()
            self._decoder = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


def _outputs(targets: Targets, program: Program, x: torch.Tensor) -> dict[str, Any]:
    """The batch's target entries: boxes, labels and keypoints in the program's target form
    (data.targets.TargetForm: its box format, lists or padded, its SanitizeBoxes rules), masks
    as one tensor [N, H, W] (given without channels) or [N, C, H, W] / [N, H, W, C] in the
    output's layout."""
    size = tuple(x.shape[2:4] if program.output.layout == "NCHW" else x.shape[1:3])
    out = program.targets.outputs(targets, size, x.device)
    if targets.masks is not None:
        items = targets.masks.items
        m = items if isinstance(items, torch.Tensor) else torch.stack(items)  # warped: one tensor
        if targets.masks.planar:
            m = m[..., 0]
        elif program.output.layout == "NCHW":
            m = m.permute(0, 3, 1, 2).contiguous()
        out["masks"] = m
    return out


def _fixed_size(stage: Stage) -> tuple[int, int]:
    """The output size of a stage whatever its input (for an empty batch): planned on two
    dummy images of different shapes; an input-dependent size has no answer."""
    probe = stage.sample(0, 0, np.arange(2), np.array([[97.0, 131.0], [240.0, 180.0]]))
    size = probe.uniform_size()
    if size is None:
        raise ValueError("an empty batch has no output size: these ops give sizes that depend on each image; "
                         "end them with a fixed-size op such as Resize((h, w)) or CenterCrop(size)")
    return size
