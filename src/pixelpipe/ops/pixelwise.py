"""Small tensor helpers the pixel and batch ops share: per-sample numbers as broadcastable
tensors, grey levels, mirrored indices and rectangles in output coordinates.

The ops compute their per-sample parameters on the host (numpy [N] arrays, see
`pixelpipe.ops.kinds`); these helpers bring them to the image's device in one copy each, so
no op branches on a sample in Python.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..data.random import Draws
from ..data.transfer import to_device

__all__ = ["column", "draws_of_rows", "grey_levels", "inside", "pad_reflect", "reflect_indices", "where_on"]

# the dtypes numpy can hold, for a cast before the copy (bfloat16 is cast on the device)
_NUMPY_TWIN = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.bool: np.bool_,
               torch.int64: np.int64, torch.int32: np.int32, torch.uint8: np.uint8}


def column(values: np.ndarray, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Per-sample values (numpy [N]) as a tensor [N, 1, 1, 1] on x's device, of x's dtype
    (or `dtype`), ready to broadcast against an [N, C, H, W] batch."""
    values = np.asarray(values)
    want = torch.bool if values.dtype == np.bool_ else (dtype or x.dtype)
    if want in _NUMPY_TWIN:  # cast on the host, one asynchronous copy
        return to_device(values.astype(_NUMPY_TWIN[want], copy=False), x.device).view(-1, 1, 1, 1)
    return to_device(values, x.device).to(want).view(-1, 1, 1, 1)


def where_on(on: np.ndarray, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """torch.where(column(on, x), out, x) for a per-sample flag (numpy bool [N]): `out` itself
    where every flag is set (an augmentation policy's operations always are), `x` where none
    is, the select only for a mix: the same values, without a pass over the batch when the
    flags agree."""
    on = np.asarray(on, dtype=bool)
    if on.all():
        return out
    if not on.any():
        return x
    return torch.where(column(on, x), out, x)


def grey_levels(x: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Grey levels round(255 x), clamped to 0..255, as int64 (indices for a gather or a
    histogram) or `dtype`: the uint8 image a [0, 1] float image stands for (exact for images
    that came in as uint8 and were not resampled)."""
    return (x * 255.0).round_().clamp_(0, 255).to(dtype)


def reflect_indices(n: int, before: int, after: int, device: torch.device) -> torch.Tensor:
    """int64 [before + n + after]: the source index of each position of a row of n values padded
    by mirroring without repeating the edge (torch's and numpy's "reflect": ... 2 1 | 0 1 2 ...
    n-1 | n-2 ...), for any padding, also wider than the row (the mirror repeats)."""
    i = torch.arange(-before, n + after, device=device)
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = i.remainder(period)
    return torch.where(i < n, i, period - i)


def pad_reflect(x: torch.Tensor, dim: int, before: int, after: int) -> torch.Tensor:
    """x [N, C, H, W] padded along dim 2 or 3 by mirroring (reflect_indices' rule): torch's
    reflection pad where it applies (padding shorter than the axis), a gather otherwise. The
    same values either way; on the CPU the gather along the last axis was 20x slower."""
    size = x.shape[dim]
    if 0 <= before < size and 0 <= after < size and x.dim() == 4:
        pad = (before, after, 0, 0) if dim == 3 else (0, 0, before, after)
        return F.pad(x, pad, mode="reflect")
    return x.index_select(dim, reflect_indices(size, before, after, x.device))


def inside(y0: np.ndarray, x0: np.ndarray, y1: np.ndarray, x1: np.ndarray, shape: tuple[int, int],
           device: torch.device) -> torch.Tensor:
    """bool [N, 1, H, W]: pixel (i, j) of sample n lies in rows [y0[n], y1[n]) and columns
    [x0[n], x1[n]) (integer pixel bounds, numpy [N]; empty where y1 <= y0 or x1 <= x0)."""
    h, w = shape
    b = to_device(np.stack([y0, y1, x0, x1], 1).astype(np.int64), device)
    rows = torch.arange(h, device=device).view(1, h)
    cols = torch.arange(w, device=device).view(1, w)
    in_rows = (rows >= b[:, 0:1]) & (rows < b[:, 1:2])  # [N, H]
    in_cols = (cols >= b[:, 2:3]) & (cols < b[:, 3:4])  # [N, W]
    return (in_rows[:, :, None] & in_cols[:, None, :]).unsqueeze(1)


def draws_of_rows(draws: Draws, rows: np.ndarray) -> Draws:
    """The draws of some samples of a batch (host int64 row numbers): the same numbers for
    them as in the whole batch, per-pixel fields included, so an op can make noise for the
    rows it changes alone."""
    idx = draws.indices.detach().cpu().numpy()[rows]
    epoch = draws.epoch[rows] if isinstance(draws.epoch, np.ndarray) else draws.epoch
    return Draws(draws.seed, epoch, idx, draws.op, draws.prefix_np()[rows])
