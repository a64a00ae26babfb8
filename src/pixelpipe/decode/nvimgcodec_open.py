"""A batch's nvImageCodec code streams, region views and images made in one native call
(native/open.c), and released in one.

Why: `CDecoder.open` made them with three library calls per image from Python, on a GPU
Pipeline's planning thread, holding the GIL: about 4.7 ms per batch of 256 on an H100, while the Pipeline's threads were bound by the GIL (caching the JPEG
header parses, 2.4 ms of Python per batch, made the rn50 Pipeline 1.4x faster). open.c makes
the same calls in one ctypes call that releases the GIL.

The per-image calls one by one (`CDecoder._code_streams` and `_images`) stay as the twin, used
where open.c cannot be built or `CDecoder.native_open` is False; both give the same slots and
reasons, and the same pixels (tests/test_native_open.py, tests/test_decode_gpu_native.py).
"""

from __future__ import annotations

import ctypes as C
import threading
from typing import Any

import numpy as np
import torch

from ..native.pointers import bytes_pointers
from . import nvimgcodec_structs as S
from .buffer_ring import BufferRing, Lease
from .pinned_staging import staged_size

__all__ = ["library", "open_batch", "output_buffer", "release"]

_P = C.c_void_p
_WIRED: list[C.CDLL | None] = []  # open.c, wired to nvImageCodec (once)
_LOCK = threading.Lock()
_REASONS = {1: "nvImageCodec cannot parse it", 3: "nvImageCodec could not describe its output",
            4: "out of memory while making its nvImageCodec image"}



class Slot:
    """One decoded sample in the batch buffer, shaped like an nvImageCodec image for the code
    that reads those (`__cuda_array_interface__`, byte `strides`); holds the buffer. Packed
    interleaved RGB of (height, width) at `address`. The interface is made when asked for:
    a batch makes a slot per sample on the planning thread, which shares the GIL."""

    __slots__ = ("address", "buffer", "height", "width")

    def __init__(self, buffer: torch.Tensor, address: int, height: int, width: int) -> None:
        self.buffer, self.address, self.height, self.width = buffer, address, height, width

    @property
    def strides(self) -> tuple[int, int, int]:
        return (self.width * 3, 3, 1)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.height, self.width, 3), "typestr": "|u1", "data": (self.address, False),
                "version": 3, "strides": self.strides}


def _layout() -> np.ndarray:
    """The byte offsets open.c writes at (see its pp_open_batch), from the ctypes mirrors."""
    region = S.CodeStreamView.region.offset
    plane = S.ImageInfo.plane_info.offset
    return np.array([C.sizeof(S.CodeStreamView), region + S.Region.start.offset, region + S.Region.end.offset,
                     C.sizeof(S.ImageInfo), plane + S.PlaneInfo.width.offset, plane + S.PlaneInfo.height.offset,
                     plane + S.PlaneInfo.row_stride.offset, S.ImageInfo.buffer.offset], dtype=np.int64)


LAYOUT = _layout()


SIGNATURES = {
    "pp_open_set": (None, [_P] * 5),
    "pp_open_batch": (C.c_int, [_P, C.c_int, _P, _P, _P, _P, C.c_uint64, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P]),
    "pp_release_batch": (None, [C.c_int, _P, _P, _P]),
}
FUNCTIONS = ("nvimgcodecCodeStreamCreateFromHostMem", "nvimgcodecCodeStreamGetSubCodeStream",
             "nvimgcodecCodeStreamDestroy", "nvimgcodecImageCreate", "nvimgcodecImageDestroy")  # pp_open_set's


def library(api: Any) -> C.CDLL | None:
    """open.c built, loaded (CDLL: its calls release the GIL) and wired to the library of `api`
    (nvimgcodec_c's), or None without a C compiler. Cached (one nvImageCodec per process)."""
    from .. import native

    with _LOCK:
        if not _WIRED:
            lib = native.shared("open.c", "nvImageCodec's code streams and images made one by one from Python",
                                signatures=SIGNATURES)
            _WIRED.append(None if lib is None else native.wire(lib, "pp_open_set", api.free, FUNCTIONS))
        return _WIRED[0]


def output_buffer(shape: np.ndarray, stream: torch.cuda.Stream,
                  steady: BufferRing | None = None) -> tuple[np.ndarray, torch.Tensor, Lease | None]:
    """Each sample's byte offset (int64 [N]) in one uint8 buffer of interleaved RGB images of
    `shape` (int64 [N, 2]: h, w), the buffer, allocated in `stream`'s order, and its lease
    where `steady` (a lane's ring: see decode/buffer_ring.py) lent it (the buffer may then be
    larger than the images)."""
    sizes = shape[:, 0] * shape[:, 1] * 3
    offsets = np.cumsum(sizes) - sizes
    total = max(int(offsets[-1] + sizes[-1]) if len(sizes) else 0, 1)

    def allocate(size: int) -> torch.Tensor:
        with torch.cuda.stream(stream):
            return torch.empty(size, dtype=torch.uint8, device=stream.device)

    if steady is None:
        return offsets, allocate(total), None
    buffer, lease = steady.take(total, allocate)
    return offsets, buffer, lease


def open_batch(lib: C.CDLL, decoder: Any, instance: Any, opened: Any, boxes: list[tuple[int, int, int, int] | None],
               sizes: list[tuple[int, int]], stream: torch.cuda.Stream) -> None:
    """What `CDecoder._code_streams` and `_images` do for `opened` (an nvimgcodec_c.Opened of
    `decoder`), in one call: its buffer, slots, decodable samples and (code streams, images)."""

    blobs = opened.blobs
    n = len(blobs)
    shape = np.array(sizes, dtype=np.int64).reshape(n, 2)
    offsets, buffer, opened.lease = output_buffer(shape, stream, decoder.steady)
    base = buffer.data_ptr()
    data, _data = bytes_pointers(blobs)
    lengths = np.fromiter(map(len, blobs), np.uint64, n)
    staging = None
    need = staged_size(lengths) if decoder.staging is not None else None
    if need is not None:  # the blobs copied into pinned memory: the decoders' uploads are DMA
        staging = decoder.staging.take(need)
        opened.staging = staging
    # (y0, x0, y1, x1, 1) for a region, zeros for the whole image
    box = np.zeros((n, 5), dtype=np.int32)
    if None not in boxes:  # every sample a region: one conversion
        box[:, :4] = np.array(boxes, dtype=np.int32).reshape(n, 4)
        box[:, 4] = 1
    else:
        for k, b in enumerate(boxes):
            if b is not None:
                box[k] = (*b, 1)
    hw = shape.astype(np.int32)
    at = offsets.astype(np.uint64)
    view, info = S.view_template(), S.info_template(stream.cuda_stream)
    parents, subs, image_of = (_P * n)(), (_P * n)(), (_P * n)()
    codes = np.empty(n, dtype=np.int32)
    streams, images = (_P * n)(), (_P * n)()
    lib.pp_open_batch(instance, n, data, lengths.ctypes.data, box.ctypes.data, hw.ctypes.data, base,
                      at.ctypes.data, LAYOUT.ctypes.data, C.byref(view), C.byref(info), parents, subs, image_of,
                      codes.ctypes.data, streams, images, None if staging is None else staging.data_ptr())
    opened.native = (lib, n, parents, subs, image_of)
    slots: list[Any] = []
    for k, code, (h, w), address in zip(range(n), codes.tolist(), sizes, (offsets + base).tolist()):
        if code == 0:
            slots.append(Slot(buffer, address, h, w))
        elif code == 2:
            slots.append(f"nvImageCodec refused the region {boxes[k]}")
        else:
            slots.append(_REASONS.get(code, f"nvImageCodec: open code {code}"))
    opened.buffer, opened.stream, opened.slots = buffer, stream, slots
    opened.ok = np.flatnonzero(codes == 0).tolist()
    opened.batch = (streams, images)


def release(lib: C.CDLL, n: int, parents: Any, subs: Any, image_of: Any) -> None:
    """Destroy what `open_batch` made (images, then region views, then code streams)."""
    lib.pp_release_batch(n, parents, subs, image_of)
