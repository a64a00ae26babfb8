"""ImageBatch: N uint8 images of different sizes in one flat buffer.

One contiguous uint8 buffer holds every image in HWC order, one after the other, and a small
int64 table says where each starts and how big it is. A single kernel launch can therefore read
the whole ragged batch: it gets one pointer and the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["ImageBatch", "batch_or_images", "dense_table"]

# Columns of ImageBatch.table.
OFFSET, HEIGHT, WIDTH, CHANNELS = 0, 1, 2, 3


class ImageBatch:
    """N uint8 images (HWC, 1 or 3 channels, any height and width) in one buffer.

    Args:
        data: 1-D uint8 tensor holding every image back to back, HWC, row-major.
        table: int64 tensor [N, 4] of (offset, height, width, channels), on the CPU.

    The table always lives on the CPU (the planner reads sizes on the host); `kernel_table()`
    gives a copy on the data's device for kernels.

    Example:
        >>> b = ImageBatch.from_list([torch.zeros(4, 6, 3, dtype=torch.uint8),
        ...                           torch.zeros(5, 2, 1, dtype=torch.uint8)])
        >>> len(b), b.sizes.tolist()
        (2, [[4, 6], [5, 2]])
    """

    def __init__(self, data: torch.Tensor, table: torch.Tensor) -> None:
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise ValueError(f"data must be a 1-D uint8 tensor, got {data.dtype} {tuple(data.shape)}")
        table = torch.as_tensor(table, dtype=torch.int64).cpu()
        if table.dim() != 2 or table.shape[1] != 4:
            raise ValueError(f"table must be [N, 4] (offset, height, width, channels), got {tuple(table.shape)}")
        if len(table):  # numpy: batches are made per call (a cache's, a decoder's)
            t = table.numpy()
            ends = t[:, OFFSET] + t[:, HEIGHT] * t[:, WIDTH] * t[:, CHANNELS]
            if (t[:, OFFSET] < 0).any() or int(ends.max()) > data.numel():
                raise ValueError("table points outside the data buffer")
            bad = ~((t[:, CHANNELS] == 1) | (t[:, CHANNELS] == 3))
            if bad.any():
                i = int(bad.nonzero()[0][0])
                raise ValueError(f"sample {i}: {int(t[i, CHANNELS])} channels; only 1 or 3 are stored")
        self.data = data
        self.table = table
        self._device_table: torch.Tensor | None = None

    # ----------------------------------------------------------------------------- building
    @classmethod
    def from_list(cls, images: Sequence[torch.Tensor | np.ndarray], device: str | torch.device | None = None) -> ImageBatch:
        """Pack HWC (or HW) uint8 images into one buffer. 2 and 4 channels are converted:
        2 (grey + alpha) keeps the grey channel, 4 (RGBA) keeps RGB; see `to_storable`."""
        tensors = [to_storable(img, i) for i, img in enumerate(images)]
        if device is None:
            device = tensors[0].device if tensors else "cpu"
        rows, offset = [], 0
        for t in tensors:
            h, w, c = t.shape
            rows.append((offset, h, w, c))
            offset += h * w * c
        data = torch.empty(offset, dtype=torch.uint8, device=device)
        for (o, h, w, c), t in zip(rows, tensors):  # one copy each, strided sources included
            data[o : o + h * w * c].view(h, w, c).copy_(t, non_blocking=True)
        return cls(data, torch.tensor(rows, dtype=torch.int64).view(-1, 4))

    @classmethod
    def trusted(cls, data: torch.Tensor, table: torch.Tensor) -> ImageBatch:
        """A batch over `data` whose int64 CPU table [N, 4] its maker built from images it
        stored there (a cache's rows): not checked again. The checks of the constructor cost
        about 60 us a batch on a GPU host, paid on the thread that plans the next batch."""
        batch = cls.__new__(cls)
        batch.data, batch.table, batch._device_table = data, table, None
        return batch

    @classmethod
    def from_dense(cls, x: torch.Tensor | np.ndarray) -> ImageBatch:
        """A batch of equal-sized images given as one NHWC array [N, H, W, C] (C 1 to 4), as
        from_list would pack its N images (a uint8 batch of 1 or 3 channels in one copy).
        Raises TypeError for an NCHW-looking array, saying how to make it NHWC."""
        t = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
        if t.dim() != 4:
            raise ValueError(f"a dense batch is [N, H, W, C], got shape {tuple(t.shape)}")
        n, h, w, c = t.shape
        if c not in (1, 2, 3, 4):
            if t.shape[1] in (1, 2, 3, 4):
                raise TypeError(f"a 4-D batch is taken as NHWC [N, H, W, C]; this one, {tuple(t.shape)}, looks "
                                "NCHW: pass x.permute(0, 2, 3, 1)")
            raise ValueError(f"a dense batch is [N, H, W, C] with 1 to 4 channels, got shape {tuple(t.shape)}")
        if t.dtype != torch.uint8 or c not in (1, 3):  # converted image by image, as from_list does
            return cls.from_list(list(t))
        return cls(t.reshape(-1).contiguous(), dense_table(n, h, w, c))

    @classmethod
    def empty(cls, device: str | torch.device = "cpu") -> ImageBatch:
        return cls(torch.empty(0, dtype=torch.uint8, device=device), torch.zeros(0, 4, dtype=torch.int64))

    # ----------------------------------------------------------------------------- reading
    def __len__(self) -> int:
        return int(self.table.shape[0])

    def __getitem__(self, i: int) -> torch.Tensor:
        """Image i as an HWC view into the buffer (no copy)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for a batch of {len(self)}")
        o, h, w, c = self.table[i].tolist()
        return self.data[o : o + h * w * c].view(h, w, c)

    def rows(self, sel: slice) -> ImageBatch:
        """Some of the samples, sharing the buffer (their table rows only; not checked again).
        A kernel table uploaded already is shared too (its rows, for the same stream)."""
        part = ImageBatch.trusted(self.data, self.table[sel])
        if self._device_table is not None:
            part._device_table = self._device_table[sel]
            part.__dict__["_table_stream"] = self.__dict__.get("_table_stream")
        return part

    def tolist(self) -> list[torch.Tensor]:
        """Each image as an HWC tensor (views into the buffer)."""
        return [self[i] for i in range(len(self))]

    @property
    def sizes(self) -> torch.Tensor:
        """int64 [N, 2] of (height, width), on the CPU."""
        return self.table[:, HEIGHT:CHANNELS].clone()

    @property
    def channels(self) -> torch.Tensor:
        """int64 [N] channel counts (1 or 3), on the CPU."""
        return self.table[:, CHANNELS].clone()

    @property
    def device(self) -> torch.device:
        return self.data.device

    def to(self, device: str | torch.device, non_blocking: bool = False) -> ImageBatch:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())  # what "cuda" means for tensors
        if device == self.data.device:
            return self  # the same batch: what it cached (its kernel table) stays
        return ImageBatch(self.data.to(device, non_blocking=non_blocking), self.table)

    def kernel_table(self) -> torch.Tensor:
        """int64 [N, 6] (offset, height, width, channels, row stride, column stride) on the
        data's device: the table the warp kernel reads. Made and uploaded once per batch and
        CUDA stream (a batch augmented every epoch, as a decoded dataset is, skips the upload)."""
        stream = torch.cuda.current_stream(self.data.device).cuda_stream if self.data.is_cuda else None
        cached = self._device_table
        if cached is not None and self.__dict__.get("_table_stream") == stream:
            return cached
        strided = strided_table(self.table)
        if self.data.is_cuda:  # pinned, so that the copy does not wait for the stream
            from .transfer import to_device

            strided = to_device(strided, self.data.device)
        self._device_table, self.__dict__["_table_stream"] = strided, stream
        return strided

    def __repr__(self) -> str:
        shapes = [tuple(r[1:]) for r in self.table.tolist()[:4]]
        more = ", ..." if len(self) > 4 else ""
        return f"ImageBatch(n={len(self)}, device={self.device}, shapes={shapes}{more})"


def strided_table(table: torch.Tensor) -> torch.Tensor:
    """The kernels' [N, 6] table: an ImageBatch table [N, 4] with its contiguous strides
    (row w * c, column c) appended; a table that has them already (a DeviceViews') as it is."""
    if table.shape[1] == 6:
        return table
    t = table.numpy()  # numpy: no torch CPU op on the caller's thread (see kernels/_device)
    return torch.from_numpy(np.concatenate([t, t[:, WIDTH:WIDTH + 1] * t[:, CHANNELS:], t[:, CHANNELS:]], 1))


def to_storable(img: torch.Tensor | np.ndarray, index: int = 0) -> torch.Tensor:
    """Return img as an HWC uint8 tensor with 1 or 3 channels.

    HW becomes HW1; 2 channels (grey + alpha) keep the grey one; 4 (RGBA) keep RGB; 16-bit
    (uint16) images are scaled to 8 bits by keeping the high byte. Anything else raises a
    ValueError naming the sample index.
    """
    if isinstance(img, np.ndarray):
        if img.dtype == np.uint16:
            img = (img >> 8).astype(np.uint8)
        img = np.ascontiguousarray(img)
        img = torch.from_numpy(img if img.flags.writeable else img.copy())
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"sample {index}: expected a tensor or numpy array, got {type(img).__name__}")
    if img.dtype == torch.uint16:
        img = (img.to(torch.int32) >> 8).to(torch.uint8)
    if img.dtype != torch.uint8:
        raise ValueError(f"sample {index}: images must be uint8 (or uint16), got {img.dtype}")
    if img.dim() == 2:
        img = img.unsqueeze(-1)
    if img.dim() != 3:
        raise ValueError(f"sample {index}: expected HWC or HW, got shape {tuple(img.shape)}")
    h, w, c = img.shape
    if h == 0 or w == 0:
        raise ValueError(f"sample {index}: image has zero height or width ({h}x{w})")
    if c == 2:
        img = img[..., :1]
    elif c == 4:
        img = img[..., :3]
    elif c not in (1, 3):
        raise ValueError(f"sample {index}: {c} channels; expected 1, 2, 3 or 4 (HWC layout?)")
    return img.contiguous()


def dense_table(n: int, h: int, w: int, c: int) -> torch.Tensor:
    """int64 [N, 4] (offset, h, w, c) rows of N images of h x w x c packed back to back."""
    table = torch.empty(n, 4, dtype=torch.int64)
    table[:, OFFSET] = torch.arange(n, dtype=torch.int64) * (h * w * c)
    table[:, HEIGHT:] = torch.tensor([h, w, c], dtype=torch.int64)
    return table


def batch_or_images(images: Any) -> Any:
    """What a call that takes a batch of images was given: an NHWC array [N, H, W, C] as the
    ImageBatch of its images (ImageBatch.from_dense), anything else as it is; a single image
    (bytes, a 2-D or 3-D array) refused with a TypeError that says what to pass."""
    if isinstance(images, (torch.Tensor, np.ndarray)) and images.ndim == 4:
        return ImageBatch.from_dense(images)
    if isinstance(images, (bytes, bytearray, memoryview, torch.Tensor, np.ndarray)):
        raise TypeError("pass a list of images (or an ImageBatch, or an NHWC batch [N, H, W, C]), not a "
                        "single image: [image]")
    return images
