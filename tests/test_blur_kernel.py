"""GaussianBlur's Triton kernel (kernels.triton.blur, reached through kernels.pixel_forms) against
its twin, the tap loop of ops.blur._filter. Needs CUDA and Triton; skips cleanly otherwise. Set
PIXELPIPE_TRITON_INTERPRET=1 (with triton installed) to run the same checks on the CPU through
Triton's interpreter (slow; small sizes).

Tolerance: both sum float32 products tap by tap in the same order, without fused multiply-adds
(the kernel is compiled with enable_fp_fusion=False), so the same numbers: exact under the
interpreter; on a GPU within 1e-30, which only a product in float32's denormal range (below
1.2e-38: a far tap of a small sigma) could reach, were the kernel compiled to flush those to
zero.

The finishing pass (blur_rows_into: the blur's last pass writing the output, normalised and
cast) sums the same products, then rounds v * scale + bias once (a fused multiply-add) where
torch's addcmul, the twin's Normalize, may round twice: within one unit in the last place of
the output's dtype (relative; 1e-6 absolute where the sum cancels to about zero)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import count_pixel_forms, no_pixel_forms, triton_device

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.ops.blur import _filter, gaussian_kernels

DEVICE, INTERPRET = triton_device()

from pixelpipe.kernels.pixel_forms import gaussian_blur_form  # noqa: E402
from pixelpipe.kernels.triton.blur import blur_rows, blur_rows_into  # noqa: E402

ATOL = 0.0 if INTERPRET else 1e-30


def twin(x: torch.Tensor, rows: np.ndarray, along_w, along_h) -> torch.Tensor:
    """The blurred rows by the tap loop, written into a copy of x."""
    pick = torch.from_numpy(rows).to(x.device)
    part = x[pick]
    if along_w is not None:
        part = _filter(part, torch.from_numpy(along_w), 3, along_w.shape[1] // 2, along_w.shape[1] // 2)
    if along_h is not None:
        part = _filter(part, torch.from_numpy(along_h), 2, along_h.shape[1] // 2, along_h.shape[1] // 2)
    return x.index_copy(0, pick, part)


SHAPES = [  # (n, c, h, w), (kh, kw), rows
    ((6, 3, 20, 17), (5, 7), [0, 2, 5]),
    ((5, 1, 9, 3), (23, 23), [0, 1, 2, 3, 4]),  # taps reach past the far border: the mirror repeats
    ((4, 3, 1, 6), (3, 5), [3, 1]),  # one row: nothing to mirror along the columns
    ((3, 3, 33, 40), (23, 1), [1]),  # along the columns alone
    ((3, 3, 12, 12), (1, 9), [0, 2]),  # along the rows alone
    ((2, 3, 50, 100), (5, 5), [1]),  # tiles whose taps stay inside (the unmirrored loop) and tiles that reach out
    ((3, 1, 40, 70), (3, 7), [0, 2]),
]
if not INTERPRET:
    SHAPES.append(((64, 3, 224, 224), (23, 23), list(range(0, 64, 2))))


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize("shape, size, rows", SHAPES)
def test_blur_rows_is_the_tap_loop(shape, size, rows, owned):
    g = torch.Generator().manual_seed(shape[0])
    x = torch.rand(*shape, generator=g).to(DEVICE)
    rows = np.array(rows)
    sigma = np.linspace(0.1, 2.0, len(rows))
    (kh, kw) = size
    along_w = gaussian_kernels(kw, sigma) if kw > 1 else None
    along_h = along_w if kh == kw else gaussian_kernels(kh, sigma) if kh > 1 else None  # square: one table, as the form gives
    want = twin(x, rows, along_w, along_h)
    given = x.clone()
    got = blur_rows(given, rows, along_w, along_h, owned)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    assert (got.data_ptr() == given.data_ptr()) == owned
    if not owned:
        assert torch.equal(given, x)


def test_channels_last_input_and_no_rows():
    x = torch.rand(4, 3, 10, 13, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    cl = x.contiguous(memory_format=torch.channels_last)
    rows = np.array([1, 3])
    k = gaussian_kernels(5, np.array([0.7, 1.9]))
    torch.testing.assert_close(blur_rows(cl, rows, k, k, False), twin(x, rows, k, k), atol=ATOL, rtol=0)
    assert blur_rows(x, np.array([], dtype=np.int64), k[:0], k[:0], False) is x


def ulp_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """got within one unit in the last place of its dtype of want (see the module's tolerance)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), rtol=torch.finfo(got.dtype).eps, atol=1e-6)


@pytest.mark.parametrize("dtype, layout, norm", [(torch.float32, "NCHW", False), (torch.float32, "NCHW", True),
                                                 (torch.float16, "NCHW", True), (torch.bfloat16, "NHWC", True),
                                                 (torch.float16, "NHWC", False)])
@pytest.mark.parametrize("shape, size, rows", SHAPES[:5] + [((5, 3, 16, 16), (5, 5), [])])
def test_blur_rows_into_is_the_tap_loop_then_normalize(shape, size, rows, dtype, layout, norm):
    """The finishing pass: every sample into the output (blurred or not), normalised and cast."""
    g = torch.Generator().manual_seed(shape[0] + 7)
    x = torch.rand(*shape, generator=g).to(DEVICE)
    rows = np.array(rows, dtype=np.int64)
    sigma = np.linspace(0.1, 2.0, len(rows))
    (kh, kw) = size
    along_w = gaussian_kernels(kw, sigma) if kw > 1 else None
    along_h = along_w if kh == kw else gaussian_kernels(kh, sigma) if kh > 1 else None
    want = twin(x, rows, along_w, along_h) if len(rows) else x.clone()
    c = shape[1]
    scale = bias = None
    if norm:
        scale = torch.linspace(2.0, 4.5, c, device=DEVICE).view(1, c, 1, 1)
        bias = torch.linspace(-2.1, -1.7, c, device=DEVICE).view(1, c, 1, 1)
        want = torch.addcmul(bias, want, scale)
    n, _, h, w = shape
    out = torch.full((n, h, w, c) if layout == "NHWC" else shape, float("nan"), dtype=dtype, device=DEVICE)
    view = out.permute(0, 3, 1, 2) if layout == "NHWC" else out
    given = x.clone()
    blur_rows_into(given, rows, along_w, along_h, view, scale, bias)
    ulp_close(view, want.to(dtype))
    assert torch.equal(given, x)  # x is read, never written


@pytest.mark.parametrize("kernel_size, p", [(23, 0.5), ((5, 9), 1.0), (3, 0.0)])
def test_form_is_gaussian_blurs_apply(kernel_size, p):
    """The form the engine runs gives GaussianBlur.apply's numbers, with the op's own params."""
    n = 12
    op = pp.GaussianBlur(kernel_size, sigma=(0.1, 2.0), p=p)
    x = torch.rand(n, 3, 24, 21, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    draws = Draws(2, 1, np.arange(n), 3)
    params = op.sample(draws, np.tile([24.0, 21.0], (n, 1)))
    want = op.apply(x, params, draws)
    torch.testing.assert_close(gaussian_blur_form(op, x.clone(), params, False), want, atol=ATOL, rtol=0)
    torch.testing.assert_close(gaussian_blur_form(op, x.clone(), params, True), want, atol=ATOL, rtol=0)


@pytest.mark.skipif(INTERPRET, reason="the engine runs the form on CUDA tensors only")
def test_the_engine_runs_the_form_on_cuda(monkeypatch):
    """A Compose on CUDA blurs through the kernel (once per call), and gives the numbers of the
    twin (the engine without the form)."""
    images = [torch.randint(0, 256, (60 + k, 50 + 2 * k, 3), dtype=torch.uint8) for k in range(16)]
    batch = pp.ImageBatch.from_list(images).to("cuda")
    t = pp.Compose([pp.RandomResizedCrop(48), pp.RandomFlip(), pp.GaussianBlur(23, p=0.5),
                    pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    calls = count_pixel_forms(monkeypatch)
    fast = t(batch, seed=3)
    assert calls == [("GaussianBlur finishing", 16)]  # the last op, Normalize after it: one pass writes the output
    no_pixel_forms(monkeypatch)
    ulp_close(fast, t(batch, seed=3))


@pytest.mark.skipif(INTERPRET, reason="the engine runs the form on CUDA tensors only")
@pytest.mark.parametrize("dtype, layout, normalize", [(torch.float16, "NCHW", True), (torch.bfloat16, "NHWC", True),
                                                      (torch.float16, "NCHW", False), (torch.float32, "NCHW", False)])
def test_the_blur_finishes_the_output_on_cuda(monkeypatch, dtype, layout, normalize):
    """As the last pixel op the blur writes the output itself wherever the output needs a pass
    (Normalize after it, another dtype, NHWC), and not otherwise (float32 NCHW without
    Normalize: blurred in place); the twin's numbers within the finishing pass's tolerance; an
    op after the blur takes it back to the in-place form."""
    images = [torch.randint(0, 256, (40 + k, 44 + k, 3), dtype=torch.uint8) for k in range(12)]
    batch = pp.ImageBatch.from_list(images).to("cuda")
    ops = [pp.RandomResizedCrop(32), pp.GaussianBlur(7, p=0.5)]
    ops += [pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])] if normalize else []
    t = pp.Compose(ops, dtype=dtype, layout=layout)
    calls = count_pixel_forms(monkeypatch)
    fast = t(batch, seed=5)
    finishes = normalize or dtype != torch.float32 or layout == "NHWC"
    assert calls == [("GaussianBlur finishing" if finishes else "GaussianBlur", 12)]
    no_pixel_forms(monkeypatch)
    ulp_close(fast, t(batch, seed=5))
    if normalize:
        calls = count_pixel_forms(monkeypatch)
        pp.Compose(ops[:2] + [pp.RandomErasing(p=1.0), ops[2]], dtype=dtype, layout=layout)(batch, seed=5)
        assert calls[0] == ("GaussianBlur", 12)
