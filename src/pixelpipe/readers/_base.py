"""What every reader shares: the Sample record, the two reader protocols, and label helpers.

A reader is the first stage of the pipeline: it produces encoded samples (bytes) or already
decoded HWC uint8 arrays, each with its label, a human-readable source and a global index.
There are two kinds:

* indexable readers (`indexable = True`) can read sample i directly: `read(i)`, `__len__`,
  `sources(i)` and `labels` (all labels at once, without reading an image), so a sampler can
  shuffle, shard and balance classes before any byte is read;
* streaming readers (`indexable = False`) only read forwards: they expose `shards` and
  `iter_shard(shard_id, skip)`, which yields the samples of one shard in stored order. `skip`
  makes resuming exact: the pipeline records how many samples of each shard it consumed.

Readers never retry or swallow errors: a missing file raises an OSError naming the path, and
the pipeline's error policy decides what to do with it. A streaming reader, which cannot raise
for one sample without ending its shard, yields an `Unreadable` in that sample's place (a tar
member above max_bytes, a label that does not parse, each sample a damaged shard lost) and
goes on.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = [
    "IMAGE_EXTENSIONS",
    "IndexableReader",
    "Label",
    "MAX_BYTES",
    "ReaderError",
    "Sample",
    "StreamingReader",
    "Unreadable",
    "check_image",
    "check_index",
    "check_skip",
    "labels_tensor",
    "normalize_label",
    "split_item",
]

# File name extensions (lower case, no dot) that readers treat as encoded images by default.
IMAGE_EXTENSIONS: tuple[str, ...] = ("jpg", "jpeg", "png", "webp", "bmp")

Label = int | tuple[int, ...] | None

# The most bytes one sample's file or tar member may hold, by default (readers' max_bytes): a
# bad header, a symlink to a device or a huge stray file is an error naming its size, never
# a read of gigabytes.
MAX_BYTES = 256 << 20


class ReaderError(ValueError):
    """A reader cannot be built: missing root, empty dataset, malformed list file, ...

    Raised at construction, so a bad dataset fails before the first batch, never at the
    10,000th. The message names the file (and the line, for list files).
    """


@dataclass(slots=True)
class Sample:
    """One sample as a reader produces it.

    Attributes:
        data: the encoded image (bytes, bytearray or memoryview) or an HWC uint8 array
            (numpy, torch CPU/CUDA, or any object with `__dlpack__` / `__cuda_array_interface__`),
            kept exactly as given: no copy, no conversion.
        label: an int, a tuple of ints (multi-label), or None when the dataset has no labels.
        source: where the sample came from, for error messages: a file path,
            "shard.tar:member.jpg", "iterable[17]", "memory[3]".
        index: the global sample index (see each reader for how it is numbered).
        targets: what else the sample carries, by name: "boxes" ([K, 4] xyxy pixels),
            "keypoints" ([K, 2] or [K, 3]), "masks" (an integer label image the size of the
            image), which move with the image; any other name is a per-sample value handed
            through as it is. None: nothing.
    """

    data: Any
    label: Label
    source: str
    index: int
    targets: dict[str, Any] | None = None


@dataclass(slots=True)
class Unreadable:
    """A sample a streaming reader could not produce, yielded in its place so that the stream
    goes on (a Pipeline's on_error policy decides): a tar member above max_bytes, a label that
    does not parse, the samples lost with the rest of a shard that breaks off.

    Attributes:
        source: the shard and member ("shard.tar:0001.jpg"), or the shard.
        index: the index the sample would have had.
        reason: what is wrong, without the data's contents.
    """

    source: str
    index: int
    reason: str


@runtime_checkable
class IndexableReader(Protocol):
    """A reader with random access: sample i can be read on its own."""

    indexable: bool

    def __len__(self) -> int: ...
    def read(self, i: int) -> Sample: ...
    def sources(self, i: int) -> str: ...

    @property
    def labels(self) -> torch.Tensor | None: ...


@runtime_checkable
class StreamingReader(Protocol):
    """A reader that only reads forwards, shard by shard."""

    indexable: bool
    shards: list[str]

    def iter_shard(self, shard_id: int, skip: int = 0) -> Iterator[Sample]: ...


# ---------------------------------------------------------------------------------- helpers
def check_index(i: int, n: int, what: str) -> int:
    """Return i as an int if 0 <= i < n, else raise an IndexError naming the reader."""
    i = operator.index(i)
    if not 0 <= i < n:
        raise IndexError(f"sample {i} out of range for {what} of {n} samples")
    return i


def check_indices(indices: Any, n: int, what: str) -> list[int]:
    """check_index of each index, as a list of ints: for a list of ints all in range (what a
    Pipeline's read-ahead gives), one comparison of the smallest and the largest instead of a
    call per index."""
    if type(indices) is list and indices and set(map(type, indices)) == {int} and (
            0 <= min(indices) and max(indices) < n):
        return indices
    return [check_index(i, n, what) for i in indices]


def check_skip(shard_id: int, skip: int, n_shards: int) -> tuple[int, int]:
    """Validate the arguments of iter_shard; return them as ints."""
    shard_id, skip = operator.index(shard_id), operator.index(skip)
    if not 0 <= shard_id < n_shards:
        raise IndexError(f"shard {shard_id} out of range: the reader has {n_shards} shards")
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    return shard_id, skip


def normalize_label(label: Any, source: str) -> Label:
    """Turn a user-given label into None, an int or a tuple of ints.

    Accepts Python and numpy integers, 0-d integer tensors, and lists/tuples/1-d arrays of
    those (multi-label). Anything else raises a TypeError naming the sample.
    """
    if label is None:
        return None
    if isinstance(label, bool):
        raise TypeError(f"{source}: label is a bool ({label}); use an int class index")
    try:
        return operator.index(label)
    except TypeError:
        pass
    if isinstance(label, (list, tuple, np.ndarray, torch.Tensor)):
        try:
            return tuple(operator.index(x) for x in label)
        except TypeError:
            pass
    raise TypeError(
        f"{source}: label {label!r} ({type(label).__name__}) is not an int or a list of ints"
    )


def labels_tensor(labels: Sequence[Label], what: str) -> torch.Tensor | None:
    """Stack per-sample labels into int64 [N] (ints) or [N, K] (K-tuples); None if all None.

    Mixing kinds (an int and a tuple, a label and None, tuples of different lengths) raises a
    ReaderError naming the first sample that disagrees with sample 0.
    """
    if not labels or labels[0] is None:
        kind: Any = None
    elif isinstance(labels[0], tuple):
        kind = len(labels[0])
    else:
        kind = int
    for i, lab in enumerate(labels):
        this = None if lab is None else len(lab) if isinstance(lab, tuple) else int
        if this != kind:
            raise ReaderError(
                f"{what}: sample {i} has label {lab!r} but sample 0 has {labels[0]!r}; all "
                "samples need the same kind of label (all ints, all K-tuples, or all None)"
            )
    if kind is None:
        return None
    if kind is int:
        return torch.tensor(labels, dtype=torch.int64)
    return torch.tensor(labels, dtype=torch.int64).reshape(len(labels), kind)


_BYTES = (bytes, bytearray, memoryview)


def label_values(table: Any, index: Any) -> list[Any]:
    """The rows `index` of a label table (numpy array or tensor, [N] or [N, K]) as samples give
    labels: an int each, or a tuple of ints. One gather, not one per sample."""
    rows = table[index].tolist()
    return rows if table.ndim == 1 else [tuple(r) for r in rows]


def check_image(data: Any, source: str) -> Any:
    """Return data unchanged if it can be an image; raise a TypeError/ValueError otherwise.

    Encoded bytes pass as they are. numpy arrays and torch tensors must be uint8 with 2 (HW) or
    3 (HWC) dimensions; that check reads only metadata. Other array objects exposing
    `__dlpack__` or `__cuda_array_interface__` (CuPy, JAX, ...) pass untouched: checking them
    would mean converting them.
    """
    if isinstance(data, _BYTES):
        return data
    if isinstance(data, (np.ndarray, torch.Tensor)):
        uint8 = data.dtype == (np.uint8 if isinstance(data, np.ndarray) else torch.uint8)
        if not uint8 or data.ndim not in (2, 3):
            raise ValueError(
                f"{source}: array images must be HWC uint8, got {data.dtype} with shape "
                f"{tuple(data.shape)}"
            )
        return data
    if hasattr(data, "__dlpack__") or hasattr(data, "__cuda_array_interface__"):
        return data
    raise TypeError(
        f"{source}: got {type(data).__name__}; an image must be encoded bytes or an HWC "
        "uint8 array (for file paths use the Folder or FileList readers)"
    )


def split_item(item: Any, source: str) -> tuple[Any, Label, dict[str, Any] | None]:
    """Split one user item into (image, label, targets).

    An item is an image; a tuple/list (image, label, *extra) whose extra fields are ignored;
    or a dict with the image under "image", the label under "label" (optional) and anything
    else (boxes, keypoints, masks, per-sample values) as the sample's targets. The image is
    checked with `check_image` and returned as given.
    """
    if isinstance(item, dict):
        if "image" not in item:
            raise ValueError(f"{source}: a dict sample needs its image under 'image'; got keys {sorted(item)}")
        label = normalize_label(item.get("label"), source)
        rest = {k: v for k, v in item.items() if k not in ("image", "label")}
        return check_image(item["image"], source), label, rest or None
    if isinstance(item, (tuple, list)):
        if not item:
            raise ValueError(f"{source}: empty {type(item).__name__}; expected (image, label)")
        label = normalize_label(item[1], source) if len(item) > 1 else None
        return check_image(item[0], source), label, None
    return check_image(item, source), None, None
