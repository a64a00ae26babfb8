"""`pixelpipe show` on videos: clips of a few videos of a dataset, augmented as a VideoPipeline
augments them, drawn one row per clip (tools.show_clips), so that one look tells whether every
frame of a clip got the same crop, flip and colour and whether the clips differ.

The videos are spread evenly over the dataset; each gives `clips` clips whose starts spread
evenly over it (ClipSampler's start="uniform"), each clip `frames_per_clip` frames `stride`
apart. Videos that cannot be read are left out and reported. Without a dataset, a few
synthetic videos (tools.videos) are made in a temporary folder.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import torch

from ..data.threads import default_threads
from ..ops import Normalize
from .video_data import open_videos

__all__ = ["show_video_dataset"]


class _Picked:
    """Some videos of a reader, in the reader's order, read as a reader of their own."""

    indexable = True
    video = True

    def __init__(self, reader: Any, picks: list[int]) -> None:
        self.reader, self.picks = reader, picks
        self.reads_files = getattr(reader, "reads_files", False)
        labels = getattr(reader, "labels", None)
        self.labels = None if labels is None else labels[torch.as_tensor(picks, dtype=torch.int64)]

    def __len__(self) -> int:
        return len(self.picks)

    def sources(self, i: int) -> str:
        return str(self.reader.sources(self.picks[i]))

    def read(self, i: int) -> Any:
        return self.reader.read(self.picks[i])


def show_video_dataset(data: Any, transforms: Any, n: int = 4, clips: int = 2, frames_per_clip: int = 8,
                       stride: int = 2, seed: int = 0, tile: int = 96) -> tuple[Any, list[tuple[str, str]]]:
    """The grid (a PIL image) of `clips` augmented clips of each of n videos of `data` (a path
    `open_videos` reads, a video reader, or None for synthetic videos), and the (source,
    reason) of each video left out.

    Raises:
        ReaderError: data holds no videos.
        ValueError: none of the videos picked could be read.
    """
    from ..readers import ReaderError

    if data is None:
        with tempfile.TemporaryDirectory(prefix="pixelpipe-show-") as folder:
            from .videos import synthetic_videos

            synthetic_videos(folder, n, classes=min(n, 3), frames=max(40, (frames_per_clip - 1) * stride + 1),
                             height=96, width=128, seed=seed)
            return show_video_dataset(folder, transforms, n, clips, frames_per_clip, stride, seed, tile)
    reader = open_videos(data)
    if reader is None:
        raise ReaderError(f"{os.fspath(data) if isinstance(data, (str, os.PathLike)) else data!r} holds no videos")
    from ..data.clips import ClipSampler
    from ..loader.video import VideoPipeline
    from .show_clips import show_clips

    total = len(reader)
    picks = list(range(total)) if n >= total else [k * total // n for k in range(n)]
    pipe = VideoPipeline(_Picked(reader, picks), transforms, batch_size=len(picks),
                         clips=ClipSampler(frames_per_clip, stride, clips, start="uniform"), seed=seed,
                         shuffle=False, on_error="skip", num_threads=min(len(picks), default_threads()))
    with pipe:
        try:
            batch = next(iter(pipe), None)
        except RuntimeError:  # no video could be read: the errors say why
            if not pipe.errors:
                raise
            batch = None
        skipped = [(source, reason) for _, source, reason in pipe.errors]
    keep = batch["valid"] if batch is not None else torch.zeros(0, dtype=torch.bool)
    if not bool(keep.any()):
        reasons = "; ".join(f"{s}: {r}" for s, r in skipped[:3])
        raise ValueError(f"none of the {len(picks)} videos picked could be read ({reasons})")
    shown = {k: v[keep] for k, v in batch.items() if isinstance(v, torch.Tensor) and v.shape[:1] == keep.shape}
    shown["index"] = torch.as_tensor(np.asarray(picks), dtype=torch.int64)[shown["index"]]  # the reader's numbers
    norm = next((op for op in getattr(transforms, "ops", []) if isinstance(op, Normalize)), None)
    mean, std = (norm.mean, norm.std) if norm is not None else (None, None)
    return show_clips(shown, frames=frames_per_clip, tile=tile, mean=mean, std=std), skipped
