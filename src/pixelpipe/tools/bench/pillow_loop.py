"""The baseline every CPU figure is compared with: a plain Pillow + numpy loop.

Per image, in a thread pool: decode with Pillow, pick a random resized crop window as
torchvision does, crop and resize with Pillow (one call, bilinear, antialiased), mirror with
probability 0.5, normalise with numpy into float16 CHW; then stack the batch. This is what a
hand-written PyTorch Dataset with Pillow transforms does, minus the DataLoader's process
overhead (threads share the cores the same way pixelpipe's decoding threads do).
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _crop_window(rng: random.Random, width: int, height: int, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return left, top, left + w, top + h
    w, h = width, height
    return 0, 0, w, h


def train_one(data: bytes, seed: int, size: int = 224) -> np.ndarray:
    """One image through the rn50 training transforms: float16 [3, size, size]."""
    rng = random.Random(seed)
    im = Image.open(io.BytesIO(data)).convert("RGB")
    box = _crop_window(rng, im.width, im.height)
    im = im.resize((size, size), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(im, dtype=np.float32) / 255.0
    a = (a - MEAN) / STD
    return a.astype(np.float16).transpose(2, 0, 1)


def val_one(data: bytes, seed: int, size: int = 224, resize: int = 256) -> np.ndarray:
    im = Image.open(io.BytesIO(data)).convert("RGB")
    if im.width <= im.height:
        w, h = resize, int(resize * im.height / im.width)
    else:
        w, h = int(resize * im.width / im.height), resize
    im = im.resize((w, h), Image.BILINEAR)
    left, top = int(round((w - size) / 2)), int(round((h - size) / 2))
    im = im.crop((left, top, left + size, top + size))
    a = (np.asarray(im, dtype=np.float32) / 255.0 - MEAN) / STD
    return a.astype(np.float16).transpose(2, 0, 1)


def pillow_batches(blobs: Sequence[bytes], batch_size: int, threads: int, pipeline: str = "rn50",
                   seed: int = 0) -> Iterator[torch.Tensor]:
    """Yield float16 [B, 3, 224, 224] batches made by the Pillow loop with `threads` threads."""
    fn = train_one if pipeline == "rn50" else val_one
    with ThreadPoolExecutor(threads) as pool:
        for start in range(0, len(blobs), batch_size):
            chunk = blobs[start : start + batch_size]
            arrays = list(pool.map(fn, chunk, range(seed + start, seed + start + len(chunk))))
            yield torch.from_numpy(np.stack(arrays))
