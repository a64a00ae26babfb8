"""JpegQuality: the artefacts of re-encoding each image as a JPEG of a random quality.

A JPEG round trip is no formula of the pixels: it runs the encoder and the decoder. On the CPU
each affected sample is encoded and decoded by Pillow (libjpeg-turbo), in the threads of a
small pool, Pillow releasing the GIL; on a GPU the affected samples, and only those, are copied
to the host, round-tripped there and copied back: a documented synchronisation with the device
(nvImageCodec's encoder would keep them there; it is not wired in yet)."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..data.transfer import to_device
from .checks import check_prob, check_range, one_or_pair
from .kinds import Op, Params, PixelOp

__all__ = ["JpegQuality", "jpeg_round_trip"]

_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(4, thread_name_prefix="pixelpipe-jpeg")
    return _POOL


def jpeg_round_trip(image: np.ndarray, quality: int) -> np.ndarray:
    """uint8 HWC (C = 1 or 3) -> the same image encoded by Pillow as a baseline JPEG of
    `quality` (1..100; Pillow's default 4:2:0 chroma subsampling for colour) and decoded."""
    from PIL import Image

    grey = image.shape[2] == 1
    pil = Image.fromarray(image[..., 0] if grey else image, "L" if grey else "RGB")
    buf = io.BytesIO()
    pil.save(buf, "JPEG", quality=int(quality))
    out = np.asarray(Image.open(io.BytesIO(buf.getvalue())))
    return out[..., None] if grey else out


class JpegQuality(PixelOp):
    """Re-encode each image as a JPEG of a random quality (torchvision's JPEG,
    albumentations' ImageCompression), with probability p.

    Args:
        quality: (low, high) JPEG qualities, 1..100, a whole number drawn uniform per image,
            both ends included; one number is a fixed quality.
        p: probability that an image is re-encoded.

    The image's grey levels round(255 x) are encoded by Pillow and decoded again, so a uint8
    image that was not resampled gets exactly Pillow's round trip (tested). The op costs an
    encode and a decode per affected image on the host (about a millisecond for 224x224):
    keep p small or images small. On a GPU the affected rows are copied to the host and back,
    a synchronisation of the device per batch (the other rows stay where they are).
    Keep it before Normalize: it expects values in [0, 1].

    Example: ``JpegQuality((30, 90), p=0.3)``.
    """

    draws = 2

    def __init__(self, quality: int | tuple[int, int] = (50, 95), p: float = 0.5) -> None:
        pair = (quality, quality) if isinstance(quality, (int, float)) and not isinstance(quality, bool) else quality
        lo, hi = check_range("quality", pair, 1, 100)
        if lo != int(lo) or hi != int(hi):
            raise ValueError(f"quality must be whole numbers in [1, 100], got {quality!r}")
        self.quality = (int(lo), int(hi))
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"quality": one_or_pair(self.quality), "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        lo, hi = self.quality
        q = np.minimum(lo + np.floor(draws.uniform_np(1) * (hi - lo + 1)), hi).astype(np.int64)
        return {"quality": q, "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        rows = np.flatnonzero(params["on"])
        if len(rows) == 0:
            return x
        pick = to_device(rows, x.device)
        # the one host copy: only the affected rows, as uint8 HWC
        levels = (x[pick].clamp(0.0, 1.0) * 255.0).round_().to(torch.uint8)
        host = levels.permute(0, 2, 3, 1).contiguous().cpu().numpy()
        quality = params["quality"][rows]
        done = list(_pool().map(jpeg_round_trip, host, quality))
        back = to_device(np.ascontiguousarray(np.stack(done).transpose(0, 3, 1, 2)), x.device)
        return x.index_copy(0, pick, back.to(x.dtype) * (1.0 / 255.0))
