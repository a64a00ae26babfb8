"""Resampling filters and border rules, shared by every warp implementation.

The filters are those Pillow uses, so that an antialiased Resize matches Pillow's resize:
triangle for bilinear (support 1) and Keys' cubic with a = -0.5 for bicubic (support 2). When
a warp shrinks by s > 1 along an axis the filter is stretched by s (support R*s) and its taps
are renormalised to sum to 1: that is the antialiasing.
"""

from __future__ import annotations

import torch

# support radius in source pixels at scale 1
SUPPORT = {"nearest": 0.5, "bilinear": 1.0, "bicubic": 2.0}
# the largest shrink factor antialiasing follows; beyond it the footprint is capped (memory and
# time grow with it) and the result is still smooth but slightly aliased
MAX_AA_SCALE = 16.0
INTERP_CODE = {"nearest": 0, "bilinear": 1, "bicubic": 2}
BORDER_CODE = {"constant": 0, "reflect": 1, "replicate": 2, "wrap": 3}


def filter_weight(t: torch.Tensor, interpolation: str) -> torch.Tensor:
    """The filter at distance t (in filter units)."""
    a = t.abs()
    if interpolation == "bilinear":
        return (1.0 - a).clamp_min(0.0)
    if interpolation == "bicubic":
        c = -0.5
        near = ((c + 2.0) * a - (c + 3.0)) * a * a + 1.0
        far = ((c * a - 5.0 * c) * a + 8.0 * c) * a - 4.0 * c
        return torch.where(a < 1.0, near, torch.where(a < 2.0, far, torch.zeros_like(a)))
    return (a < 0.5).to(t.dtype)


def border_index(k: torch.Tensor, size: torch.Tensor, border: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Map integer pixel indices k (any shape) into [0, size) by the border rule.

    Returns (index, outside): `outside` marks taps that read the fill colour ("constant").
    "reflect" mirrors without repeating the edge pixel (... 2 1 | 0 1 2 ...), as numpy's
    "reflect" and torch's reflect padding do; "replicate" repeats the edge; "wrap" tiles.
    """
    outside = (k < 0) | (k >= size)
    if border == "constant":
        return k.clamp(torch.zeros_like(size), size - 1), outside
    if border == "replicate":
        return k.clamp(torch.zeros_like(size), size - 1), torch.zeros_like(outside)
    if border == "wrap":
        return torch.remainder(k, size), torch.zeros_like(outside)
    # reflect: period 2*(size-1); a 1-pixel axis has nothing to mirror
    period = (2 * (size - 1)).clamp_min(1)
    m = torch.remainder(k, period)
    m = torch.where(m >= size, period - m, m)
    return torch.where(size > 1, m, torch.zeros_like(m)), torch.zeros_like(outside)


def rows_output(x: torch.Tensor, rows: int, owned: bool) -> torch.Tensor:
    """Where a filter of `rows` of x's samples (the rest kept) writes: x itself when the caller
    owns it, a new contiguous tensor when every sample is filtered, else a contiguous copy of x
    (the kept samples in place)."""
    if owned:
        return x
    if rows == x.shape[0]:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return x.clone(memory_format=torch.contiguous_format)
