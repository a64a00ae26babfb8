"""The photometric set: colour ops (ChannelShuffle, RGBShift) checked against the plain output
transformed by the formula, and pixel ops on grey levels (RandomPosterize, RandomSolarize,
RandomAutocontrast, RandomEqualize, RandomGamma) checked against Pillow's ImageOps on the same
uint8 images, with the tolerance each test states (exact where Pillow's maths is exact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run, varied_images
from PIL import Image, ImageOps

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

SIZE = [pp.Resize((16, 16))]
TOL = {"atol": 2e-6, "rtol": 0}  # float32 rounding of values in [0, 1]


def photos(n: int = 5) -> list[np.ndarray]:
    """uint8 HWC images of one size (no resampling: the op sees the uint8 values exactly): varied
    ones, a low-contrast one, a grey one as RGB, one of two levels and a constant one."""
    imgs = [make_image(24, 32, seed=s) for s in range(n)]
    imgs.append((make_image(24, 32, seed=9).astype(np.float64) * 0.2 + 100).round().astype(np.uint8))
    imgs.append(np.repeat(make_image(24, 32, 0, seed=11)[..., None], 3, axis=2))
    two = np.zeros((24, 32, 3), np.uint8)
    two[:, 16:] = 200
    imgs += [two, np.full((24, 32, 3), 77, np.uint8)]
    return imgs


def pillow(imgs: list[np.ndarray], fn) -> torch.Tensor:
    """fn(PIL image) for each image, as uint8 NCHW."""
    return torch.from_numpy(np.stack([np.asarray(fn(Image.fromarray(a))) for a in imgs])).permute(0, 3, 1, 2)


def params_of(op: pp.Op, n: int, seed: int = 0, epoch: int = 0, pos: int = 0, shape=(16, 16)):
    """op's parameters for samples 0..n-1 at position `pos` of its Compose, as the planner draws them."""
    idx = np.arange(n)
    draws = Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))
    return op.sample(draws, np.tile(np.array(shape, dtype=np.float64), (n, 1)))


def levels(x: torch.Tensor) -> torch.Tensor:
    return (x * 255).round().to(torch.uint8)


# ============================================================================ ChannelShuffle
class TestChannelShuffle:
    def test_contract(self):
        check_op(pp.ChannelShuffle(0.8), tail=SIZE, p_zero=pp.ChannelShuffle(0.0))

    def test_is_the_drawn_permutation(self):
        imgs = varied_images(12)
        out = run([*SIZE, pp.ChannelShuffle(1.0)], imgs)
        base = run(SIZE, imgs)
        order = params_of(pp.ChannelShuffle(1.0), 12, pos=1)["order"]
        perms = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
        for k in range(12):
            torch.testing.assert_close(out[k], base[k][list(perms[order[k]])], **TOL)

    def test_orders_are_uniform(self):
        order = params_of(pp.ChannelShuffle(1.0), 6000)["order"]
        counts = np.bincount(order, minlength=6)
        assert counts.min() > 900 and counts.max() < 1100, counts
        assert (params_of(pp.ChannelShuffle(0.0), 100)["order"] == 0).all()

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="p"):
            pp.ChannelShuffle(2.0)


# ============================================================================ RGBShift
class TestRGBShift:
    def test_contract(self):
        check_op(pp.RGBShift(30, 20, 10), tail=SIZE, p_zero=pp.RGBShift(30, 20, 10, p=0.0))

    def test_adds_the_drawn_offsets_then_clamps(self):
        imgs = varied_images(10)
        op = pp.RGBShift((-40, 40), 20, (0, 60), p=0.7)
        out = run([*SIZE, op], imgs)
        base = run(SIZE, imgs)
        shift = torch.from_numpy(params_of(op, 10, pos=1)["shift"]).float()
        expect = (base + shift.view(10, 3, 1, 1) / 255).clamp(0, 1)
        torch.testing.assert_close(out, expect, atol=1e-5, rtol=0)

    def test_ranges_and_p(self):
        shift = params_of(pp.RGBShift((-40, 40), 20, (0, 60), p=0.5), 4000)["shift"]
        on = (shift != 0).any(1)
        assert abs(on.mean() - 0.5) < 0.03
        for k, (lo, hi) in enumerate(((-40, 40), (-20, 20), (0, 60))):
            assert shift[on, k].min() >= lo and shift[on, k].max() <= hi
            assert abs(shift[on, k].mean() - (lo + hi) / 2) < 2

    @pytest.mark.parametrize("kwargs", [{"r_shift": -5}, {"g_shift": (10, 5)}, {"b_shift": 300}, {"p": -0.1}])
    def test_bad_arguments(self, kwargs):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            pp.RGBShift(**kwargs)


# ============================================================================ RandomPosterize
class TestRandomPosterize:
    def test_contract(self):
        check_op(pp.RandomPosterize((2, 6)), head=SIZE, p_zero=pp.RandomPosterize(3, p=0.0))

    @pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 7, 8])
    def test_exactly_pillow(self, bits):
        imgs = photos()
        out = run([pp.RandomPosterize(bits, p=1.0)], imgs, dtype=torch.uint8)
        assert torch.equal(out, pillow(imgs, lambda im: ImageOps.posterize(im, bits)))

    def test_zero_bits_is_black(self):
        assert int(run([pp.RandomPosterize(0, p=1.0)], photos(), dtype=torch.uint8).max()) == 0

    def test_float_output_is_on_the_levels(self):
        out = run([*SIZE, pp.RandomPosterize(3, p=1.0)], varied_images(4))
        assert torch.equal(levels(out) & 0b00011111, torch.zeros_like(levels(out)))
        torch.testing.assert_close(out, levels(out).float() / 255, atol=1e-6, rtol=0)

    def test_bits_drawn_per_image_inclusive(self):
        p = params_of(pp.RandomPosterize((2, 5), p=0.5), 4000)
        counts = np.bincount(p["bits"], minlength=9)[2:6]
        assert counts.min() > 900, counts
        assert set(np.unique(p["bits"])) == {2, 3, 4, 5}
        assert abs(p["on"].mean() - 0.5) < 0.03

    @pytest.mark.parametrize("bits", [9, -1, (3, 2), 2.5])
    def test_bad_arguments(self, bits):
        with pytest.raises(ValueError, match="bits"):
            pp.RandomPosterize(bits)


# ============================================================================ RandomSolarize
class TestRandomSolarize:
    def test_contract(self):
        check_op(pp.RandomSolarize((0.3, 0.7)), head=SIZE, p_zero=pp.RandomSolarize(0.5, p=0.0))

    @pytest.mark.parametrize("threshold", [0, 1, 64, 128, 200, 255])
    def test_exactly_pillow(self, threshold):
        imgs = photos()
        out = run([pp.RandomSolarize(threshold / 255, p=1.0)], imgs, dtype=torch.uint8)
        assert torch.equal(out, pillow(imgs, lambda im: ImageOps.solarize(im, threshold)))

    def test_is_the_formula_on_resampled_images(self):
        imgs = varied_images(6)
        base = run(SIZE, imgs)
        op = pp.RandomSolarize((0.2, 0.8), p=0.6)
        out = run([*SIZE, op], imgs)
        p = params_of(op, 6, pos=1)
        t = torch.from_numpy(p["threshold"]).float().view(6, 1, 1, 1)
        on = torch.from_numpy(p["on"]).view(6, 1, 1, 1)
        expect = torch.where(on & (base * 255 >= t * 255 - 1e-3), 1 - base, base)
        torch.testing.assert_close(out, expect, atol=1e-6, rtol=0)

    def test_names_the_unit_of_a_uint8_threshold(self):
        with pytest.raises(ValueError, match="128/255"):
            pp.RandomSolarize(128)
        with pytest.raises(ValueError, match="threshold"):
            pp.RandomSolarize((0.6, 0.4))


# ============================================================================ RandomAutocontrast
class TestRandomAutocontrast:
    def test_contract(self):
        check_op(pp.RandomAutocontrast(), head=SIZE, p_zero=pp.RandomAutocontrast(0.0))

    def test_within_one_level_of_pillow(self):
        """Pillow truncates (x - lo) * 255 / (hi - lo) in its table; the op keeps the ratio, so
        uint8 outputs differ by at most 1 level, 0.6 on average (Pillow's float table even maps
        a channel's maximum to 254 at times: 255 * (1 - 1e-16) truncated); a constant image is
        kept by both."""
        imgs = photos()
        out = run([pp.RandomAutocontrast(1.0)], imgs, dtype=torch.uint8).int()
        ref = pillow(imgs, ImageOps.autocontrast).int()
        diff = (out - ref).abs()
        assert int(diff.max()) <= 1 and float(diff.float().mean()) < 0.6
        assert torch.equal(out[-1], ref[-1])
        assert (out.amin((2, 3))[:-1] == 0).all() and (out.amax((2, 3))[:-1] == 255).all()

    def test_is_the_float_formula(self):
        imgs = varied_images(6)
        base = run(SIZE, imgs)
        out = run([*SIZE, pp.RandomAutocontrast(1.0)], imgs)
        lo, hi = base.amin((2, 3), keepdim=True), base.amax((2, 3), keepdim=True)
        torch.testing.assert_close(out, (base - lo) / (hi - lo), atol=2e-6, rtol=0)
        assert float(out.amin((2, 3)).max()) == 0.0 and float(out.amax((2, 3)).min()) == 1.0

    def test_constant_channel_is_kept(self):
        flat = [np.full((8, 8, 3), (10, 100, 250), np.uint8)]
        assert torch.equal(run([pp.RandomAutocontrast(1.0)], flat), run([], flat))


# ============================================================================ RandomEqualize
class TestRandomEqualize:
    def test_contract(self):
        check_op(pp.RandomEqualize(), head=SIZE, p_zero=pp.RandomEqualize(0.0))

    def test_exactly_pillow(self):
        imgs = photos()
        out = run([pp.RandomEqualize(1.0)], imgs, dtype=torch.uint8)
        assert torch.equal(out, pillow(imgs, ImageOps.equalize))

    def test_exactly_pillow_on_many_histograms(self):
        rng = np.random.default_rng(3)
        imgs = [rng.integers(lo, hi, (12, 20, 3), dtype=np.uint8) for lo, hi in
                ((0, 256), (0, 3), (250, 256), (100, 102), (0, 40))]
        imgs.append(rng.choice([0, 255], (12, 20, 3), p=[0.97, 0.03]).astype(np.uint8))
        out = run([pp.RandomEqualize(1.0)], imgs, dtype=torch.uint8)
        assert torch.equal(out, pillow(imgs, ImageOps.equalize))

    def test_p_draws_per_image(self):
        on = params_of(pp.RandomEqualize(0.3), 4000)["on"]
        assert abs(on.mean() - 0.3) < 0.03


# ============================================================================ RandomGamma
class TestRandomGamma:
    def test_contract(self):
        check_op(pp.RandomGamma((0.5, 2.0)), head=SIZE, p_zero=pp.RandomGamma(p=0.0))

    def test_is_the_formula_with_the_drawn_gamma(self):
        imgs = varied_images(8)
        base = run(SIZE, imgs)
        op = pp.RandomGamma((0.5, 2.0), gain=1.1, p=0.7)
        out = run([*SIZE, op], imgs, seed=4)
        p = params_of(op, 8, seed=4, pos=1)
        g = torch.from_numpy(p["gamma"]).view(8, 1, 1, 1)
        on = torch.from_numpy(p["on"]).view(8, 1, 1, 1)
        expect = torch.where(on, (1.1 * base.double() ** g).clamp(0, 1).float(), base)
        torch.testing.assert_close(out, expect, atol=2e-6, rtol=0)
        assert 0.5 <= p["gamma"].min() and p["gamma"].max() <= 2.0

    def test_pillow_gamma_table(self):
        """Pillow has no gamma op; its point table of round(255 (i / 255) ** g) is the reference
        for uint8 images: exact."""
        imgs = photos()
        out = run([pp.RandomGamma(2.2, p=1.0)], imgs, dtype=torch.uint8)
        table = [round(255 * (i / 255) ** 2.2) for i in range(256)]
        assert torch.equal(out, pillow(imgs, lambda im: im.point(table * 3)))

    @pytest.mark.parametrize("kwargs, name", [({"gamma": 0}, "gamma"), ({"gamma": (2, 1)}, "gamma"),
                                              ({"gain": -1}, "gain"), ({"p": 3}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.RandomGamma(**kwargs)


# ============================================================================ on the GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", [pp.RandomPosterize((1, 7), p=1.0), pp.RandomSolarize((0.2, 0.8), p=1.0),
                                pp.RandomAutocontrast(1.0), pp.RandomEqualize(1.0), pp.RandomGamma(p=1.0)],
                         ids=lambda op: type(op).__name__)
def test_pixel_ops_agree_on_the_gpu(op):
    """The op alone, on the same float input and parameters on both devices: the same grey
    levels (the warps themselves differ by the devices' rounding, test_gpu_kernels)."""
    x = run(SIZE, varied_images(8))
    params = params_of(op, 8)
    draws = Draws(0, 0, np.arange(8), 0)
    cpu = op.apply(x, params, draws)
    gpu = op.apply(x.cuda(), params, draws).cpu()
    torch.testing.assert_close(gpu, cpu, atol=1e-5, rtol=0)
