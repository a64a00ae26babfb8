"""Iterable: samples produced by Python code (a generator, a list, or a function of the index).

Items are either an image or a tuple (image, label, *extra). An image is encoded bytes or an
HWC uint8 array; arrays are handed on untouched (same object: a CUDA tensor stays on its
device, a CuPy array stays a CuPy array), so data already decoded elsewhere costs nothing.
"""

from __future__ import annotations

import itertools
from collections import abc
from collections.abc import Iterator
from typing import Any

import torch

from ._base import (
    ReaderError,
    Sample,
    check_index,
    check_skip,
    labels_tensor,
    normalize_label,
    split_item,
)

__all__ = ["Iterable"]

_NOT_SOURCES = (str, bytes, bytearray, memoryview)


class Iterable:
    """A reader over any Python iterable, sequence or index -> item function.

    Args:
        source: one of
            * a Sequence (list, tuple, ...) or any object with `__getitem__` and `__len__`
              (a map-style torch Dataset, an [N, H, W, C] uint8 array): indexable; item i is
              read on demand and nothing is copied (later changes are seen);
            * a callable taking a sample index and returning an item: indexable; needs
              `length`;
            * any other iterable or generator: streaming, one pseudo-shard "iterable" read in
              order. A generator or iterator can be read only once; pass an object whose
              `__iter__` starts afresh to iterate several epochs or resume.
        length: the number of samples. Required for a callable; optional for a stream (gives
            `len()` when the stream has no `__len__`); checked against `len()` of a Sequence.

    Items: an image, or (image, label, *extra) with extra fields ignored. A label is an int,
    a list/tuple of ints (multi-label) or None. Samples are numbered 0, 1, ... in order (for a
    stream the index is the position, so `iter_shard(0, skip=k)` continues at index k) and
    their `source` is "iterable[i]".

    `indexable` says which interface applies: `read`, `sources`, `labels` for indexable
    sources; `shards`, `iter_shard` for streams. `labels` is known without calling anything
    only for a list or tuple (it looks at the labels, never at the images); it is None for
    other sources.

    Example:
        >>> def make(i): return (bytes([i]), i % 10)
        >>> r = Iterable(make, length=100)
        >>> r.read(42).label, len(r)
        (2, 100)
        >>> s = Iterable(x for x in [b"a", b"b", b"c"])
        >>> [x.index for x in s.iter_shard(0, skip=1)]
        [1, 2]
    """

    classes: list[str] | None = None

    def __init__(self, source: Any, length: int | None = None):
        if isinstance(source, _NOT_SOURCES):
            raise ReaderError(f"Iterable: a {type(source).__name__} is not a collection of "
                              "samples; wrap one sample in a list")
        if length is not None and length < 0:
            raise ReaderError(f"Iterable: length must be >= 0, got {length}")
        self._source = source
        self._length = length
        self._started = False
        cls = type(source)
        self._sequence = isinstance(source, abc.Sequence) or (
            hasattr(cls, "__getitem__") and hasattr(cls, "__len__")
            and not isinstance(source, abc.Mapping))
        if self._sequence:
            self.indexable = True
            if length is not None and length != len(source):
                raise ReaderError(f"Iterable: length={length} but the sequence has "
                                  f"{len(source)} items")
            self._length = len(source)
            if self._length == 0:
                raise ReaderError("Iterable: the sequence is empty")
        elif callable(source):
            self.indexable = True
            if length is None:
                raise ReaderError("Iterable: a callable source needs length=N (the number of "
                                  "samples it can produce)")
        elif isinstance(source, abc.Iterable):
            self.indexable = False
            self.shards: list[str] = ["iterable"]
            if length is None and isinstance(source, abc.Sized):
                self._length = len(source)
        else:
            raise ReaderError(f"Iterable: {type(source).__name__} is neither a sequence, a "
                              "callable nor an iterable")

    def __len__(self) -> int:
        if self._sequence:
            return len(self._source)  # not copied: follow its changes
        if self._length is None:
            raise TypeError("the length of this Iterable is unknown (a generator has no "
                            "len()); pass length=N when building it")
        return self._length

    # ---------------------------------------------------------------------------- indexable
    def read(self, i: int) -> Sample:
        """Item i as a Sample (calls the function, or indexes the sequence, now)."""
        self._need(indexable=True, what="read(i)")
        i = check_index(i, len(self), "Iterable")
        item = self._source[i] if self._sequence else self._source(i)
        source = f"iterable[{i}]"
        data, label, targets = split_item(item, source)
        return Sample(data, label, source, i, targets)

    def sources(self, i: int) -> str:
        self._need(indexable=True, what="sources(i)")
        return f"iterable[{check_index(i, len(self), 'Iterable')}]"

    @property
    def labels(self) -> torch.Tensor | None:
        """int64 [N] or [N, K] for a list or tuple with labels (built on each access, since it
        may change); None otherwise: getting the labels of a Dataset, a callable or a stream
        would mean producing its images."""
        if not isinstance(self._source, (list, tuple)):
            return None
        return labels_tensor([_label_only(x, i) for i, x in enumerate(self._source)],
                             "Iterable")

    # ---------------------------------------------------------------------------- streaming
    def iter_shard(self, shard_id: int, skip: int = 0) -> Iterator[Sample]:
        """Yield the stream's items from position `skip` on, as Samples numbered by position."""
        self._need(indexable=False, what="iter_shard()")
        _, skip = check_skip(shard_id, skip, 1)
        it = iter(self._source)
        if it is self._source:  # a generator or iterator: it cannot be restarted
            if self._started:
                raise RuntimeError("Iterable: this source is a generator/iterator and was "
                                   "already iterated; pass a re-iterable object instead")
            self._started = True
        return _samples(itertools.islice(it, skip, None), skip)

    def _need(self, indexable: bool, what: str) -> None:
        if self.indexable != indexable:
            kind = "an indexable" if self.indexable else "a streaming"
            raise TypeError(f"Iterable over {type(self._source).__name__} is {kind} reader; "
                            f"{what} is not available")

    def __repr__(self) -> str:
        kind = "indexable" if self.indexable else "streaming"
        n = self._length if self._length is not None else "?"
        return f"Iterable({type(self._source).__name__}, {kind}, samples={n})"


def _samples(items: abc.Iterable[Any], start: int) -> Iterator[Sample]:
    for i, item in enumerate(items, start):
        source = f"iterable[{i}]"
        data, label, targets = split_item(item, source)
        yield Sample(data, label, source, i, targets)


def _label_only(item: Any, i: int) -> Any:
    """The label of an item, without looking at the image."""
    if isinstance(item, (tuple, list)) and len(item) > 1:
        return normalize_label(item[1], f"iterable[{i}]")
    if isinstance(item, dict):
        return normalize_label(item.get("label"), f"iterable[{i}]")
    return None
