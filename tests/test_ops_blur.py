"""Blur and sharpness pixel ops: each checked against its definition written out here in numpy
(the kernel, the border, the blend) given the op's own parameters, and against Pillow where
Pillow has the same filter (MedianFilter: exact; ImageEnhance.Sharpness: within 1 level)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run, varied_images
from PIL import Image, ImageEnhance, ImageFilter

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix
from pixelpipe.ops.blur import TINY_WEIGHT, gaussian_kernels, motion_kernels

SIZE = [pp.Resize((16, 16))]


def params_of(op: pp.Op, n: int, seed: int = 0, epoch: int = 0, pos: int = 1, shape=(16, 16)):
    """op's parameters for samples 0..n-1 at position `pos` of its Compose, as the planner draws them."""
    idx = np.arange(n)
    draws = Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))
    return op.sample(draws, np.tile(np.array(shape, dtype=np.float64), (n, 1)))


def correlate(img: np.ndarray, kernel: np.ndarray, mode: str) -> np.ndarray:
    """img [C, H, W] correlated with kernel [kh, kw] (odd), padded by np.pad's `mode`: the sum
    over the kernel's taps written out."""
    kh, kw = kernel.shape
    pad = np.pad(img, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)), mode=mode)
    h, w = img.shape[1:]
    out = np.zeros(img.shape, dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            out += kernel[i, j] * pad[:, i:i + h, j:j + w]
    return out


def gaussian(size: int, sigma: float) -> np.ndarray:
    """torchvision's 1-D Gaussian kernel: exp(-x^2 / (2 sigma^2)) at integer offsets, normalised."""
    x = np.arange(size) - (size - 1) / 2
    k = np.exp(-(x**2) / (2 * sigma**2))
    return k / k.sum()


def photos(n: int = 4) -> list[np.ndarray]:
    return [make_image(24, 32, seed=s) for s in range(n)]


def pillow(imgs, fn) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.asarray(fn(Image.fromarray(a))) for a in imgs])).permute(0, 3, 1, 2)


# ============================================================================ GaussianBlur
class TestGaussianBlur:
    def test_contract(self):
        check_op(pp.GaussianBlur(5, (0.5, 2.0)), head=SIZE, p_zero=pp.GaussianBlur(5, p=0.0))

    @pytest.mark.parametrize("kernel_size", [3, (5, 9), (7, 1), 21])
    def test_is_torchvisions_kernel_with_reflection(self, kernel_size):
        """The 2-D kernel outer(gy, gx) over the image padded by reflection (torchvision's
        gaussian_blur): float32 within 1e-5, so uint8 within 1 level, 0.01 on average (the
        issue's bound is 1 level mean)."""
        imgs = varied_images(6)
        op = pp.GaussianBlur(kernel_size, sigma=(0.3, 4.0), p=0.8)
        base = run(SIZE, imgs, seed=2).double().numpy()
        out = run([*SIZE, op], imgs, seed=2)
        p = params_of(op, 6, seed=2)
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        expect = []
        for k in range(6):
            if not p["on"][k]:
                expect.append(base[k])
                continue
            kernel = np.outer(gaussian(kh, p["sigma"][k]), gaussian(kw, p["sigma"][k]))
            expect.append(correlate(base[k], kernel, "reflect"))
        expect = torch.from_numpy(np.stack(expect)).float()
        torch.testing.assert_close(out, expect, atol=1e-5, rtol=0)
        levels = ((out * 255).round() - (expect * 255).round()).abs()
        assert float(levels.max()) <= 1 and float(levels.mean()) < 0.01

    def test_kernel_wider_than_the_image_mirrors_again(self):
        """11 taps on a 4x6 image: the reflection repeats (np.pad's reflect does the same)."""
        imgs = varied_images(3)
        op = pp.GaussianBlur(11, 3.0)
        base = run([pp.Resize((4, 6))], imgs).double().numpy()
        out = run([pp.Resize((4, 6)), op], imgs)
        kernel = np.outer(gaussian(11, 3.0), gaussian(11, 3.0))
        expect = np.stack([correlate(b, kernel, "reflect") for b in base])
        torch.testing.assert_close(out, torch.from_numpy(expect).float(), atol=1e-5, rtol=0)

    @pytest.mark.parametrize("size", [1, 3, 5, 23, 31])
    def test_kernel_table_is_the_formula_bit_for_bit(self, size):
        """gaussian_kernels (computed on half the offsets and mirrored) gives the bits of the
        formula over every offset: exp(-(o / sigma)^2 / 2) normalised, weights below
        TINY_WEIGHT zeroed. The CPU and GPU blurs both take these numbers."""
        sigma = np.random.default_rng(size).uniform(0.01, 10.0, 257)
        offsets = np.arange(size, dtype=np.float64) - (size - 1) / 2
        k = np.exp(-0.5 * (offsets[None, :] / sigma[:, None]) ** 2)
        k = k / k.sum(1, keepdims=True)
        k[k < TINY_WEIGHT] = 0.0
        assert np.array_equal(gaussian_kernels(size, sigma), k)
        assert gaussian_kernels(size, sigma[:0]).shape == (0, size)

    def test_sigma_drawn_per_image(self):
        p = params_of(pp.GaussianBlur(3, (0.1, 2.0), p=0.5), 4000)
        assert p["sigma"].min() >= 0.1 and p["sigma"].max() <= 2.0 and abs(p["sigma"].mean() - 1.05) < 0.03
        assert abs(p["on"].mean() - 0.5) < 0.03

    def test_keeps_the_mean_and_targets(self):
        imgs = [np.full((20, 30, 3), 90, np.uint8)] * 2
        out = pp.Compose([pp.GaussianBlur(7, 3.0)])(imgs, boxes=[[[1, 2, 3, 4]], []])
        assert out["boxes"][0].tolist() == [[1.0, 2.0, 3.0, 4.0]]
        torch.testing.assert_close(out["image"], torch.full_like(out["image"], 90 / 255), atol=1e-6, rtol=0)

    @pytest.mark.parametrize("kwargs, name", [({"kernel_size": 4}, "kernel_size"), ({"kernel_size": (3, 0)},
                                              "kernel_size"), ({"kernel_size": 3, "sigma": 0}, "sigma"),
                                              ({"kernel_size": 3, "sigma": (2, 1)}, "sigma"),
                                              ({"kernel_size": 3, "p": 2}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.GaussianBlur(**kwargs)


# ============================================================================ MotionBlur
class TestMotionBlur:
    def test_contract(self):
        check_op(pp.MotionBlur(5), head=SIZE, p_zero=pp.MotionBlur(5, p=0.0))

    def test_kernels_are_lines(self):
        k = motion_kernels(7, np.array([7.0, 7.0, 7.0, 7.0, 3.0]), np.array([0.0, 90.0, 45.0, 0.0, 0.0]),
                           np.array([0.0, 0.0, 0.0, 1.0, 0.0]))
        np.testing.assert_allclose(k.sum((1, 2)), 1.0, atol=1e-12)
        np.testing.assert_allclose(k[0, 3], np.full(7, 1 / 7), atol=1e-12)  # horizontal, even
        np.testing.assert_allclose(k[1][:, 3], np.full(7, 1 / 7), atol=1e-12)  # vertical
        np.testing.assert_allclose(k[4, 3, 2:5], np.full(3, 1 / 3), atol=0.01)  # 3 taps, to 1/16 px
        np.testing.assert_allclose(k[2], k[2][::-1, ::-1], atol=1e-12)  # a diagonal, centred
        assert k[2][1, 5] > 0.1 and k[2][5, 1] > 0.1 and k[2][1, 1] == 0  # up-right: y grows downwards
        assert k[3, 3, 6] > 1.5 * k[3, 3, 3] and k[3, 3, 0] < 0.03  # direction 1: weight at the front

    def test_is_the_drawn_kernel_with_reflection(self):
        imgs = varied_images(5)
        op = pp.MotionBlur(7, angle=(0, 180), direction=(-1, 1), p=0.7)
        base = run(SIZE, imgs, seed=1).double().numpy()
        out = run([*SIZE, op], imgs, seed=1)
        p = params_of(op, 5, seed=1)
        kernels = motion_kernels(7, p["length"], p["angle"], p["direction"])
        expect = np.stack([correlate(base[k], kernels[k], "reflect") if p["on"][k] else base[k] for k in range(5)])
        torch.testing.assert_close(out, torch.from_numpy(expect).float(), atol=1e-5, rtol=0)

    @pytest.mark.parametrize("kwargs, name", [({"kernel_size": 4}, "kernel_size"), ({"kernel_size": 1}, "kernel_size"),
                                              ({"length": (2, 9)}, "length"), ({"direction": (0, 2)}, "direction")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.MotionBlur(**kwargs)


# ============================================================================ MedianBlur
class TestMedianBlur:
    def test_contract(self):
        check_op(pp.MedianBlur((3, 5)), head=SIZE, p_zero=pp.MedianBlur(3, p=0.0))

    @pytest.mark.parametrize("size", [3, 5, 7])
    def test_exactly_pillow(self, size):
        imgs = photos()
        out = run([pp.MedianBlur(size, p=1.0)], imgs, dtype=torch.uint8)
        assert torch.equal(out, pillow(imgs, lambda im: im.filter(ImageFilter.MedianFilter(size))))

    def test_sizes_drawn_per_image(self):
        imgs = photos(8)
        op = pp.MedianBlur((3, 7), p=0.8)
        out = run([op], imgs, dtype=torch.uint8, seed=3)
        sizes = params_of(op, 8, seed=3, pos=0)["kernel_size"]
        assert set(sizes.tolist()) <= {1, 3, 5, 7} and len(set(sizes.tolist())) >= 3
        for k, size in enumerate(sizes.tolist()):
            ref = pillow([imgs[k]], lambda im, s=size: im.filter(ImageFilter.MedianFilter(s)) if s > 1 else im)[0]
            assert torch.equal(out[k], ref), (k, size)

    @pytest.mark.parametrize("size", [2, 1, (5, 3), (3, 4)])
    def test_bad_arguments(self, size):
        with pytest.raises(ValueError, match="kernel_size"):
            pp.MedianBlur(size)


# ============================================================================ RandomSharpness
def sharpened(img: np.ndarray, factor: float) -> np.ndarray:
    """torchvision's adjust_sharpness on a float image [C, H, W]: the inside blended with its
    3x3 smoothing (centre weight 5 of 13), the outermost pixels kept, clamped."""
    kernel = np.ones((3, 3))
    kernel[1, 1] = 5
    smooth = correlate(img, kernel / 13, "edge")
    out = img.copy()
    inner = np.clip(smooth + factor * (img - smooth), 0, 1)
    out[:, 1:-1, 1:-1] = inner[:, 1:-1, 1:-1]
    return out


class TestRandomSharpness:
    def test_contract(self):
        check_op(pp.RandomSharpness((0.0, 3.0)), head=SIZE, p_zero=pp.RandomSharpness(p=0.0))

    def test_is_torchvisions_definition(self):
        imgs = varied_images(6)
        op = pp.RandomSharpness((0.0, 4.0), p=0.7)
        base = run(SIZE, imgs).double().numpy()
        out = run([*SIZE, op], imgs)
        p = params_of(op, 6)
        expect = np.stack([sharpened(base[k], p["factor"][k]) if p["on"][k] else base[k] for k in range(6)])
        torch.testing.assert_close(out, torch.from_numpy(expect).float(), atol=2e-6, rtol=0)

    def test_factor_one_changes_nothing_and_tiny_images_are_kept(self):
        imgs = varied_images(3)
        torch.testing.assert_close(run([*SIZE, pp.RandomAdjustSharpness(1.0, p=1.0)], imgs), run(SIZE, imgs),
                                   atol=2e-6, rtol=0)
        tiny = [make_image(2, 9)]
        assert torch.equal(run([pp.RandomSharpness(p=1.0)], tiny), run([], tiny))

    @pytest.mark.parametrize("kwargs, name", [({"factor": -1}, "factor"), ({"factor": (2, 1)}, "factor"),
                                              ({"p": -1}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.RandomSharpness(**kwargs)


class TestRandomAdjustSharpness:
    def test_contract(self):
        check_op(pp.RandomAdjustSharpness(2.0), head=SIZE, p_zero=pp.RandomAdjustSharpness(2.0, p=0.0))

    @pytest.mark.parametrize("factor", [0.0, 0.5, 2.0, 3.0])
    def test_within_one_level_of_pillow(self, factor):
        """Pillow's ImageEnhance.Sharpness (torchvision's reference on PIL images) blends in
        uint8 with its own rounding: at most 1 level apart, 0.5 on average."""
        imgs = photos()
        out = run([pp.RandomAdjustSharpness(factor, p=1.0)], imgs, dtype=torch.uint8).int()
        ref = pillow(imgs, lambda im: ImageEnhance.Sharpness(im).enhance(factor)).int()
        diff = (out - ref).abs()
        assert int(diff.max()) <= 1 and float(diff.float().mean()) < 0.5

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="sharpness_factor"):
            pp.RandomAdjustSharpness(-0.5)


# ============================================================================ on the GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", [pp.GaussianBlur((5, 9), (0.5, 3.0)), pp.MotionBlur(7, p=1.0),
                                pp.MedianBlur((3, 5), p=1.0), pp.RandomSharpness((0.0, 3.0), p=1.0)],
                         ids=lambda op: type(op).__name__)
def test_filters_agree_on_the_gpu(op):
    """The op alone on the same float input and parameters on both devices."""
    x = run(SIZE, varied_images(8))
    params = params_of(op, 8)
    draws = Draws(0, 0, np.arange(8), 1)
    cpu = op.apply(x, params, draws)
    gpu = op.apply(x.cuda(), params, draws).cpu()
    torch.testing.assert_close(gpu, cpu, atol=1e-5, rtol=0)
