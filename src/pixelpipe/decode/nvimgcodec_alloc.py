"""Device and pinned memory allocators for nvImageCodec, with the padding that lets its JPEG
decoders keep their buffers.

Why: nvImageCodec's JPEG decoders grow per-thread nvJPEG buffers (device and pinned) as images
need them. With nvImageCodec's default allocators the buffers are exactly as large as the
largest image seen so far, each growth is a cudaFree and cudaMalloc (cudaFree waits for the whole
device), and the padding options are ignored: nvjpeg_cuda_decoder sets its device padding to 0
unless it is given allocators. Given a device and a pinned allocator and a padding, every buffer
is rounded up to a multiple of the padding and almost never grows again. DALI passes its own.
Measured on H100s, nvImageCodec's decode call alone, images/s
in alternating rounds without / with these allocators (8 MiB device, 4 MiB pinned padding):
19.2k / 17.2k / 17.7k against 22.6k / 22.1k / 22.7k on one machine, 16.7k / 17.3k / 18.3k
against 18.8k / 20.1k / 20.5k on another (1.1-1.3x). With allocators but no padding: no gain.

Why 32 MiB of device padding : each executor thread's buffer grows to the
largest image that thread has met, so with 8 MiB steps nvImageCodec's memory kept growing for
epochs (8 threads, the ImageNet sample listed 10 times, rn50: 80 -> 136 MiB over 4 epochs, in
growths to 16 and 24 MiB, and the pool kept the blocks they left). With 32 MiB every buffer of
these images is made once, on the thread's first image: 256 MiB from the first batch on, flat
(H100). DALI's own default is 16 MiB.

Why both allocators, always: nvidia-nvimgcodec 0.9's nvjpeg_cuda_decoder reads the pinned
allocator's padding whenever a device allocator is given, without checking that a pinned one
is; a device allocator alone crashes `nvimgcodecDecoderCreate` (SIGSEGV, seen).

How: `native/alloc.c` (compiled on first use, like the C planner) holds the four functions
nvImageCodec calls from its threads. They forward to the CUDA runtime the process already
loaded (torch's libcudart, `cudart.runtime()`): device memory from a memory pool of
pixelpipe's own, one per device, in stream order (cudaMallocFromPoolAsync / cudaFreeAsync: no
device-wide synchronisation, whatever the calling thread's current device), pinned memory
portable (cudaHostAlloc / cudaFreeHost). `counts()` gives how many calls of each kind
nvImageCodec made, with the frees that name no stream apart: a device free ordered on the legacy
default stream (NULL) is not ordered after work on nvImageCodec's own non-blocking streams, and
a pinned free that names a stream frees at once a buffer a copy queued there may still read
(an illegal memory access in one ssd bench run is not explained yet; these counts say whether
either kind happens). The pool keeps what is freed for the next allocation
(release threshold: unlimited; with the default of 0 it would hand its memory back to the driver
at every synchronisation and map it again for the next batch). `trim(device_index)`, which
GpuDecoder.close() calls, returns the unused part to the driver. The device's default pool, which
other code may use, is left alone.

`allocators(device_index)` gives None, and nvImageCodec keeps its defaults, where the runtime or
a C compiler is missing, or with PIXELPIPE_NVIMGCODEC_ALLOCATORS=0 in the environment.
"""

from __future__ import annotations

import ctypes as C
import os
import threading
from dataclasses import dataclass

from .. import native
from . import cudart
from .nvimgcodec_structs import ST_DEVICE_ALLOCATOR, ST_PINNED_ALLOCATOR, DeviceAllocator, PinnedAllocator

__all__ = ["COUNTS", "DEVICE_PADDING", "PINNED_PADDING", "Allocators", "allocators", "counts", "pool_usage", "trim"]

DEVICE_PADDING = 32 << 20  # bytes: device buffers grow in steps of this (see the module docstring)
PINNED_PADDING = 4 << 20  # bytes: pinned host buffers grow in steps of this
_POOL_PROPS_BYTES = 256  # cudaMemPoolProps is 88 bytes in CUDA 12 and 13: room to spare, zeroed
_ATTR_RELEASE_THRESHOLD = 4  # cudaMemPoolAttrReleaseThreshold
_ATTR_RESERVED, _ATTR_USED_HIGH = 5, 8  # cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrUsedMemHigh
RUNTIME_FUNCTIONS = ("cudaMallocFromPoolAsync", "cudaFreeAsync", "cudaHostAlloc", "cudaFreeHost")  # pp_alloc_set's
COUNTS = ("device_mallocs", "device_frees", "device_frees_null_stream", "pinned_mallocs", "pinned_frees",
          "pinned_frees_on_a_stream")  # pp_alloc_counts's, in its order; each kind of free counted once:
# device frees on a stream / on NULL, pinned frees naming no stream / naming one


@dataclass
class Allocators:
    """The two allocator structs for one device, to put in nvimgcodecExecutionParams_t. They and
    the pool handle they point to live as long as the process (nvImageCodec keeps the pointers)."""

    device: DeviceAllocator
    pinned: PinnedAllocator
    pool: C.c_void_p
    runtime: C.CDLL

    def addresses(self) -> tuple[int, int]:
        return C.addressof(self.device), C.addressof(self.pinned)


_LOCK = threading.Lock()
_MADE: dict[int, Allocators | None] = {}


def allocators(device_index: int) -> Allocators | None:
    """The allocators for CUDA device `device_index` (made once per process), or None where
    the CUDA runtime or the shim is not available, or PIXELPIPE_NVIMGCODEC_ALLOCATORS=0
    (nvImageCodec then uses its own)."""
    if os.environ.get("PIXELPIPE_NVIMGCODEC_ALLOCATORS", "1") == "0":
        return None
    with _LOCK:
        if device_index not in _MADE:
            _MADE[device_index] = _make(device_index)
        return _MADE[device_index]


def trim(device_index: int) -> None:
    """Hand the memory the device's pool holds but no decoder uses back to the driver (after
    the device has finished the work that freed it)."""
    with _LOCK:
        made = _MADE.get(device_index)
    if made is not None:
        import torch

        torch.cuda.synchronize(device_index)
        made.runtime.cudaMemPoolTrimTo(made.pool, C.c_size_t(0))


def pool_usage(device_index: int) -> tuple[int, int] | None:
    """(bytes the device's pool holds now, the most its allocations ever used at once): what
    nvImageCodec's decoders took on `device_index` outside torch; None without the pool."""
    with _LOCK:
        made = _MADE.get(device_index)
    if made is None:
        return None
    out = []
    for attr in (_ATTR_RESERVED, _ATTR_USED_HIGH):
        value = C.c_uint64(0)
        if made.runtime.cudaMemPoolGetAttribute(made.pool, C.c_int(attr), C.byref(value)) != 0:
            made.runtime.cudaGetLastError()
            return None
        out.append(int(value.value))
    return out[0], out[1]


def counts() -> dict[str, int] | None:
    """How many calls of each kind (`COUNTS`) nvImageCodec has made to these allocators in this
    process, all devices together; None where they were never made."""
    with _LOCK:
        if not any(made is not None for made in _MADE.values()):
            return None
    shim = _shim()
    if shim is None:
        return None
    out = (C.c_ulonglong * len(COUNTS))()
    shim.pp_alloc_counts(out)
    return dict(zip(COUNTS, (int(v) for v in out)))


def _shim() -> C.CDLL | None:
    # CDLL: nvImageCodec calls these from its own threads, without the GIL
    return native.shared("alloc.c", "nvImageCodec allocates with its own defaults, not pixelpipe's allocators",
                         signatures={"pp_alloc_set": (None, [C.c_void_p] * len(RUNTIME_FUNCTIONS)),
                                     "pp_alloc_counts": (None, [C.c_void_p])})


def _make(device_index: int) -> Allocators | None:
    rt = cudart.runtime()
    shim = _shim()
    if rt is None or shim is None:
        return None
    try:
        native.wire(shim, "pp_alloc_set", rt, RUNTIME_FUNCTIONS)
    except AttributeError:
        return None
    pool = _pool(rt, device_index)
    if pool is None:
        return None
    device = DeviceAllocator(ST_DEVICE_ALLOCATOR, C.sizeof(DeviceAllocator), None,
                             C.cast(shim.pp_device_malloc, C.c_void_p), C.cast(shim.pp_device_free, C.c_void_p),
                             C.addressof(pool), DEVICE_PADDING)
    pinned = PinnedAllocator(ST_PINNED_ALLOCATOR, C.sizeof(PinnedAllocator), None,
                             C.cast(shim.pp_pinned_malloc, C.c_void_p), C.cast(shim.pp_pinned_free, C.c_void_p),
                             None, PINNED_PADDING)
    return Allocators(device, pinned, pool, rt)


def _pool(rt: C.CDLL, device_index: int) -> C.c_void_p | None:
    """A new stream-ordered pool of device memory on the device that keeps what is freed."""
    # cudaMemPoolProps: allocType (cudaMemAllocationTypePinned = 1), handleTypes (none = 0),
    # location {type (cudaMemLocationTypeDevice = 1), id}; every later field 0 (the defaults)
    props = (C.c_int * (_POOL_PROPS_BYTES // 4))()
    props[0], props[1], props[2], props[3] = 1, 0, 1, device_index
    pool = C.c_void_p()
    if rt.cudaMemPoolCreate(C.byref(pool), C.byref(props)) != 0 or not pool:
        rt.cudaGetLastError()  # clear the error for torch's next check
        return None
    keep = C.c_uint64(2**64 - 1)
    if rt.cudaMemPoolSetAttribute(pool, C.c_int(_ATTR_RELEASE_THRESHOLD), C.byref(keep)) != 0:
        rt.cudaGetLastError()
        rt.cudaMemPoolDestroy(pool)
        return None
    return pool
