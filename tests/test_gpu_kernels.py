"""The Triton kernel against its twin (the reference warp + pointwise pass). Needs CUDA and
Triton; skips cleanly otherwise. Set PIXELPIPE_TRITON_INTERPRET=1 (with triton installed) to
run the same checks on the CPU through Triton's interpreter (slow; small sizes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import gradient_images, triton_device

import pixelpipe as pp
from pixelpipe.kernels.reference.pointwise import channel_means, pointwise_reference
from pixelpipe.kernels.reference.warp import warp_reference
from pixelpipe.kernels.spec import PointwiseSpec, WarpSpec

DEVICE, INTERPRET = triton_device()

from pixelpipe.kernels.triton.warp import warp_gpu, warp_pointwise_gpu  # noqa: E402

SMALL = INTERPRET


def _images(n: int, seed: int) -> list[torch.Tensor]:
    return gradient_images(n, seed, SMALL)


PLANS = [
    ("rrc+flip", lambda s: [pp.RandomResizedCrop(s), pp.RandomFlip()], "bilinear", "constant"),
    ("rotate reflect", lambda s: [pp.RandomRotate(40, border="reflect"), pp.Resize((s, s))], "bilinear", "reflect"),
    ("rotate wrap bicubic", lambda s: [pp.RandomRotate(30, border="wrap", interpolation="bicubic"), pp.Resize((s, s + 3))], "bicubic", "wrap"),
    ("affine replicate", lambda s: [pp.RandomAffine(20, scale=(0.5, 1.5), shear=10, border="replicate"), pp.Resize((s, s))], "bilinear", "replicate"),
    ("perspective fill", lambda s: [pp.RandomPerspective(0.6, p=1.0, fill=(10, 200, 30)), pp.Resize((s - 2, s))], "bilinear", "constant"),
    ("nearest", lambda s: [pp.RandomRotate(25, interpolation="nearest"), pp.Resize((s, s), interpolation="nearest")], "nearest", "constant"),
    ("big shrink", lambda s: [pp.Resize((s // 2, s // 3))], "bilinear", "constant"),
]


def _spec(ops, imgs, antialias=True):
    batch = pp.ImageBatch.from_list(imgs)
    plan = pp.Compose(ops, antialias=antialias).stages[0].sample(3, 1, torch.arange(len(imgs)), batch.sizes.double())
    return batch, plan, plan.warp_spec(plan.uniform_size(), plan.regions(), antialias=antialias)


@pytest.mark.parametrize("name,make,interp,border", PLANS, ids=[p[0] for p in PLANS])
@pytest.mark.parametrize("antialias", [True, False])
def test_warp_matches_reference(name, make, interp, border, antialias):
    """Raw warp values agree with the reference within 0.02 grey levels (float32 weights on the
    GPU against float64 coordinates and float32 sums in the reference); nearest is exact
    except where a source point falls within 1e-9 of a pixel edge."""
    imgs = _images(9, seed=len(name))
    size = 16 if SMALL else 96
    batch, plan, spec = _spec(make(size), imgs, antialias)
    ref = warp_reference(batch.data, batch.table, spec)
    out, means = warp_gpu(batch.data.to(DEVICE), batch.table, spec, sums=True)
    diff = (out.cpu() - ref).abs()
    assert float(diff.max()) <= (0.02 if interp != "nearest" else 0.0) + 1e-3, f"{name}: max diff {float(diff.max())}"
    assert torch.allclose(means.double().cpu(), channel_means(ref), atol=0.01)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("channels", [3, 1])
def test_fused_kernel_matches_twin(dtype, layout, channels):
    """The one-launch kernel (warp + colour + clamp + normalise + cast + layout) equals the
    reference warp followed by the reference pointwise pass: within 1 grey level for uint8
    (rounding of values within float error of .5), and within the output dtype's precision."""
    imgs = _images(7, seed=5)
    size = 16 if SMALL else 80
    batch, plan, spec = _spec([pp.RandomResizedCrop(size), pp.RandomFlip(), pp.RandomRotate(10)], imgs)
    color = torch.zeros(len(imgs), 3, 4, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    color[:, :, :3] = torch.eye(3, dtype=torch.float64) * 0.8 + 0.1 * torch.rand(len(imgs), 3, 3, generator=g, dtype=torch.float64)
    color[:, :, 3] = 20 * torch.rand(len(imgs), 3, generator=g, dtype=torch.float64) - 10
    norm = dtype != torch.uint8
    pspec = PointwiseSpec(color, (0.485, 0.456, 0.406) if norm else None, (0.229, 0.224, 0.225) if norm else None,
                          dtype, layout, channels)
    ref = pointwise_reference(warp_reference(batch.data, batch.table, spec), pspec)
    out = warp_pointwise_gpu(batch.data.to(DEVICE), batch.table, spec, pspec).cpu()
    assert out.dtype == dtype and out.shape == ref.shape
    tol = {torch.uint8: 1.0, torch.float16: 2e-2, torch.bfloat16: 8e-2, torch.float32: 1e-3}[dtype]
    assert float((out.float() - ref.float()).abs().max()) <= tol


def test_compose_on_device_matches_cpu():
    """A whole Compose on the GPU gives the CPU's result (the CPU runs its fast paths): the
    same random draws on both devices, values within 2 grey levels."""
    if INTERPRET:
        pytest.skip("needs a real CUDA device")
    imgs = _images(16, seed=9)
    t = pp.Compose([pp.RandomResizedCrop(64), pp.RandomFlip(), pp.ColorJitter(0.3, 0.3, 0.3, 0.05)],
                   dtype=torch.uint8, layout="NHWC")
    cpu = t(imgs, seed=4, epoch=2)
    gpu = t(pp.ImageBatch.from_list(imgs).to("cuda"), seed=4, epoch=2)
    assert gpu.is_cuda
    assert float((gpu.cpu().float() - cpu.float()).abs().max()) <= 2.0


def test_random_bits_same_on_gpu():
    if INTERPRET:
        pytest.skip("needs a real CUDA device")
    from pixelpipe.data.random import hash32

    idx = torch.arange(0, 1 << 20, 7, dtype=torch.int64)
    assert torch.equal(hash32(11, 3, idx, 2, 5), hash32(11, 3, idx.cuda(), 2, 5).cpu())


@pytest.mark.parametrize("dtype,layout,channels", [(torch.float16, "NCHW", 3), (torch.uint8, "NHWC", 1)])
def test_device_pointwise_with_means_matches_host(dtype, layout, channels):
    """Contrast needs the warped images' means: the colour matrices completed from them in the
    fused kernel (out = A x + b0 + B mu, mu from the first launch's sums, no device-to-host
    copy) equal the reference pointwise pass given the same means on the host."""
    from pixelpipe.kernels import color_slopes

    imgs = _images(6, seed=11)
    size = 16 if SMALL else 64
    jitter = pp.ColorJitter(0.4, 0.4, 0.4, 0.1)
    ops = [pp.RandomResizedCrop(size), jitter, pp.RandomGrayscale(0.5)]
    if dtype != torch.uint8:
        ops.append(pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
    compose = pp.Compose(ops, dtype=dtype, layout=layout, channels=channels)
    batch, plan, spec = _spec(ops, imgs)
    warped, means = warp_gpu(batch.data.to(DEVICE), batch.table, spec, sums=True)
    make = lambda m: plan.pointwise(m, compose.program.form(0))
    ref = pointwise_reference(warped.cpu(), make(means.double().cpu()))
    zero, slopes = color_slopes(len(imgs), make)
    out = warp_pointwise_gpu(batch.data.to(DEVICE), batch.table, spec, zero, slopes=slopes).cpu()
    tol = 1.0 if dtype == torch.uint8 else 2e-2
    assert out.shape == ref.shape and float((out.float() - ref.float()).abs().max()) <= tol


@pytest.mark.parametrize("dtype,layout,channels", [(torch.float16, "NCHW", 3), (torch.uint8, "NHWC", 1)])
def test_run_stage_with_means_matches_the_twin(dtype, layout, channels):
    """Contrast on the device: a launch for the means, then one fused launch whose colour
    matrices are computed from them on the device, equals the twin (reference warp, its means,
    the reference pointwise pass) within the fused kernel's tolerance."""
    from pixelpipe.kernels import run_stage

    imgs = _images(6, seed=12)
    size = 16 if SMALL else 64
    ops = [pp.RandomResizedCrop(size), pp.RandomRotate(8), pp.ColorJitter(0.4, 0.4, 0.4, 0.1), pp.RandomGrayscale(0.5)]
    if dtype != torch.uint8:
        ops.append(pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
    compose = pp.Compose(ops, dtype=dtype, layout=layout, channels=channels)
    batch, plan, spec = _spec(ops, imgs)
    assert plan.needs_means
    make = lambda m: plan.pointwise(m, compose.program.form(0))
    warped = warp_reference(batch.data, batch.table, spec)
    ref = pointwise_reference(warped, make(channel_means(warped)))
    out = run_stage(pp.ImageBatch(batch.data.to(DEVICE), batch.table), spec, make, True).cpu()
    tol = 1.0 if dtype == torch.uint8 else 2e-2
    assert out.shape == ref.shape and float((out.float() - ref.float()).abs().max()) <= tol


def test_kernel_reads_strided_views_like_a_batch():
    """Samples left in separate allocations with padded rows, transposed or mirrored (a GPU
    decoder's images, oriented by strides) give exactly the output of the same samples copied
    into one ImageBatch: the table's strides only change where the kernel reads."""
    from pixelpipe.data.views import DeviceViews, strided_view

    imgs = _images(6, seed=11)
    stored, rows, shown = [], [], []
    for i, img in enumerate(imgs):
        h, w, c = img.shape
        pitch = w * c + 7 * i  # padded rows
        buf = torch.zeros(h * pitch + 16, dtype=torch.uint8)
        torch.as_strided(buf, (h, w, c), (pitch, c, 1), 16).copy_(img)
        buf = buf.to(DEVICE)
        stored.append(buf)
        transpose, flip = i % 2 == 1, [(), (1,), (0,), (0, 1)][i % 4]
        rows.append(strided_view(buf.data_ptr() + 16, h, w, c, pitch, c, transpose=transpose, flip=flip))
        view = img.transpose(0, 1) if transpose else img
        shown.append(view.flip(flip) if flip else view)
    views = DeviceViews(torch.device(DEVICE), rows, stored, lambda: shown)
    size = 16 if SMALL else 64
    batch, plan, spec = _spec([pp.RandomResizedCrop(size), pp.RandomRotate(15)], [s.contiguous() for s in shown])
    pspec = PointwiseSpec(None, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), torch.float32, "NCHW", 3)
    want = warp_pointwise_gpu(batch.data.to(DEVICE), batch.table, spec, pspec)
    got = warp_pointwise_gpu(views.data, views.table, spec, pspec)
    assert torch.equal(got, want)
    assert torch.equal(views.contiguous().data.cpu(), batch.data)


FILL = (10.0, 200.0, 30.0)


def _footprint_spec(scales, out_size, interpolation, border, seed):
    """Noise images and a WarpSpec mapping each output onto its image with the given per-sample
    (x, y) source pixels per output pixel: an antialiased shrink where above 1. Sample 1 is
    also rotated, sample 2 seen in perspective, and with border "constant" sample 0 shifted
    half out of its image (fill taps inside wide footprints). Noise makes any dropped or extra
    tap visible."""
    g = torch.Generator().manual_seed(seed)
    H, W = out_size
    n = len(scales)
    imgs, inv = [], np.zeros((n, 3, 3))
    for i, (sx, sy) in enumerate(scales):
        h, w = math.ceil(sy * H) + 3, math.ceil(sx * W) + 3
        imgs.append(torch.randint(0, 256, (h, w, 1 if i % 3 == 2 else 3), generator=g, dtype=torch.uint8))
        a = 0.3 if i == 1 else 0.0
        c, s = math.cos(a), math.sin(a)
        shift = 0.5 * w if border == "constant" and i == 0 else 0.0
        # output centre -> image centre (+ shift), scaled by (sx, sy) then rotated by a
        lin = np.array([[c * sx, -s * sy], [s * sx, c * sy]])
        inv[i, :2, :2] = lin
        inv[i, :2, 2] = np.array([w / 2 + shift, h / 2]) - lin @ np.array([W / 2, H / 2])
        inv[i, 2] = [0.2 / W, 0.0, 0.9] if i == 2 else [0.0, 0.0, 1.0]  # 2: the taps vary over the output
    batch = pp.ImageBatch.from_list(imgs)
    sizes = batch.sizes.numpy()
    zero = np.zeros((n, 2), dtype=np.int64)
    spec = WarpSpec(inv, sizes, zero, np.concatenate([zero, sizes], 1), (H, W), interpolation, border, FILL, True)
    return batch, spec


def _check_against_twin(batch, spec):
    """warp_gpu (raw values, means) and warp_pointwise_gpu (colour, normalise, float32 NCHW)
    against the reference warp and pointwise pass, with the tolerances of the tests above."""
    ref = warp_reference(batch.data, batch.table, spec)
    out, means = warp_gpu(batch.data.to(DEVICE), batch.table, spec, sums=True)
    diff = float((out.cpu() - ref).abs().max())
    assert diff <= 0.02 + 1e-3, f"max diff {diff}"
    assert torch.allclose(means.double().cpu(), channel_means(ref), atol=0.01)
    n = len(spec)
    color = torch.zeros(n, 3, 4, dtype=torch.float64)
    color[:, :, :3] = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.8, 0.2], [0.1, 0.1, 0.7]], dtype=torch.float64)
    color[:, :, 3] = torch.tensor([5.0, -3.0, 2.0], dtype=torch.float64)
    pspec = PointwiseSpec(color, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), torch.float32, "NCHW", 3)
    want = pointwise_reference(ref, pspec)
    got = warp_pointwise_gpu(batch.data.to(DEVICE), batch.table, spec, pspec).cpu()
    assert got.shape == want.shape and float((got - want).abs().max()) <= 1e-3


@pytest.mark.parametrize("interp,border", [("bilinear", "constant"), ("bilinear", "reflect"), ("bicubic", "replicate")])
def test_mixed_footprints_in_one_launch(interp, border):
    """Samples of very different footprints (shrinks of 3 to 3.5x next to enlargements) in one
    launch: every sample gets exactly its own taps (a tap count taken from another sample
    would drop a wide one's outer taps or add taps to a narrow one)."""
    scales = [(3.5, 1.2), (0.4, 2.5), (1.0, 0.5), (3.0, 3.0), (0.6, 1.0)]
    batch, spec = _footprint_spec(scales, (9, 10) if SMALL else (40, 48), interp, border, seed=21)
    taps = spec.taps()[:, 1]
    assert int(taps.max()) >= 3 * int(taps.min())  # the mix this test is about
    _check_against_twin(batch, spec)


@pytest.mark.parametrize("interp,border", [("bilinear", "constant"), ("bicubic", "wrap")])
def test_very_wide_footprints(interp, border):
    """A 12x shrink in x (24 bilinear taps, 48 bicubic) next to narrow samples in the same
    launch agrees with the reference; with border "constant" the shifted sample's fill taps
    lie inside the wide footprint."""
    scales = [(12.0, 1.5), (12.5, 0.8), (1.0, 1.0), (0.5, 2.0)]
    batch, spec = _footprint_spec(scales, (6, 7) if SMALL else (32, 40), interp, border, seed=22)
    assert int(spec.taps()[:, 1].max()) >= 24
    _check_against_twin(batch, spec)


@pytest.mark.skipif(INTERPRET, reason="2^31 output elements: too big for the interpreter")
@pytest.mark.parametrize("color", [False, True])
def test_batches_past_two_to_the_31_elements(color: bool) -> None:
    """An output batch of more than 2^31 elements (4 x 3 x 16384 x 16384 uint8, 3.2 GB): the
    last sample starts past 2^31, where a 32-bit offset wraps. Each sample
    is one flat colour, so every output pixel must be its own sample's colour. With `color`,
    a contrast of exactly 1 (the colour then needs each image's mean: the second kernel, which
    writes the output, takes its own offsets)."""
    if torch.cuda.get_device_properties(0).total_memory < 24 * 2**30:
        pytest.skip("needs 24 GiB of GPU memory")
    levels = (40, 100, 160, 220)
    imgs = [torch.full((8, 8, 3), v, dtype=torch.uint8) for v in levels]
    ops = [pp.Resize((16384, 16384), interpolation="nearest")]
    if color:
        ops.append(pp.ColorJitter(contrast=(1.0, 1.0)))
    out = pp.Compose(ops, dtype=torch.uint8)(pp.ImageBatch.from_list(imgs).to("cuda"))
    assert out.numel() > 2**31
    for k, v in enumerate(levels):
        sample = out[k]
        assert int(sample.min()) == int(sample.max()) == v, (k, int(sample.min()), int(sample.max()))
    del out
    torch.cuda.empty_cache()
