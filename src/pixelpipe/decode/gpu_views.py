"""nvImageCodec's decoded images as DeviceViews (in place) or as torch tensors (the twin).

A decoded image is addressed through its `__cuda_array_interface__` (address, shape) and its
byte strides; the displayed region of a sample (its box when the whole image was decoded, its
EXIF orientation) is a view of it: an offset and possibly swapped or negated strides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from ..data.views import DeviceViews, strided_view

Row = tuple[int, int, int, int, int, int]  # a DeviceViews row


class Job(NamedTuple):
    """One sample for nvImageCodec (a named tuple: a batch makes one per sample on the planning
    thread, which shares the GIL; a frozen dataclass took three times as long to make)."""

    index: int
    out_size: tuple[int, int]  # (h, w) of the displayed region: the slot in the batch
    stored_size: tuple[int, int]  # (h, w) of the image as stored, before orientation
    box: tuple[int, int, int, int]  # the region in stored coordinates (y0, x0, y1, x1)
    orientation: int
    roi: bool  # nvImageCodec decodes only `box` (else the whole image, cropped here)

    @property
    def region(self) -> tuple[int, int, int, int] | None:
        """What nvImageCodec is asked to decode: `box`, or None for the whole image."""
        return self.box if self.roi else None

    @property
    def decoded_size(self) -> tuple[int, int]:
        """(h, w) of what nvImageCodec returns: the box, or the whole stored image."""
        y0, x0, y1, x1 = self.box
        return (y1 - y0, x1 - x0) if self.roi else self.stored_size


class _CudaArray:
    """An nvImageCodec image's __cuda_array_interface__ with explicit strides; holds the image
    so that its memory lives as long as the tensor made from it."""

    def __init__(self, interface: dict[str, Any], owner: Any) -> None:
        self.__cuda_array_interface__ = interface
        self.owner = owner


def _as_tensor(img: Any, device: torch.device) -> torch.Tensor:
    """Zero-copy HWC uint8 tensor over an nvImageCodec device image."""
    interface = dict(img.__cuda_array_interface__)
    interface["strides"] = tuple(int(s) for s in img.strides)  # bytes; rows may be padded
    # Decoded on our stream (cuda_stream=), so already ordered before anything we enqueue on it.
    interface.pop("stream", None)
    return torch.as_tensor(_CudaArray(interface, img), device=device)


def _displayed(job: Job, pixels: torch.Tensor) -> torch.Tensor:
    """The displayed region from nvImageCodec's stored pixels (the box, or the whole image)."""
    expect = job.decoded_size
    if pixels.dim() != 3 or tuple(pixels.shape[:2]) != expect or pixels.shape[2] not in (1, 3):
        raise RuntimeError(
            f"sample {job.index}: nvImageCodec returned {tuple(pixels.shape)} pixels, expected "
            f"{expect} x 3 ({'region ' + str(job.box) if job.roi else 'whole image'}, stored "
            f"size {job.stored_size} from the header)"
        )
    if pixels.dtype != torch.uint8:
        raise RuntimeError(f"sample {job.index}: nvImageCodec returned {pixels.dtype}, not uint8")
    if not job.roi:
        y0, x0, y1, x1 = job.box
        pixels = pixels[y0:y1, x0:x1]
    if pixels.shape[2] == 1:
        pixels = pixels.expand(-1, -1, 3)
    pixels = _orient(pixels, job.orientation)
    if tuple(pixels.shape[:2]) != job.out_size:  # by construction; guards the box arithmetic
        raise RuntimeError(f"sample {job.index}: region of {tuple(pixels.shape[:2])} pixels, "
                           f"expected {job.out_size}")
    return pixels


# EXIF orientation -> the flips (of H, W) applied after transposing (for 5..8), as
# PIL.ImageOps.exif_transpose: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90
# clockwise, 7 transverse, 8 rotate 90 counter-clockwise.
_FLIPS = {1: (), 2: (1,), 3: (0, 1), 4: (0,), 5: (), 6: (1,), 7: (0, 1), 8: (0,)}


def _orient(pixels: torch.Tensor, orientation: int) -> torch.Tensor:
    """Stored HWC pixels -> displayed. Transposes are views; flips copy (rare files only)."""
    if orientation >= 5:
        pixels = pixels.transpose(0, 1)
    flips = _FLIPS[orientation]
    return pixels.flip(flips) if flips else pixels


def view_row(job: Job, interface: dict[str, Any], strides: Any) -> Row:
    """The DeviceViews row of a decoded image's displayed region (box, orientation)."""
    shape = tuple(int(v) for v in interface["shape"])
    expect = job.decoded_size
    if len(shape) != 3 or shape[:2] != expect or shape[2] not in (1, 3):
        raise RuntimeError(
            f"sample {job.index}: nvImageCodec returned {shape} pixels, expected {expect} x 3 "
            f"({'region ' + str(job.box) if job.roi else 'whole image'}, stored size "
            f"{job.stored_size} from the header)")
    if interface.get("typestr") != "|u1":
        raise RuntimeError(f"sample {job.index}: nvImageCodec returned {interface.get('typestr')}, not uint8")
    rs, cs, chs = (int(v) for v in strides)  # bytes; rows may be padded
    if chs != 1 and shape[2] > 1:
        raise RuntimeError(f"sample {job.index}: nvImageCodec image is not interleaved (strides {strides})")
    row = strided_view(int(interface["data"][0]), shape[0], shape[1], shape[2], rs, cs,
                       box=None if job.roi else job.box, transpose=job.orientation >= 5,
                       flip=_FLIPS[job.orientation])
    if row[1:3] != job.out_size:  # by construction; guards the box arithmetic
        raise RuntimeError(f"sample {job.index}: region of {row[1:3]} pixels, expected {job.out_size}")
    return row


def slot_row(job: Job, address: int) -> Row:
    """`view_row` for an image pixelpipe laid out itself: packed interleaved RGB of the job's
    decoded size at `address` (an nvimgcodec_open.Slot), so there is nothing to check."""
    h, w = job.decoded_size
    return strided_view(address, h, w, 3, w * 3, 3, box=None if job.roi else job.box,
                        transpose=job.orientation >= 5, flip=_FLIPS[job.orientation])


def as_views(n: int, on_gpu: dict[int, tuple[Job, Any, Row]], uploads: list[Any], device: torch.device,
             recycle: Any = None, leases: Sequence[Any] = ()) -> DeviceViews:
    """The batch as views: nvImageCodec's images in place, the CPU-decoded samples where their
    `gpu_fallback.CpuUpload`s copied them (each waited for already); `leases`: of the ring
    buffers the images are in (retired with the views)."""
    owners: list[Any] = [img for _, img, _ in on_gpu.values()]
    where: dict[int, tuple[torch.Tensor, int, tuple[int, ...]]] = {}
    for upload in uploads:
        if upload.data is not None:
            owners.append(upload.data)
            where.update({i: (upload.data, o, shape) for i, (o, shape) in upload.places.items()})

    def cpu_row(i: int) -> Row:  # HWC, packed, at its offset of its upload's buffer
        data, o, (h, w, c) = where[i]
        return strided_view(data.data_ptr() + o, h, w, c, w * c, c)

    def cpu_tensor(i: int) -> torch.Tensor:
        data, o, (h, w, c) = where[i]
        return data[o:o + h * w * c].view(h, w, c)

    rows = [on_gpu[i][2] if i in on_gpu else cpu_row(i) for i in range(n)]

    def gather() -> list[torch.Tensor]:  # the slow twin: every sample as a tensor
        return [_displayed(on_gpu[i][0], _as_tensor(on_gpu[i][1], device)) if i in on_gpu else cpu_tensor(i)
                for i in range(n)]

    return DeviceViews(device, rows, owners, gather, recycle, leases)
