"""show_clips: each clip of a batch as a strip of its frames, one row per clip, to see at a
glance that every frame of a clip got the same crop, flip and colour change and that clips
differ. Takes what a VideoPipeline yields (or a clips tensor) and gives a PIL image."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..data.clips import LAYOUTS

__all__ = ["show_clips"]


def show_clips(batch: dict[str, Any] | torch.Tensor, path: str | os.PathLike[str] | None = None, *,
               layout: str = "NTCHW", frames: int = 8, tile: int = 96, mean: Sequence[float] | None = None,
               std: Sequence[float] | None = None) -> Any:
    """A grid, one row per clip: up to `frames` of its frames, evenly spaced, left to right,
    captioned with the clip's label, video index and frame numbers when the batch has them.

    Args:
        batch: a VideoPipeline batch dict ("video", and "label", "index", "frames"), or a
            clips tensor.
        path: write the grid there as PNG when given.
        layout: the clips' layout ("NTCHW", "NCTHW" or "NTHWC"): a VideoPipeline's `layout`.
        frames: at most this many frames per clip are drawn.
        tile: side of each frame's square tile, in pixels.
        mean, std: how float clips were normalised (default: the ImageNet values when their
            values leave [0, 1]).

    Example:
        >>> import torch, pixelpipe as pp
        >>> clips = torch.zeros(2, 4, 3, 16, 16, dtype=torch.uint8)
        >>> pp.show_clips(clips, frames=4, tile=32).size
        (158, 114)
    """
    from .show import _chunks, _render, _to_uint8, _unnormalize

    video = batch["video"] if isinstance(batch, dict) else batch
    if not isinstance(video, torch.Tensor) or video.dim() != 5:
        raise ValueError(f"expected clips [N, T, C, H, W] (or another 5-D layout), got "
                         f"{getattr(video, 'shape', type(video).__name__)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    if frames < 1 or tile < 8:
        raise ValueError(f"frames must be >= 1 and tile >= 8, got frames={frames}, tile={tile}")
    x = video.detach().cpu()
    x = {"NTCHW": x, "NCTHW": x.permute(0, 2, 1, 3, 4), "NTHWC": x.permute(0, 1, 4, 2, 3)}[layout]
    n, t = x.shape[:2]
    pick = np.unique(np.linspace(0, t - 1, min(frames, t)).round().astype(np.int64)) if t else np.zeros(0, np.int64)
    x = x[:, torch.from_numpy(pick)]
    if x.dtype != torch.uint8:
        x = x.float()
        if mean is not None or std is not None or (x.numel() and (x.min() < 0 or x.max() > 1)):
            from ..presets import IMAGENET_MEAN, IMAGENET_STD

            flat = x.reshape(-1, *x.shape[2:])
            flat = _unnormalize(flat, IMAGENET_MEAN if mean is None else mean, IMAGENET_STD if std is None else std)
            x = flat.reshape(x.shape)
        x = _to_uint8(x)
    rows = [[_rgb(f.permute(1, 2, 0).numpy()) for f in clip] for clip in x]
    captions = [[_caption(batch, i, pick)] + [""] * (len(pick) - 1) for i in range(n)]
    grid = _render(rows, captions, None, tile) if rows else _render(_chunks([], 1), [], None, tile)
    if path is not None:
        grid.save(path)
    return grid


def _rgb(a: np.ndarray) -> np.ndarray:
    return np.repeat(a[:, :, :1], 3, axis=2) if a.shape[2] == 1 else np.ascontiguousarray(a[:, :, :3])


def _caption(batch: Any, i: int, pick: np.ndarray) -> str:
    if not isinstance(batch, dict):
        return f"clip {i}"
    parts = []
    for key, name in (("label", "label"), ("index", "video")):
        v = batch.get(key)
        if isinstance(v, torch.Tensor) and v.dim() == 1:
            parts.append(f"{name} {int(v[i])}")
    f = batch.get("frames")
    if isinstance(f, torch.Tensor) and f.dim() == 2 and len(pick):
        parts.append("frames " + ", ".join(str(int(f[i, k])) for k in pick.tolist()))
    return ", ".join(parts) or f"clip {i}"
