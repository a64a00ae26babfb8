"""warp_cpu's per-sample shortcuts against the general forms they replace (STYLE.md, idea 7).

- resize_window (torch's antialiased bilinear kernel writing into a channels-last tensor, read
  from a strided window view) against F.interpolate on a contiguous copy of the window: equal,
  every byte, colour and grey, shrinking and enlarging, windows at any offset in a larger buffer.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pixelpipe.kernels.spec import WarpSpec
from pixelpipe.kernels.warp_cpu import SampleRows, resize_window


def _spec(out_size: tuple[int, int]) -> WarpSpec:
    eye = torch.eye(3, dtype=torch.float64)[None]
    z = torch.zeros(1, 2, dtype=torch.int64)
    return WarpSpec(eye, z, z, torch.zeros(1, 4, dtype=torch.int64), out_size, "bilinear", "constant", (0.0,) * 3,
                    True)


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("window", [(40, 52), (9, 31), (23, 23), (70, 17)])
@pytest.mark.parametrize("out_size", [(23, 23), (16, 40)])
def test_resize_window_equals_interpolate_on_a_copy(channels, window, out_size):
    rng = np.random.default_rng(window[0] * 7 + channels)
    h, w = window
    stored = rng.integers(0, 256, (h + 11, w + 14, channels), dtype=np.uint8)  # region + margins
    oy, ox = 100, 200  # where the stored region sits in the image
    y0, x0 = oy + 5, ox + 9
    rows = SampleRows([1], [[y0, x0, y0 + h, x0 + w]], [[oy, ox]], [False], [False])
    got = resize_window(torch.from_numpy(stored), _spec(out_size), rows, 0)
    win = np.ascontiguousarray(stored[5 : 5 + h, 9 : 9 + w])
    want = F.interpolate(torch.from_numpy(win).permute(2, 0, 1)[None], size=out_size, mode="bilinear",
                         antialias=True)[0]
    assert got.shape == (channels, *out_size) and got.dtype == torch.uint8
    assert got.permute(1, 2, 0).is_contiguous()  # HWC bytes, as the fused pointwise pass reads them
    assert torch.equal(got, want)
