"""nvImageCodec's C API through ctypes: a batch of JPEG regions decoded into one torch buffer.

Why not the Python binding: its `Decoder.decode` takes the GIL back about twice per image while
it decodes. Measured on an H200 host (256 ImageNet JPEGs, 8 threads), one decode took 18-20 ms
alone. Beside a thread running a pure-Python loop it took 2.2 s, because every one of those GIL
hand-overs waited out the interpreter's 5 ms switch interval; in a pipeline, the planning and
kernel threads cost it 25-50%. Called through ctypes, `nvimgcodecDecoderDecode` and the wait
run without the GIL, and the per-image calls around them are quick calls that keep it. The
same 256 regions then took 18.5 ms alone and 32 ms beside the busy loop, with pixels equal to
the binding's (mean difference 0.0). The decoder writes straight into a buffer pixelpipe owns,
one slot per sample, so no nvImageCodec-owned image outlives the call.

Relied on, from `nvimgcodec.h` of nvidia-nvimgcodec-cu13 0.9.0 (shipped in the wheel): the
struct layouts below (each starts with struct_type, struct_size, struct_next), the structure
type numbers, NVIMGCODEC_VER = major * 1000 + minor * 100 + patch (`nvimgcodecGetProperties`),
regions only through `nvimgcodecCodeStreamGetSubCodeStream` (a view given at creation is refused),
and processing status 1 = success. Other library versions are not trusted with these layouts:
`load()` returns None for them and GpuDecoder keeps the Python binding.
"""

from __future__ import annotations

import collections
import ctypes as C
import importlib.util
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import nvimgcodec_executor, nvimgcodec_open, nvimgcodec_queue
from . import nvimgcodec_structs as S
from .buffer_ring import BufferRing, Lease
from .nvimgcodec_open import Slot
from .pinned_staging import PinnedStaging, staging_wanted

__all__ = ["CDecoder", "Opened", "Slot", "load", "package_dir"]

_P = C.c_void_p


@dataclass
class _Api:
    free: C.CDLL  # calls that release the GIL (decode, wait)
    held: C.PyDLL  # quick calls that keep it
    extensions: str
    batch: Any = None  # native/decode.c's pp_decode_batch (a batch in one call), or None


DECODE_SIGNATURES = {  # native/decode.c
    "pp_decode_set": (None, [_P] * 4),
    "pp_decode_batch": (C.c_int, [_P, _P, _P, C.c_int, _P, _P, C.POINTER(C.c_size_t), _P, C.POINTER(C.c_int)]),
}
DECODE_FUNCTIONS = ("nvimgcodecDecoderDecode", "nvimgcodecFutureWaitForAll", "nvimgcodecFutureGetProcessingStatus",
                    "nvimgcodecFutureDestroy")  # pp_decode_set's


def _batch_call(free: C.CDLL) -> Any:
    """native/decode.c wired to the library, or None without a C compiler (then `_run` makes
    the same calls one by one through ctypes: its twin)."""
    from .. import native

    lib = native.shared("decode.c", "nvImageCodec's decode steps called one by one from Python",  # CDLL: no GIL
                        signatures=DECODE_SIGNATURES)
    return None if lib is None else native.wire(lib, "pp_decode_set", free, DECODE_FUNCTIONS).pp_decode_batch


def package_dir() -> str | None:
    """The folder of the installed nvidia.nvimgcodec package (its library, extensions and
    include/), or None where it is not installed."""
    try:
        spec = importlib.util.find_spec("nvidia.nvimgcodec")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


_LOADED: list[_Api | None] = []
_LOAD_LOCK = threading.Lock()


def load() -> _Api | None:
    """The library of the installed nvidia-nvimgcodec wheel, if it is a 0.9 release (whose
    struct layouts this module mirrors); None otherwise. Cached."""
    with _LOAD_LOCK:
        if not _LOADED:
            _LOADED.append(_load())
        return _LOADED[0]


def _load() -> _Api | None:
    base = package_dir()
    if base is None:
        return None
    path = os.path.join(base, "libnvimgcodec.so.0")
    if not os.path.isfile(path):
        return None
    try:
        free, held = C.CDLL(path), C.PyDLL(path)
    except OSError:
        return None
    for lib in (free, held):
        lib.nvimgcodecGetProperties.argtypes = [C.POINTER(S.Properties)]
        lib.nvimgcodecInstanceCreate.argtypes = [C.POINTER(_P), C.POINTER(S.InstanceCreateInfo)]
        lib.nvimgcodecInstanceDestroy.argtypes = [_P]
        lib.nvimgcodecDecoderCreate.argtypes = [_P, C.POINTER(_P), C.POINTER(S.ExecutionParams), C.c_char_p]
        lib.nvimgcodecDecoderDestroy.argtypes = [_P]
        lib.nvimgcodecCodeStreamCreateFromHostMem.argtypes = [_P, C.POINTER(_P), C.c_char_p, C.c_size_t, _P]
        lib.nvimgcodecCodeStreamGetSubCodeStream.argtypes = [_P, C.POINTER(_P), C.POINTER(S.CodeStreamView)]
        lib.nvimgcodecCodeStreamDestroy.argtypes = [_P]
        lib.nvimgcodecImageCreate.argtypes = [_P, C.POINTER(_P), C.POINTER(S.ImageInfo)]
        lib.nvimgcodecImageDestroy.argtypes = [_P]
        lib.nvimgcodecDecoderDecode.argtypes = [_P, C.POINTER(_P), C.POINTER(_P), C.c_int,
                                                C.POINTER(S.DecodeParams), C.POINTER(_P)]
        lib.nvimgcodecFutureWaitForAll.argtypes = [_P]
        lib.nvimgcodecFutureGetProcessingStatus.argtypes = [_P, C.POINTER(C.c_uint32), C.POINTER(C.c_size_t)]
        lib.nvimgcodecFutureDestroy.argtypes = [_P]
    props = S.make(S.Properties, S.ST_PROPERTIES)
    if held.nvimgcodecGetProperties(C.byref(props)) != 0 or not 900 <= props.version < 1000:
        return None
    return _Api(free, held, os.path.join(base, "extensions"), _batch_call(free))


class Opened:
    """One batch prepared by `CDecoder.open`: per blob a code stream or why there is none and,
    once `sizes` and a stream were given, the output buffer, one nvImageCodec image per
    decodable blob (its slot of the buffer) and the slots. Holds the blobs (nvImageCodec reads
    them while it decodes). Released once, by the decoder (see `CDecoder.decode`)."""

    def __init__(self, owner: CDecoder, blobs: list[bytes]) -> None:
        # bytes (nvImageCodec reads them while it decodes): a copy only of what is not bytes
        self.owner, self.blobs = owner, [b if type(b) is bytes else bytes(b) for b in blobs]
        self.streams: list[Any] = []  # per blob: a code stream handle, or why there is none
        self.handles: list[Any] = []  # code streams to destroy
        self.images: list[Any] = []  # images to destroy
        self.buffer: torch.Tensor | None = None
        self.lease: Lease | None = None  # the buffer's, where a lane's ring lent it (the views retire it)
        self.stream: torch.cuda.Stream | None = None  # the images decode in its order
        self.slots: list[Slot | str] = []  # per blob: its slot, or why it has none
        self.ok: list[int] = []  # blobs with a code stream and an image, in batch order
        self.batch: tuple[Any, Any] | None = None  # (code streams, images) as C arrays of len(ok)
        self.ticket: nvimgcodec_queue.Ticket | None = None  # submitted to the decoder's queue
        self.native: tuple[Any, ...] | None = None  # native/open.c's handles (nvimgcodec_open.release)
        self.staging: torch.Tensor | None = None  # the pinned copy of the blobs the code streams read
        self.released = False
        self.decoded = False  # `CDecoder.run` ran (a batch decodes once)

    def release(self) -> None:
        owner = self.owner
        with owner._open_lock:
            if self.released:
                return
            self.released = True
            owner._opened.discard(self)
            ticket, self.ticket = self.ticket, None
        decoded = None if ticket is None else ticket.event  # completes once the batch is decoded
        if ticket is not None:  # queued: cancelled; decoding: waited for (it writes the buffer)
            ticket.retire()
        with owner._open_lock:  # close() cannot destroy the instance meanwhile
            handles, images, self.handles, self.images = self.handles, self.images, [], []
            # the slots handed out hold the buffer; this batch's own references go
            self.buffer, self.batch, self.slots, self.ok = None, None, [], []
            native, self.native = self.native, None
            if native is not None and owner._instance:
                nvimgcodec_open.release(*native)
            if owner._instance:
                held = owner._api.held
                for img in images:
                    held.nvimgcodecImageDestroy(img)
                for h in reversed(handles):
                    held.nvimgcodecCodeStreamDestroy(h)
            staging, self.staging = self.staging, None
            if staging is not None and owner.staging is not None:  # reused once the stream's work is done
                owner.staging.give(staging, self.stream, decoded)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass


class CDecoder:
    """An nvImageCodec instance and decoder driven through the C API (see the module docstring).
    `decode` calls are serialised by GpuDecoder; `open` (the planning thread's part) may run
    beside a `decode` of another batch."""

    steady: BufferRing | None = None  # lends the batch buffers (GpuDecoder's steady_buffers)

    def __init__(self, api: _Api, device_index: int, num_cpu_threads: int,
                 backends: list[tuple[str, float | None]], options: str, allocators: Any = None,
                 ahead: bool = False, executor: bool = False) -> None:
        """backends: (BackendKind name, load hint or None for the default), in order.
        allocators: `nvimgcodec_alloc.Allocators` for the device (kept alive by the caller
        for as long as the decoder lives), or None for nvImageCodec's defaults. ahead: decode
        each batch on a native thread (`nvimgcodec_queue`) as soon as `open` has made its
        images, in the order they were opened; `run` then waits for it. `self.ahead` says
        whether the queue runs (it needs native/decode.c, native/queue.c and torch's CUDA
        runtime). executor: nvImageCodec's tasks on a pool of pixelpipe's (`nvimgcodec_executor`,
        `self.executor`; None where it cannot be built) instead of its default executor."""
        self._api = api
        info = S.make(S.InstanceCreateInfo, S.ST_INSTANCE)
        info.load_builtin_modules, info.load_extension_modules = 1, 1
        info.extension_modules_path = api.extensions.encode()
        self._instance = _P()
        _check(api.held.nvimgcodecInstanceCreate(C.byref(self._instance), C.byref(info)), "creating an instance")
        self._backends = (S.Backend * len(backends))()
        for b, (kind, hint) in zip(self._backends, backends):
            b.struct_type, b.struct_size = S.ST_BACKEND, C.sizeof(S.Backend)
            b.kind = S.KINDS[kind]
            b.params.struct_type, b.params.struct_size = S.ST_BACKEND_PARAMS, C.sizeof(S.BackendParams)
            b.params.load_hint = 1.0 if hint is None else hint
            b.params.load_hint_policy = S.POLICY_IGNORE if hint is None else S.POLICY_FIXED
        ex = S.make(S.ExecutionParams, S.ST_EXECUTION)
        ex.max_num_cpu_threads, ex.device_id, ex.pre_init = num_cpu_threads, device_index, 1
        ex.num_backends, ex.backends = len(backends), self._backends
        if allocators is not None:
            ex.device_allocator, ex.pinned_allocator = allocators.addresses()
        self.allocators = allocators
        self.executor = nvimgcodec_executor.make(num_cpu_threads, device_index) if executor else None
        if self.executor is not None:
            ex.executor = self.executor.address()
        self._decoder = _P()
        status = api.free.nvimgcodecDecoderCreate(self._instance, C.byref(self._decoder), C.byref(ex),
                                                  options.encode())
        if status != 0:
            api.held.nvimgcodecInstanceDestroy(self._instance)
            if self.executor is not None:
                self.executor.close()
            _check(status, "creating a decoder")
        self._params = S.make(S.DecodeParams, S.ST_DECODE_PARAMS)
        self._params.apply_exif_orientation = 0
        # Held by open() from start to end, by a release's destroys and by close(): the
        # instance is not destroyed while another thread makes or destroys its handles.
        # Reentrant: an Opened dropped (and released in __del__) while this thread holds it.
        self._open_lock = threading.RLock()
        # open batches not released yet; weak, so that a batch planned and then dropped
        # (a pipeline stopped between planning and decoding) releases its own in Opened.__del__
        self._opened: weakref.WeakSet[Opened] = weakref.WeakSet()
        # decoded batches whose handles the next open() releases; appended by run() without
        # the lock (a deque's append and popleft are atomic), so that a decode's end never
        # waits for an open() in progress on the planning thread
        self._decoded: collections.deque[Opened] = collections.deque()
        self.native_batch = True  # decode a batch in one native call where native/decode.c was built
        self.native_open = True  # open a batch in one native call where native/open.c was built
        # the blobs copied into pinned memory by the native open (pinned_staging.py); None: read in place
        self.staging: PinnedStaging | None = PinnedStaging() if staging_wanted() else None
        self.last_times: tuple[float, float, float] | None = None  # see _run
        self._queue = nvimgcodec_queue.start(api.batch, device_index) if ahead else None
        self.ahead = self._queue is not None

    def close(self) -> None:
        """Release every open batch, stop the queue, destroy the decoder and the instance. Safe
        beside an open() or a release on another thread: it waits for them (the lock)."""
        with self._open_lock:
            pending = list(self._opened) + _drain(self._decoded)
            for opened in pending:  # code streams and images belong to the instance: first
                opened.release()
            if self._queue is not None:  # its thread stops before the decoder goes
                self._queue.close()
                self._queue = None
            if self._decoder:
                self._api.held.nvimgcodecDecoderDestroy(self._decoder)
                self._decoder = _P()
            if getattr(self, "executor", None) is not None:  # its workers stop after the decoder is gone
                self.executor.close()
            if self._instance:
                self._api.held.nvimgcodecInstanceDestroy(self._instance)
                self._instance = _P()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def open(self, blobs: list[bytes], boxes: list[tuple[int, int, int, int] | None],
             sizes: list[tuple[int, int]] | None = None, stream: torch.cuda.Stream | None = None) -> Opened:
        """Code streams for blobs[k] (a region view of its box of the stored image, or the
        whole image for None) and, given `sizes` (the (h, w) each gives) and the stream to
        decode on, the output buffer and images: every per-image call of a decode, which a
        pipeline makes on its planning thread. Pass the result to `decode`. Raises
        RuntimeError once the decoder is closed (close() on another thread waits for it)."""
        with self._open_lock:
            if not self._decoder:
                raise RuntimeError("this decoder was closed")
            for old in _drain(self._decoded):  # the handles of batches decoded since the last call
                old.release()
            opened = Opened(self, blobs)
            self._opened.add(opened)
            if sizes is not None and stream is not None:
                native = nvimgcodec_open.library(self._api) if self.native_open else None
                if native is not None:  # every per-image call in one, without the GIL
                    nvimgcodec_open.open_batch(native, self, self._instance, opened, boxes, sizes, stream)
                else:
                    self._code_streams(opened, boxes)
                    self._images(opened, sizes, stream)
                opened.ticket = self._submit(opened)
            else:
                self._code_streams(opened, boxes)
            return opened

    def _code_streams(self, opened: Opened, boxes: list[tuple[int, int, int, int] | None]) -> None:
        """A code stream per blob (or why there is none), call by call: native/open.c's twin."""
        held = self._api.held
        view = S.view_template()
        for k, blob in enumerate(opened.blobs):
            parent = _P()
            if held.nvimgcodecCodeStreamCreateFromHostMem(self._instance, C.byref(parent), blob, len(blob), None) != 0:
                opened.streams.append("nvImageCodec cannot parse it")
                continue
            opened.handles.append(parent)
            if boxes[k] is None:
                opened.streams.append(parent)
                continue
            y0, x0, y1, x1 = boxes[k]  # type: ignore[misc]
            view.region.start[0], view.region.start[1] = y0, x0
            view.region.end[0], view.region.end[1] = y1, x1
            sub = _P()
            if held.nvimgcodecCodeStreamGetSubCodeStream(parent, C.byref(sub), C.byref(view)) != 0:
                opened.streams.append(f"nvImageCodec refused the region {boxes[k]}")
                continue
            opened.handles.append(sub)
            opened.streams.append(sub)

    def _images(self, opened: Opened, sizes: list[tuple[int, int]], stream: torch.cuda.Stream) -> None:
        """The buffer (allocated in `stream`'s order) and an image per code stream, one slot
        each, call by call: native/open.c's twin."""
        offsets, buffer, opened.lease = nvimgcodec_open.output_buffer(
            np.array(sizes, dtype=np.int64).reshape(-1, 2), stream, self.steady)
        addresses = (offsets + buffer.data_ptr()).tolist()
        held = self._api.held
        info = S.info_template(stream.cuda_stream)
        p = info.plane_info[0]
        n = len(opened.blobs)
        streams, images = (_P * n)(), (_P * n)()
        slots: list[Slot | str] = [""] * n
        ok: list[int] = []
        for k in range(n):
            cs = opened.streams[k]
            if isinstance(cs, str):
                slots[k] = cs
                continue
            h, w = sizes[k]
            p.width, p.height, p.row_stride = w, h, w * 3
            info.buffer = addresses[k]
            img = _P()
            if held.nvimgcodecImageCreate(self._instance, C.byref(img), C.byref(info)) != 0:
                slots[k] = "nvImageCodec could not describe its output"
                continue
            opened.images.append(img)
            streams[len(ok)], images[len(ok)] = cs, img
            ok.append(k)
            slots[k] = Slot(buffer, addresses[k], h, w)
        opened.buffer, opened.stream, opened.slots, opened.ok = buffer, stream, slots, ok
        opened.batch = (streams, images)

    def _submit(self, opened: Opened) -> Any:
        """The batch (its images made) queued for the decoder's thread, with an event recorded
        on its stream once it is decoded; None where there is no queue (or native_batch is off),
        nothing to decode, or the queue refused it: `run` then decodes it itself."""
        if self._queue is None or not self.native_batch or not opened.ok:
            return None
        assert opened.batch is not None and opened.stream is not None
        event = torch.cuda.Event()
        event.record(opened.stream)  # makes the CUDA event; the queue's thread records it again
        return self._queue.submit(self._decoder, *opened.batch, len(opened.ok), self._params, event,
                                  opened.stream.cuda_stream)

    def decode(self, blobs: list[bytes], boxes: list[tuple[int, int, int, int] | None],
               sizes: list[tuple[int, int]], stream: torch.cuda.Stream,
               opened: Opened | None = None) -> tuple[list[Slot | str], torch.Tensor]:
        """Decode blobs[k] (its box (y0, x0, y1, x1) of the stored image, or the whole image
        for None; sizes[k] is the (h, w) that gives) as interleaved RGB into one uint8 buffer
        allocated on `stream`, in `stream`'s order. opened: `open(blobs, boxes[, sizes,
        stream])` done already. Returns per blob a Slot, or why it failed, and the buffer.
        Only the decode itself runs here (without the GIL) when `open` made the images."""
        if not self._decoder:
            raise RuntimeError("this decoder was closed")
        if opened is None or opened.released:
            opened = self.open(blobs, boxes, sizes, stream)
        elif opened.stream is None or opened.stream.cuda_stream != stream.cuda_stream:
            if opened.images or opened.native is not None:
                raise ValueError("this batch's images were made for another stream")
            self._images(opened, sizes, stream)
        buffer = opened.buffer
        assert buffer is not None
        return self.run(opened), buffer

    def run(self, opened: Opened, then: torch.cuda.Stream | None = None) -> list[Slot | str]:
        """Decode a batch `open` made the images of (given sizes and a stream): per blob its
        Slot, or why it failed. The only call of a decode that a pipeline's decode thread makes;
        the batch's handles are released by the next `open`. A batch decodes once. With the
        queue (ahead), the batch was submitted by `open`: this waits for it. then: a stream
        made to wait here for this batch's pixels (without the queue, for the open stream's
        work so far)."""
        if not self._decoder:
            raise RuntimeError("this decoder was closed")
        if opened.released or opened.batch is None or opened.decoded:
            raise ValueError("this batch was decoded already, or open() made no images for it")
        opened.decoded = True
        try:
            out = list(opened.slots)
            if opened.ok:
                streams, images = opened.batch
                if opened.ticket is None:
                    # opened without a stream, then given one: through the queue too, so that
                    # no decode runs on this thread beside the queue's (one decoder, one caller)
                    opened.ticket = self._submit(opened)
                if opened.ticket is not None:
                    status = self._collect(opened.ticket, len(opened.ok))
                    if then is not None:
                        then.wait_event(opened.ticket.event)
                else:
                    status = self._run(streams, images, len(opened.ok))
                    if then is not None:
                        assert opened.stream is not None
                        then.wait_stream(opened.stream)
                for j, k in enumerate(opened.ok):
                    if status[j] != S.SUCCESS:
                        name = S.STATUS_NAMES.get(status[j], "unknown reason")
                        out[k] = f"nvImageCodec could not decode it (status {status[j]:#x}: {name})"
        finally:  # released by the next open(), on the planning thread
            self._decoded.append(opened)
        return out

    def _run(self, streams: Any, images: Any, n: int) -> list[int]:
        """The processing status of each of the n images: in one native call (native/decode.c)
        where it was built, else call by call (`_run_steps`, its twin). `last_times` keeps
        (issued, waited, back) in time.perf_counter seconds: when the decode was issued, when
        the wait ended, and when this thread held the GIL again (benchmarks/
        gpu_pipeline_threads.py reports them). One call instead of four takes the GIL back
        once per batch instead of twice; a Pipeline measured no faster for it (H100:
        the wait that matters, after the decode, remains), nor with a shorter switch
        interval, which cut that wait from 9-20% to 2-3% of an epoch."""
        status = (C.c_uint32 * n)()
        size = C.c_size_t(n)
        batch = self._api.batch
        if batch is None or not self.native_batch:
            self._run_steps(streams, images, n, status, size)
        else:
            self._run_native(batch, streams, images, n, status, size)
        return _statuses(status, size, n)

    def _run_native(self, batch: Any, streams: Any, images: Any, n: int, status: Any, size: C.c_size_t) -> None:
        times = (C.c_double * 2)()
        failure = C.c_int(0)
        step = batch(self._decoder, streams, images, n, C.byref(self._params), status, C.byref(size), times,
                     C.byref(failure))
        self._stepped(step, failure, times)

    def _collect(self, ticket: Any, n: int) -> list[int]:
        """As `_run`, for a batch submitted to the queue: waits for it (without the GIL)."""
        self._stepped(ticket.wait(), ticket.failure, ticket.times)
        return _statuses(ticket.status, ticket.size, n)

    def _stepped(self, step: int, failure: C.c_int, times: Any) -> None:
        """After decode.c's call (directly or on the queue's thread): keep its timestamps
        (`last_times`), raise for the step that failed (or a batch the queue cancelled)."""
        self.last_times = (times[0], times[1], time.perf_counter())
        if step == nvimgcodec_queue.CANCELLED:
            raise RuntimeError("this batch's decode was cancelled (its decoder was closed)")
        if step:
            _check(failure.value, nvimgcodec_queue.STEPS[step])

    def _run_steps(self, streams: Any, images: Any, n: int, status: Any, size: C.c_size_t) -> None:
        free, held = self._api.free, self._api.held
        future = _P()
        _check(free.nvimgcodecDecoderDecode(self._decoder, streams, images, n, C.byref(self._params),
                                            C.byref(future)), "decoding")
        try:
            _check(free.nvimgcodecFutureWaitForAll(future), "waiting for the decode")
            _check(held.nvimgcodecFutureGetProcessingStatus(future, status, C.byref(size)), "reading the statuses")
        finally:
            held.nvimgcodecFutureDestroy(future)


def _drain(batches: collections.deque[Opened]) -> list[Opened]:
    """Everything in `batches`, taken out one by one (safe beside another thread's append)."""
    out = []
    while True:
        try:
            out.append(batches.popleft())
        except IndexError:
            return out


def _statuses(status: Any, size: C.c_size_t, n: int) -> list[int]:
    if size.value != n:
        raise RuntimeError(f"nvImageCodec reported {size.value} statuses for {n} images")
    return list(status[:n])


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"nvImageCodec C API: {what} failed (status {status})")
