"""Targets: what travels with each image and moves with it. Boxes (with their class labels),
keypoints and masks; the formats boxes come and go in; the rules that drop boxes; the output
forms (lists, padded tensors, torchvision's detection dicts).

Each kind knows how a stage's per-sample matrix moves it: boxes and keypoints on the host, in
numpy, all samples of a batch in one evaluation (they are few numbers); masks are label images,
resampled on the images' device by the nearest-neighbour warp (pixelpipe.kernels.reference.masks)
with the same matrices; a displacement field moves them by a map of points (`moved_by`,
plan.deform). Coordinates are those of the images (pixel (row i, column j) covers [j, j+1) x
[i, i+1)), in the displayed orientation of encoded images (EXIF applied).

Boxes and keypoints are ragged: one array of all the batch's rows and a count per sample, so no
step loops over samples in Python. Inside, boxes are always (x0, y0, x1, y1) pixels; a Compose's
`box_format` is converted on the way in (Engine.prepare, where the image sizes are known) and on
the way out (`TargetForm.outputs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import is_not
from typing import Any

import numpy as np
import torch

from .errors import SampleError
from .keypoint_pairs import check_flip_pairs
from .points import box_outline, transform_points
from .target_rows import labels_rows, ragged_rows
from .transfer import Upload, to_device

__all__ = ["BOX_FORMATS", "BoxRules", "Boxes", "Keypoints", "Masks", "TARGET_FORMS", "TARGET_KEYS", "TargetForm",
           "Targets", "convert_boxes", "targets_of", "to_detection"]

# the per-image target keys of a Compose call and of a reader's dict samples ("labels": the
# boxes' class ids, one per box)
TARGET_KEYS = ("boxes", "labels", "keypoints", "masks")
# corners, corner + size, centre + size; with "n": divided by the image's width and height
BOX_FORMATS = ("xyxy", "xywh", "cxcywh", "xyxyn", "xywhn", "cxcywhn")
TARGET_FORMS = ("list", "padded")
_GET = dict.get


def convert_boxes(boxes: Any, source: str, dest: str, wh: np.ndarray | None = None) -> np.ndarray:
    """Boxes [K, 4] from format `source` to `dest` (BOX_FORMATS), float64. wh: [K, 2] or [2]
    (width, height) of each box's image, needed when a format is normalised (ends in "n").

    Example: ``convert_boxes([[20, 30, 100, 120]], "xywh", "xyxy")`` is [[20, 30, 120, 150]]."""
    a = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    for f in (source, dest):
        if f not in BOX_FORMATS:
            raise ValueError(f"box format must be one of {', '.join(map(repr, BOX_FORMATS))}, got {f!r}")
    if source == dest:
        return a
    s, d = source.removesuffix("n"), dest.removesuffix("n")
    scale = None
    if s != source or d != dest:
        if wh is None:
            raise ValueError(f"converting {source!r} to {dest!r} needs the images' sizes")
        scale = np.tile(np.asarray(wh, dtype=np.float64).reshape(-1, 2), 2)  # (w, h, w, h)
    if s != source:
        a = a * scale
    if s == "xywh":
        a = np.concatenate([a[:, :2], a[:, :2] + a[:, 2:]], 1)
    elif s == "cxcywh":
        a = np.concatenate([a[:, :2] - a[:, 2:] / 2, a[:, :2] + a[:, 2:] / 2], 1)
    if d == "xywh":
        a = np.concatenate([a[:, :2], a[:, 2:] - a[:, :2]], 1)
    elif d == "cxcywh":
        a = np.concatenate([(a[:, :2] + a[:, 2:]) / 2, a[:, 2:] - a[:, :2]], 1)
    if d != dest:
        a = a / scale
    return a


class _Ragged:
    """Rows of every sample in one array, with per-sample counts."""

    def __init__(self, data: np.ndarray, counts: np.ndarray) -> None:
        self.data, self.counts = data, np.asarray(counts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.counts)

    def sample_of(self) -> np.ndarray:
        """int64 [K]: the batch position of each row."""
        return np.repeat(np.arange(len(self.counts)), self.counts)

    def _take(self, index: np.ndarray, counts: np.ndarray) -> Any:
        return type(self)(self.data[index], counts)

    def rows(self, sel: slice) -> Any:
        """The rows of samples sel (a slice of the batch)."""
        ends = np.concatenate([[0], np.cumsum(self.counts)])
        idx = range(len(self.counts))[sel]
        if not len(idx):
            index = np.zeros(0, np.int64)
        elif idx.step == 1:
            index = np.arange(ends[idx.start], ends[idx.stop])
        else:
            index = np.concatenate([np.arange(ends[i], ends[i + 1]) for i in idx])
        return self._take(index, self.counts[sel])


    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self.counts.sum())} rows over {len(self)} samples)"


class Boxes(_Ragged):
    """Per-sample boxes: `data` float64 [K, 4] as (x0, y0, x1, y1) in pixels, `counts` [N],
    `labels` int64 [K] (their class ids) or None, `visible` float64 [K]: the fraction of each
    moved box that clipping kept (1 as given; multiplied at each stage).

    A box covers [x0, x1) x [y0, y1). Moved by a matrix, it becomes the box that encloses its
    four transformed corners (for flips, crops and resizes exactly the moved box), clipped to
    the output image."""

    def __init__(self, data: np.ndarray, counts: np.ndarray, labels: np.ndarray | None = None,
                 visible: np.ndarray | None = None) -> None:
        super().__init__(data, counts)
        self.labels = labels
        self.visible = np.ones(len(data)) if visible is None else visible

    def _take(self, index: np.ndarray, counts: np.ndarray) -> Boxes:
        return Boxes(self.data[index], counts, None if self.labels is None else self.labels[index],
                     self.visible[index])

    @classmethod
    def from_samples(cls, values: Any, n: int, labels: Any = None) -> Boxes:
        data, counts, _ = ragged_rows(values, n, (4,), "boxes")
        return cls(data, counts, None if labels is None else labels_rows(labels, counts))

    def in_pixels(self, box_format: str, sizes: np.ndarray) -> Boxes:
        """These boxes, given in `box_format`, as (x0, y0, x1, y1) pixels; sizes: float64 [N, 2]
        (height, width) of their images. A box with x1 < x0 or y1 < y0 is a SampleError."""
        wh = sizes[self.sample_of()][:, ::-1] if box_format.endswith("n") else None
        data = convert_boxes(self.data, box_format, "xyxy", wh)
        bad = (data[:, 2] < data[:, 0]) | (data[:, 3] < data[:, 1])
        if bad.any():
            k = int(np.argmax(bad))
            what = ("x1 < x0 or y1 < y0 (boxes are (x0, y0, x1, y1) in pixels)" if box_format == "xyxy"
                    else f"a negative width or height (box_format {box_format!r}), so x1 < x0 or y1 < y0")
            raise SampleError(int(self.sample_of()[k]), f"boxes: box {self.data[k].tolist()} has {what}")
        return Boxes(data, self.counts, self.labels, self.visible)

    def moved(self, matrix: np.ndarray, out_sizes: np.ndarray) -> Boxes:
        return self.moved_by(lambda p, s: transform_points(matrix, p, s), out_sizes)

    def moved_by(self, move: Any, out_sizes: np.ndarray, per_edge: int = 2) -> Boxes:
        """The boxes through a map of points, move(points [K, 2], sample [K]) -> [K, 2]: each
        becomes the box enclosing its outline moved at `per_edge` points per edge (outlines:
        2, the corners, for matrices; more for a map that bends lines), clipped to the image."""
        if not len(self.data):
            return Boxes(self.data.copy(), self.counts, self.labels, self.visible)
        corners = box_outline(self.data, per_edge)
        k = corners.shape[1]
        moved = move(corners.reshape(-1, 2), np.repeat(self.sample_of(), k)).reshape(-1, k, 2)
        lo, hi = moved.min(1), moved.max(1)
        whole = np.prod(hi - lo, 1)
        wh = out_sizes[self.sample_of()][:, ::-1]  # (w, h) per box
        lo = np.clip(lo, 0.0, wh)
        hi = np.clip(hi, 0.0, wh)
        with np.errstate(divide="ignore", invalid="ignore"):
            kept = np.where(whole > 0, np.prod(hi - lo, 1) / whole, 1.0)
        return Boxes(np.concatenate([lo, hi], 1), self.counts, self.labels, self.visible * np.nan_to_num(kept))


class Keypoints(_Ragged):
    """Per-sample keypoints: `data` float64 [K, 3] as (x, y, visibility), `counts` [N] (rows).
    Given as [K, 2], every point is visible (1). Given as [K, J, 2 or 3] per sample, they are
    instances of `joints` = J points each (COCO's person keypoints: one instance per box), kept
    flat here. Moved by a matrix, a point keeps its coordinates (even outside the image) and
    becomes invisible (0) when it leaves the output image."""

    def __init__(self, data: np.ndarray, counts: np.ndarray, joints: int | None = None) -> None:
        super().__init__(data, counts)
        self.joints = joints

    def _take(self, index: np.ndarray, counts: np.ndarray) -> Keypoints:
        return Keypoints(self.data[index], counts, self.joints)

    @classmethod
    def from_samples(cls, values: Any, n: int) -> Keypoints:
        return cls(*ragged_rows(values, n, (2, 3), "keypoints", grouped=True))

    def instances(self) -> np.ndarray:
        """int64 [N]: instances per sample (rows, when not grouped)."""
        return self.counts // (self.joints or 1)

    def moved(self, matrix: np.ndarray, out_sizes: np.ndarray) -> Keypoints:
        return self.moved_by(lambda p, s: transform_points(matrix, p, s), out_sizes)

    def moved_by(self, move: Any, out_sizes: np.ndarray) -> Keypoints:
        """The points through a map: move(points [K, 2], sample [K]) -> [K, 2]."""
        if not len(self.data):
            return Keypoints(self.data.copy(), self.counts, self.joints)
        sample = self.sample_of()
        uv = move(self.data[:, :2], sample)
        h, w = out_sizes[sample, 0], out_sizes[sample, 1]
        inside = (uv[:, 0] >= 0) & (uv[:, 0] < w) & (uv[:, 1] >= 0) & (uv[:, 1] < h)
        vis = np.where(np.isfinite(uv).all(1) & inside, self.data[:, 2], 0.0)
        return Keypoints(np.concatenate([uv, vis[:, None]], 1), self.counts, self.joints)


class Masks:
    """Per-sample label images the size of their image: integer or bool tensors [H_i, W_i]
    (one label map) or [H_i, W_i, C] (C channels, e.g. one per instance), all of one dtype and
    channel count, on any device, held as [H_i, W_i, C]; after a warp, one tensor [N, H, W, C].
    `planar` says whether they were given without a channel axis."""

    def __init__(self, items: list[torch.Tensor] | torch.Tensor, planar: bool) -> None:
        self.items, self.planar = items, planar

    def __len__(self) -> int:
        return len(self.items)

    @classmethod
    def from_samples(cls, values: Any, n: int) -> Masks:
        if isinstance(values, (torch.Tensor, np.ndarray)) and values.ndim in (3, 4):
            values = list(values)
        values = list(values)
        if len(values) != n:
            raise ValueError(f"masks: {len(values)} entries for {n} images (one label image per image)")
        items, planar, dtype = [], None, None
        for i, v in enumerate(values):
            t = torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
            if not isinstance(t, torch.Tensor):
                raise SampleError(i, f"masks: expected a tensor or numpy array, got {type(v).__name__}")
            if t.is_floating_point() or t.is_complex():
                raise SampleError(i, f"masks: label images must be integer or bool, got {t.dtype}")
            if t.dim() not in (2, 3):
                raise SampleError(i, f"masks: expected [H, W] or [H, W, C], got shape {tuple(t.shape)}")
            flat = t.dim() == 2
            if planar is None:
                planar, dtype = flat, t.dtype
            if items and (flat != planar or t.shape[-1:] != items[0].shape[-1:] and not flat):
                raise SampleError(i, f"masks: shape {tuple(t.shape)} differs in channels from sample 0's "
                                     f"{tuple(items[0].shape)}")
            if t.dtype != dtype:
                raise SampleError(i, f"masks: dtype {t.dtype} differs from sample 0's {dtype}")
            items.append(t.unsqueeze(-1) if flat else t)
        return cls(items, bool(planar) if planar is not None else True)

    def check_sizes(self, sizes: np.ndarray) -> None:
        """Every mask has its image's (height, width) (`sizes` [N, 2], displayed)."""
        for i, (t, hw) in enumerate(zip(self.items, np.round(sizes).astype(np.int64).tolist())):
            if list(t.shape[:2]) != hw:
                raise SampleError(i, f"masks: {tuple(t.shape[:2])} is not the size of its image {tuple(hw)} "
                                     "(height, width)")

    def rows(self, sel: slice) -> Masks:
        return Masks(self.items[sel], self.planar)


@dataclass
class Targets:
    """The targets of a batch (any of them may be absent); the boxes hold their labels."""

    boxes: Boxes | None = None
    keypoints: Keypoints | None = None
    masks: Masks | None = None

    @classmethod
    def from_args(cls, n: int, boxes: Any = None, keypoints: Any = None, masks: Any = None,
                  labels: Any = None) -> Targets:
        if labels is not None and boxes is None:
            raise ValueError("labels are the boxes' class ids (one per box) and need boxes; pass per-image "
                             "values under another name")
        b = None if boxes is None else Boxes.from_samples(boxes, n, labels)
        k = None if keypoints is None else Keypoints.from_samples(keypoints, n)
        if b is not None and k is not None and k.joints is not None and (k.instances() != b.counts).any():
            i = int(np.argmax(k.instances() != b.counts))
            raise SampleError(i, f"keypoints: {int(k.instances()[i])} instances for {int(b.counts[i])} boxes "
                                 "(keypoints given as [K, J, 3] belong to the boxes, one instance per box)")
        return cls(b, k, None if masks is None else Masks.from_samples(masks, n))

    def __bool__(self) -> bool:
        return self.boxes is not None or self.keypoints is not None or self.masks is not None

    def rows(self, sel: slice) -> Targets:
        return Targets(*(None if t is None else t.rows(sel) for t in (self.boxes, self.keypoints, self.masks)))

    def moved(self, matrix: np.ndarray, out_sizes: np.ndarray) -> Targets:
        """Boxes and keypoints through the matrices (masks are warped by the engine)."""
        return Targets(None if self.boxes is None else self.boxes.moved(matrix, out_sizes),
                       None if self.keypoints is None else self.keypoints.moved(matrix, out_sizes), self.masks)


@dataclass(frozen=True)
class BoxRules:
    """Which moved boxes are kept (pixelpipe.SanitizeBoxes holds one): those at least
    `min_size` pixels wide and high, of at least `min_area` square pixels, and of which at
    least `min_visibility` of the moved box's area lies inside the image."""

    min_area: float = 1.0
    min_visibility: float = 0.0
    min_size: float = 1.0

    def apply(self, targets: Targets) -> tuple[Targets, _Ragged]:
        """The targets without the boxes these rules drop (their labels go with them, and their
        keypoints when those are per box), and per sample the original positions of the kept."""
        b = targets.boxes
        assert b is not None
        w, h = b.data[:, 2] - b.data[:, 0], b.data[:, 3] - b.data[:, 1]
        keep = (w >= self.min_size) & (h >= self.min_size) & (w * h >= self.min_area) & (b.visible >= self.min_visibility)
        sample = b.sample_of()
        counts = np.bincount(sample[keep], minlength=len(b))
        first = np.concatenate([[0], np.cumsum(b.counts)[:-1]])
        kept = _Ragged((np.arange(len(sample)) - first[sample])[keep], counts)
        k = targets.keypoints
        if k is not None and k.joints is not None:
            k = k._take(np.flatnonzero(np.repeat(keep, k.joints)), counts * k.joints)
        return Targets(b._take(np.flatnonzero(keep), counts), k, targets.masks), kept


def _host_rows(values: np.ndarray, counts: np.ndarray, form: str, fill: float) -> np.ndarray:
    """What goes to the device of rows [K, ...] of ragged samples: the rows as they are ("list")
    or one array [N, max K, ...] padded with `fill` ("padded"), made on the host."""
    if form == "list":
        return np.ascontiguousarray(values)
    n, most = len(counts), int(counts.max()) if len(counts) else 0
    out = np.full((n, most, *values.shape[1:]), fill, dtype=values.dtype)
    sample = np.repeat(np.arange(n), counts)
    row = np.arange(len(sample)) - np.concatenate([[0], np.cumsum(counts)[:-1]])[sample]
    out[sample, row] = values
    return out


class _Outputs:
    """The target entries of a batch sent to the device in one copy (data.transfer.Upload):
    `add` each (a ragged one with its counts and form), then `send` gives them there, a ragged
    "list" entry split into a tensor per sample. Why: a copy per entry took a pinned block and
    a copy each (boxes, labels, kept, keypoints, counts), in the thread that finishes batches."""

    def __init__(self, form: str) -> None:
        self.form = form
        self.upload = Upload()
        self.entries: list[tuple[str, np.ndarray | None]] = []

    def add(self, name: str, values: np.ndarray, dtype: torch.dtype, counts: np.ndarray | None = None,
            fill: float = 0.0) -> None:
        self.upload.add(values if counts is None else _host_rows(values, counts, self.form, fill), dtype)
        self.entries.append((name, counts))

    def send(self, device: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (name, counts), t in zip(self.entries, self.upload.send(torch.device(device))):
            out[name] = list(t.split_with_sizes(counts.tolist())) if counts is not None and self.form == "list" else t
        return out


@dataclass(frozen=True)
class TargetForm:
    """How boxes come in and targets go out (a Compose's `box_format` and `targets`), the
    rules that drop boxes (its SanitizeBoxes, if any), the keypoints' left/right pairs
    (its `flip_pairs`, see data.keypoint_pairs) and whether boxes follow their masks (its
    `boxes_from_masks`)."""

    box_format: str = "xyxy"
    form: str = "list"
    rules: BoxRules | None = None
    flip_pairs: tuple[tuple[int, int], ...] = ()  # left/right joints, swapped where a sample is mirrored
    boxes_from_masks: bool = False  # each moved box is its warped mask's box (data.mask_boxes)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flip_pairs", check_flip_pairs(self.flip_pairs))
        if self.box_format not in BOX_FORMATS:
            raise ValueError(f"box_format must be one of {', '.join(map(repr, BOX_FORMATS))}, got {self.box_format!r}")
        if self.form not in TARGET_FORMS:
            raise ValueError(f"targets must be 'list' or 'padded', got {self.form!r}")

    def outputs(self, targets: Targets, size: tuple[int, int], device: Any) -> dict[str, Any]:
        """The batch entries of boxes, labels and keypoints (and "kept" with rules) of targets
        moved into images of `size` (h, w): see Compose for their forms. They go to `device`
        in one copy."""
        b, k, form = targets.boxes, targets.keypoints, self.form
        out = _Outputs(form)
        if b is not None and self.rules is not None:
            targets, kept = self.rules.apply(targets)
            b, k = targets.boxes, targets.keypoints
            out.add("kept", kept.data, torch.int64, kept.counts, -1)
        if b is not None:
            data = convert_boxes(b.data, "xyxy", self.box_format, np.array(size[::-1], dtype=np.float64))
            out.add("boxes", data.astype(np.float32), torch.float32, b.counts, 0.0)
            if b.labels is not None:
                out.add("labels", b.labels, torch.int64, b.counts, -1)
            if form == "padded":
                out.add("box_counts", b.counts, torch.int64)
        if k is not None:
            data = k.data.astype(np.float32)
            if k.joints is not None:
                data = data.reshape(-1, k.joints, 3)
            out.add("keypoints", data, torch.float32, k.instances(), 0.0)
            if form == "padded":
                out.add("keypoint_counts", k.instances(), torch.int64)
        return out.send(device)


def to_detection(batch: dict[str, Any], box_format: str = "xyxy") -> list[dict[str, torch.Tensor]]:
    """A batch's targets as torchvision's detection models take them: one dict per image with
    "boxes" (float32 [K, 4], (x0, y0, x1, y1) pixels), "labels" (int64 [K]) and, where the
    batch has them, "masks" (uint8 [K, H, W], one binary mask per box) and "keypoints"
    (float32 [K, J, 3]).

    box_format: the format of the batch's boxes (its Compose's). Lists and the padded form
    ("box_counts") are both read. Masks are read as an instance map [N, H, W] (pixel value
    k + 1 marks box k, 0 no box: what the COCO reader's masks="instances" gives) or as one
    channel per box [N, C, H, W] (channel k is box k); boxes a SanitizeBoxes dropped are matched
    by their original positions (the batch's "kept").

    Example:
        >>> import torch, pixelpipe as pp
        >>> from pixelpipe.data.targets import to_detection
        >>> out = pp.Compose([pp.Resize((32, 32))])([torch.zeros(64, 64, 3, dtype=torch.uint8)],
        ...                                         boxes=[[[8, 8, 40, 24]]], labels=[[7]])
        >>> to_detection(out)[0]["boxes"].tolist(), to_detection(out)[0]["labels"].tolist()
        ([[4.0, 4.0, 20.0, 12.0]], [7])
    """
    if "boxes" not in batch or "labels" not in batch:
        raise ValueError("to_detection needs the batch's 'boxes' and their 'labels' (give labels= beside boxes=)")
    image = batch["image"]
    n, (h, w) = image.shape[0], image.shape[-2:]
    counts = batch.get("box_counts")
    counts = None if counts is None else counts.tolist()  # one read of the counts, not one per sample
    cut = (lambda v, i: v[i]) if counts is None else (lambda v, i: v[i, : counts[i]])
    masks, kept = batch.get("masks"), batch.get("kept")
    all_boxes = batch["boxes"]
    if box_format != "xyxy":  # the whole batch's boxes in one conversion
        def to_xyxy(b: torch.Tensor) -> torch.Tensor:
            flat = convert_boxes(b.reshape(-1, 4).cpu().numpy(), box_format, "xyxy", np.array([w, h]))
            return to_device(flat.astype(np.float32), b.device).view(b.shape)

        if isinstance(all_boxes, torch.Tensor):
            all_boxes = to_xyxy(all_boxes)
        else:
            sizes = [len(b) for b in all_boxes]
            all_boxes = list(torch.split(to_xyxy(torch.cat(all_boxes)), sizes)) if all_boxes else []
    kc = batch.get("keypoint_counts")
    kc = None if kc is None else kc.tolist()
    out = []
    for i in range(n):
        boxes = cut(all_boxes, i)
        d = {"boxes": boxes, "labels": cut(batch["labels"], i)}
        if masks is not None:
            m = masks[i]
            where = cut(kept, i) if kept is not None else torch.arange(len(boxes), device=m.device)
            if m.dim() == 2:  # an instance map
                d["masks"] = (m.unsqueeze(0) == (where.to(m.device) + 1).view(-1, 1, 1).to(m.dtype)).to(torch.uint8)
            else:
                d["masks"] = (m[where.to(m.device)] != 0).to(torch.uint8)
        if "keypoints" in batch:
            d["keypoints"] = batch["keypoints"][i] if kc is None else batch["keypoints"][i][: kc[i]]
        out.append(d)
    return out


def targets_of(dicts: Sequence[dict[str, Any] | None]) -> Targets | None:
    """The targets of a batch from its samples' target dicts (None where a sample has none);
    None when no sample has any."""
    if not any(dicts):
        return None
    given = {k: v for k in TARGET_KEYS if (v := sample_values(dicts, k)) is not None}
    return Targets.from_args(len(dicts), **given) if given else None


def sample_values(items: Sequence[dict[str, Any] | None], key: str) -> list[Any] | None:
    """The values of `key` across per-sample target dicts (None where a sample has none), or
    None when no sample has it."""
    try:  # every sample a dict (what readers of targets give): the lookups in one C loop
        values = list(map(_GET, items, repeat(key, len(items))))
    except TypeError:  # a sample without targets (None), or a mapping that is not a dict
        values = [None if d is None else d.get(key) for d in items]
    return values if any(map(is_not, values, repeat(None))) else None
