"""Per-sample target values (boxes, keypoints, labels as users and readers give them: lists,
numpy arrays or tensors, None for none) checked and joined into the ragged rows of
`pixelpipe.data.targets`: one array for the batch and a count per sample, converted and checked
for non-finite values once per batch; a bad sample is named (SampleError) in sample order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .errors import SampleError

__all__ = ["array_of", "labels_rows", "ragged_rows"]


def array_of(v: Any) -> np.ndarray:
    if type(v) is np.ndarray:  # what readers give, once per sample and kind of target
        return v
    return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)


def ragged_rows(values: Any, n: int, width: tuple[int, ...], what: str,
          grouped: bool = False) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Per-sample arrays [K_i, w] (w in `width`; None or empty: no rows) as one float64 array
    [K, max(width)], counts [N] and None; a second accepted width is padded with ones
    (visibility). With `grouped`, samples may give [K_i, J, w] instead (K_i groups of J rows,
    the joints of K_i instances, one J for all): returned flat ([K_i * J] rows each) with J."""
    if isinstance(values, (torch.Tensor, np.ndarray)) and getattr(values, "ndim", 0) >= 3:
        values = list(values)
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} entries for {n} images (one per image, empty for none)")
    full = max(width)
    data = None if grouped else _joined_arrays(values, 2, np.float64)
    if data is not None and data.shape[1] == full:
        # what readers give (every sample an array [K_i, w], empty for none): one concatenation,
        # no per-sample checks (about half the time for 256 samples of 20 boxes)
        _check_finite(data, values, range(n), what)
        return data, np.fromiter(map(len, values), dtype=np.int64, count=n), None
    parts: list[np.ndarray] = []
    owners: list[int] = []  # the sample of each part
    counts = np.zeros(n, dtype=np.int64)
    joints, flat = None, False
    shapes = " or ".join(map(str, width))
    for i, v in enumerate(values):
        if v is None:
            continue
        a = array_of(v)
        if a.size == 0:
            continue
        problem = None
        if grouped and a.ndim == 3 and a.shape[2] in width:
            if flat or joints not in (None, a.shape[1]):
                problem = (f"{what}: shape {tuple(a.shape)}, other samples have {joints or 'no'} points per instance "
                           "(all [K, J, w] with one J, or all [K, w])")
            else:
                joints = a.shape[1]
                a = a.reshape(-1, a.shape[2])
        elif a.ndim != 2 or a.shape[1] not in width:
            more = f" or [K, J, {shapes}]" if grouped else ""
            problem = f"{what}: expected shape [K, {shapes}]{more}, got {tuple(a.shape)}"
        elif joints is not None:
            problem = f"{what}: [K, {shapes}] here, [K, {joints}, {shapes}] in other samples"
        else:
            flat = True
        if problem is not None:
            _check_finite(_joined(parts, full), parts, owners, what)  # the samples before it first, in order
            raise SampleError(i, problem)
        if a.shape[1] < full:
            a = np.concatenate([a, np.ones((len(a), full - a.shape[1]))], 1)
        parts.append(a)
        owners.append(i)
        counts[i] = len(a)
    data = _joined(parts, full)
    _check_finite(data, parts, owners, what)
    return data, counts, joints


def _joined_arrays(values: list[Any], ndim: int, dtype: Any = None) -> np.ndarray | None:
    """The values' rows as one array of `ndim` dimensions (converted to `dtype` as astype
    would, or in numpy's common type) when every value is a numpy array of that many (numpy
    checks the shapes as it joins them), else None: the per-sample path then checks each and
    names the one at fault."""
    if not values or set(map(type, values)) != {np.ndarray}:
        return None
    try:
        data = np.concatenate(values, dtype=dtype, casting="unsafe" if dtype is not None else "same_kind")
    except (ValueError, TypeError):
        return None
    return data if data.ndim == ndim else None


def _joined(parts: list[np.ndarray], width: int) -> np.ndarray:
    """The parts' rows as one float64 array [K, width] (each part converted as astype would):
    one conversion and one check for the batch, not one per sample."""
    return np.concatenate(parts, dtype=np.float64, casting="unsafe") if parts else np.zeros((0, width))


def _check_finite(data: np.ndarray, parts: list[np.ndarray], owners: Sequence[int], what: str) -> None:
    """A SampleError naming the first sample with a non-finite value in `data` (the rows of
    `parts` back to back, part j from sample owners[j]) and its row, if there is one."""
    if np.isfinite(np.add.reduce(data, axis=None)):  # one sum: NaN or inf wherever a value is one
        return  # (a sum that overflows is checked value by value below, and passes there)
    finite = np.isfinite(data).all(1)
    if finite.all():
        return
    k = int(np.argmin(finite))
    ends = np.cumsum([len(p) for p in parts])
    j = int(np.searchsorted(ends, k, side="right"))
    raise SampleError(owners[j], f"{what}: non-finite values (row {k - int(ends[j]) + len(parts[j])})")


_NO_LABELS = np.zeros(0, np.int64)


def labels_rows(values: Any, counts: np.ndarray) -> np.ndarray:
    """Per-sample class ids [K_i] (one per box) as int64 [K]."""
    if isinstance(values, (torch.Tensor, np.ndarray)) and values.ndim == 2:
        values = list(values)
    values = list(values)
    if len(values) != len(counts):
        raise ValueError(f"labels: {len(values)} entries for {len(counts)} images (one per image, a class id per box)")
    joined = _joined_arrays(values, 1)
    if (joined is not None and joined.dtype.kind in "iub"
            and np.array_equal(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), counts)):
        # what readers give: one integer array per sample, a class id per box (a float among
        # them would have made the join float)
        return joined.astype(np.int64, copy=False)
    parts = []
    for i, (v, k) in enumerate(zip(values, counts.tolist())):
        a = _NO_LABELS if v is None else array_of(v)
        if a.ndim != 1 or len(a) != k:
            raise SampleError(i, f"labels: {tuple(a.shape)} for {k} boxes (one class id per box, [K])")
        if a.dtype.kind not in "iub" and not (np.isfinite(a).all() and (a == np.round(a)).all()):
            raise SampleError(i, f"labels: class ids must be integers, got {a.tolist()[:5]}")
        parts.append(a)
    return np.concatenate(parts, dtype=np.int64, casting="unsafe") if parts else np.zeros(0, np.int64)  # as astype
