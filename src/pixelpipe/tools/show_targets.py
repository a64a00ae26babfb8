"""Targets drawn on an image for `show`: boxes as outlines, label masks as a coloured overlay,
keypoints as dots (visible ones only), each label and each instance in its own colour.

Drawn at the image's own resolution before it is fitted into its tile, with lines as thick as
one tile pixel, so that a box on a large image stays visible once shrunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["draw_targets", "palette", "sample_targets"]

MASK_ALPHA = 0.45  # how much of a labelled pixel is its label's colour


def palette(k: int) -> tuple[int, int, int]:
    """A distinct, saturated colour for label or instance k (golden-angle hues)."""
    import colorsys

    r, g, b = colorsys.hsv_to_rgb((k * 0.381966) % 1.0, 0.85, 1.0)
    return int(r * 255), int(g * 255), int(b * 255)


def _numpy(v: Any) -> np.ndarray:
    return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)


def draw_targets(img: np.ndarray, tile: int, boxes: Any = None, labels: Any = None, masks: Any = None,
                 keypoints: Any = None) -> np.ndarray:
    """`img` (HWC uint8 RGB) with its targets drawn on a copy.

    Args:
        img: the image the targets belong to.
        tile: the side of the tile it will be shown in (sets the line width).
        boxes: [K, 4] corners (x0, y0, x1, y1) in the image's pixels.
        labels: [K] class ids of the boxes (their colours; default: one per box).
        masks: a label image [H, W] (0 is background) or [C, H, W] / [H, W, C] channels of one
            label each (the channel's index + 1 is its colour).
        keypoints: [K, 3] or [K, J, 3] (x, y, visibility); points with visibility 0 are not drawn.
    """
    from PIL import Image, ImageDraw

    out = img.copy()
    h, w = out.shape[:2]
    if masks is not None:
        m = _numpy(masks)
        if m.ndim == 3:  # one channel per label (channel c is label c + 1); the last one set wins
            m = m if m.shape[:2] == (h, w) else np.moveaxis(m, 0, -1)
            last = m.shape[-1] - np.argmax(m[..., ::-1] != 0, -1)  # 1 + the last set channel
            m = np.where(m.any(-1), last, 0)
        if m.shape != (h, w):
            raise ValueError(f"the mask is {m.shape}, the image {(h, w)}")
        ids = np.unique(m[m != 0])
        if len(ids):
            colours = np.array([palette(int(k)) for k in ids], dtype=np.float64)
            where = np.searchsorted(ids, m)
            labelled = m != 0
            blend = out[labelled].astype(np.float64) * (1 - MASK_ALPHA) + colours[where[labelled]] * MASK_ALPHA
            out[labelled] = np.round(blend).astype(np.uint8)
    if boxes is None and keypoints is None:
        return out
    pil = Image.fromarray(out)
    draw = ImageDraw.Draw(pil)
    line = max(1, round(max(h, w) / max(tile, 1)))
    if boxes is not None:
        b = _numpy(boxes).reshape(-1, 4)
        lab = _numpy(labels).reshape(-1) if labels is not None else np.arange(len(b))
        for (x0, y0, x1, y1), k in zip(b.tolist(), lab.tolist()):
            if x1 > x0 and y1 > y0:
                draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=palette(int(k)), width=line)
    if keypoints is not None:
        kp = _numpy(keypoints)
        kp = kp.reshape(-1, kp.shape[-2] if kp.ndim == 3 else 1, kp.shape[-1])
        r = 1.5 * line
        for n, inst in enumerate(kp):
            for x, y, *vis in inst.tolist():
                if (vis and vis[0] <= 0) or not (np.isfinite(x) and np.isfinite(y)):
                    continue
                draw.ellipse([x - r, y - r, x + r, y + r], fill=palette(n + 7), outline=(0, 0, 0))
    return np.asarray(pil)


def sample_targets(out: dict[str, Any], i: int, box_format: str) -> dict[str, Any]:
    """Sample i's targets in a Compose's output dict (list or padded form), boxes as corners
    in the output image's pixels: what draw_targets takes."""
    from ..data.targets import convert_boxes

    got: dict[str, Any] = {}
    image = out["image"]
    hw = image.shape[-2:] if image.shape[1] in (1, 3) else image.shape[1:3]
    padded = "box_counts" in out or "keypoint_counts" in out
    if "boxes" in out:
        k = int(out["box_counts"][i]) if padded else None
        b = _numpy(out["boxes"][i])[:k]
        got["boxes"] = convert_boxes(b, box_format, "xyxy", np.array([hw[1], hw[0]], dtype=np.float64))
        if "labels" in out:
            got["labels"] = _numpy(out["labels"][i])[:k]
    if "keypoints" in out:
        k = int(out["keypoint_counts"][i]) if padded else None
        got["keypoints"] = _numpy(out["keypoints"][i])[:k]
    if "masks" in out:
        got["masks"] = _numpy(out["masks"][i])
    return got
