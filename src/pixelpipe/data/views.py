"""DeviceViews: a ragged batch of uint8 images that stay where a decoder put them.

An `ImageBatch` copies every image into one buffer. A GPU decoder (nvImageCodec) allocates each
decoded image itself, so building an ImageBatch costs one device copy and a few Python calls per
image. DeviceViews skips that: a table gives, per sample, the address of its first displayed
pixel relative to a base tensor, its size, channels and its row and column strides in bytes
(negative strides express flips, swapped ones transposes). The Triton kernel reads it exactly
like an ImageBatch, whose table is the special case of contiguous rows.

The decoder's buffers must outlive every kernel that reads them: `retire(stream)` keeps their
owners until an event recorded on that stream has completed, then drops them.
`contiguous()` gathers the samples into an ImageBatch: the slow twin, used where the kernel is
not available and by the tests that check both give the same output.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .batch import ImageBatch

__all__ = ["DeviceViews", "release_retired", "strided_view"]

# Columns of DeviceViews.table.
OFFSET, HEIGHT, WIDTH, CHANNELS, ROW_STRIDE, COL_STRIDE = range(6)
_BASES: dict[str, torch.Tensor] = {}
_RETIRED: list[tuple[torch.cuda.Event, list[Any], Callable[[list[Any]], None] | None]] = []
_LOCK = threading.Lock()


def _base(device: torch.device) -> torch.Tensor:
    """A one-byte tensor on `device` whose address the offsets are relative to."""
    key = str(device)
    if key not in _BASES:
        _BASES[key] = torch.zeros(1, dtype=torch.uint8, device=device)
    return _BASES[key]


def strided_view(address: int, height: int, width: int, channels: int, row_stride: int, col_stride: int,
                 box: tuple[int, int, int, int] | None = None, transpose: bool = False,
                 flip: Sequence[int] = ()) -> tuple[int, int, int, int, int, int]:
    """(address, h, w, c, row_stride, col_stride) of a view of an HWC image: its `box`
    (y0, x0, y1, x1, end-exclusive), then transposed (H and W swapped), then flipped along the
    given axes (0 = rows, 1 = columns) — the order pixelpipe.decode.gpu orients images in."""
    if box is not None:
        y0, x0, y1, x1 = box
        address += y0 * row_stride + x0 * col_stride
        height, width = y1 - y0, x1 - x0
    if transpose:
        height, width, row_stride, col_stride = width, height, col_stride, row_stride
    if 0 in flip:
        address += (height - 1) * row_stride
        row_stride = -row_stride
    if 1 in flip:
        address += (width - 1) * col_stride
        col_stride = -col_stride
    return address, height, width, channels, row_stride, col_stride


class DeviceViews:
    """N uint8 HWC images (1 or 3 channels, channel stride 1) anywhere in one device's memory.

    Args:
        device: the CUDA device holding every image.
        rows: per sample (address, height, width, channels, row_stride, col_stride), the
            address being that of the sample's first displayed pixel (see `strided_view`).
        owners: objects that keep the memory alive (decoder images, tensors).
        gather: returns the samples as HWC tensors (views are fine); used by `contiguous`.
        recycle: given the owners once no enqueued work reads them any more (see `retire`),
            e.g. to hand a decoder's buffers back for reuse.
        leases: objects told `retired(event)` by `retire`, the event recorded after the
            kernels (a decoder lane's ring buffers: decode/buffer_ring.py).
    """

    def __init__(self, device: torch.device, rows: Sequence[tuple[int, int, int, int, int, int]],
                 owners: list[Any], gather: Callable[[], list[torch.Tensor]],
                 recycle: Callable[[list[Any]], None] | None = None, leases: Sequence[Any] = ()) -> None:
        self.device = torch.device(device)
        self.data = _base(self.device)
        origin = self.data.data_ptr()
        if any(row[CHANNELS] not in (1, 3) for row in rows):
            raise ValueError("DeviceViews holds 1- or 3-channel images only")
        table = np.array(rows, dtype=np.int64).reshape(-1, 6)  # numpy: a third of torch.tensor's time
        table[:, 0] -= origin
        self.table = torch.from_numpy(table)
        self._owners = owners
        self._gather = gather
        self._recycle = recycle
        self._leases = list(leases)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def sizes(self) -> torch.Tensor:
        """int64 [N, 2] (height, width) on the CPU, as ImageBatch.sizes."""
        return self.table[:, HEIGHT:WIDTH + 1].clone()

    def contiguous(self) -> ImageBatch:
        """The samples copied into one ImageBatch on the device (the current stream's order)."""
        images = self._gather()
        if len(images) != len(self):
            raise RuntimeError(f"gather gave {len(images)} images for {len(self)} samples")
        return ImageBatch.from_list(images, device=self.device)

    def retire(self, stream: torch.cuda.Stream) -> None:
        """Keep the images alive until the work enqueued on `stream` so far has run; the owners
        of earlier batches whose work is done are dropped (or recycled) now."""
        event = torch.cuda.Event()
        event.record(stream)
        leases, self._leases = self._leases, []
        for lease in leases:
            lease.retired(event)
        done = []
        with _LOCK:
            _RETIRED.append((event, self._owners, self._recycle))
            while _RETIRED and _RETIRED[0][0].query():
                done.append(_RETIRED.pop(0))
        self._owners = []
        for _, owners, recycle in done:
            if recycle is not None:
                recycle(owners)


def release_retired() -> None:
    """Wait for the work every retired batch was kept for, then drop (or recycle) its owners:
    what a pipeline's close() calls so that the decoders' buffers go back at once."""
    with _LOCK:
        done, _RETIRED[:] = list(_RETIRED), []
    for event, owners, recycle in done:
        event.synchronize()
        if recycle is not None:
            recycle(owners)
