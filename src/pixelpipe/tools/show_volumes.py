"""show_volumes: the three orthogonal middle slices of each volume, its label map overlaid, as
one PNG grid: to see what an augmentation does to a batch of volumes at a glance."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

__all__ = ["show_volumes", "slice_tiles"]

# overlay colours of label values 1, 2, 3, ... (cycled): red, green, blue, yellow, magenta, cyan
_COLOURS = np.array([[230, 40, 40], [40, 200, 60], [60, 90, 240], [240, 220, 40], [220, 60, 220], [40, 210, 220]],
                    dtype=np.float32)


def _grey(slice_: np.ndarray) -> np.ndarray:
    """float [h, w] -> uint8 grey, stretched between the slice's 1st and 99th percentiles."""
    lo, hi = np.percentile(slice_, [1, 99]) if slice_.size else (0.0, 1.0)
    scaled = (slice_ - lo) / max(hi - lo, 1e-6)
    return (np.clip(scaled, 0, 1) * 255).astype(np.uint8)


def _tile(img: np.ndarray, lab: np.ndarray | None, tile: int, alpha: float) -> np.ndarray:
    """One slice as an RGB uint8 [tile, tile, 3] (aspect kept, centred on black), labels over it."""
    from PIL import Image

    rgb = np.repeat(_grey(img)[..., None], 3, -1).astype(np.float32)
    if lab is not None:
        on = lab > 0
        colour = _COLOURS[(np.maximum(lab, 1) - 1) % len(_COLOURS)]
        rgb[on] = (1 - alpha) * rgb[on] + alpha * colour[on]
    h, w = img.shape
    scale = tile / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    pic = np.asarray(Image.fromarray(rgb.astype(np.uint8)).resize(size, Image.NEAREST))
    out = np.zeros((tile, tile, 3), dtype=np.uint8)
    y, x = (tile - pic.shape[0]) // 2, (tile - pic.shape[1]) // 2
    out[y : y + pic.shape[0], x : x + pic.shape[1]] = pic
    return out


def slice_tiles(volume: np.ndarray, label: np.ndarray | None, tile: int, alpha: float = 0.45) -> list[np.ndarray]:
    """The middle slices across axis 0, 1 and 2 of one volume [D, H, W] (any real dtype), each
    an RGB uint8 [tile, tile, 3] with the label map's non-zero values overlaid."""
    v = np.asarray(volume, dtype=np.float32)
    d, h, w = v.shape
    cuts = (np.s_[d // 2], np.s_[:, h // 2], np.s_[:, :, w // 2])
    return [_tile(v[cut], None if label is None else np.asarray(label)[cut], tile, alpha) for cut in cuts]


def show_volumes(batch: dict[str, Any] | torch.Tensor, path: str | os.PathLike[str] | None = None,
                 tile: int = 128, alpha: float = 0.45, channel: int = 0) -> Any:
    """A grid, one row per volume: its middle slices across axis 0, axis 1 and axis 2, with the
    label map's non-zero values overlaid in colour (one colour per value).

    Args:
        batch: a Compose3D output dict ("image" [N, C, D, H, W], optional "label"), or an image
            tensor [N, C, D, H, W].
        path: write the grid there as PNG when given.
        tile: each slice's square tile, pixels.
        alpha: the label overlay's opacity.
        channel: which channel to draw.

    Returns the grid as a PIL image.

    Example:
        >>> import torch, pixelpipe as pp
        >>> out = pp.Compose3D([pp.RandomFlip3D()])([torch.zeros(8, 9, 10)], labels=[torch.ones(8, 9, 10, dtype=torch.uint8)])
        >>> pp.show_volumes(out, tile=32).size
        (96, 32)
    """
    from PIL import Image

    image = batch["image"] if isinstance(batch, dict) else batch
    label = batch.get("label") if isinstance(batch, dict) else None
    if image.dim() != 5:
        raise ValueError(f"expected volumes [N, C, D, H, W], got shape {tuple(image.shape)}")
    if not 0 <= channel < image.shape[1]:
        raise ValueError(f"channel must be in [0, {image.shape[1]}), got {channel}")
    if tile < 8:
        raise ValueError(f"tile must be >= 8 pixels, got {tile}")
    vols = image[:, channel].detach().float().cpu().numpy()
    labs = None if label is None else label[:, 0].detach().cpu().numpy()
    rows = [np.concatenate(slice_tiles(v, None if labs is None else labs[n], tile, alpha), 1)
            for n, v in enumerate(vols)]
    grid = np.concatenate(rows, 0) if rows else np.zeros((tile, 3 * tile, 3), dtype=np.uint8)
    pic = Image.fromarray(grid)
    if path is not None:
        pic.save(os.fspath(path), format="PNG")
    return pic
