"""Colour ops, Normalize and Lambda: one class per op, each running check_op plus the op's own
semantics, checked against the plain (no colour op) output transformed by the formulas written
out here (torchvision's definitions)."""

from __future__ import annotations

import colorsys
import itertools
import math

import numpy as np
import pytest
import torch
from helpers import check_op, grey, make_image, run, varied_images

import pixelpipe as pp
from pixelpipe import Compose

SIZE = [pp.Resize((16, 16))]
TOL = {"atol": 2e-6, "rtol": 0}  # float32 rounding of values in [0, 1]


def plain(imgs, **kw):
    """float32 NCHW in [0, 1] of the images through SIZE, no colour op."""
    return run(SIZE, imgs, **kw)


def colour_params(ops, n, seed=0):
    """[(op, parameters as tensors)] of the first stage's colour ops."""
    plan = Compose(ops).stages[0].sample(seed, 0, torch.arange(n), torch.full((n, 2), 16.0, dtype=torch.float64))
    return [(op, {k: torch.from_numpy(np.asarray(v)) for k, v in params.items()}) for op, params in plan.color_params]


# ============================================================================ ColorJitter
class TestColorJitter:
    def test_contract(self):
        check_op(pp.ColorJitter(0.4, 0.4, 0.4, 0.1), tail=SIZE, p_zero=pp.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.0))

    @pytest.mark.parametrize("factor", [0.5, 1.3, 2.5])
    def test_brightness_scales_and_clamps(self, factor):
        imgs = varied_images(4)
        out = run([*SIZE, pp.ColorJitter(brightness=(factor, factor))], imgs)
        torch.testing.assert_close(out, (plain(imgs) * factor).clamp(0, 1), **TOL)

    @pytest.mark.parametrize("factor", [0.0, 0.6, 1.8])
    def test_contrast_blends_with_the_mean_grey(self, factor):
        imgs = varied_images(4)
        base = plain(imgs)
        mean_grey = grey(base).mean(dim=(1, 2, 3), keepdim=True)  # of the output image, per sample
        out = run([*SIZE, pp.ColorJitter(contrast=(factor, factor))], imgs)
        torch.testing.assert_close(out, (factor * base + (1 - factor) * mean_grey).clamp(0, 1), atol=1e-5, rtol=0)

    @pytest.mark.parametrize("factor", [0.0, 0.5, 2.0])
    def test_saturation_blends_with_the_grey(self, factor):
        imgs = varied_images(4)
        base = plain(imgs)
        out = run([*SIZE, pp.ColorJitter(saturation=(factor, factor))], imgs)
        torch.testing.assert_close(out, (factor * base + (1 - factor) * grey(base)).clamp(0, 1), atol=1e-5, rtol=0)

    @pytest.mark.parametrize("hue", [0.1, -0.3, 0.5])
    def test_hue_keeps_grey_and_luma(self, hue):
        # mid-range colours so that nothing is clamped
        img = (make_image(16, 16).astype("float32") * 0.4 + 76).round().astype("uint8")
        grey_img = make_image(16, 16, 0)
        base = plain([img, grey_img])
        out = run([*SIZE, pp.ColorJitter(hue=(hue, hue))], [img, grey_img])
        torch.testing.assert_close(out[1], base[1], **TOL)  # grey pixels do not move
        torch.testing.assert_close(grey(out[:1]), grey(base[:1]), atol=1e-5, rtol=0)  # luma is kept
        assert float((out[0] - base[0]).abs().max()) > 0.02  # but colours change

    @pytest.mark.parametrize("colour", [(180, 60, 60), (60, 180, 60), (60, 60, 180), (200, 150, 50)])
    @pytest.mark.parametrize("turn", [1 / 3, -1 / 3])
    def test_hue_turns_the_way_hsv_does(self, colour, turn):
        # the YIQ rotation is not HSV's hue shift, but a third of a turn must bring the same
        # primary to the top as colorsys does (red -> green -> blue for positive turns)
        img = np.full((4, 4, 3), colour, np.uint8)
        out = run([pp.ColorJitter(hue=(turn, turn))], [img])[0, :, 0, 0]
        h, sat, v = colorsys.rgb_to_hsv(*(c / 255 for c in colour))
        expect = colorsys.hsv_to_rgb((h + turn) % 1.0, sat, v)
        assert int(out.argmax()) == int(np.argmax(expect)), (out.tolist(), expect)

    def test_hue_full_turn_in_two_halves(self):
        img = (make_image(16, 16).astype("float32") * 0.4 + 76).round().astype("uint8")
        half = run([*SIZE, pp.ColorJitter(hue=(0.5, 0.5)), pp.ColorJitter(hue=(0.5, 0.5))], [img])
        torch.testing.assert_close(half, plain([img]), atol=1e-5, rtol=0)

    def test_factors_within_range_and_p(self):
        n = 4000
        jitter = pp.ColorJitter(brightness=(0.6, 1.2), contrast=0.3, saturation=(0.0, 2.0), hue=0.2, p=0.75)
        (op, params), = colour_params([jitter], n)
        assert op is jitter
        for name, (lo, hi) in (("brightness", (0.6, 1.2)), ("contrast", (0.7, 1.3)),
                               ("saturation", (0.0, 2.0)), ("hue", (-0.2, 0.2))):
            v = params[name]
            assert float(v.min()) >= lo and float(v.max()) <= hi, name
        off = (params["brightness"] == 1) & (params["contrast"] == 1) & (params["saturation"] == 1) \
            & (params["hue"] == 0)
        assert abs(float(off.double().mean()) - 0.25) < 0.03

    def test_the_four_steps_commute_as_the_fold_says(self):
        """The fold draws no order: with one clamp at the end the steps commute. Each step
        applied one after another by its own definition, in all 24 orders, to colours and a
        mean colour, must give the fold's result."""
        n = 50
        jitter = pp.ColorJitter(brightness=0.5, contrast=0.6, saturation=(0.0, 2.0), hue=0.5)
        (_, params), = colour_params([jitter], n)
        g = torch.Generator().manual_seed(4)
        x = torch.rand(n, 3, dtype=torch.float64, generator=g) * 255
        mu = torch.rand(n, 3, dtype=torch.float64, generator=g) * 255
        luma = torch.tensor([0.299, 0.587, 0.114], dtype=torch.float64)
        yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], dtype=torch.float64)
        b, c, s, h = (params[k].to(torch.float64).view(n, 1) for k in ("brightness", "contrast", "saturation", "hue"))

        def hue(v):
            a = 2 * math.pi * h.view(n)
            rot = torch.zeros(n, 3, 3, dtype=torch.float64)
            rot[:, 0, 0] = 1.0
            rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = a.cos(), a.sin(), -a.sin(), a.cos()
            return (torch.linalg.inv(yiq) @ rot @ yiq @ v.unsqueeze(-1)).squeeze(-1)

        steps = [lambda v, m: b * v,
                 lambda v, m: c * v + (1 - c) * (m @ luma).view(n, 1),
                 lambda v, m: s * v + (1 - s) * (v @ luma).view(n, 1),
                 lambda v, m: hue(v)]
        fold = torch.from_numpy(jitter.color({k: v.numpy() for k, v in params.items()}, mu.numpy()))
        expect = (fold[:, :, :3] @ x.unsqueeze(-1)).squeeze(-1) + fold[:, :, 3]
        for order in itertools.permutations(range(4)):
            v, m = x.clone(), mu.clone()
            for k in order:
                v, m = steps[k](v, m), steps[k](m, m)
            torch.testing.assert_close(v, expect, atol=1e-9, rtol=1e-12, msg=str(order))

    def test_zero_factors_are_no_op(self):
        assert Compose([pp.ColorJitter()]).stages[0].colors[0][1].needs_mean is False
        imgs = varied_images(3)
        out = run([*SIZE, pp.ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)], imgs)
        torch.testing.assert_close(out, plain(imgs), **TOL)

    def test_fused_with_geometry_and_colour_of_grey_images(self):
        # colour ops act on the replicated grey image: saturation does nothing there
        g = make_image(20, 20, 0)
        base = run([pp.RandomFlip(1.0), pp.Resize((16, 16))], [g])
        out = run([pp.RandomFlip(1.0), pp.ColorJitter(saturation=(0.0, 2.0)), pp.Resize((16, 16))], [g])
        torch.testing.assert_close(out, base, atol=1e-5, rtol=0)


# ============================================================================ RandomGrayscale
class TestRandomGrayscale:
    def test_contract(self):
        check_op(pp.RandomGrayscale(0.5), tail=SIZE, p_zero=pp.RandomGrayscale(0.0))

    def test_p1_gives_the_grey(self):
        imgs = varied_images(5)
        base = plain(imgs)
        out = run([*SIZE, pp.RandomGrayscale(1.0)], imgs)
        torch.testing.assert_close(out, grey(base).expand_as(base), atol=1e-5, rtol=0)

    def test_uint8_channels_equal(self):
        out = run([*SIZE, pp.RandomGrayscale(1.0)], varied_images(5), dtype=torch.uint8)
        assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 1], out[:, 2])

    def test_rate_is_p(self):
        (_, params), = colour_params([pp.RandomGrayscale(0.2)], 4000)
        assert abs(float(params["grey"].double().mean()) - 0.2) < 0.03


# ============================================================================ RandomInvert
class TestRandomInvert:
    def test_contract(self):
        check_op(pp.RandomInvert(0.5), tail=SIZE, p_zero=pp.RandomInvert(0.0))

    def test_p1_is_pillows_invert(self):
        """Against Pillow's ImageOps.invert of the same resized images: exact in uint8."""
        from PIL import Image, ImageOps

        imgs = varied_images(6)
        resized = run(SIZE, imgs, dtype=torch.uint8, layout="NHWC")
        out = run([*SIZE, pp.RandomInvert(1.0)], imgs, dtype=torch.uint8, layout="NHWC")
        want = np.stack([np.asarray(ImageOps.invert(Image.fromarray(r.numpy()))) for r in resized])
        assert np.array_equal(out.numpy(), want)

    def test_folds_with_the_other_colour_ops(self):
        """One pointwise pass: inverting after a brightness change is 255 - b x."""
        imgs = varied_images(4)
        jitter = pp.ColorJitter(brightness=(0.5, 0.5))
        out = run([*SIZE, jitter, pp.RandomInvert(1.0)], imgs)
        torch.testing.assert_close(out, 1.0 - 0.5 * plain(imgs), **TOL)
        assert len(Compose([*SIZE, jitter, pp.RandomInvert(1.0)]).stages) == 1

    def test_rate_is_p(self):
        (_, params), = colour_params([pp.RandomInvert(0.3)], 4000)
        assert abs(float(params["invert"].double().mean()) - 0.3) < 0.03


# ============================================================================ Normalize
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class TestNormalize:
    def test_contract(self):
        check_op(pp.Normalize(MEAN, STD), head=SIZE, random=False, float_only=True)

    @pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 4e-3), (torch.bfloat16, 3e-2)])
    def test_values(self, dtype, tol):
        imgs = varied_images(4)
        base = plain(imgs)
        expect = (base - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
        out = run([*SIZE, pp.Normalize(MEAN, STD)], imgs, dtype=dtype)
        torch.testing.assert_close(out.float(), expect, atol=tol, rtol=tol)
        nhwc = run([*SIZE, pp.Normalize(MEAN, STD)], imgs, dtype=dtype, layout="NHWC")
        assert torch.equal(nhwc.permute(0, 3, 1, 2), out)

    def test_one_value_for_all_channels(self):
        imgs = varied_images(3)
        out = run([*SIZE, pp.Normalize([0.5], [0.25])], imgs)
        torch.testing.assert_close(out, (plain(imgs) - 0.5) / 0.25, atol=1e-5, rtol=0)

    def test_after_colour_ops(self):
        imgs = varied_images(3)
        out = run([*SIZE, pp.ColorJitter(brightness=(0.5, 0.5)), pp.Normalize(MEAN, STD)], imgs)
        expect = (plain(imgs) * 0.5 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
        torch.testing.assert_close(out, expect, atol=1e-5, rtol=0)

    def test_one_channel_output(self):
        imgs = varied_images(3)
        out = run([*SIZE, pp.Normalize([0.5], [0.25])], imgs, channels=1)
        torch.testing.assert_close(out, (grey(plain(imgs)) - 0.5) / 0.25, atol=1e-5, rtol=0)


# ============================================================================ Lambda
def invert(x: torch.Tensor) -> torch.Tensor:
    return 1.0 - x


class TestLambda:
    def test_contract(self):
        check_op(pp.Lambda(invert), head=SIZE, tail=[pp.CenterCrop(12)], random=False)

    def test_receives_float_nchw_in_unit_range(self):
        seen = []

        def spy(x):
            seen.append(x.clone())
            return x

        imgs = varied_images(5)
        run([pp.Resize((14, 18)), pp.Lambda(spy), pp.RandomFlip(0.0)], imgs, dtype=torch.uint8, layout="NHWC")
        (x,) = seen
        assert x.dtype == torch.float32 and x.shape == (5, 3, 14, 18)
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
        torch.testing.assert_close(x, run([pp.Resize((14, 18))], imgs), atol=0, rtol=0)

    def test_splits_the_plan_and_its_output_is_used(self):
        imgs = varied_images(4)
        c = Compose([pp.Resize((16, 16)), pp.Lambda(invert), pp.RandomFlip(1.0)])
        lines = c.plan().splitlines()
        assert len(lines) == 3 and "warp[Resize]" in lines[1] and "pixel[invert]" in lines[1]
        assert "warp[RandomFlip]" in lines[2]
        out = c(imgs)
        torch.testing.assert_close(out, (1.0 - plain(imgs)).flip(-1), atol=1e-6, rtol=0)

    def test_at_the_end_gets_floats_and_the_output_form_follows(self):
        """A Lambda at the end sees float32 NCHW in [0, 1] like everywhere; the Compose's
        dtype and layout are applied to what it returns (uint8: rounded, clamped)."""
        seen = []
        imgs = varied_images(2)
        out = run([*SIZE, pp.Lambda(lambda x: seen.append((x.dtype, tuple(x.shape))) or x * 2)], imgs,
                  dtype=torch.uint8, layout="NHWC")
        assert seen == [(torch.float32, (2, 3, 16, 16))]
        plain_u8 = run(SIZE, imgs, dtype=torch.uint8, layout="NHWC")
        assert out.dtype == torch.uint8 and out.shape == (2, 16, 16, 3)
        want = (plain_u8.float() * 2).clamp(0, 255)
        assert float((out.float() - want).abs().max()) <= 2.0  # rounding once against rounding twice

    def test_with_two_parameters_gets_reproducible_draws(self):
        """fn(x, draws): per-sample draws, the same for a sample in any batch."""
        noise = pp.Lambda(lambda x, draws: x + 0.1 * draws.normal_field(0, x.shape[1:], x.device))
        imgs = varied_images(4)
        whole = run([*SIZE, noise], imgs, seed=3)
        part = run([*SIZE, noise], imgs[2:], seed=3, indices=[2, 3])
        torch.testing.assert_close(whole[2:], part, atol=1e-6, rtol=0)
        assert not torch.allclose(whole, run([*SIZE, noise], imgs, seed=4))

    def test_resizing_lambda(self):
        # a Lambda may change the size; the next stage resamples its output
        out = run([*SIZE, pp.Lambda(lambda x: x[:, :, :8, :10]), pp.Resize((4, 5))], varied_images(3))
        assert out.shape == (3, 3, 4, 5)

    def test_must_return_a_tensor(self):
        with pytest.raises(TypeError, match="tensor"):
            run([*SIZE, pp.Lambda(lambda x: x.numpy())], varied_images(2))

    def test_first_op_receives_a_tensor(self):
        seen = []

        def spy(x):
            seen.append(type(x))
            return x

        imgs = [make_image(16, 16, seed=i) for i in range(3)]
        out = run([pp.Lambda(spy), pp.RandomFlip(0.0)], imgs)
        assert seen == [torch.Tensor]
        torch.testing.assert_close(out, run([], imgs), atol=1e-6, rtol=0)


# ============================================================================ invalid arguments
@pytest.mark.parametrize("make, name", [
    (lambda: pp.ColorJitter(brightness=-0.1), "brightness"),
    (lambda: pp.ColorJitter(contrast=(1.5, 0.5)), "contrast"),
    (lambda: pp.ColorJitter(saturation=(-1.0, 1.0)), "saturation"),
    (lambda: pp.ColorJitter(hue=0.6), "hue"),
    (lambda: pp.ColorJitter(hue=(-0.7, 0.1)), "hue"),
    (lambda: pp.ColorJitter(hue=(0.3, 0.1)), "hue"),
    (lambda: pp.ColorJitter(0.1, p=1.2), "p"),
    (lambda: pp.RandomGrayscale(-0.1), "p"),
    (lambda: pp.RandomGrayscale(1.5), "p"),
    (lambda: pp.Normalize([0.5, 0.5], [0.2, 0.2]), "mean"),
    (lambda: pp.Normalize([0.5] * 3, [0.2] * 2), "std"),
    (lambda: pp.Normalize([0.5] * 3, [0.2, 0.0, 0.2]), "std"),
    (lambda: pp.Normalize([0.5] * 3, [0.2, -1.0, 0.2]), "std"),
    (lambda: pp.Lambda(42), "fn"),
])
def test_invalid_colour_arguments(make, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        make()


# ============================================================================ low-precision rounding
def nearest_error(base: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """|x - nearest representable value| for float32 values x: the error of rounding once."""
    return (base.to(dtype).float() - base).abs()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("fast", [
    pytest.param(True, id="resize"),
    pytest.param(False, id="rotate"),
])
def test_low_precision_output_is_rounded_once(dtype, normalize, fast):
    # the float32 result cast once is the best a float16/bfloat16 output can be; allow float32
    # noise (1e-6) on top. fast=True takes the CPU per-sample path, False the reference warp.
    imgs = varied_images(8)
    ops = [pp.Resize((16, 16))] if fast else [pp.RandomRotate((90, 90)), pp.Resize((16, 16))]
    if normalize:
        ops.append(pp.Normalize(MEAN, STD))
    base = run(ops, imgs)
    out = run(ops, imgs, dtype=dtype).float()
    excess = (out - base).abs() - nearest_error(base, dtype)
    assert float(excess.max()) <= 1e-6, f"{dtype}: off by {float((out - base).abs().max())} at most"
