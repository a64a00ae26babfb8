"""Memory: a small dataset held in a Python list, checked once at construction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ._base import ReaderError, Sample, check_index, check_indices, labels_tensor, split_item

__all__ = ["Memory"]


class Memory:
    """An indexable reader over in-memory samples.

    Args:
        samples: (image, label) pairs (extra fields ignored) or bare images. An image is encoded
            bytes or an HWC uint8 array (numpy, torch on any device, or any `__dlpack__` /
            `__cuda_array_interface__` object), stored as given. Labels are ints, lists of ints
            (multi-label) or None, the same kind for every sample.

    Unlike `Iterable` over a list, the samples are copied into a new list (the images are not
    copied) and every item is checked now, so a bad item fails here, naming its index, and
    later changes to the caller's list are not seen. Sources are "memory[i]".

    Raises:
        ReaderError: no samples, or labels of mixed kinds.
        TypeError / ValueError: an item that is not an image (or an array that is not uint8).

    Example:
        >>> r = Memory([(b"jpeg bytes", 3), (b"more bytes", 1)])
        >>> len(r), r.labels.tolist(), r.read(1).label
        (2, [3, 1], 1)
    """

    indexable = True
    classes: list[str] | None = None

    def __init__(self, samples: Iterable[Any]):
        if isinstance(samples, (str, bytes, bytearray, memoryview)):
            raise ReaderError(f"Memory: a {type(samples).__name__} is not a list of samples; "
                              "wrap one sample in a list")
        pairs = [split_item(item, f"memory[{i}]") for i, item in enumerate(samples)]
        if not pairs:
            raise ReaderError("Memory: no samples")
        self._data = [d for d, _, _ in pairs]
        self._label_list = [lab for _, lab, _ in pairs]
        self._targets = [t for _, _, t in pairs]
        self._labels = labels_tensor(self._label_list, "Memory")

    def __len__(self) -> int:
        return len(self._data)

    def read(self, i: int) -> Sample:
        i = check_index(i, len(self._data), "Memory")
        return Sample(self._data[i], self._label_list[i], f"memory[{i}]", i, self._targets[i])

    def read_items(self, indices: list[int]) -> tuple[list[Any], list[Any], list[str], list[Any]]:
        """read(i) of each index without a Sample each: (images, labels, sources, targets), the
        items as they are stored. A Pipeline's planning thread takes its batches' items so, in
        one pass (loader/reading.py, for any reader with a read_items that agrees with its
        read), while the pipeline's other threads wait for the GIL."""
        indices = check_indices(indices, len(self._data), "Memory")
        return (list(map(self._data.__getitem__, indices)), list(map(self._label_list.__getitem__, indices)),
                [f"memory[{i}]" for i in indices], list(map(self._targets.__getitem__, indices)))

    def sources(self, i: int) -> str:
        return f"memory[{check_index(i, len(self._data), 'Memory')}]"

    @property
    def labels(self) -> torch.Tensor | None:
        """int64 [N] or [N, K]; None when the samples have no labels. Shared, do not modify."""
        return self._labels

    def __repr__(self) -> str:
        return f"Memory(samples={len(self)})"
