"""Matrix helpers of the geometric ops: per-sample affine matrices from numpy columns, and
per-sample values as float64 numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["affine", "host"]


def affine(n: int, a: Any = 1.0, b: Any = 0.0, tx: Any = 0.0, c: Any = 0.0, d: Any = 1.0,
           ty: Any = 0.0) -> np.ndarray:
    """float64 [N, 3, 3] matrices [[a, b, tx], [c, d, ty], [0, 0, 1]] from per-sample numpy
    arrays [N] or numbers."""
    m = np.zeros((n, 3, 3))
    m[:, 0, 0], m[:, 0, 1], m[:, 0, 2] = a, b, tx
    m[:, 1, 0], m[:, 1, 1], m[:, 1, 2] = c, d, ty
    m[:, 2, 2] = 1.0
    return m


def host(t: Any) -> np.ndarray:
    """Per-sample values as a float64 numpy array: a tensor (any device) or an array (no copy
    when it is float64 already)."""
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().to(torch.float64).numpy()
    return np.asarray(t, dtype=np.float64)
