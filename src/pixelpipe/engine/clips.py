"""augment_clips: a Compose run on clips, every frame of a clip with the clip's draws.

The N clips' T frames go through the Compose as one batch of N * T images whose sample indices
are each clip's id repeated T times: every draw of every op is a function of (seed, epoch,
sample index, op), so the frames of a clip share one draw of each op and the clips differ
(see pixelpipe.data.clips). Each image also carries its frame number in its clip (0..T-1):
ops with per_frame=True draw from (seed, epoch, clip id, frame, op) instead, a draw per frame.
Batch ops run after the frames are regrouped, on the clips as samples, so MixUp and CutMix
mix whole clips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..data.batch import ImageBatch
from ..data.clips import LAYOUTS, to_layout
from .defaults import default_engine

__all__ = ["augment_clips", "clip_batch"]


def augment_clips(compose: Any, clips: torch.Tensor | Sequence[Any], ids: Any, seed: int = 0, epoch: int = 0,
                  layout: str = "NTCHW", engine: Any = None, device: str | torch.device | None = None,
                  **values: Any) -> Any:
    """Run a Compose on N clips, every frame of a clip with the same draws (module docstring).

    Args:
        compose: a pixelpipe.Compose with layout "NCHW" (the frames' layout; `layout` gives
            the clips').
        clips: uint8 [N, T, H, W, 3] (CPU or CUDA), or N arrays/tensors [T, H, W, 3] (clips may
            differ in size, not in T).
        ids: int64 [N], each clip's global id (see clip_ids): with seed and epoch it fixes the
            clip's augmentation, whatever the batch.
        layout: "NTCHW", "NCTHW" or "NTHWC".
        engine, device: where the Compose runs (as Compose's arguments of the same names).
        values: what batch ops need, per clip: label=int64 [N] for MixUp/CutMix, and valid=
            bool [N] (rows False are neither mixed nor partners).

    Returns the clips [N, T, C, H, W] (in `layout`); with batch ops, a dict with "video" and
    what the batch ops return (e.g. soft labels under "label").

    Example:
        >>> import torch, pixelpipe as pp
        >>> t = pp.Compose([pp.RandomResizedCrop(16), pp.RandomFlip()])
        >>> pp.augment_clips(t, torch.zeros(2, 4, 24, 32, 3, dtype=torch.uint8), [0, 1]).shape
        torch.Size([2, 4, 3, 16, 16])
    """
    if compose.layout != "NCHW":
        raise ValueError(f"augment_clips needs a Compose with layout 'NCHW' (the frames' layout), got "
                         f"{compose.layout!r}; choose the clips' layout with layout=")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    if engine is not None and device is not None:
        raise ValueError("give an engine or a device, not both (the engine has its device)")
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    n = len(clips)
    if len(ids) != n:
        raise ValueError(f"{n} clips but {len(ids)} ids")
    shapes = [tuple(c.shape) for c in clips]
    for k, s in enumerate(shapes):
        if len(s) != 4 or s[3] != 3 or s[0] != shapes[0][0]:
            raise ValueError(f"clip {k} has shape {s}; every clip must be uint8 [T, H, W, 3] with the same T "
                             f"(clip 0 has {shapes[0]})")
    t = shapes[0][0] if n else 0
    frames: Any = clip_batch(clips, t)
    if frames is None:  # numpy, other dtypes, strided clips: frame by frame (to_storable's checks)
        frames = [torch.as_tensor(c[f]) for c in clips for f in range(t)]
    first = frames.data if isinstance(frames, ImageBatch) else frames[0] if len(frames) else None
    eng = engine if engine is not None else default_engine(device if device is not None else
                                                           (first.device if first is not None else None))
    program = compose.program
    if n == 0:
        c = compose.channels
        size = (0, 0)
        empty = torch.empty(0, t, c, *size, dtype=compose.dtype)
        return to_layout(empty, layout) if not program.batch_ops else {"video": to_layout(empty, layout), **values}
    prepared = eng.prepare(program, frames, seed, epoch, np.repeat(ids, t), frames=np.tile(np.arange(t), n))
    out = eng.finish(prepared)["image"]
    video = out.view(n, t, *out.shape[1:])
    if not program.batch_ops:
        return to_layout(video, layout)
    c, h, w = video.shape[2:]
    batch = program.mix({"image": video.reshape(n, t * c, h, w), **values}, seed, epoch, ids)
    batch["video"] = to_layout(batch.pop("image").view(n, t, c, h, w), layout)
    return batch


def clip_batch(clips: torch.Tensor | Sequence[Any], t: int) -> ImageBatch | None:
    """The clips' N * T frames as one ImageBatch, frame f of clip k at row k * T + f, without a
    copy per frame: a contiguous uint8 tensor [N, T, H, W, 3] is the buffer itself (a view),
    contiguous uint8 clips [T, H_k, W_k, 3] on one device are joined in one copy. None for
    anything else (numpy arrays, other dtypes, strided or mixed-device clips), which go frame by
    frame through ImageBatch.from_list. Why: frame by frame, 8 clips of 16 frames took 128 copies
    and as many per-frame checks per batch of a video pipeline."""
    if not len(clips) or t == 0:
        return None
    if isinstance(clips, torch.Tensor):
        parts = [clips] if clips.dim() == 5 else None
    else:
        parts = list(clips)
    if parts is None or not all(isinstance(c, torch.Tensor) and c.dtype == torch.uint8 and c.is_contiguous()
                                and c.device == parts[0].device for c in parts):
        return None
    shapes = np.array([c.shape[-3:-1] for c in clips] if isinstance(clips, torch.Tensor) else
                      [c.shape[1:3] for c in parts], dtype=np.int64).reshape(-1, 2)
    if (shapes == 0).any():
        return None  # from_list names the empty frame
    size = shapes[:, 0] * shapes[:, 1] * 3  # bytes a frame, per clip
    first = np.concatenate([[0], np.cumsum(size * t)[:-1]])
    table = np.empty((len(shapes) * t, 4), dtype=np.int64)
    table[:, 0] = (first[:, None] + np.arange(t)[None, :] * size[:, None]).reshape(-1)
    table[:, 1] = np.repeat(shapes[:, 0], t)
    table[:, 2] = np.repeat(shapes[:, 1], t)
    table[:, 3] = 3
    data = parts[0].reshape(-1) if len(parts) == 1 else torch.cat([c.reshape(-1) for c in parts])
    return ImageBatch.trusted(data, torch.from_numpy(table))  # made from the clips' own shapes
