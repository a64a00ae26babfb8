"""GPU decoding of JPEGs (and their regions) with NVIDIA nvImageCodec.

`GpuDecoder.decode_views` sends the JPEGs of a batch to nvImageCodec in one call. The hardware
JPEG engine and the CUDA/hybrid nvJPEG decoder share the work. The decoded images stay in
device memory and are passed on as a `DeviceViews` table of addresses and strides that the
kernel reads. Whatever nvImageCodec cannot decode goes to the CPU (`decode_region`, Pillow),
and those samples are reported so the pipeline can count them. `decode_regions` copies the
views into one ImageBatch. Regions and EXIF orientation follow the CPU decoder exactly: the
same box of the displayed image, oriented the same way.

Two ways to drive nvImageCodec (`api=`):
- "c", the default where the installed release is one it mirrors: its C API through ctypes
  (`nvimgcodec_c`). The decode runs without the GIL, into one buffer pixelpipe owns (one slot
  per sample).
- "python": its Python binding, described below. Its decode stalls while other Python threads
  run (measurements in nvimgcodec_c). It decodes into buffers nvImageCodec owns, and those are
  reused across batches.

Both use the same backends and options, and give the same pixels bit for bit.

API facts relied on, for nvidia-nvimgcodec-cu13 0.9.0.20 (module `nvidia.nvimgcodec`; from the
docstrings in its extension module, NVIDIA/nvImageCodec sources of earlier releases, and the
issues named; the binding's calls are described in gpu_binding, the C API's in nvimgcodec_c):

- `Decoder(device_id=, max_num_cpu_threads=, backends=[Backend(kind, load_hint=f,
  load_hint_policy=LoadHintPolicy.FIXED)], options=)`. A load hint is the share of a batch a
  backend takes; the rest falls through to the next decoder that accepts it. JPEG decoders:
  nvjpeg_hw_decoder (HW_GPU_ONLY: the A100/H100 engine, baseline only), nvjpeg_cuda_decoder
  (HYBRID_CPU_GPU: Huffman on CPU threads, or on the GPU for large baseline images), CPU ones
  (CPU_ONLY). CPU_ONLY stays off here, so what no GPU decoder takes comes back as None and is
  counted as a fallback instead of being decoded on the CPU silently.
- `options`: space-separated ":opt=value" (any decoder) or "decoder_id:opt=value". We always
  say ":fancy_upsampling=0|1" (earlier bindings defaulted to 0, 0.9 keeps each decoder's
  default). 1 is libjpeg's, so Pillow's, triangular chroma upsampling; 0 replicates chroma
  pixels, as DALI does by default. Measured on an H200, 500 ImageNet JPEGs, batch 256,
  8 threads: 0 decodes 14.5-16.9k images/s against 8.4-9.5k for 1 (the hardware engine is
  much slower with 1); against Pillow, 0 is off by 0.14 levels on average (worst image 4.4,
  single pixels up to 69 at sharp colour edges), 1 by under 0.001.

Known problems, and what this module does about them:

- NVIDIA/nvImageCodec#55 (open): 0.9.0 GPU JPEG ROI decoding via sub code streams fails on
  ordinary ROIs: INTERNAL_ERROR on A100, SIGSEGV on H100/B200 (seen through DALI). A failure
  is a fallback here; a crash is not catchable: `GpuDecoder(roi_decode=False)` decodes whole
  images and crops them on the GPU.
- NVIDIA/DALI#6344: with a non-trivial EXIF orientation nvImageCodec checks a ROI against the
  stored size while it outputs oriented pixels. We never let it orient: the ROI is mapped to
  stored coordinates as the CPU decoder maps it, and we transpose/flip on the GPU by the
  orientation our header parser read, as the CPU decoder does.
- libnvjpeg_ext 0.9.0 logs "ROI decode with fancy upsampling may produce wrong results on image
  edge (1 pixel wide) with nvJPEG < 13.2" and, with such an nvJPEG, declines ROI samples unless
  the option enable_roi_fancy_upsampling=1 is given: they would all fall back to the CPU.
- NVIDIA/nvImageCodec#50: some lossless JPEGs decode to zeros without an error. Lossless,
  12-bit and CMYK/YCCK JPEGs, truncated JPEGs (no end-of-image marker: nvJPEG may return grey
  rows where Pillow raises), other formats (nvImageCodec has only CPU decoders for them) and
  files over decode_region's pixel limit go straight to the CPU decoder, so their pixels and
  errors are exactly the CPU path's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from ..data.batch import ImageBatch
from ..data.threads import one_torch_thread
from ..data.views import DeviceViews
from . import nvimgcodec_alloc, nvimgcodec_c, nvimgcodec_executor
from .buffer_ring import BufferRing
from .gpu_available import gpu_decoder_available, gpu_decoder_missing, nvimgcodec_module
from .gpu_binding import BindingPath
from .gpu_fallback import CpuUpload, SampleDecodeError, decode_sample
from .gpu_plan import Planned, lane_settings, plan_job, split_by_pixels
from .gpu_views import Job, Row, as_views, slot_row, view_row
from .nvimgcodec_open import Slot
from .roi_probe import LAST_FAILURE, roi_decode_safe
from .steady import HighWater

__all__ = ["GpuDecoder", "gpu_decoder_available", "gpu_decoder_missing"]


class GpuDecoder(BindingPath):
    """Decodes batches of encoded images (regions of them) into one ImageBatch on a GPU.

    Args:
        device: the CUDA device ("cuda" is the current one).
        hw_fraction: share of the JPEGs of a batch given to the hardware JPEG decoder (A100,
            H100, ...), in [0, 1]; the rest go to the CUDA (hybrid) decoder, which also takes
            what the hardware one refuses (progressive JPEGs, for example). None: the
            Backend defaults (load hint 1: the hardware decoder takes every JPEG it can).
            0 leaves the hardware decoder out.
        num_cpu_threads: threads of nvImageCodec's executor (hybrid Huffman decoding, parsing)
            and of the CPU fallback decoder; >= 1.
        roi_decode: let nvImageCodec decode only each region (ROI code streams). False
            decodes whole images and crops them on the GPU: the workaround for
            NVIDIA/nvImageCodec#55 (see the module docstring). "auto" (default): region
            decoding if a probe in a child process (`roi_probe`) ran it cleanly on this GPU.
        fancy_upsampling: libjpeg's (Pillow's) triangular chroma upsampling, so that pixels
            match the CPU decoder's (True); or chroma by pixel replication (False, default,
            as DALI): about 1.7x the decoding rate, 0.14 grey levels off Pillow on average
            (see the module docstring).
        options: further nvImageCodec decoder options, passed verbatim after the upsampling
            one (see the module docstring).
        api: "c": nvImageCodec's C API through ctypes (`nvimgcodec_c`): decodes without the
            GIL, into one buffer pixelpipe owns; "python": its Python binding, whose decode
            stalls while other Python threads run (see nvimgcodec_c). "auto" (default): "c"
            when the installed library is a release whose structs pixelpipe mirrors.
        lanes: with the C API, how many nvImageCodec decoders this one drives, each with its
            own CUDA stream and num_cpu_threads // lanes executor threads (at least 1). A
            batch planned for one lane (`plan(lane=k)`; a Pipeline alternates them) decodes
            there while other lanes decode other batches on other threads; a batch planned
            with lane=None is split into parts of about equal pixel counts, one per lane,
            decoded at the same time. Default 1. The Python binding always uses one.
        lane_fractions: instead of equal lanes, one lane per given hardware share (as
            hw_fraction), each with num_cpu_threads executor threads; a caller chooses a
            batch's lane (`plan(lane=k)`), and a batch planned with lane=None decodes on the
            first. A Pipeline with `GpuDecoding(ahead_fraction=...)` uses two. Needs lanes=1.
        allocators: with the C API, hand nvImageCodec pixelpipe's device and pinned allocators
            with 32 MiB / 4 MiB of padding (`nvimgcodec_alloc`), so that its decoders' buffers
            stop growing (each growth waited for the whole device): its decode call alone
            measured 1.1-1.3x faster on H100s. True (default) where a C compiler and the CUDA
            runtime are there; False, or PIXELPIPE_NVIMGCODEC_ALLOCATORS=0, keeps nvImageCodec's
            own. `allocators_used` says which.
        decode_ahead: with the C API, each lane decodes on a native thread of its own, batch
            after batch in the order `plan` made them, starting each as soon as it is planned
            and the previous one is done (`nvimgcodec_queue`); `decode_views` waits for it.
            Without it, a batch starts when a Python thread asks, after waiting for the GIL.
            With it, a Pipeline's decoder ran 98-104% of the epoch (H100); in A/B
            rounds (taken before the planning thread's GIL time was cut) it was no faster.
            True (default) where it can be built; False, or PIXELPIPE_DECODE_AHEAD=0, decodes
            when asked. `decode_ahead_used` says which. A planned batch never decoded costs
            its decode; dropping it, or close(), cancels it if it has not started.
        executor: with the C API, nvImageCodec runs its per-image tasks on a thread pool of
            pixelpipe's (`nvimgcodec_executor`, one per lane) instead of its own executor; None
            (default): as PIXELPIPE_NVIMGCODEC_EXECUTOR says (off unless "pixelpipe": a
            Pipeline was timed no faster with it). `executor_used` says which.
        max_pixels: images whose header claims more pixels fail (a DecodeError naming the
            sample), as in decode_region. Images over 100M pixels go to the CPU decoder.
        steady_buffers: size each batch's buffers (decoded regions, CPU-decoded samples) from
            the largest batch so far plus 25% (`steady.HighWater`), the C API's lanes lending
            theirs from a ring of two (`buffer_ring.BufferRing`, lent again once the views'
            kernels ran), so that a pipeline's GPU memory is flat from its first batches; a
            buffer may then be up to twice its images. False (default): exact sizes, for
            batches a caller keeps. Compose (and so every Pipeline) turns it on.

    One decoder per device; reuse it for every batch. A lane decodes one batch at a time (a
    lock); batches planned for different lanes (`plan(lane=k)`) may decode on different
    threads at once, as a Pipeline with several lanes does.

    Example:
        >>> dec = GpuDecoder(torch.device("cuda"))  # doctest: +SKIP
        >>> batch, fell_back, why = dec.decode_regions(  # doctest: +SKIP
        ...     blobs, [(0, 0, 224, 224)] * len(blobs))
        >>> batch.device, batch[0].shape  # doctest: +SKIP
        (device(type='cuda', index=0), torch.Size([224, 224, 3]))
    """

    def __init__(
        self,
        device: torch.device,
        hw_fraction: float | None = None,
        num_cpu_threads: int = 8,
        *,
        roi_decode: bool | str = "auto",
        fancy_upsampling: bool = False,
        options: str = "",
        api: str = "auto",
        lanes: int = 1,
        allocators: bool = True,
        decode_ahead: bool = True,
        max_pixels: int = 100_000_000,
        steady_buffers: bool = False,
        lane_fractions: list[float | None] | None = None,
        executor: bool | None = None,
    ) -> None:
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"device must be a CUDA device ('cuda' or 'cuda:N'), got {device}")
        if hw_fraction is not None and not 0.0 <= hw_fraction <= 1.0:
            raise ValueError(f"hw_fraction must be None or in [0, 1], got {hw_fraction}")
        if num_cpu_threads < 1:
            raise ValueError(f"num_cpu_threads must be >= 1, got {num_cpu_threads}")
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be an int >= 1, got {lanes!r}")
        if max_pixels < 1:
            raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
        self.max_pixels = int(max_pixels)
        self.lane_fractions = None if lane_fractions is None else list(lane_fractions)
        settings = lane_settings(hw_fraction, num_cpu_threads, lanes, self.lane_fractions)  # checks them too
        nvc = nvimgcodec_module()
        if not torch.cuda.is_available():
            raise RuntimeError("GpuDecoder needs a CUDA device; torch.cuda.is_available() is False")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.hw_fraction = hw_fraction
        self.num_cpu_threads = num_cpu_threads
        self.fancy_upsampling = bool(fancy_upsampling)
        options = f":fancy_upsampling={int(self.fancy_upsampling)} {options}".strip()
        if roi_decode == "auto":
            roi_decode = roi_decode_safe(device.index, options)
            if not roi_decode:
                print("pixelpipe: nvImageCodec region decoding failed a probe on this GPU "
                      f"({LAST_FAILURE.get(device.index, '?')}; see NVIDIA/nvImageCodec#55); "
                      "decoding whole images and cropping them", file=sys.stderr)
        elif not isinstance(roi_decode, bool):
            raise ValueError(f'roi_decode must be True, False or "auto", got {roi_decode!r}')
        self.roi_decode = roi_decode
        self._nvc = nvc
        if api not in ("auto", "c", "python"):
            raise ValueError(f'api must be "auto", "c" or "python", got {api!r}')
        backends = settings[0][0]
        capi = nvimgcodec_c.load() if api != "python" else None
        alloc = nvimgcodec_alloc.allocators(device.index) if capi is not None and allocators else None
        ahead = decode_ahead and os.environ.get("PIXELPIPE_DECODE_AHEAD", "1") != "0"
        pool = nvimgcodec_executor.wanted() if executor is None else bool(executor)
        if api == "c" and capi is None:
            raise RuntimeError("nvImageCodec's C API is not usable here (pixelpipe mirrors the 0.9 "
                               "release's structs); use api='python'")
        self._c: list[nvimgcodec_c.CDecoder] = []  # the lanes (C API), each with a stream
        if capi is not None:  # decoding without the GIL, straight into pixelpipe's buffer
            try:
                for lane_backends, threads in settings:
                    self._c.append(nvimgcodec_c.CDecoder(capi, device.index, threads, lane_backends, options,
                                                         alloc, ahead, executor=pool))
            except RuntimeError as e:
                for made in self._c:
                    made.close()
                self._c = []
                if api == "c":
                    raise
                print(f"pixelpipe: nvImageCodec's C API failed ({e}); using its Python binding", file=sys.stderr)
        self.lanes = len(self._c) or 1
        if self._c:
            self._decoder: Any = self._c
        else:
            fixed = nvc.LoadHintPolicy.FIXED
            self._decoder = nvc.Decoder(
                device_id=device.index, max_num_cpu_threads=num_cpu_threads, options=options,
                backends=[nvc.Backend(getattr(nvc.BackendKind, kind)) if hint is None else
                          nvc.Backend(getattr(nvc.BackendKind, kind), load_hint=hint, load_hint_policy=fixed)
                          for kind, hint in backends])
            self._params = nvc.DecodeParams(color_spec=nvc.ColorSpec.SRGB,
                                            apply_exif_orientation=False, allow_any_depth=False)
        self.api = "c" if self._c else "python"
        self.allocators_used = bool(self._c) and alloc is not None
        self.decode_ahead_used = bool(self._c) and all(lane.ahead for lane in self._c)
        self.executor_used = bool(self._c) and all(lane.executor is not None for lane in self._c)
        # each lane decodes in its stream's order (its images are made at planning time, when
        # the caller's stream is not known yet); decode_views makes the caller's stream wait
        self._c_streams = [torch.cuda.Stream(device) for _ in self._c]
        self._lane_pool: ThreadPoolExecutor | None = None  # runs the lanes after the first
        self._pool: ThreadPoolExecutor | None = None  # the CPU decoder's threads
        self._upload_stream: torch.cuda.Stream | None = None  # their copies to the device
        self._steady = HighWater() if steady_buffers else None  # the CPU samples' device buffers
        for lane in self._c if steady_buffers else []:
            lane.steady = BufferRing()  # its batches' region buffers, lent again once read
        self._lock = threading.Lock()  # the binding's decodes, close()
        self._lane_locks = [threading.Lock() for _ in self._c]  # a lane decodes one batch at a time
        self._pools_lock = threading.Lock()  # making the thread pools
        self._free: list[Any] = []  # decoded images to decode into again (see _take_free)
        self._free_cap = 4096
        self._free_lock = threading.Lock()

    def close(self) -> None:
        """Release nvImageCodec's decoder and the CPU fallback threads."""
        with contextlib.ExitStack() as held:
            for lock in (self._lock, *self._lane_locks):  # no decode is running
                held.enter_context(lock)
            self._decoder = None
            for lane in self._c:
                lane.close()
            if self._c and self.allocators_used:
                nvimgcodec_alloc.trim(self.device.index)  # what the decoders freed goes back
            self._c = []
            with self._free_lock:
                self._free = []
            with self._pools_lock:  # _start_cpu refuses once _decoder is None
                pools, self._pool, self._lane_pool = (self._pool, self._lane_pool), None, None
            for pool in pools:
                if pool is not None:
                    pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return (f"GpuDecoder(device={self.device}, hw_fraction={self.hw_fraction}, "
                f"num_cpu_threads={self.num_cpu_threads}, roi_decode={self.roi_decode}, "
                f"fancy_upsampling={self.fancy_upsampling}, api={self.api!r}, lanes={self.lanes}, "
                f"allocators={self.allocators_used}, decode_ahead={self.decode_ahead_used}"
                + ("" if self.lane_fractions is None else f", lane_fractions={self.lane_fractions}") + ")")

    # ------------------------------------------------------------------------------ decoding
    def decode_regions(
        self,
        blobs: list[bytes],
        regions: list[tuple[int, int, int, int]] | None = None,
        stream: torch.cuda.Stream | None = None,
        *,
        exif: bool = True,
    ) -> tuple[ImageBatch, list[int], list[str]]:
        """Decode every blob (or only its region) as RGB, EXIF orientation applied, into one
        ImageBatch: `decode_views` followed by copying the samples into one buffer.

        Args:
            blobs: encoded images: JPEGs go to the GPU; PNG, WebP and BMP to the CPU decoder.
            regions: per sample (y0, x0, y1, x1), end-exclusive, in the full-resolution
                displayed image (after EXIF orientation), as `decode_region` takes them; None
                decodes whole images.
            stream: the CUDA stream all the work is ordered on (default: the device's current
                stream). The batch is ready in that stream's order; use it there, or
                synchronise, before reading it from another stream.

        Returns:
            (batch, fallback_indices, reasons): an ImageBatch on the device with 3 channels
            per sample, each the size of its region; the indices (ascending) of the samples
            decoded by the CPU decoder instead, and why, one reason per index.

        Raises:
            DecodeError: "sample i: ..." when neither decoder can decode sample i (the lowest
                such index of the CPU decoder's failures).
            ValueError: a region outside its image ("sample i: ..."), or a stream of another
                device.
            RuntimeError: nvImageCodec returned an image whose size is not the one the file
                header gives (names the sample).
        """
        views, fallback, reasons = self.decode_views(blobs, regions, stream, exif=exif)
        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            batch = views.contiguous()
            views.retire(stream)
        return batch, fallback, reasons

    def plan(
        self,
        blobs: list[bytes],
        regions: list[tuple[int, int, int, int]] | None = None,
        headers: list[Any] | None = None,
        *,
        exif: bool = True,
        lane: int | None = None,
    ) -> Planned:
        """The per-sample work of `decode_views` that needs no decoder: which samples go to
        nvImageCodec (and their code streams), which to the CPU decoder and why; those start
        decoding on the CPU decoder's threads here. A pipeline calls it on the planning
        thread, so that the decoding thread only decodes. lane: the
        decoder lane that decodes the whole batch (with the C API; batches planned for
        different lanes may decode on different threads at the same time); None splits the
        batch over every lane. Raises ValueError for a region outside its image ("sample i:
        ...") or a lane this decoder does not have, RuntimeError once the decoder is closed
        (also when close() runs on another thread meanwhile: it waits for an open batch to
        be made, then releases it)."""
        lanes = self._c  # close() empties self._c; the lanes refuse to open once closed
        if self._decoder is None:
            raise RuntimeError("this GpuDecoder was closed")
        n = len(blobs)
        if regions is not None and len(regions) != n:
            raise ValueError(f"got {len(regions)} regions for {n} blobs")
        if lane is not None and not 0 <= lane < self.lanes:
            raise ValueError(f"lane must be None or in [0, {self.lanes}), got {lane}")
        if lane is None and self.lane_fractions is not None:
            lane = 0  # lanes of different shares are chosen, never split over
        blobs = [b if isinstance(b, bytes) else bytes(b) for b in blobs]
        jobs: list[Job] = []
        why: dict[int, str] = {}  # sample -> reason it goes to the CPU decoder
        for i in range(n):
            job = plan_job(i, blobs[i], None if regions is None else regions[i],
                        self.roi_decode, None if headers is None else headers[i], exif, self.max_pixels)
            if isinstance(job, str):
                why[i] = job
            else:
                jobs.append(job)
        # files that go to the CPU anyway start decoding now, on its threads: a pipeline plans
        # ahead, so they are ready when the batch is decoded
        pending = self._start_cpu(blobs, regions, exif, sorted(why))
        if lanes:  # code streams, buffers and images made here, on the planning thread
            parts, rows = [], {}
            split = split_by_pixels(jobs, len(lanes)) if lane is None else [(lane, jobs)] if jobs else []
            for k, part in split:
                opened = lanes[k].open([blobs[job.index] for job in part], [job.region for job in part],
                                         [job.decoded_size for job in part], self._c_streams[k])
                rows.update({job.index: slot_row(job, slot.address) if type(slot) is Slot
                             else view_row(job, slot.__cuda_array_interface__, slot.strides)
                             for job, slot in zip(part, opened.slots) if not isinstance(slot, str)})
                parts.append((k, part, opened))
            return Planned(blobs, regions, exif, why, [job for _, part, _ in parts for job in part], parts,
                           pending, rows)
        streams, parents, decodable = self._code_streams(blobs, jobs, why)
        return Planned(blobs, regions, exif, why, decodable, streams + parents, pending)

    def decode_views(
        self,
        blobs: list[bytes],
        regions: list[tuple[int, int, int, int]] | None = None,
        stream: torch.cuda.Stream | None = None,
        headers: list[Any] | None = None,
        *,
        exif: bool = True,
        planned: Planned | None = None,
    ) -> tuple[DeviceViews, list[int], list[str]]:
        """As `decode_regions`, but the samples stay in nvImageCodec's buffers: a DeviceViews
        whose table points at each displayed region (orientation by strides, no copies). The
        kernels read it in place; call `views.retire(stream)` once they are enqueued.
        Samples decoded on the CPU are uploaded into one device buffer (asynchronously).
        headers: per blob, `parse_jpeg(blob, to_scan=True)` already done by the caller (or
        None: parsed here). planned: `plan(blobs, regions, headers, exif=exif)` done already
        (then blobs, regions, headers and exif are taken from it)."""
        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        elif stream.device != self.device:
            raise ValueError(f"stream is on {stream.device}, the decoder on {self.device}")
        if planned is None:
            planned = self.plan(blobs, regions, headers, exif=exif)
        n = len(planned.blobs)
        if n == 0:
            return DeviceViews(self.device, [], [], list), [], []
        why = dict(planned.why)
        # the C API: only the lanes this batch uses (another batch may decode on the others)
        locks = [self._lane_locks[k] for k, _, _ in planned.opened] if self._c else [self._lock]
        with contextlib.ExitStack() as held, torch.cuda.device(self.device), torch.cuda.stream(stream):
            for lock in locks:  # in lane order
                held.enter_context(lock)
            if self._decoder is None:
                raise RuntimeError("this GpuDecoder was closed")
            # files that go to the CPU anyway were started by plan(); those nvImageCodec fails start now
            early = planned.pending
            # the ring buffers' leases, taken before the decode (the next plan releases its batch)
            leases = [o.lease for _, _, o in planned.opened if o.lease is not None] if self._c else []
            on_gpu = self._decode_gpu(planned, stream, why)
            late = self._start_cpu(planned.blobs, planned.regions, planned.exif, sorted(why.keys() - early.samples))
            uploads = [early, late]
            unreadable: list[SampleDecodeError] = []  # all reported at once; any other error raises
            for i in sorted(why):
                try:
                    (early if i in early.samples else late).result(i)
                except SampleDecodeError as e:
                    unreadable.append(e)
            if unreadable:
                first = unreadable[0]
                raise SampleDecodeError(first.sample, first.reason, [(e.sample, e.reason) for e in unreadable[1:]])
            for upload in uploads:
                upload.into(stream)  # the stream waits for the copy
            views = as_views(n, on_gpu, uploads, self.device, None if self._c else self._recycle, leases)
        fallback = sorted(why)
        return views, fallback, [why[i] for i in fallback]

    def _decode_gpu(
        self, planned: Planned, stream: torch.cuda.Stream, why: dict[int, str],
    ) -> dict[int, tuple[Job, Any, Row]]:
        """nvImageCodec decodes the planned code streams; returns sample -> (job, nvImageCodec
        image or C-API slot, the DeviceViews row of its displayed region). Failures go into `why`."""
        if self._c:
            return self._decode_gpu_c(planned, stream, why)
        return self._decode_binding(planned, stream, why)

    def _decode_gpu_c(
        self, planned: Planned, stream: torch.cuda.Stream, why: dict[int, str],
    ) -> dict[int, tuple[Job, Any, Row]]:
        """As _decode_gpu, through the C API: every job into its slot of its lane's new
        buffer, the lanes at once (the first on this thread, the others on helper threads)."""
        parts = planned.opened
        if not parts:
            return {}
        assert self._c and planned.rows is not None  # plan() made the images and rows
        if len(parts) > 1:
            with self._pools_lock:
                if self._lane_pool is None:
                    self._lane_pool = ThreadPoolExecutor(len(self._c) - 1, thread_name_prefix="pixelpipe-decode-lane")
        # each run makes the caller's stream wait for its lane's pixels
        others = [self._lane_pool.submit(self._c[lane].run, opened, stream)  # type: ignore[union-attr]
                  for lane, _, opened in parts[1:]]
        try:  # each raises for a planned batch decoded before
            results = self._c[parts[0][0]].run(parts[0][2], stream)
        finally:  # no lane may still write into its buffer when this returns or raises
            for fut in others:
                fut.exception()
        for fut in others:
            results.extend(fut.result())
        out: dict[int, tuple[Job, Any, Row]] = {}
        for job, res in zip(planned.decodable, results):
            if isinstance(res, str):
                why[job.index] = res
            else:
                out[job.index] = (job, res, planned.rows[job.index])
        return out

    def _start_cpu(self, blobs: list[bytes], regions: list[tuple[int, int, int, int]] | None, exif: bool,
                   indices: list[int]) -> CpuUpload:
        """decode_region (libjpeg-turbo, Pillow) decodes `indices` on the CPU decoder's threads,
        and the last of them to finish copies them all to the device (`gpu_fallback.CpuUpload`,
        on the decoder's upload stream). Raises RuntimeError once the decoder is closed."""
        if not indices:
            return CpuUpload({}, self.device, None)
        with self._pools_lock:
            if self._decoder is None:
                raise RuntimeError("this GpuDecoder was closed")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.num_cpu_threads, initializer=one_torch_thread,
                                                thread_name_prefix="pixelpipe-gpu-fallback")
                self._upload_stream = torch.cuda.Stream(self.device)
            pool, stream = self._pool, self._upload_stream
        return CpuUpload({i: pool.submit(decode_sample, blobs, regions, exif, i, self.max_pixels) for i in indices},
                         self.device, stream, self._steady)

