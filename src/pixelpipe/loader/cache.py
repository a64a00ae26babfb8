"""A device-resident cache of decoded images: later epochs skip reading and decoding.

The cache is one preallocated uint8 buffer on the device plus a table, exactly the layout of an
ImageBatch, so a batch of cached samples is an ImageBatch that shares the buffer and carries
only its own table rows: no copy, and the warp kernel reads the cached pixels directly.

With `max_side`, images are shrunk (antialiased, on the device) so that their longer side is
at most `max_side` before they are stored, and every epoch, the first included, augments the
shrunk image: the source a sample's augmentation sees never depends on whether it came from
the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.batch import ImageBatch
from ..engine.stats import BatchDecode

__all__ = ["DeviceCache", "CacheFullError"]


_ARRAY_ROWS = 1 << 26  # sample indices the array map covers (512 MiB at most)
_FIRST = 64 << 20  # a growable cache's first buffer, in bytes
_ENCODED = (bytes, bytearray, memoryview)  # a sample's data that is a file to decode


def _size(n: float) -> str:
    """Bytes in KiB, MiB or GiB, one decimal."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**10:,.1f} KiB"


class CacheFullError(RuntimeError):
    """The cache's memory budget cannot hold the dataset."""


class DeviceCache:
    """Decoded images kept on `device`, up to `budget` bytes.

    Args:
        device: where the pixels live ("cuda", "cuda:N"; "cpu" works too, for tests).
        budget: bytes for pixels, allocated at once on first use. Default (None): up to half
            of the device's free memory when first used (1 GiB on the CPU), in a buffer that
            starts at 64 MiB and doubles as images arrive (each growth copies what is cached
            into the new buffer, in stream order), so a small dataset takes only about its size.
        max_side: shrink images whose longer side exceeds this before caching (None: keep).

    A batch (`batch`, `batch_rows`) is a view of the buffer of the moment; a later growth
    leaves it valid (it keeps the old buffer alive). A Pipeline reads and writes the cache on
    one stream, so the memory of a replaced buffer is reused only after the work queued on it.
    """

    def __init__(self, device: str | torch.device, budget: int | None = None, max_side: int | None = None) -> None:
        if budget is not None and budget < 1:
            raise ValueError(f"cache budget must be a positive number of bytes, got {budget}")
        if max_side is not None and max_side < 8:
            raise ValueError(f"cache_max_side must be >= 8 pixels, got {max_side}")
        self.device = torch.device(device)
        self.budget = budget
        self.growable = budget is None  # the default budget: grow the buffer up to it
        self.max_side = max_side
        self.buffer: torch.Tensor | None = None
        self.rows: dict[int, int] = {}  # sample index -> its row of _table
        self._table = np.zeros((0, 4), dtype=np.int64)  # (offset, h, w, c) per cached image
        self._row_of = np.full(0, -1, dtype=np.int64)  # the same map as an array (for many at once)
        self.used = 0
        self.expected: int | None = None  # samples the cache is expected to hold (its error's estimate)

    def __contains__(self, index: int) -> bool:
        return index in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def _allocate(self, need: int) -> None:
        if self.budget is None:
            if self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
                self.budget = int(free * 0.5)
            else:
                self.budget = 1 << 30
        size = min(self.budget, max(_FIRST, need)) if self.growable else self.budget
        self.buffer = torch.empty(size, dtype=torch.uint8, device=self.device)

    def _grow(self, need: int) -> None:
        """A buffer of at least `need` bytes (twice the last, at most the budget) holding what
        the old one held."""
        assert self.buffer is not None and self.budget is not None
        old = self.buffer
        self.buffer = torch.empty(min(self.budget, max(2 * len(old), need)), dtype=torch.uint8, device=self.device)
        self.buffer[: self.used].copy_(old[: self.used], non_blocking=True)

    @property
    def capacity(self) -> int:
        """Bytes of the current buffer (0 before the first image)."""
        return 0 if self.buffer is None else len(self.buffer)

    def shrink(self, image: torch.Tensor) -> torch.Tensor:
        """HWC uint8 image shrunk so that its longer side is at most max_side."""
        h, w, c = image.shape
        if self.max_side is None or max(h, w) <= self.max_side:
            return image
        s = self.max_side / max(h, w)
        size = (max(1, round(h * s)), max(1, round(w * s)))
        src = image.permute(2, 0, 1).unsqueeze(0)
        if src.is_cuda:  # the uint8 antialiased kernel is CPU-only in some torch versions
            out = F.interpolate(src.float(), size=size, mode="bilinear", antialias=True).round().clamp(0, 255)
            return out.to(torch.uint8)[0].permute(1, 2, 0)
        return F.interpolate(src, size=size, mode="bilinear", antialias=True)[0].permute(1, 2, 0)

    def put(self, index: int, image: torch.Tensor) -> None:
        """Store sample `index` (HWC uint8, any device); shrunk first when max_side is set."""
        image = self.shrink(image.to(self.device, non_blocking=True))
        h, w, c = image.shape
        size = h * w * c
        if self.buffer is None:
            self._allocate(size)
        assert self.buffer is not None and self.budget is not None
        if self.used + size > self.budget:
            raise CacheFullError(self._full_message(index, size))
        if self.used + size > len(self.buffer):
            self._grow(self.used + size)
        self.buffer[self.used : self.used + size].copy_(image.reshape(-1), non_blocking=True)
        row = len(self.rows)
        if row == len(self._table):  # grow by doubling: amortised O(1) per image
            self._table = np.concatenate([self._table, np.zeros((max(64, row), 4), dtype=np.int64)])
        self._table[row] = (self.used, h, w, c)
        self.rows[index] = row
        if 0 <= index < _ARRAY_ROWS:  # an index beyond is only in the dict (rows_of says -1)
            if index >= len(self._row_of):
                grown = np.full(min(max(2 * len(self._row_of), index + 1, 64), _ARRAY_ROWS), -1, dtype=np.int64)
                grown[: len(self._row_of)] = self._row_of
                self._row_of = grown
            self._row_of[index] = row
        self.used += size

    def _full_message(self, index: int, size: int) -> str:
        n = len(self.rows)
        text = (f"the device cache is full: {n:,} images use {_size(self.used)} of its {_size(self.budget or 0)} "
                f"budget (cache_budget) and sample {index} needs {_size(size)} more.")
        if self.expected and n:
            need = (self.used + size) / (n + 1) * self.expected
            text += f" At their mean size, the {self.expected:,} samples this cache would hold need about {_size(need)}."
        return text + (" Raise cache_budget, set cache_max_side (e.g. 320) to cache shrunk images, or turn "
                       "the cache off.")

    def batch(self, indices: Sequence[int]) -> ImageBatch:
        """The cached samples as an ImageBatch sharing the cache's buffer (KeyError: one is not
        cached)."""
        rows = self.rows_of(np.asarray(indices, dtype=np.int64)) if len(indices) else np.zeros(0, dtype=np.int64)
        if (rows < 0).any():  # not cached, or beyond the array map: the dict says which
            rows = np.fromiter((self.rows[i] for i in indices), dtype=np.int64, count=len(indices))
        return self.batch_rows(rows)

    def rows_of(self, indices: np.ndarray) -> np.ndarray:
        """int64: each sample's row in the cache, -1 where it is not cached (indices >= 0)."""
        out = np.full(len(indices), -1, dtype=np.int64)
        inside = (indices >= 0) & (indices < len(self._row_of))
        out[inside] = self._row_of[indices[inside]]
        return out

    def batch_rows(self, rows: np.ndarray) -> ImageBatch:
        """The samples at these rows (from rows_of, all >= 0) as an ImageBatch sharing the
        buffer."""
        assert self.buffer is not None
        return ImageBatch.trusted(self.buffer, torch.from_numpy(self._table[rows]))

    def batch_for(self, items: Sequence[Any], map_fn: Callable[..., Iterable[Any]], max_pixels: int,
                  decode_many: Callable[[list[bytes]], tuple[list[torch.Tensor], list[int], list[str]]] | None = None,
                  ) -> tuple[ImageBatch, BatchDecode]:
        """A Pipeline's batch from the cache, and how its samples were decoded: items (with
        .index and .data, encoded bytes or an image array) missing from the cache are decoded
        whole and stored first; by `decode_many` when given (the GPU decoder: (HWC device
        images, the indices it sent to the CPU decoder, why), raising SampleDecodeError), else
        one by one by decode_region through map_fn (e.g. a thread pool's map). Grey images
        (and grey + alpha) are stored with one channel either way. A sample that cannot be
        decoded raises SampleError naming its place in the batch."""
        from ..data.batch import to_storable
        from ..decode import decode_region
        from ..engine import SampleError

        def load(pair: tuple[int, Any]) -> tuple[Any, torch.Tensor]:
            k, it = pair
            try:
                if isinstance(it.data, _ENCODED):
                    return it, torch.from_numpy(decode_region(it.data, rgb=False, max_pixels=max_pixels)[0])
                return it, to_storable(torch.as_tensor(it.data), k)
            except ValueError as e:
                raise SampleError(k, str(e)) from e

        rows = self.rows
        missing = [(k, it) for k, it in enumerate(items) if it.index not in rows]
        record = BatchDecode(cached=len(items) - len(missing))
        if missing:  # later epochs: none
            encoded, given = [], []
            for pair in missing:
                (encoded if isinstance(pair[1].data, _ENCODED) else given).append(pair)
            loaded: Iterable[tuple[Any, torch.Tensor]]
            if decode_many is not None and encoded:
                loaded = [*self._decode_many(encoded, decode_many, record), *map(load, given)]
            else:
                record.cpu = len(encoded)
                loaded = map_fn(load, missing)
            for it, image in loaded:
                if it.index not in rows:  # a repeated sample in one batch is stored once
                    self.put(it.index, image)
        return self.batch([it.index for it in items]), record

    @staticmethod
    def _decode_many(encoded: list[tuple[int, Any]], decode_many: Callable[..., Any],
                     record: BatchDecode) -> list[tuple[Any, torch.Tensor]]:
        from ..decode.gpu_fallback import SampleDecodeError
        from ..decode.on_device import one_channel_if_grey
        from ..engine import SampleError

        blobs = [bytes(it.data) for _, it in encoded]
        try:
            images, fallback, reasons = decode_many(blobs)
        except SampleDecodeError as e:  # neither decoder can read it: the pipeline's policy decides
            raise SampleError(encoded[e.sample][0], e.reason, [(encoded[k][0], r) for k, r in e.more]) from e
        record.gpu += len(blobs) - len(fallback)
        record.fallbacks += [(encoded[i][1].index, why) for i, why in zip(fallback, reasons)]
        return [(it, image) for (_, it), image in zip(encoded, one_channel_if_grey(blobs, images))]

    def clear(self) -> None:
        """Forget every image and give the memory back."""
        self.buffer = None
        self.rows.clear()
        self._table = np.zeros((0, 4), dtype=np.int64)
        self._row_of = np.full(0, -1, dtype=np.int64)
        self.used = 0
