"""Boxes from instance masks: after a rotation, a shear or a perspective warp, the box that
encloses a box's four moved corners is larger than the object (a rotated square's box grows by
up to 41%); the box that encloses the object's moved mask is not. A Compose made with
`boxes_from_masks=True` replaces each moved box by the box of its instance's warped mask.

Which mask is a box's: with masks given per image as [H, W, C], channel k is box k's (nonzero
inside); as one label image [H, W], box k's pixels hold k + 1 (an instance map, as
`to_detection` reads it). A box whose mask is empty after the warp (the object left the image)
becomes an empty box at the origin with visibility 0, so SanitizeBoxes drops it.

The masks are already warped on the image's device; the boxes (a few numbers per sample) live
on the host, so this reads 4 numbers per box back once per stage.
"""

from __future__ import annotations

import numpy as np
import torch

from .errors import SampleError
from .targets import Boxes, Masks

__all__ = ["boxes_from_masks"]


def boxes_from_masks(boxes: Boxes, masks: Masks) -> Boxes:
    """`boxes` with each box replaced by the box (x0, y0, x1, y1, pixels) of its warped mask
    (module docstring): masks holds one tensor [N, H, W, C] (warped). SampleError for a sample
    whose masks do not give one channel (or one instance id) per box."""
    m = masks.items if isinstance(masks.items, torch.Tensor) else torch.stack(list(masks.items))
    counts = boxes.counts
    n, h, w, c = m.shape
    k_max = int(counts.max()) if len(counts) else 0
    if k_max == 0:
        return boxes
    if masks.planar:  # an instance map: box k is where the label is k + 1
        present_cols = torch.zeros((n, k_max, w), dtype=torch.bool, device=m.device)
        present_rows = torch.zeros((n, k_max, h), dtype=torch.bool, device=m.device)
        labels = m[..., 0]
        for k in range(k_max):
            inside = labels == k + 1
            present_cols[:, k] = inside.any(1)
            present_rows[:, k] = inside.any(2)
    else:
        wrong = np.flatnonzero(counts != c)
        if len(wrong):
            i = int(wrong[0])
            raise SampleError(i, f"boxes_from_masks: {int(counts[i])} boxes and {c} mask channels (one channel per "
                                 "box, or a label image [H, W] whose value k + 1 marks box k)")
        inside = m != 0
        present_cols = inside.any(1).permute(0, 2, 1)  # [N, C, W]
        present_rows = inside.any(2).permute(0, 2, 1)  # [N, C, H]
    x0, x1 = _extent(present_cols)
    y0, y1 = _extent(present_rows)
    found = present_cols.any(2)
    table = torch.stack([x0, y0, x1, y1, found.to(x0.dtype)], -1).cpu().numpy()  # [N, K, 5]: one read
    sample = boxes.sample_of()
    slot = np.arange(len(sample)) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    rows = table[sample, slot]
    hit = rows[:, 4] > 0
    data = np.where(hit[:, None], rows[:, :4], 0.0).astype(np.float64)
    return Boxes(data, counts, boxes.labels, np.where(hit, boxes.visible, 0.0))


def _extent(present: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First index and last index + 1 of the True entries along the last axis (0, 0 where none)."""
    size = present.shape[-1]
    pos = torch.arange(size, device=present.device, dtype=torch.float64)
    first = torch.where(present, pos, float(size)).amin(-1)
    last = torch.where(present, pos + 1, 0.0).amax(-1)
    return torch.where(first < size, first, 0.0), last
