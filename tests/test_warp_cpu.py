"""warp_cpu's per-sample shortcuts against the general forms they replace (STYLE.md, idea 7).

- resize_window (torch's antialiased bilinear kernel writing into a channels-last tensor, read
  from a strided window view) against F.interpolate on a contiguous copy of the window: equal,
  every byte, colour and grey, shrinking and enlarging, windows at any offset in a larger buffer.
- classify (numpy, once per batch) against the same tests in torch ops: equal kinds on batches
  mixing all three paths.
- band_weights (numpy) against warp_torch.axis_weights: equal to 1 float32 ulp (the row sums
  may add in another order), every filter, border and antialias setting.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pixelpipe as pp
from pixelpipe.kernels.cpu.warp import (
    REFERENCE,
    SEPARABLE,
    WINDOW,
    SampleRows,
    band_weights,
    classify,
    resize_window,
)
from pixelpipe.kernels.reference.warp import axis_weights
from pixelpipe.kernels.spec import WarpSpec


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


def _classify_torch(spec: WarpSpec) -> torch.Tensor:
    """The twin of classify: the same tests, in torch ops on [N] tensors (its former form)."""
    n = len(spec)
    kind = torch.full((n,), REFERENCE, dtype=torch.int64)
    if n == 0 or spec.interpolation == "nearest" or not spec.antialias:
        return kind
    inv = torch.from_numpy(spec.inverse)
    H, W = spec.out_size
    tol = 1e-6
    aligned = (inv[:, 0, 1].abs() < tol) & (inv[:, 1, 0].abs() < tol) & (inv[:, 2, 0].abs() < tol) \
        & (inv[:, 2, 1].abs() < tol) & ((inv[:, 2, 2] - 1).abs() < tol)
    u0, u1 = inv[:, 0, 2], inv[:, 0, 0] * W + inv[:, 0, 2]
    v0, v1 = inv[:, 1, 2], inv[:, 1, 1] * H + inv[:, 1, 2]
    lo_u, hi_u = torch.minimum(u0, u1), torch.maximum(u0, u1)
    lo_v, hi_v = torch.minimum(v0, v1), torch.maximum(v0, v1)
    clip = torch.from_numpy(spec.clip).to(torch.float64)
    img = torch.from_numpy(spec.image_size).to(torch.float64)
    exact = ((lo_u - clip[:, 1]).abs() < 1e-4) & ((hi_u - clip[:, 3]).abs() < 1e-4) \
        & ((lo_v - clip[:, 0]).abs() < 1e-4) & ((hi_v - clip[:, 2]).abs() < 1e-4)
    inside = (lo_u >= -1e-9) & (lo_v >= -1e-9) & (hi_u <= img[:, 1] + 1e-9) & (hi_v <= img[:, 0] + 1e-9)
    kind[aligned & inside] = SEPARABLE
    if spec.interpolation == "bilinear":
        kind[aligned & exact] = WINDOW
    return kind


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
def test_classify_equals_its_torch_twin(interpolation):
    """Planned batches mixing all three kinds (crops at whole and fractional pixels, DCT-style
    scales, flips, rotations of some samples), plus hand-made edge cases."""
    ops = [pp.RandomResizedCrop((20, 24), interpolation=interpolation), pp.RandomFlip(0.5, 0.5),
           pp.RandomRotate(30, p=0.3)]
    sizes = torch.tensor([[37.0 + 5 * (i % 7), 41.0 + 9 * (i % 5)] for i in range(48)], dtype=torch.float64)
    seen = set()
    for seed in range(4):
        plan = pp.Compose(ops).stages[0].sample(seed, 0, torch.arange(48), sizes)
        regions = plan.regions()
        scale = torch.tensor([1.0, 0.5, 0.25] * 16, dtype=torch.float64)
        for spec in (plan.warp_spec(plan.uniform_size(), regions, origin=regions[:, :2]),
                     plan.warp_spec(plan.uniform_size(), regions, origin=regions[:, :2], scale=scale)):
            got = classify(spec)
            assert got.dtype == torch.int64 and torch.equal(got, _classify_torch(spec))
            seen.update(got.tolist())
    assert seen == ({REFERENCE} if interpolation == "nearest" else
                    {REFERENCE, WINDOW, SEPARABLE} if interpolation == "bilinear" else {REFERENCE, SEPARABLE})
    empty = _spec((4, 4))
    empty = WarpSpec(empty.inverse[:0], empty.image_size[:0], empty.origin[:0], empty.clip[:0], (4, 4))
    assert classify(empty).shape == (0,)


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("border", ["constant", "replicate", "reflect", "wrap"])
@pytest.mark.parametrize("antialias", [True, False])
def test_band_weights_equal_axis_weights(interpolation, border, antialias):
    """The numpy weights of the separable path against warp_torch.axis_weights, their twin:
    shrinking and enlarging maps, clip ranges at and away from the image's edges."""
    spec = WarpSpec(torch.eye(3, dtype=torch.float64)[None], torch.zeros(1, 2, dtype=torch.int64),
                    torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, 4, dtype=torch.int64), (8, 8),
                    interpolation, border, (0.0,) * 3, antialias)
    rng = np.random.default_rng(hash((interpolation, border, antialias)) % 2**32)
    for _ in range(40):
        size = int(rng.integers(5, 400))
        lo = int(rng.integers(0, size)) if rng.random() < 0.6 else 0
        hi = int(rng.integers(lo + 1, size + 1)) if rng.random() < 0.6 else size
        n_out = int(rng.integers(1, 300))
        a = (hi - lo) / n_out * float(rng.choice([1.0, -1.0]))  # mirrored maps have a < 0
        b = lo if a > 0 else hi
        b += float(rng.uniform(-0.3, 0.3)) * abs(a)  # fractional windows
        limit = float(rng.uniform(1.0, 16.0))
        got = band_weights(a, b, n_out, limit, lo, hi, size, spec)
        want = axis_weights(a, b, n_out, limit, lo, hi, size, spec).numpy()
        assert got.dtype == np.float32 and got.shape == (n_out, hi - lo)
        np.testing.assert_array_max_ulp(got, want, maxulp=1)

