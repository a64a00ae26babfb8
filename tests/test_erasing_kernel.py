"""RandomErasing's noise kernel (kernels.triton.erasing, reached through kernels.pixel_forms)
against its twin, ops.erasing.noise_on_device (the same table, torch operations). Needs CUDA and
Triton; PIXELPIPE_TRITON_INTERPRET=1 runs the kernel through Triton's interpreter on the CPU.

Tolerance: on CUDA the same bits (the hash is integer arithmetic; the normal's log and cos are
libdevice's logf and cosf, as in torch's kernels; sqrt and products rounded once). Through the
interpreter log and cos are numpy's, whose last bits may differ from torch's CPU ones: within
4e-6 (values are standard normal, |v| < 6), and the same positions written.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import count_pixel_forms, no_pixel_forms, triton_device

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.ops.erasing import noise_on_device, noise_table

DEVICE, INTERPRET = triton_device()
ATOL = 4e-6 if INTERPRET else 0.0


def erasing_case(n: int, c: int, h: int, w: int, seed: int, p: float = 0.5):
    op = pp.RandomErasing(p, value="random")
    draws = Draws(seed, 1, np.arange(n) + 7 * seed, 3)
    params = op.sample(draws, np.tile([float(h), float(w)], (n, 1)))
    x = torch.rand(n, c, h, w, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    return op, params, draws, x


def rows_of(params):
    return np.flatnonzero((params["height"] > 0) & (params["width"] > 0))


@pytest.mark.parametrize("channels", [3, 1])
def test_kernel_is_the_twin(channels):
    from pixelpipe.kernels.triton.erasing import noise_rectangles

    for seed in range(3):
        n, (h, w) = (12, (23, 29)) if INTERPRET else (64, (224, 224))
        op, params, draws, x = erasing_case(n, channels, h, w, seed)
        rows = rows_of(params)
        assert 0 < len(rows) < n
        args = (rows, params["top"], params["left"], params["height"], params["width"], draws, op.draws)
        want = noise_on_device(x.clone(), *args)
        got = noise_rectangles(x.clone(), noise_table(tuple(x.shape[1:]), *args))
        changed = want != x
        assert torch.equal(got != x, changed)  # the same values written, nothing else
        assert changed.sum().item() > 0
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_big_rectangles_span_several_programs_and_half_precision():
    from pixelpipe.kernels.triton.erasing import BLOCK, noise_rectangles

    n, h, w = 4, 40, 60
    op, params, draws, x = erasing_case(n, 3, h, w, 5, p=1.0)
    params["top"][:] = [0, 3, 10, 1]
    params["left"][:] = [0, 5, 1, 20]
    params["height"][:] = [40, 30, 7, 0]  # the whole image; an empty rectangle (no values)
    params["width"][:] = [60, 50, 9, 0]
    rows = rows_of(params)
    assert 3 * 40 * 60 > 4 * BLOCK and len(rows) == 3
    args = (rows, params["top"], params["left"], params["height"], params["width"], draws, op.draws)
    for dtype in (torch.float32, torch.float16):
        y = x.to(dtype)
        want = noise_on_device(y.clone(), *args)
        got = noise_rectangles(y.clone(), noise_table(tuple(y.shape[1:]), *args))
        torch.testing.assert_close(got, want, atol=ATOL if dtype == torch.float32 else 2e-3, rtol=0)
        assert torch.equal(got[3], y[3])


def test_refuses_what_it_cannot_write():
    from pixelpipe.kernels.triton.erasing import noise_rectangles

    table = np.zeros((11, 1), dtype=np.int64)
    with pytest.raises(ValueError, match="contiguous floating"):
        noise_rectangles(torch.zeros(2, 3, 4, 4, device=DEVICE).transpose(2, 3), table)
    with pytest.raises(ValueError, match="contiguous floating"):
        noise_rectangles(torch.zeros(2, 3, 4, 4, dtype=torch.int32, device=DEVICE), table)


@pytest.mark.parametrize("owned", [False, True])
def test_form_is_apply(owned):
    from pixelpipe.kernels.pixel_forms import erasing_noise_form, pixel_form

    op, params, draws, x = erasing_case(10, 3, 21, 19, 9)
    want = op.apply(x.clone(), params, draws)
    given = x.clone()
    got = erasing_noise_form(op, given, params, owned, draws)
    if not owned:
        assert torch.equal(given, x)
    else:
        assert got is given
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    if not INTERPRET:
        assert pixel_form(op, x) is not None
    assert pixel_form(pp.RandomErasing(0.5, value=0.0), x) is None  # constant fills stay with apply()
    assert pixel_form(op, x.cpu()) is None  # the CPU slices its rectangles itself


@pytest.mark.skipif(INTERPRET, reason="the engine runs the form on CUDA tensors only")
def test_the_engine_runs_the_form_on_cuda(monkeypatch):
    imgs = [torch.randint(0, 256, (60 + k, 50 + 2 * k, 3), dtype=torch.uint8) for k in range(32)]
    batch = pp.ImageBatch.from_list(imgs).to("cuda")
    t = pp.Compose([pp.RandomResizedCrop(48), pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                    pp.RandomErasing(0.5, value="random")])
    calls = count_pixel_forms(monkeypatch)
    fast = t(batch, seed=3)
    assert calls == [("RandomErasing", 32)]
    no_pixel_forms(monkeypatch)
    slow = t(batch, seed=3)
    assert torch.equal(fast, slow)
