"""GaussianBlur's CPU form (kernels.cpu.blur, native/blur.c, reached through kernels.pixel_forms)
against its twin, GaussianBlur.apply (the tap loop of ops.blur._filter). Skips where blur.c was
not built.

Tolerance: none. Both compute each value as float32 products and sums tap by tap in the same
order, without fused multiply-adds (blur.c is built with -ffp-contract=off), with the same
float32 weights and the same mirrored borders, so torch.equal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import count_pixel_forms, no_pixel_forms

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.data.random import Draws
from pixelpipe.kernels.cpu.blur import blur_library, blur_rows_cpu
from pixelpipe.kernels.pixel_forms import gaussian_blur_cpu_form, pixel_form
from pixelpipe.presets import simclr

pytestmark = pytest.mark.skipif(blur_library() is None, reason="native/blur.c was not built")

CASES = [  # kernel_size, (h, w), p
    (1, (8, 9), 1.0),
    (3, (20, 17), 1.0),
    (23, (40, 37), 0.5),  # some samples untouched
    ((5, 9), (16, 21), 1.0),
    ((23, 1), (30, 12), 1.0),  # along the columns alone
    ((1, 9), (12, 12), 0.7),  # along the rows alone
    (23, (9, 3), 1.0),  # the taps reach past the far border: the mirror repeats
    ((5, 9), (1, 6), 1.0),  # one row: nothing to mirror along the columns
    (23, (1, 1), 1.0),
    (3, (10, 10), 0.0),  # nothing blurs: x itself
]


def _params(op: pp.GaussianBlur, n: int, h: int, w: int, seed: int = 2) -> tuple[dict, Draws]:
    draws = Draws(seed, 1, np.arange(n), 3)
    return op.sample(draws, np.tile([float(h), float(w)], (n, 1))), draws


@pytest.mark.parametrize("kernel_size, hw, p", CASES)
def test_form_is_gaussian_blurs_apply(kernel_size, hw, p):
    n = 10
    h, w = hw
    op = pp.GaussianBlur(kernel_size, sigma=(0.1, 2.0), p=p)
    x = torch.rand(n, 3, h, w, generator=torch.Generator().manual_seed(h * w)) * 2 - 0.5
    params, draws = _params(op, n, h, w)
    want = op.apply(x, params, draws)
    before = x.clone()
    got = gaussian_blur_cpu_form(op, x, params, False)
    assert torch.equal(got, want)
    assert torch.equal(x, before)  # not owned: x untouched
    if 0 < params["on"].sum() < n:
        assert torch.equal(got[~torch.from_numpy(params["on"])], x[~torch.from_numpy(params["on"])])
    owned = x.clone()
    got = gaussian_blur_cpu_form(op, owned, params, True)
    assert torch.equal(got, want)
    if params["on"].any():
        assert got.data_ptr() == owned.data_ptr()  # written in place


@pytest.mark.parametrize("sigma", [0.1, 0.35, 0.8, 2.0, 7.0])
def test_each_sigma_on_images_of_photo_size(sigma):
    """Whole sigmas, small ones whose far weights are float32 denormals included."""
    op = pp.GaussianBlur(23, sigma=sigma)
    x = torch.rand(3, 3, 64, 80, generator=torch.Generator().manual_seed(7))
    x[0, :, :10] = 0.0  # black rows: sums of tiny products
    params, draws = _params(op, 3, 64, 80)
    assert torch.equal(gaussian_blur_cpu_form(op, x, params, False), op.apply(x, params, draws))


@pytest.mark.parametrize("layout", ["channels_last", "slice", "transposed"])
def test_strided_inputs(layout):
    op = pp.GaussianBlur((5, 7), sigma=(0.3, 2.0), p=0.6)
    base = torch.rand(8, 3, 18, 22, generator=torch.Generator().manual_seed(11))
    if layout == "channels_last":
        x = base.contiguous(memory_format=torch.channels_last)
    elif layout == "slice":
        x = base[:, :, 2:16, 1:21]
    else:
        x = base.transpose(2, 3)
    params, draws = _params(op, 8, *x.shape[2:])
    want = op.apply(x, params, draws)
    assert torch.equal(gaussian_blur_cpu_form(op, x, params, False), want)
    assert torch.equal(gaussian_blur_cpu_form(op, x.clone(), params, True), want)  # clone keeps the strides


def test_blur_rows_cpu_rows_and_errors():
    x = torch.rand(4, 1, 6, 6)
    k = np.full((1, 3), 1 / 3)
    assert blur_rows_cpu(x, np.array([], dtype=np.int64), k[:0], None, False) is x
    with pytest.raises(ValueError, match="rows must lie in 0..3"):
        blur_rows_cpu(x, np.array([4]), k, None, False)


def test_pixel_form_on_the_cpu():
    op = pp.GaussianBlur(3)
    x = torch.rand(2, 3, 8, 8)
    assert pixel_form(op, x) is not None
    assert pixel_form(op, x.double()) is None  # float32 alone
    assert pixel_form(pp.MedianBlur(3), x) is None
    with native.disabled():
        assert pixel_form(op, x) is None  # the twin runs


def test_simclr_compose_on_the_cpu_is_the_twins(monkeypatch):
    """The SimCLR preset on the CPU, through the Engine's pieces (the blur in place on the
    warped rows): the same bits with the C form as with the tap loop (the engine without forms,
    and with native code off)."""
    images = [torch.randint(0, 256, (70 + 3 * k, 60 + 5 * k, 3), dtype=torch.uint8) for k in range(20)]
    batch = pp.ImageBatch.from_list(images)
    t = simclr(48)
    calls = count_pixel_forms(monkeypatch)
    fast = t(batch, seed=5)
    assert calls and {name for name, _ in calls} == {"GaussianBlur"}
    assert sum(rows for _, rows in calls) == len(images)  # every piece of the batch
    no_pixel_forms(monkeypatch)
    assert torch.equal(fast, t(batch, seed=5))
    monkeypatch.undo()
    with native.disabled():
        assert torch.equal(fast, t(batch, seed=5))
