"""What the detection readers (Coco, Voc, Yolo) share: image files listed with per-image
targets parsed at construction, read by index like Folder's files.

A sample's targets are a dict of numpy arrays: "boxes" [K, 4] (in the reader's `box_format`),
"labels" int64 [K], and what else the format holds ("keypoints" [K, J, 3], "masks", an
"image_id"). The arrays are the reader's own: a sample hands out views, which nothing writes to
(the pipeline copies what it moves).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from ._base import MAX_BYTES, ReaderError, Sample, check_index, check_indices
from ._files import read_files, read_one

__all__ = ["AnnotatedFiles", "check_max_bytes"]


def check_max_bytes(name: str, max_bytes: Any) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ReaderError(f"{name}: max_bytes must be an int >= 1, got {max_bytes!r}")
    return max_bytes


class AnnotatedFiles:
    """An indexable reader of image files, each with a dict of targets.

    Subclasses fill `_paths` (one image file per sample) and `_targets` (its dict), and may
    override `_complete` to make part of a sample's targets when it is read (COCO's masks).
    A subclass that overrides `targets(i)` instead gets its targets read through it."""

    indexable = True
    reads_files = True  # read() opens a file: a Pipeline reads ahead on threads
    box_format = "xyxy"  # how the boxes are given: give it to the Compose (box_format=)
    classes: list[str] | None = None  # the name of label l is classes[l] where it is known

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = check_max_bytes(type(self).__name__, max_bytes)
        self._paths: list[str] = []
        self._targets: list[dict[str, Any]] = []

    def _done(self, what: str) -> None:
        if not self._paths:
            raise ReaderError(f"{type(self).__name__}: {what} lists no images")

    def __len__(self) -> int:
        return len(self._paths)

    def targets(self, i: int) -> dict[str, Any]:
        """Sample i's targets, without reading its image."""
        i = check_index(i, len(self._paths), type(self).__name__)
        t = dict(self._targets[i])
        self._complete([t], [i])
        return t

    def targets_many(self, indices: list[int]) -> list[dict[str, Any]]:
        """targets(i) of each index: the parsed dicts copied in one pass and completed in one
        call, where a subclass did not change targets()."""
        indices = check_indices(indices, len(self._paths), type(self).__name__)
        if type(self).targets is not AnnotatedFiles.targets:
            return [self.targets(i) for i in indices]
        out = list(map(dict, map(self._targets.__getitem__, indices)))
        self._complete(out, indices)
        return out

    def _complete(self, targets: list[dict[str, Any]], indices: list[int]) -> None:
        """Add to each copied dict what is made when its sample is read (nothing here)."""

    def read(self, i: int) -> Sample:
        """Read the bytes of sample i now (FileNotFoundError/OSError naming the path if gone)."""
        return read_one(self, i)

    def read_many(self, indices: list[int]) -> list[Sample | OSError]:
        """read(i) of each index, the files read in one call (readers._files): each sample,
        or the OSError reading its file raised."""
        datas, paths, targets = self.read_raw(indices)
        return [d if isinstance(d, OSError) else Sample(d, None, p, i, t)
                for i, p, d, t in zip(indices, paths, datas, targets)]

    def read_raw(self, indices: list[int]) -> tuple[list[bytes | OSError], list[str], list[dict[str, Any]]]:
        """Each index's bytes (or the OSError reading it raised), its path and its targets:
        read_many without a Sample per file. Why: a Pipeline's reader threads made a Sample
        and called sources() and targets() per file, about 1 ms of a batch's 256 files under
        the GIL on an H200 host (py-spy), which the pipeline's other threads wait for."""
        indices = check_indices(indices, len(self._paths), type(self).__name__)
        paths = list(map(self._paths.__getitem__, indices))
        return read_files(paths, self.max_bytes), paths, self.targets_many(indices)

    def sources(self, i: int) -> str:
        """The path of sample i's image."""
        return self._paths[check_index(i, len(self._paths), type(self).__name__)]

    @property
    def labels(self) -> torch.Tensor | None:
        """None: the samples' class ids are per box (their targets' "labels"), not per image."""
        return None

    def box_counts(self) -> np.ndarray:
        """int64 [N]: the boxes of every sample."""
        return np.array([len(t["boxes"]) for t in self._targets], dtype=np.int64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(samples={len(self)}, boxes={int(self.box_counts().sum())})"


def resolve(root: str, name: str) -> str:
    return name if os.path.isabs(name) else os.path.join(root, name)
