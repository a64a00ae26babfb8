"""Resizes that keep the aspect ratio, as detectors take their inputs: LetterBox (fit inside a
fixed size and pad: YOLO's and Mask R-CNN's batches), ScaleJitter (a random scale of a fitted
size: large-scale jitter) and RandomShortestSize (the shorter side one of a few sizes, the
longer capped: torchvision's detection references)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.random import Draws
from .checks import INTERPOLATIONS, check_choice, check_fill, check_range, check_size
from .kinds import GeometryOp, Op, Params
from .matrices import affine

__all__ = ["LetterBox", "RandomShortestSize", "ScaleJitter"]


def _resized(sizes: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The matrix and size of resizing each image by r (sides truncated to whole pixels, as
    torchvision does; at least 1)."""
    h, w = np.maximum(np.floor(sizes[:, 0] * r), 1.0), np.maximum(np.floor(sizes[:, 1] * r), 1.0)
    return affine(len(r), a=w / sizes[:, 1], d=h / sizes[:, 0]), np.stack([h, w], 1)


class LetterBox(GeometryOp):
    """Resize each image to fit inside `size` keeping its aspect ratio, then pad it to `size`
    with `fill`: every sample gets the same size, none is distorted.

    Args:
        size: output (height, width), or one int for a square.
        fill: the padding's colour (one value or three, 0..255; default 0; YOLO uses 114).
        anchor: where the resized image sits in the free space, (y, x) fractions: (0.5, 0.5)
            centred (YOLO), (0.0, 0.0) top-left (Mask R-CNN's batches pad right and bottom).
        scale_up: False: never enlarge (small images are only padded).
        interpolation: "nearest", "bilinear" (default) or "bicubic"; shrinking is antialiased.

    The fitted side is rounded to whole pixels: a 640x480 (w x h) image in LetterBox(320)
    becomes 320x240 with 40 rows of padding above and below.
    """

    deterministic = True

    def __init__(self, size: int | tuple[int, int], fill: Any = None, anchor: tuple[float, float] = (0.5, 0.5),
                 scale_up: bool = True, interpolation: str | None = None) -> None:
        h, w = check_size("size", size)
        self.size = (int(h), int(w))
        self.fill = check_fill(fill)
        try:
            ay, ax = (float(v) for v in anchor)
        except (TypeError, ValueError):
            raise ValueError(f"anchor must be a (y, x) pair of fractions, got {anchor!r}") from None
        if not (0.0 <= ay <= 1.0 and 0.0 <= ax <= 1.0):
            raise ValueError(f"anchor fractions must be in [0, 1], got {anchor!r}")
        self.anchor = (ay, ax)
        self.scale_up = bool(scale_up)
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.border = "constant"

    def _fields(self) -> dict[str, Any]:
        return {"size": self.size, "fill": self.fill, "anchor": self.anchor, "scale_up": self.scale_up,
                "interpolation": self.interpolation}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        oh, ow = self.size
        r = np.minimum(oh / sizes[:, 0], ow / sizes[:, 1])
        if not self.scale_up:
            r = np.minimum(r, 1.0)
        h = np.clip(np.round(sizes[:, 0] * r), 1.0, oh)
        w = np.clip(np.round(sizes[:, 1] * r), 1.0, ow)
        top, left = np.floor((oh - h) * self.anchor[0]), np.floor((ow - w) * self.anchor[1])
        m = affine(len(r), a=w / sizes[:, 1], tx=left, d=h / sizes[:, 0], ty=top)
        return m, np.broadcast_to(np.array(self.size, dtype=np.float64), sizes.shape).copy()


class ScaleJitter(GeometryOp):
    """Resize each image by a random scale of the factor that fits it inside `target_size`
    (torchvision's ScaleJitter, the large-scale jitter of Copy-Paste / Mask R-CNN training).

    r = min(target_w / w, target_h / h) * s, with s uniform in `scale_range`; the sides become
    int(side * r). Sizes differ per sample: follow it with a LetterBox or a crop to a fixed
    size.
    """

    draws = 1

    def __init__(self, target_size: int | tuple[int, int], scale_range: tuple[float, float] = (0.1, 2.0),
                 interpolation: str | None = None) -> None:
        h, w = check_size("target_size", target_size)
        self.target_size = (int(h), int(w))
        self.scale_range = check_range("scale_range", scale_range, 0.0)
        if self.scale_range[0] <= 0:
            raise ValueError(f"scale_range must be positive, got {scale_range}")
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)

    def eval_form(self, style: str) -> list[Op]:
        """Scale 1: the image fitted inside target_size."""
        return [ScaleJitter(self.target_size, (1.0, 1.0), self.interpolation)]

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        lo, hi = self.scale_range
        return {"scale": lo + draws.uniform_np(0).astype(np.float64) * (hi - lo)}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        th, tw = self.target_size
        return _resized(sizes, np.minimum(tw / sizes[:, 1], th / sizes[:, 0]) * params["scale"])


class RandomShortestSize(GeometryOp):
    """Resize each image so that its shorter side is one of `min_size` (drawn per sample) and
    its longer side at most `max_size`, keeping the aspect ratio (torchvision's
    RandomShortestSize; Faster / Mask R-CNN train with (480, ..., 800) and 1333).

    r = min(s / shorter side, max_size / longer side); the sides become int(side * r).
    """

    draws = 1

    def __init__(self, min_size: int | Sequence[int], max_size: int | None = None,
                 interpolation: str | None = None) -> None:
        sizes = (min_size,) if isinstance(min_size, int) else tuple(min_size)
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(f"min_size must be an int >= 1 or a sequence of them, got {min_size!r}")
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1):
            raise ValueError(f"max_size must be an int >= 1 or None, got {max_size!r}")
        self.min_size, self.max_size = sizes, max_size
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)

    def eval_form(self, style: str) -> list[Op]:
        """The largest of min_size, always."""
        return [RandomShortestSize(max(self.min_size), self.max_size, self.interpolation)]

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        k = np.minimum((draws.uniform_np(0).astype(np.float64) * len(self.min_size)).astype(np.int64),
                       len(self.min_size) - 1)
        return {"short": np.asarray(self.min_size, dtype=np.float64)[k]}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = params["short"] / sizes.min(1)
        if self.max_size is not None:
            r = np.minimum(r, self.max_size / sizes.max(1))
        return _resized(sizes, r)
