"""warp_cpu's per-sample shortcuts against the general forms they replace (STYLE.md, idea 7).

- resize_window (torch's antialiased bilinear kernel writing into a channels-last tensor, read
  from a strided window view) against F.interpolate on a contiguous copy of the window: equal,
  every byte, colour and grey, shrinking and enlarging, windows at any offset in a larger buffer.
- classify (numpy, once per batch) against the same tests in torch ops: equal kinds on batches
  mixing all three paths.
- band_weights (numpy) against warp_torch.axis_weights: equal to 1 float32 ulp (the row sums
  may add in another order), every filter, border and antialias setting.
- TestGeneralWarp: warp.c's "general" path (any 3x3 map) against warp_reference, on random
  affine and perspective maps (rotations, shears, shrinks and enlargements, parts of the output
  outside the image), every border, interpolation and antialias setting, grey and RGB sources
  stored with margins (strided views) or planar (channel stride != 1), random clip boxes and
  buffer origins (as a decoded region at a DCT scale gives them), and outputs whose rows have
  8-pixel blocks and tails. Stated tolerance, in grey levels of the warped values clamped to
  [0, 255] as the pointwise pass clamps them: max |general - reference| <= 0.01 and mean <=
  1e-4, so at most 1 grey level apart once rounded to uint8, and equal for all but 0.1% of the
  pixels (measured over 240 random cases per setting: max 2.4e-3, mean <= 1.5e-5, 4 pixels in
  257,826 one level apart; the exact per-pixel path equals the reference, the 8-pixel vector
  blocks round their weights to float32). Unclamped, bicubic values far outside [0, 255]
  (where dropped taps leave weights that nearly cancel) agree to ~1e-4 relative only.
  Its fused pointwise pass against pointwise_reference of the reference warp (every output
  dtype, layout, grey output, colour matrices): within float32 rounding, then the dtype's.
  Its float16 / bfloat16 / uint8 stores: exactly torch's casts of its own float32 output.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import make_image

import pixelpipe as pp
from pixelpipe import ImageBatch
from pixelpipe.kernels.cpu.stage import _post, finish_sample, output_tensor
from pixelpipe.kernels.cpu.warp import (
    GENERAL,
    REFERENCE,
    SEPARABLE,
    WINDOW,
    SampleRows,
    band_weights,
    channel_sums,
    classify,
    finish_general,
    finish_warped,
    general_library,
    general_sample,
    resize_window,
    sample_rows,
    with_general,
)
from pixelpipe.kernels.reference.pointwise import pointwise_reference
from pixelpipe.kernels.reference.warp import axis_weights, warp_reference
from pixelpipe.kernels.spec import PointwiseSpec, WarpSpec


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



# ----------------------------------------------------------------------------- the general warp
GENERAL_MAX, GENERAL_MEAN = 0.01, 1e-4  # grey levels, warped float values (see the docstring)
INTERPOLATIONS = ["bilinear", "bicubic", "nearest"]
BORDERS = ["constant", "reflect", "replicate", "wrap"]


def _random_map(rng: np.random.Generator, out_hw: tuple[int, int], clip: np.ndarray, perspective: bool,
                axis_aligned: bool = False) -> np.ndarray:
    """An output -> image map: the output's centre near the clip box's centre, rotated by any
    angle, scaled by 0.3 to 4 per axis (enlarging and shrinking), sheared, and (perspective)
    tilted so that pz stays within [0.6, 1.4] over the output. axis_aligned: scaled and
    flipped per axis only, its centre further off (much of the output maps outside the image:
    translations, zoom-outs)."""
    H, W = out_hw
    y0, x0, y1, x1 = clip
    spread = 0.8 if axis_aligned else 0.3
    centre = np.array([(x0 + x1) / 2, (y0 + y1) / 2]) + rng.normal(0, spread, 2) * [x1 - x0, y1 - y0]
    scale = np.diag(np.exp(rng.uniform(np.log(0.3), np.log(4.0), 2)))
    if axis_aligned:
        a = scale @ np.diag(rng.choice([-1.0, 1.0], 2))
    else:
        t = rng.uniform(-np.pi, np.pi)
        rot = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
        shear = np.array([[1.0, rng.uniform(-0.4, 0.4)], [0.0, 1.0]])
        a = rot @ shear @ scale
    m = np.eye(3)
    m[:2, :2] = a
    m[:2, 2] = centre - a @ np.array([W / 2, H / 2])
    if perspective:
        g = rng.uniform(-0.4, 0.4, 2) / np.array([W, H])
        tilt = np.array([[1.0, 0, 0], [0, 1.0, 0], [g[0], g[1], 1.0 - g[0] * W / 2 - g[1] * H / 2]])
        m = m @ tilt  # the output centre keeps pz = 1
    return m


def _random_case(rng: np.random.Generator, channels: int, perspective: bool, interpolation: str, border: str,
                 antialias: bool, layout: str = "margins", axis_aligned: bool = False) -> tuple[torch.Tensor, WarpSpec]:
    """(the stored buffer, a one-sample spec): an image of random size, a clip box inside it
    (the whole image 30% of the time), a buffer holding the clip box from a random origin (a
    decoded region), stored with margins (a strided view) or planar (channel stride h*w)."""
    ih, iw = (int(v) for v in rng.integers(12, 80, 2))
    full = rng.random() < 0.3
    y0, x0 = (0, 0) if full else (int(rng.integers(0, ih - 2)), int(rng.integers(0, iw - 2)))
    y1, x1 = (ih, iw) if full else (int(rng.integers(y0 + 1, ih + 1)), int(rng.integers(x0 + 1, iw + 1)))
    oy, ox = int(rng.integers(0, y0 + 1)), int(rng.integers(0, x0 + 1))
    bh, bw = int(rng.integers(y1 - oy, ih - oy + 1)), int(rng.integers(x1 - ox, iw - ox + 1))
    pixels = make_image(bh, bw, c=channels, seed=int(rng.integers(1 << 30)), noise=20.0)
    pixels = pixels.reshape(bh, bw, channels)
    if layout == "planar":  # HWC view of CHW planes
        stored = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))).permute(1, 2, 0)
    else:
        big = np.zeros((bh + 5, bw + 7, channels), dtype=np.uint8)
        big[2 : 2 + bh, 3 : 3 + bw] = pixels
        stored = torch.from_numpy(big)[2 : 2 + bh, 3 : 3 + bw]
    out_hw = (int(rng.integers(3, 30)), int(rng.integers(5, 42)))  # 8-pixel blocks and tails
    clip = np.array([y0, x0, y1, x1])
    inv = _random_map(rng, out_hw, clip, perspective, axis_aligned)  # WarpSpec.inverse: output -> image
    fill = tuple(float(v) for v in rng.integers(0, 256, 3))
    spec = WarpSpec(inv[None], np.array([[ih, iw]]), np.array([[oy, ox]]), clip[None], out_hw, interpolation,
                    border, fill, antialias)
    return stored, spec


def _reference_one(stored: torch.Tensor, spec: WarpSpec) -> torch.Tensor:
    b = ImageBatch.from_list([stored.contiguous()])
    return warp_reference(b.data, b.table, spec)[0]


def _general_rows(spec: WarpSpec) -> SampleRows:
    return sample_rows(spec, torch.full((len(spec),), GENERAL))


def _errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    d = (got.double() - want.double()).abs()
    return float(d.max()), float(d.mean())


@pytest.mark.skipif(general_library() is None, reason="warp.c was not built")
class TestGeneralWarp:
    @pytest.mark.parametrize("interpolation", INTERPOLATIONS)
    @pytest.mark.parametrize("border", BORDERS)
    @pytest.mark.parametrize("antialias", [True, False])
    @pytest.mark.parametrize("perspective", [False, True])
    def test_random_maps_agree_with_the_reference(self, interpolation, border, antialias, perspective):
        """The stated tolerance (module docstring), on 24 random cases per setting."""
        rng = np.random.default_rng(zlib.crc32(f"{interpolation} {border} {antialias} {perspective}".encode()))
        worst, total, pixels, off_u8 = 0.0, 0.0, 0, 0
        for k in range(24):
            channels = 1 if k % 4 == 3 else 3
            layout = "planar" if k % 6 == 5 else "margins"
            stored, spec = _random_case(rng, channels, perspective, interpolation, border, antialias, layout)
            got = general_sample(stored, spec, _general_rows(spec), 0)
            want = _reference_one(stored, spec)
            assert got.shape == want.shape == (*spec.out_size, 3) and got.dtype == torch.float32
            got, want = got.clamp(0, 255), want.clamp(0, 255)
            mx, mean = _errors(got, want)
            worst = max(worst, mx)
            total += mean * want.numel()
            pixels += want.numel()
            rounded = (got.round() - want.round()).abs()
            assert float(rounded.max()) <= 1
            off_u8 += int((rounded > 0).sum())
        assert worst <= GENERAL_MAX, worst
        assert total / pixels <= GENERAL_MEAN
        assert off_u8 <= max(2, pixels // 1000)

    def test_planned_warps_agree_with_the_reference(self):
        """Rotations, shears and perspective planned by the ops (RandomResizedCrop windows,
        decoded regions as clip boxes) on grey and RGB images, with and without antialiasing."""
        b = ImageBatch.from_list([torch.from_numpy(make_image(40 + 9 * k, 90 - 7 * k, c=1 if k == 2 else 3, seed=k))
                                  for k in range(6)])
        for ops in ([pp.RandomResizedCrop((20, 40)), pp.RandomRotate(40)],
                    [pp.RandomPerspective(0.5, p=1.0), pp.Resize((33, 17))],
                    [pp.RandomAffine(degrees=20, shear=15, scale=(0.5, 2.0), border="reflect"), pp.Resize((24, 24))]):
            for antialias in (True, False):
                plan = pp.Compose(ops).stages[0].sample(0, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
                spec = plan.warp_spec(plan.uniform_size(), plan.regions(), antialias=antialias)
                kind = with_general(classify(spec))
                assert bool((kind == GENERAL).all())
                rows = sample_rows(spec, kind)
                want = warp_reference(b.data, b.table, spec)
                got = torch.stack([general_sample(b[i], spec, rows, i) for i in range(len(b))])
                mx, mean = _errors(got.clamp(0, 255), want.clamp(0, 255))
                assert mx <= GENERAL_MAX and mean <= GENERAL_MEAN

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8])
    @pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
    @pytest.mark.parametrize("channels", [3, 1])
    def test_fused_pointwise_agrees_with_the_reference(self, dtype, layout, channels):
        """finish_general (warp + pointwise in one call) against pointwise_reference of the
        reference warp; finish_warped (the pass alone) against finish_sample."""
        rng = np.random.default_rng(11)
        for k in range(6):
            stored, spec = _random_case(rng, 3 if k % 3 else 1, k % 2 == 1, "bilinear", BORDERS[k % 4], True)
            color = None
            if k % 2:
                color = np.concatenate([np.eye(3) * 0.8 + 0.05, np.full((3, 1), 12.0)], 1)[None]
            norm = (None, None) if dtype == torch.uint8 else ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
            pspec = PointwiseSpec(None if color is None else torch.from_numpy(color), norm[0], norm[1], dtype, layout,
                                  channels)
            out = output_tensor(1, spec.out_size, pspec)
            k_, b_ = _post(pspec)
            post = (k_.numpy(), b_.numpy())
            c32 = None if color is None else color[0].astype(np.float32)
            finish_general(stored, spec, _general_rows(spec), 0, pspec, c32, post, out[0])
            ref = pointwise_reference(_reference_one(stored, spec)[None], pspec)
            alone = output_tensor(1, spec.out_size, pspec)
            warped = general_sample(stored, spec, _general_rows(spec), 0)
            finish_warped(warped, spec, pspec, c32, post, alone[0])
            twin = output_tensor(1, spec.out_size, pspec)
            finish_sample(warped, pspec, 0, twin[0], _post(pspec))
            assert out.dtype == ref.dtype == dtype and out.shape == ref.shape
            if dtype == torch.uint8:
                assert float((out.float() - ref.float()).abs().max()) <= 1
                assert float((alone.float() - twin.float()).abs().max()) <= 1
            else:
                tol = {torch.float32: 1e-4, torch.float16: 2 * 2**-9, torch.bfloat16: 2 * 2**-6}[dtype]
                torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)
                torch.testing.assert_close(alone.float(), twin.float(), atol=tol, rtol=tol)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.uint8])
    def test_stores_are_torchs_casts(self, dtype):
        """The kernel's float16 / bfloat16 / uint8 outputs are torch's casts (round to nearest
        even) of its own float32 output, every pixel (vector blocks and tails)."""
        rng = np.random.default_rng(5)
        for k in range(8):
            stored, spec = _random_case(rng, 3, k % 2 == 1, "bicubic", "reflect", True)
            norm = ((0.5,), (0.001,))  # values far past float16's 1
            outs = {}
            for dt in (torch.float32, dtype):
                pspec = PointwiseSpec(None, *((None, None) if dt == torch.uint8 else norm), dt, ("NCHW", "NHWC")[k % 2], 3)
                out = output_tensor(1, spec.out_size, pspec)
                k_, b_ = (np.ones(3, np.float32), np.zeros(3, np.float32)) if dtype == torch.uint8 else _post(pspec)
                finish_general(stored, spec, _general_rows(spec), 0, pspec, None, (np.asarray(k_), np.asarray(b_)), out[0])
                outs[dt] = out
            want = torch.round(outs[torch.float32]).to(dtype) if dtype == torch.uint8 else outs[torch.float32].to(dtype)
            assert torch.equal(outs[dtype], want)

    def test_channel_sums(self):
        x = torch.from_numpy(make_image(37, 51, seed=3))
        want = x.double().sum((0, 1)).numpy()
        assert np.array_equal(channel_sums(x), want)
        f = x.float() * 1.37 - 3.0
        np.testing.assert_allclose(channel_sums(f), f.double().sum((0, 1)).numpy(), rtol=1e-12)
        np.testing.assert_allclose(channel_sums(f.flip(1)), f.double().sum((0, 1)).numpy(), rtol=1e-12)

    def test_stage_takes_the_general_path_for_rotations(self):
        """run_cpu_stage sends rotated uint8 samples through warp.c (no batched reference), and
        a Compose on the CPU agrees with the reference twin of every sample."""
        imgs = [torch.from_numpy(make_image(50 + 5 * k, 70 - 3 * k, c=1 if k == 3 else 3, seed=k)) for k in range(8)]
        ops = [pp.RandomResizedCrop(32), pp.RandomRotate(30), pp.RandomPerspective(0.3, p=0.5)]
        got = pp.Compose(ops, dtype=torch.float32, layout="NHWC")(imgs, seed=3)
        b = ImageBatch.from_list(imgs)
        plan = pp.Compose(ops).stages[0].sample(3, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
        spec = plan.warp_spec(plan.uniform_size(), plan.regions())
        assert bool((with_general(classify(spec)) == GENERAL).any())
        want = warp_reference(b.data, b.table, spec).clamp(0, 255) / 255
        torch.testing.assert_close(got, want, atol=GENERAL_MAX / 255 + 1e-6, rtol=0)

    @pytest.mark.parametrize("interpolation", INTERPOLATIONS)
    @pytest.mark.parametrize("border", BORDERS)
    @pytest.mark.parametrize("antialias", [True, False])
    def test_axis_aligned_maps_reaching_outside_agree_with_the_reference(self, interpolation, border, antialias):
        """Axis-aligned maps whose output reaches past the image (translations, zoom-outs, flips:
        the uncovered area takes the fill colour or the border rule) take the two 1-D passes with
        warp_pixel's two tap variants: the general path's tolerance on 24 random cases."""
        rng = np.random.default_rng(zlib.crc32(f"axis {interpolation} {border} {antialias}".encode()))
        worst, total, pixels, reaching = 0.0, 0.0, 0, 0
        for k in range(24):
            channels = 1 if k % 4 == 3 else 3
            layout = "planar" if k % 6 == 5 else "margins"
            stored, spec = _random_case(rng, channels, False, interpolation, border, antialias, layout,
                                        axis_aligned=True)
            m, (h, w), (ih, iw) = spec.inverse[0], spec.out_size, spec.image_size[0]
            assert m[0, 1] == m[1, 0] == 0
            us = (m[0, 0] * 0.5 + m[0, 2], m[0, 0] * (w - 0.5) + m[0, 2])
            vs = (m[1, 1] * 0.5 + m[1, 2], m[1, 1] * (h - 0.5) + m[1, 2])
            reaching += min(us) < 0 or max(us) >= iw or min(vs) < 0 or max(vs) >= ih
            got = general_sample(stored, spec, _general_rows(spec), 0).clamp(0, 255)
            want = _reference_one(stored, spec).clamp(0, 255)
            mx, mean = _errors(got, want)
            worst = max(worst, mx)
            total += mean * want.numel()
            pixels += want.numel()
            assert float((got.round() - want.round()).abs().max()) <= 1
        assert reaching >= 12  # most maps reach past the image
        assert worst <= GENERAL_MAX, worst
        assert total / pixels <= GENERAL_MEAN

    @pytest.mark.parametrize("interpolation", INTERPOLATIONS)
    @pytest.mark.parametrize("antialias", [True, False])
    def test_axis_aligned_maps_inside_the_image_agree_with_the_reference(self, interpolation, antialias):
        """Crops, resizes and flips whose pixel centres land inside the image take warp.c's two
        1-D passes (warp_separable.h): the general path's tolerance, grey and RGB, shrinking
        and enlarging, on buffers with margins (decoded regions) and whole images."""
        b = ImageBatch.from_list([torch.from_numpy(make_image(50 + 11 * k, 90 - 7 * k, c=1 if k == 2 else 3, seed=k))
                                  for k in range(6)])
        worst, total, pixels = 0.0, 0.0, 0
        for ops in ([pp.RandomResizedCrop((24, 40), interpolation=interpolation), pp.RandomFlip(0.5, 0.5)],
                    [pp.Resize((90, 70), interpolation=interpolation), pp.RandomFlip(0.5)],
                    [pp.CenterCrop(0.7), pp.Resize((19, 23), interpolation=interpolation)]):
            plan = pp.Compose(ops).stages[0].sample(2, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
            regions = plan.regions()
            for spec, stored in ((plan.warp_spec(plan.uniform_size(), regions, antialias=antialias), None),
                                 (plan.warp_spec(plan.uniform_size(), regions, origin=regions[:, :2],
                                                 antialias=antialias), regions)):
                rows = _general_rows(spec)
                for i in range(len(b)):
                    img = b[i]
                    if stored is not None:  # the decoded region alone (a view), as the CPU decoder leaves it
                        y0, x0, y1, x1 = stored[i].tolist()
                        img = img[y0:y1, x0:x1]
                    got = general_sample(img, spec, rows, i).clamp(0, 255)
                    want = _reference_one(img, spec[[i]]).clamp(0, 255)
                    mx, mean = _errors(got, want)
                    worst = max(worst, mx)
                    total += mean * want.numel()
                    pixels += want.numel()
        assert worst <= GENERAL_MAX, worst
        assert total / pixels <= GENERAL_MEAN

    @pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
    def test_separable_crops_take_the_general_path(self, interpolation):
        """Axis-aligned "separable" samples (every bicubic one) go through warp.c (its two 1-D
        passes are cheaper), "window" ones keep their path; a Compose agrees with the reference."""
        from pixelpipe.kernels.cpu.stage import _kinds

        imgs = [torch.from_numpy(make_image(60 + 7 * k, 80 - 5 * k, c=1 if k == 3 else 3, seed=k)) for k in range(8)]
        ops = [pp.RandomResizedCrop(32, interpolation=interpolation), pp.RandomFlip(0.5)]
        b = ImageBatch.from_list(imgs)
        plan = pp.Compose(ops).stages[0].sample(5, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
        spec = plan.warp_spec(plan.uniform_size(), plan.regions())
        before = classify(spec)
        kinds = _kinds(spec, True)
        if interpolation == "bicubic":
            assert bool((before == SEPARABLE).all())
        else:
            assert bool((before == WINDOW).all())
        assert torch.equal(kinds, torch.where(before == SEPARABLE, GENERAL, before))
        got = pp.Compose(ops, dtype=torch.float32, layout="NHWC")(imgs, seed=5)
        want = warp_reference(b.data, b.table, spec).clamp(0, 255) / 255
        tolerance = GENERAL_MAX if interpolation == "bicubic" else 2.0  # "window": 2 grey levels
        torch.testing.assert_close(got, want, atol=tolerance / 255 + 1e-6, rtol=0)
