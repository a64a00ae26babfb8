"""What every contender of the GPU bench shares: the output sizes, the batches of a pass, a
video clip's frames, the decoded batch augment-only contenders start from, and how to wait for
the device."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

from ...data.batch import ImageBatch

CROP, VAL_RESIZE = 224, 256  # output side; val's shorter side before the centre crop


# ----------------------------------------------------------------------------- shared helpers
def spans(total: int, batch: int) -> list[tuple[int, int]]:
    """(start, size) of the batches of one pass over `total` images."""
    return [(s, min(batch, total - s)) for s in range(0, total, batch)]


def clip_indices(frames: int, clip: int, stride: int, rng: random.Random) -> list[int]:
    """`clip` frame indices `stride` apart from a random start where the whole clip fits; a
    video shorter than the clip repeats its last frame."""
    span = stride * (clip - 1) + 1
    start = rng.randint(0, max(0, frames - span))
    return [min(start + k * stride, frames - 1) for k in range(clip)]


def drainer(device: torch.device) -> Callable[[], None] | None:
    """What time_runs calls to wait for the device's work: a synchronize on CUDA."""
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def decode_head(blobs: Sequence[bytes], batch: int, device: torch.device) -> ImageBatch:
    """The first min(batch, len(blobs)) images decoded whole by pixelpipe's CPU decoder, RGB
    (3 channels, so every peer can take them), packed and moved to `device`."""
    from ...decode import decode_region

    images = [decode_region(b, rgb=True)[0] for b in blobs[:batch]]
    return ImageBatch.from_list(images).to(device)


def head(images: ImageBatch, k: int) -> ImageBatch:
    """The first k images of a batch, sharing its buffer (no copy)."""
    return images if k == len(images) else ImageBatch(images.data, images.table[:k])


def augment_spans(total: int, images: ImageBatch) -> list[tuple[int, int]]:
    """The batches of an augment-only pass: the decoded batch (or its head), again and again."""
    return spans(total, len(images))
