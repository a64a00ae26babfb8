"""The CPU forms of the grey-level operations: posterize, solarize, equalize and timm's
SolarizeAdd, for float32 [N, C, H, W] images in [0, 1] on the CPU (`fast(x)` says whether x is one).

Each gives the same numbers as its twin, the device-independent torch form the op runs
elsewhere (`levels.posterize_reference` and its siblings; tests/test_ops_levels_cpu.py checks
them equal, bit for bit), with other torch calls. Why: on one CPU thread (torch 2.13, 224x224
images) the twins' slowest calls cost far more than a pass of arithmetic (about 0.02-0.05 ms an
image): torch.where with a per-pixel mask 1.9 ms an image, a scatter_add_ histogram 1.2 ms, a
gather through per-channel tables 1.1 ms. Here:

- masks are floats of 0 and 1 (`at_least_zero_`) and selections torch.lerp with those weights,
  which gives either end exactly;
- posterize masks the low bits of a whole grey level l by floor(l / 2**k) * 2**k, exact in
  float32, instead of a round trip through integers;
- equalize's histograms are numpy's bincount, its tables applied by index_select, one channel
  at a time.
"""

from __future__ import annotations

import numpy as np
import torch

from .pixelwise import column

__all__ = ["at_least_zero_", "equalize_cpu", "fast", "float_levels", "posterize_cpu", "solarize_add_cpu",
           "solarize_cpu"]

_INV255 = np.float32(1.0 / 255.0)  # what torch makes of the twins' `* (1.0 / 255.0)` on float32


def fast(x: torch.Tensor) -> bool:
    """Whether x takes these forms: a float32 tensor on the CPU."""
    return x.device.type == "cpu" and x.dtype == torch.float32


def float_levels(x: torch.Tensor) -> torch.Tensor:
    """The grey levels round(255 x), clamped to 0..255, as whole float32 numbers (a new tensor):
    `pixelwise.grey_levels` before its cast to integers."""
    return (x * 255.0).round_().clamp_(0.0, 255.0)


def at_least_zero_(d: torch.Tensor) -> torch.Tensor:
    """In place: 1.0 where d >= 0 (-0.0 included), 0.0 where d < 0 (d free of NaN)."""
    return d.sign_().add_(1.0).clamp_(max=1.0)


def posterize_cpu(x: torch.Tensor, bits: np.ndarray) -> torch.Tensor:
    """Keep the `bits` (numpy int [N], 0..8) highest bits of each grey level, as float32 levels
    / 255: posterize_reference's numbers. A power of two 2**k divides and multiplies exactly,
    and q / 255 rounds to q times the float32 of 1 / 255, so level & mask times 1/255 and
    floor(level / q) times q / 255 are the same float32 number."""
    q = np.exp2(8.0 - np.asarray(bits, dtype=np.float64))
    return float_levels(x).mul_(column(1.0 / q, x)).floor_().mul_(column(q / 255.0, x))


def solarize_cpu(x: torch.Tensor, at: np.ndarray, on: np.ndarray) -> torch.Tensor:
    """1 - x where x * 255 >= at (at: grey levels, numpy [N], made float32 as the twin does)
    and the sample's flag `on` is set, x elsewhere. The sign of x * 255 - at decides: a
    rounded difference of two floats is 0 only where they are equal."""
    w = at_least_zero_((x * 255.0).sub_(column(at, x)))
    on = np.asarray(on, dtype=bool)
    if not on.all():
        w.mul_(column(on.astype(np.float32), x))
    return torch.lerp(x, torch.rsub(x, 1.0), w)


def solarize_add_cpu(x: torch.Tensor, add: np.ndarray) -> torch.Tensor:
    """timm's SolarizeAdd: grey levels below 128 raised by `add` (whole numbers >= 0, numpy
    [N]), at most to 255, as levels / 255. On whole levels l, clamp(128 - l, 0, 1) is 1 exactly
    where l < 128."""
    lv = float_levels(x)
    low = torch.rsub(lv, 128.0).clamp_(0.0, 1.0)
    return low.mul_(column(add, x)).add_(lv).clamp_(max=255.0).mul_(1.0 / 255.0)


def equalize_tables(hist: np.ndarray) -> np.ndarray:
    """float32 [P, 256]: each channel's equalizing table (Pillow's, see RandomEqualize) from its
    histogram (int64 [P, 256]), divided by 255; the identity where step is 0."""
    total = hist.sum(1, keepdims=True)
    top = 255 - np.argmax(hist[:, ::-1] > 0, axis=1)  # the highest level present
    step = (total - hist[np.arange(len(hist)), top][:, None]) // 255
    below = np.cumsum(hist, 1) - hist
    table = np.minimum((step // 2 + below) // np.maximum(step, 1), 255)
    table = np.where(step == 0, np.arange(256)[None, :], table)
    return table.astype(np.float32) * _INV255


def equalize_cpu(x: torch.Tensor) -> torch.Tensor:
    """Equalize every channel of every image (equalize_reference's numbers): the levels as
    int64 once, then per channel a bincount and a lookup in its table."""
    n, c = x.shape[:2]
    levels = float_levels(x).to(torch.int64).view(n * c, -1).numpy()
    hist = np.stack([np.bincount(row, minlength=256) for row in levels])
    tables = equalize_tables(hist)
    out = torch.empty(x.shape, dtype=torch.float32)
    flat, rows, table = out.view(n * c, -1), torch.from_numpy(levels), torch.from_numpy(tables)
    for k in range(n * c):  # torch's index_select of one channel: a third faster than numpy's take
        torch.index_select(table[k], 0, rows[k], out=flat[k])
    return out
