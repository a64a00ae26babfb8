"""Mosaic (YOLOv4/v5): four images of the batch in one, split at a random centre, with their
boxes, labels and masks; a batch op.

Output image i is the 2x2 mosaic of its own image (top-left) and three partners (top-right,
bottom-left, bottom-right) laid out as YOLO lays them on its 2h x 2w canvas, each image's
corner touching the centre, seen through the h x w window whose mosaic centre is (cx, cy): the
top-left quadrant [0, cy) x [0, cx) shows the bottom-right corner of image i, the top-right one
the bottom-left corner of the second image, and so on. Each quadrant is a whole-pixel
translation of its image, so nothing is resampled: a mosaic is one gather over the batch.

What depends on the batch, as for MixUp and CutMix (pixelpipe.ops.mixing): whether a sample is
mixed and its centre are functions of (seed, epoch, sample index, op position); its partners
are the three samples after it in an order of the batch drawn from the same draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..data.targets import BOX_FORMATS, convert_boxes
from ..data.transfer import to_device
from .checks import check_choice, check_prob, check_range
from .kinds import BatchOp, Op, Params

__all__ = ["Mosaic"]


class Mosaic(BatchOp):
    """YOLO's mosaic of four images of the batch per output image, with probability p.

    Args:
        p: probability that a sample becomes a mosaic (else it is left as it is).
        center: (low, high) fractions of the width and height: the mosaic's centre is drawn
            uniform per sample in [low w, high w] x [low h, high h], whole pixels (YOLOv5's
            mosaic border of -s/2 draws it in [s/2, 3s/2] of its 2s canvas: (0.25, 0.75) here).
        min_size: boxes narrower or lower than this many pixels after the cut are dropped
            (YOLOv5's wh_thr, 2).
        min_visibility: boxes keeping less than this share of their area are dropped (YOLOv5's
            area_thr, 0.1).
        box_format: the format of the batch's boxes: the Compose's box_format (a batch op is
            not told it).

    Boxes are cut to their quadrant and moved with it; their labels (the batch's "labels")
    follow them; masks (label images) are mosaicked like the image. Keypoints are refused (a
    point cut off its box has no rule here). "kept" (SanitizeBoxes' positions) no longer
    names given boxes and is removed. Put a LetterBox or Resize((h, w)) before it: every
    image of the batch has one size. Rows whose "valid" is False (a Pipeline's padding) are
    neither mixed nor partners. The pixels are one gather on the image's device; the boxes
    (a few numbers per sample) are cut on the host, so on a GPU a batch with boxes reads them
    back once (as MixUp and CutMix read the labels).

    Example: ``Compose([LetterBox(640, fill=114), Mosaic(p=1.0)], targets="list")``.
    """

    draws = 4

    def __init__(self, p: float = 1.0, center: tuple[float, float] = (0.25, 0.75), min_size: float = 2.0,
                 min_visibility: float = 0.1, box_format: str = "xyxy") -> None:
        self.p = check_prob("p", p)
        self.center = check_range("center", center, 0.0, 1.0)
        self.min_size = float(min_size)
        if not np.isfinite(self.min_size) or self.min_size < 0:
            raise ValueError(f"min_size must be a number of pixels >= 0, got {min_size!r}")
        self.min_visibility = check_prob("min_visibility", min_visibility)
        self.box_format = check_choice("box_format", box_format, BOX_FORMATS, optional=False)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        h, w = sizes[:, 0], sizes[:, 1]
        lo, hi = self.center
        cx = np.round(w * (lo + (hi - lo) * draws.uniform_np(2).astype(np.float64)))
        cy = np.round(h * (lo + (hi - lo) * draws.uniform_np(3).astype(np.float64)))
        return {"on": draws.bernoulli_np(0, self.p), "key": draws.uniform_np(1), "cx": cx, "cy": cy,
                "index": draws.indices.cpu().numpy(), "sizes": sizes}

    def partners(self, batch: dict[str, Any], params: Params) -> tuple[np.ndarray, np.ndarray]:
        """(sources int64 [N, 4]: the rows of each quadrant (itself, then the three after it in
        the drawn order, cyclically), mixed bool [N])."""
        n = len(params["key"])
        valid = batch.get("valid")
        valid = np.ones(n, dtype=bool) if valid is None else np.asarray(torch.as_tensor(valid).cpu(), dtype=bool)
        rows = np.flatnonzero(valid)
        order = rows[np.lexsort((params["index"][rows], params["key"][rows]))]
        sources = np.tile(np.arange(n)[:, None], (1, 4))
        for q in range(1, 4):
            sources[order, q] = np.roll(order, -q)
        mixed = params["on"] & valid
        return np.where(mixed[:, None], sources, np.arange(n)[:, None]), mixed

    def apply(self, batch: dict[str, Any], params: Params, draws: Draws) -> dict[str, Any]:
        if batch.get("keypoints") is not None:
            raise ValueError("Mosaic cannot cut keypoints: drop them from the batch or mosaic the boxes only")
        x = batch["image"]
        n = x.shape[0]
        if n == 0:
            return batch
        sources, mixed = self.partners(batch, params)
        h, w = (int(v) for v in params["sizes"][0])
        cx = np.where(mixed, params["cx"], w).astype(np.int64)  # an unmixed sample is all top-left ...
        cy = np.where(mixed, params["cy"], h).astype(np.int64)  # ... shifted by (0, 0)
        maps = _maps(sources, cx, cy, (h, w), x.device)
        nchw = x.dim() == 4 and tuple(x.shape[2:]) == (h, w)
        out = {**batch, "image": _gather(x, maps, nchw)}
        out.pop("kept", None)
        masks = batch.get("masks")
        if masks is not None:
            out["masks"] = _gather(masks, maps, masks.dim() == 4 and tuple(masks.shape[2:]) == (h, w))
        if batch.get("boxes") is not None:
            out.update(self._boxes(batch, sources, cx, cy, (h, w)))
        return out

    def _boxes(self, batch: dict[str, Any], sources: np.ndarray, cx: np.ndarray, cy: np.ndarray,
               size: tuple[int, int]) -> dict[str, Any]:
        """The boxes (and labels) of each mosaic: each quadrant's source boxes moved, cut to the
        quadrant, and kept by min_size and min_visibility; in the batch's form (list or padded)."""
        h, w = size
        boxes, labels, padded = _unpad(batch)
        device = boxes[0].device if boxes else torch.device("cpu")
        wh = np.array([w, h], dtype=np.float64)
        xyxy = [convert_boxes(b.cpu().numpy(), self.box_format, "xyxy", wh) for b in boxes]
        own = [None if labels is None else lab.cpu().numpy() for lab in (labels or [None] * len(boxes))]
        out_boxes, out_labels = [], []
        for i in range(len(boxes)):
            parts, part_labels = [], []
            for q in range(4):
                s = sources[i, q]
                right, bottom = q in (1, 3), q in (2, 3)
                dx = (cx[i] if right else cx[i] - w)  # the quadrant's source pixel x + dx = output x
                dy = (cy[i] if bottom else cy[i] - h)
                x0, x1 = (cx[i], w) if right else (0, cx[i])
                y0, y1 = (cy[i], h) if bottom else (0, cy[i])
                if x1 <= x0 or y1 <= y0 or not len(xyxy[s]):
                    continue
                b = xyxy[s] + np.array([dx, dy, dx, dy], dtype=np.float64)
                cut = np.stack([np.clip(b[:, 0], x0, x1), np.clip(b[:, 1], y0, y1),
                                np.clip(b[:, 2], x0, x1), np.clip(b[:, 3], y0, y1)], 1)
                bw, bh = cut[:, 2] - cut[:, 0], cut[:, 3] - cut[:, 1]
                area = np.maximum((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), 1e-12)
                keep = (bw >= self.min_size) & (bh >= self.min_size) & (bw * bh >= self.min_visibility * area)
                parts.append(cut[keep])
                if own[s] is not None:
                    part_labels.append(own[s][keep])
            merged = np.concatenate(parts) if parts else np.zeros((0, 4))
            out_boxes.append(convert_boxes(merged, "xyxy", self.box_format, wh).astype(np.float32))
            if labels is not None:
                out_labels.append(np.concatenate(part_labels) if part_labels else np.zeros(0, dtype=np.int64))
        return _repad(out_boxes, out_labels if labels is not None else None, padded, device)


def _maps(sources: np.ndarray, cx: np.ndarray, cy: np.ndarray, size: tuple[int, int],
          device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """int64 [N, H, W] each: the source row, row and column of every output pixel."""
    h, w = size
    src, x0, y0 = (to_device(np.ascontiguousarray(v), device) for v in (sources, cx, cy))
    ys = torch.arange(h, device=device).view(1, h, 1)
    xs = torch.arange(w, device=device).view(1, 1, w)
    bottom = ys >= y0.view(-1, 1, 1)
    right = xs >= x0.view(-1, 1, 1)
    quadrant = bottom.to(torch.int64) * 2 + right.to(torch.int64)  # 0 tl, 1 tr, 2 bl, 3 br
    rows = torch.gather(src, 1, quadrant.view(len(sources), -1)).view(-1, h, w)
    # top quadrants show their images' bottom (row y + h - cy), bottom ones their top (y - cy)
    sy = ys - y0.view(-1, 1, 1) + torch.where(bottom, 0, h)
    sx = xs - x0.view(-1, 1, 1) + torch.where(right, 0, w)
    return rows, sy.expand(-1, h, w), sx.expand(-1, h, w)


def _gather(x: torch.Tensor, maps: tuple[torch.Tensor, torch.Tensor, torch.Tensor], nchw: bool) -> torch.Tensor:
    """x's pixels at the maps: [N, C, H, W] (nchw), [N, H, W, C] or [N, H, W]."""
    rows, sy, sx = maps
    if nchw:
        return x[rows, :, sy, sx].permute(0, 3, 1, 2).contiguous()
    return x[rows, sy, sx].contiguous()


def _unpad(batch: dict[str, Any]) -> tuple[list[torch.Tensor], list[torch.Tensor] | None, bool]:
    """The batch's boxes and labels as lists of per-sample tensors, and whether they came padded."""
    boxes, labels = batch["boxes"], batch.get("labels")
    if "box_counts" not in batch:
        return list(boxes), None if labels is None else list(labels), False
    counts = torch.as_tensor(batch["box_counts"]).cpu().tolist()
    return ([boxes[i, :c] for i, c in enumerate(counts)],
            None if labels is None else [labels[i, :c] for i, c in enumerate(counts)], True)


def _repad(boxes: list[np.ndarray], labels: list[np.ndarray] | None, padded: bool,
           device: torch.device) -> dict[str, Any]:
    """Per-sample boxes (and labels) in the batch's form: lists, or padded with "box_counts"."""
    if not padded:
        out: dict[str, Any] = {"boxes": [to_device(b, device) for b in boxes]}
        if labels is not None:
            out["labels"] = [to_device(lab.astype(np.int64), device) for lab in labels]
        return out
    counts = np.array([len(b) for b in boxes], dtype=np.int64)
    most = int(counts.max()) if len(counts) else 0
    pb = np.zeros((len(boxes), most, 4), dtype=np.float32)
    pl = np.full((len(boxes), most), -1, dtype=np.int64)
    for i, b in enumerate(boxes):
        pb[i, :len(b)] = b
        if labels is not None:
            pl[i, :len(b)] = labels[i]
    out = {"boxes": to_device(pb, device), "box_counts": to_device(counts, device)}
    if labels is not None:
        out["labels"] = to_device(pl, device)
    return out
