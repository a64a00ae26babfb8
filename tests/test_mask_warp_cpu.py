"""native/mask_warp.c (kernels/cpu/masks.py) against its twin, kernels/reference/masks.py: the
same labels bit for bit for rotations, shears, perspectives (points past the horizon included),
flips, enlargements and shrinks, every border rule and fill, integer and bool dtypes, one and
several channels; and a Compose on the CPU gives the same masks with the C form as without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import native_built

from pixelpipe.kernels.cpu import masks as cpu_masks
from pixelpipe.kernels.filters import BORDER_CODE
from pixelpipe.kernels.reference.masks import warp_masks

pytestmark = pytest.mark.skipif(native_built("mask_warp.c") is None,
                                reason="no C compiler: native/mask_warp.c cannot be built")


def random_maps(rng: np.random.Generator, n: int) -> np.ndarray:
    maps = []
    for k in range(n):
        a = rng.uniform(-np.pi, np.pi)
        s = rng.uniform(0.2, 3.0, 2) * rng.choice([-1, 1], 2)
        m = np.array([[s[0] * np.cos(a), -s[1] * np.sin(a) + rng.uniform(-0.3, 0.3), rng.uniform(-30, 60)],
                      [s[0] * np.sin(a), s[1] * np.cos(a), rng.uniform(-30, 60)],
                      [0.0, 0.0, 1.0]])
        if k % 3 == 1:  # a perspective, some points past its horizon
            m[2, :2] = rng.uniform(-0.02, 0.02, 2)
        maps.append(m)
    return np.stack(maps)


@pytest.mark.parametrize("border", ["constant", "reflect", "replicate", "wrap"])
@pytest.mark.parametrize("dtype, c", [(torch.uint8, 1), (torch.int32, 3), (torch.bool, 1), (torch.int16, 2),
                                      (torch.int64, 1)])
def test_the_c_form_gives_the_twins_labels(border: str, dtype: torch.dtype, c: int):
    rng = np.random.default_rng(hash((border, str(dtype), c)) % 2**32)
    sizes = rng.integers(1, 50, size=(7, 2))
    sizes[0] = (1, 1)  # a one-pixel mask: nothing to mirror
    masks = [torch.from_numpy(rng.integers(0, 2 if dtype == torch.bool else 300, size=(int(h), int(w), c)))
             .to(dtype) for h, w in sizes]
    inverse = random_maps(rng, 7)
    fill = 1 if dtype == torch.bool else 255
    got = cpu_masks.warp_masks_cpu(masks, inverse, sizes.astype(np.float64), (29, 41), border, fill)
    want = warp_masks(masks, inverse, sizes.astype(np.float64), (29, 41), border, fill, "cpu")
    assert got is not None and got.dtype == dtype and got.shape == (7, 29, 41, c)
    assert torch.equal(got, want)


def test_axis_aligned_maps_and_empty_batches():
    rng = np.random.default_rng(3)
    masks = [torch.from_numpy(rng.integers(0, 9, size=(20, 30, 1)).astype(np.uint8)) for _ in range(2)]
    inverse = np.array([np.diag([0.5, 0.5, 1.0]), [[-1.0, 0, 30], [0, 2.0, -3], [0, 0, 1]]])
    sizes = np.array([[20, 30], [20, 30]], dtype=np.float64)
    for border in BORDER_CODE:
        got = cpu_masks.warp_masks_cpu(masks, inverse, sizes, (17, 23), border, 7)
        assert torch.equal(got, warp_masks(masks, inverse, sizes, (17, 23), border, 7, "cpu"))
    empty = cpu_masks.warp_masks_cpu(masks, inverse, sizes, (0, 5), "constant", 0)
    assert empty.shape == (2, 0, 5, 1)


def test_a_compose_gives_the_same_masks_with_and_without_the_c_form(monkeypatch: pytest.MonkeyPatch):
    import pixelpipe as pp

    rng = np.random.default_rng(8)
    images = [rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8) for h, w in ((40, 60), (51, 33), (64, 64))]
    labels = [rng.integers(0, 5, size=im.shape[:2], dtype=np.uint8) for im in images]
    t = pp.Compose([pp.RandomResizedCrop(32), pp.RandomRotate(30), pp.RandomFlip(0.5)], dtype=torch.uint8)
    fast = t(images, masks=labels, seed=1)["masks"]
    calls = []
    real = cpu_masks.warp_masks_cpu

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr("pixelpipe.kernels.masks.warp_masks_cpu", spy)
    again = t(images, masks=labels, seed=1)["masks"]
    assert calls and torch.equal(again, fast)
    monkeypatch.setattr("pixelpipe.kernels.masks.warp_masks_cpu", lambda *a, **k: None)  # as without the helper
    twin = t(images, masks=labels, seed=1)["masks"]
    assert torch.equal(twin, fast)
