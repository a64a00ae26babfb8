"""Targets: what travels with each image and moves with it. Boxes, keypoints and masks.

Each kind knows how a stage's per-sample matrix moves it: boxes and keypoints on the host, in
numpy, all samples of a batch in one evaluation (they are few numbers); masks are label images,
resampled on the images' device by the nearest-neighbour warp (pixelpipe.kernels.reference.masks)
with the same matrices. Coordinates are those of the images (pixel (row i, column j) covers
[j, j+1) x [i, i+1)), in the displayed orientation of encoded images (EXIF applied).

Boxes and keypoints are ragged: one array of all the batch's rows and a count per sample, so no
step loops over samples in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import SampleError

__all__ = ["Boxes", "Keypoints", "Masks", "Targets", "TARGET_KEYS"]

TARGET_KEYS = ("boxes", "keypoints", "masks")


def _rows(values: Any, n: int, width: tuple[int, ...], what: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample arrays [K_i, w] (w in `width`; None or empty: no rows) as one float64 array
    [K, max(width)] and counts [N]; a second accepted width is padded with ones (visibility)."""
    if isinstance(values, (torch.Tensor, np.ndarray)) and getattr(values, "ndim", 0) == 3:
        values = list(values)
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} entries for {n} images (one per image, empty for none)")
    parts, counts = [], np.zeros(n, dtype=np.int64)
    full = max(width)
    for i, v in enumerate(values):
        if v is None:
            continue
        a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        if a.size == 0:
            continue
        if a.ndim != 2 or a.shape[1] not in width:
            raise SampleError(i, f"{what}: expected shape [K, {' or '.join(map(str, width))}], got {tuple(a.shape)}")
        a = a.astype(np.float64)
        if not np.isfinite(a).all():
            raise SampleError(i, f"{what}: non-finite values (row {int(np.argmin(np.isfinite(a).all(1)))})")
        if a.shape[1] < full:
            a = np.concatenate([a, np.ones((len(a), full - a.shape[1]))], 1)
        parts.append(a)
        counts[i] = len(a)
    data = np.concatenate(parts) if parts else np.zeros((0, full))
    return data, counts


def transform_points(matrix: np.ndarray, points: np.ndarray, sample: np.ndarray) -> np.ndarray:
    """Points [K, 2] (x, y), each through the matrix of its sample (`sample`: [K] positions
    into matrix [N, 3, 3]), perspective division included: [K, 2]."""
    m = matrix[sample]
    x, y = points[:, 0], points[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        pz = m[:, 2, 0] * x + m[:, 2, 1] * y + m[:, 2, 2]
        u = (m[:, 0, 0] * x + m[:, 0, 1] * y + m[:, 0, 2]) / pz
        v = (m[:, 1, 0] * x + m[:, 1, 1] * y + m[:, 1, 2]) / pz
    return np.stack([u, v], 1)


class _Ragged:
    """Rows of every sample in one array, with per-sample counts."""

    def __init__(self, data: np.ndarray, counts: np.ndarray) -> None:
        self.data, self.counts = data, np.asarray(counts, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.counts)

    def sample_of(self) -> np.ndarray:
        """int64 [K]: the batch position of each row."""
        return np.repeat(np.arange(len(self.counts)), self.counts)

    def rows(self, sel: slice) -> Any:
        """The rows of samples sel (a slice of the batch)."""
        ends = np.concatenate([[0], np.cumsum(self.counts)])
        idx = range(len(self.counts))[sel]
        if not len(idx):
            return type(self)(self.data[:0], self.counts[:0])
        if idx.step == 1:
            return type(self)(self.data[ends[idx.start]:ends[idx.stop]], self.counts[sel])
        keep = np.concatenate([np.arange(ends[i], ends[i + 1]) for i in idx])
        return type(self)(self.data[keep], self.counts[sel])

    def tensors(self, device: torch.device | str = "cpu") -> list[torch.Tensor]:
        """One float32 tensor per sample, views of one upload to `device`."""
        flat = torch.from_numpy(self.data.astype(np.float32)).to(device)
        return list(torch.split(flat, self.counts.tolist()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self.counts.sum())} rows over {len(self)} samples)"


class Boxes(_Ragged):
    """Per-sample boxes: `data` float64 [K, 4] as (x0, y0, x1, y1) in pixels, `counts` [N].

    A box covers [x0, x1) x [y0, y1). Moved by a matrix, it becomes the box that encloses its
    four transformed corners (for flips, crops and resizes exactly the moved box), clipped to
    the output image."""

    @classmethod
    def from_samples(cls, values: Any, n: int) -> Boxes:
        data, counts = _rows(values, n, (4,), "boxes")
        bad = (data[:, 2] < data[:, 0]) | (data[:, 3] < data[:, 1])
        if bad.any():
            k = int(np.argmax(bad))
            i = int(np.repeat(np.arange(n), counts)[k])
            raise SampleError(i, f"boxes: box {data[k].tolist()} has x1 < x0 or y1 < y0 "
                                 "(boxes are (x0, y0, x1, y1) in pixels)")
        return cls(data, counts)

    def moved(self, matrix: np.ndarray, out_sizes: np.ndarray) -> Boxes:
        if not len(self.data):
            return Boxes(self.data.copy(), self.counts)
        x0, y0, x1, y1 = self.data.T
        sample = np.repeat(self.sample_of(), 4)
        corners = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1),
                            np.stack([x0, y1], 1)], 1).reshape(-1, 2)
        moved = transform_points(matrix, corners, sample).reshape(-1, 4, 2)
        lo, hi = moved.min(1), moved.max(1)
        wh = out_sizes[self.sample_of()][:, ::-1]  # (w, h) per box
        lo = np.clip(lo, 0.0, wh)
        hi = np.clip(hi, 0.0, wh)
        return Boxes(np.concatenate([lo, hi], 1), self.counts)


class Keypoints(_Ragged):
    """Per-sample keypoints: `data` float64 [K, 3] as (x, y, visibility), `counts` [N]. Given
    as [K, 2], every point is visible (1). Moved by a matrix, a point keeps its coordinates
    (even outside the image) and becomes invisible (0) when it leaves the output image."""

    @classmethod
    def from_samples(cls, values: Any, n: int) -> Keypoints:
        return cls(*_rows(values, n, (2, 3), "keypoints"))

    def moved(self, matrix: np.ndarray, out_sizes: np.ndarray) -> Keypoints:
        if not len(self.data):
            return Keypoints(self.data.copy(), self.counts)
        sample = self.sample_of()
        uv = transform_points(matrix, self.data[:, :2], sample)
        h, w = out_sizes[sample, 0], out_sizes[sample, 1]
        inside = (uv[:, 0] >= 0) & (uv[:, 0] < w) & (uv[:, 1] >= 0) & (uv[:, 1] < h)
        vis = np.where(np.isfinite(uv).all(1) & inside, self.data[:, 2], 0.0)
        return Keypoints(np.concatenate([uv, vis[:, None]], 1), self.counts)


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
    """The targets of a batch (any of them may be absent)."""

    boxes: Boxes | None = None
    keypoints: Keypoints | None = None
    masks: Masks | None = None

    @classmethod
    def from_args(cls, n: int, boxes: Any = None, keypoints: Any = None, masks: Any = None) -> Targets:
        return cls(None if boxes is None else Boxes.from_samples(boxes, n),
                   None if keypoints is None else Keypoints.from_samples(keypoints, n),
                   None if masks is None else Masks.from_samples(masks, n))

    def __bool__(self) -> bool:
        return self.boxes is not None or self.keypoints is not None or self.masks is not None

    def rows(self, sel: slice) -> Targets:
        return Targets(*(None if t is None else t.rows(sel) for t in (self.boxes, self.keypoints, self.masks)))

    def moved(self, matrix: np.ndarray, out_sizes: np.ndarray) -> Targets:
        """Boxes and keypoints through the matrices (masks are warped by the engine)."""
        return Targets(None if self.boxes is None else self.boxes.moved(matrix, out_sizes),
                       None if self.keypoints is None else self.keypoints.moved(matrix, out_sizes), self.masks)


def sample_values(items: Sequence[dict[str, Any] | None], key: str) -> list[Any] | None:
    """The values of `key` across per-sample target dicts (None where a sample has none), or
    None when no sample has it."""
    values = [None if d is None else d.get(key) for d in items]
    return values if any(v is not None for v in values) else None
