"""Detection ops: the SSD crop sampler (RandomIoUCrop) that looks at each sample's boxes, the
zoom-out paste (RandomZoomOut), and SanitizeBoxes, which drops the boxes the geometry shrank
or pushed out of the picture. The crops are geometric ops like any other: their per-sample
matrices fold into the stage's one warp, and boxes, keypoints and masks follow them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.random import Draws
from ..data.targets import BoxRules, Targets
from .checks import check_fill, check_finite, check_prob, check_range
from .kinds import GeometryOp, Op, Params, TargetsOp
from .matrices import affine

__all__ = ["RandomIoUCrop", "RandomZoomOut", "SanitizeBoxes"]

SSD_OPTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)  # SSD's minimum IoUs; 1.0: leave the image whole
TRIAL_CHUNK = 8  # trials checked against the boxes at once


def _window(params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The matrix and output size of cutting window (top, left, height, width) out of each image."""
    m = affine(len(sizes), tx=-params["left"], ty=-params["top"])
    return m, np.stack([params["height"], params["width"]], 1)


class RandomIoUCrop(GeometryOp):
    """The SSD crop sampler (torchvision's RandomIoUCrop, DALI's random_bbox_crop): per sample,
    a crop that overlaps the sample's boxes by at least a minimum IoU drawn from
    `sampler_options`.

    Each round draws one option; 1.0 (or more) leaves the image whole, any other m tries
    `trials` windows of width and height each a fraction in [min_scale, max_scale] of the
    image's (whole pixels, truncated), with width / height in [min_aspect_ratio,
    max_aspect_ratio], at a uniform position; the first window that holds at least one box
    centre (strictly inside) and whose IoU with at least one of those boxes is >= m is the crop.
    A round without one goes on to the next option, as torchvision loops; after `rounds` rounds
    (or for a sample without boxes) the image stays whole. The output size is the window's,
    so follow it with a Resize.

    Boxes are clipped to the crop, not removed: torchvision removes the boxes whose centre left
    the crop; a SanitizeBoxes(min_visibility=...) after it drops boxes that lost most of their
    area. The op sees each sample's boxes as the ops before it in its stage moved them.

    Example: ``[pp.RandomZoomOut(), pp.RandomIoUCrop(), pp.Resize((300, 300)), pp.RandomFlip(),
    pp.SanitizeBoxes()]`` is the SSD pipeline's geometry, in one warp.
    """

    needs_targets = True

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5,
                 max_aspect_ratio: float = 2.0, sampler_options: Sequence[float] | None = None, trials: int = 40,
                 rounds: int = 10) -> None:
        self.min_scale, self.max_scale = check_range("min_scale, max_scale", (min_scale, max_scale), 0.0, 1.0)
        self.min_aspect_ratio, self.max_aspect_ratio = check_range(
            "min_aspect_ratio, max_aspect_ratio", (min_aspect_ratio, max_aspect_ratio), 0.0)
        options = SSD_OPTIONS if sampler_options is None else tuple(
            check_finite("sampler_options", v) for v in sampler_options)
        if not options:
            raise ValueError("sampler_options must hold at least one minimum IoU")
        self.sampler_options = options
        for name, v in (("trials", trials), ("rounds", rounds)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.trials, self.rounds = trials, rounds

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray, targets: Targets | None = None) -> Params:  # type: ignore[override]
        n, t = len(sizes), self.trials
        H, W = sizes[:, :1], sizes[:, 1:]
        top, left, h, w = np.zeros(n), np.zeros(n), sizes[:, 0].copy(), sizes[:, 1].copy()
        open_ = np.ones(n, dtype=bool)  # no option taken yet
        boxes = None if targets is None or targets.boxes is None or not len(targets.boxes.data) else targets.boxes
        options = np.asarray(self.sampler_options, dtype=np.float64)
        per_round = 1 + 4 * t
        for r in range(self.rounds):
            u = draws.uniforms_np(range(r * per_round, (r + 1) * per_round)).astype(np.float64)
            option = options[np.minimum((u[:, 0] * len(options)).astype(np.int64), len(options) - 1)]
            open_ &= option < 1.0  # 1.0: the image stays whole
            if boxes is None or not open_.any():
                break
            q = u[:, 1:].reshape(n, t, 4)
            cw = np.floor(W * (self.min_scale + (self.max_scale - self.min_scale) * q[..., 0]))
            ch = np.floor(H * (self.min_scale + (self.max_scale - self.min_scale) * q[..., 1]))
            with np.errstate(divide="ignore", invalid="ignore"):
                aspect = cw / ch
            cl, ct = np.floor((W - cw) * q[..., 2]), np.floor((H - ch) * q[..., 3])
            fits = (ch > 0) & (cw > 0) & (aspect >= self.min_aspect_ratio) & (aspect <= self.max_aspect_ratio)
            # the trials in chunks, for the samples still open: most take one of the first few
            for start in range(0, t, TRIAL_CHUNK):
                rows = np.flatnonzero(open_)
                if not len(rows):
                    break
                c = slice(start, start + TRIAL_CHUNK)
                window = tuple(v[rows, c] for v in (ct, cl, ch, cw))
                ok = fits[rows, c] & (_best_iou(boxes, rows, *window) >= option[rows, None])
                hit = ok.any(1)
                done, pick = rows[hit], ok.argmax(1)[hit]
                for out, v in zip((top, left, h, w), window):
                    out[done] = v[hit, pick]
                open_[done] = False
            if not open_.any():
                break
        return {"top": top, "left": left, "height": h, "width": w}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _window(params, sizes)


def _best_iou(boxes: Any, rows: np.ndarray, top: np.ndarray, left: np.ndarray, h: np.ndarray,
              w: np.ndarray) -> np.ndarray:
    """float64 [R, T]: for samples `rows` and their candidate windows (top, left, h, w, each
    [R, T]), the best IoU of a window with a box whose centre lies strictly inside it; -1 where
    none does."""
    best = np.full(top.shape, -1.0)
    counts = boxes.counts[rows]
    starts = np.concatenate([[0], np.cumsum(boxes.counts)[:-1]])[rows]
    j = np.repeat(np.arange(len(rows)), counts)  # each box's position in rows
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    k = np.repeat(starts, counts) + np.arange(len(j)) - np.repeat(first, counts)
    if not len(k):
        return best
    x0, y0, x1, y1 = (boxes.data[k, i : i + 1] for i in range(4))
    cl, ct, cw, ch = left[j], top[j], w[j], h[j]
    cr, cb = cl + cw, ct + ch
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    inside = (cl < cx) & (cx < cr) & (ct < cy) & (cy < cb)
    iw = np.minimum(x1, cr) - np.maximum(x0, cl)
    ih = np.minimum(y1, cb) - np.maximum(y0, ct)
    inter = np.maximum(iw, 0) * np.maximum(ih, 0)
    union = (x1 - x0) * (y1 - y0) + cw * ch - inter
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    iou[~inside] = -1.0
    have = np.flatnonzero(counts)
    best[have] = np.maximum.reduceat(iou, first[have], axis=0)
    return best


class RandomZoomOut(GeometryOp):
    """Place the image on a larger canvas filled with `fill` (torchvision's RandomZoomOut, DALI's
    paste), with probability p.

    The canvas side is the image's times r, r uniform in `side_range` (whole pixels,
    truncated), and the image sits at a uniform position on it. The output size is the
    canvas's, so follow it with a Resize (or a RandomIoUCrop, then a Resize). Boxes shrink
    with the image when the Resize brings the canvas back to size: the small-object
    augmentation of SSD.
    """

    draws = 4

    def __init__(self, fill: Any = None, side_range: tuple[float, float] = (1.0, 4.0), p: float = 0.5) -> None:
        self.side_range = check_range("side_range", side_range, 1.0)
        self.p = check_prob("p", p)
        self.fill = check_fill(fill)
        self.border = "constant"

    def _fields(self) -> dict[str, Any]:
        return {"fill": self.fill, "side_range": self.side_range, "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        u = draws.uniforms_np(4).astype(np.float64)
        lo, hi = self.side_range
        r = lo + u[:, 0] * (hi - lo)
        H, W = sizes[:, 0], sizes[:, 1]
        ch, cw = np.floor(H * r), np.floor(W * r)
        on = u[:, 3] < self.p
        left, top = np.floor((cw - W) * u[:, 1]), np.floor((ch - H) * u[:, 2])
        # where the image's top-left corner lands on the canvas, and the canvas's size
        return {"top": np.where(on, top, 0.0), "left": np.where(on, left, 0.0),
                "height": np.where(on, ch, H), "width": np.where(on, cw, W)}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = affine(len(sizes), tx=params["left"], ty=params["top"])
        return m, np.stack([params["height"], params["width"]], 1)


class SanitizeBoxes(TargetsOp):
    """Drop the boxes that the geometry made too small or pushed out of the picture, with
    their labels and their keypoints when those are per box (torchvision's
    SanitizeBoundingBoxes, albumentations' min_area / min_visibility).

    A box is kept when it is at least `min_size` pixels wide and high, covers at least
    `min_area` square pixels, and at least `min_visibility` of the area of the moved box
    (before clipping, over all stages) lies inside the output image. The batch's "kept" says
    which boxes stayed: per sample, their positions among the boxes given (int64). The rules
    apply to the moved boxes before they are put in the output form; like a batch op it stands
    at the end of the ops (a Compose takes one). Masks are not changed
    (pixelpipe.data.targets.to_detection picks the kept boxes' instance masks).
    """

    deterministic = True

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0, min_visibility: float = 0.0) -> None:
        size, area = check_finite("min_size", min_size), check_finite("min_area", min_area)
        if size < 0 or area < 0:
            raise ValueError(f"min_size and min_area must be >= 0, got {size} and {area}")
        self.box_rules = BoxRules(area, check_prob("min_visibility", min_visibility), size)

    def _fields(self) -> dict[str, Any]:
        r = self.box_rules
        return {"min_size": r.min_size, "min_area": r.min_area, "min_visibility": r.min_visibility}

