"""Pixel ops (per-sample functions of the warped image): one class per op, each running
check_op plus the op's own definition, checked against the formula written out here with the
same noise (torchvision's GaussianNoise: x + mean + sigma * z, clamped to [0, 1])."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, run, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

SIZE = [pp.Resize((16, 16))]


class TestGaussianNoise:
    def test_contract(self):
        check_op(pp.GaussianNoise(sigma=0.05), head=SIZE, p_zero=pp.GaussianNoise(sigma=0.05, p=0.0))

    def test_is_torchvisions_definition_with_the_same_noise(self):
        """x + mean + sigma * z, clamped, z the op's own per-pixel field (draw 2) at its place."""
        imgs = varied_images(5)
        idx = np.arange(5) + 40
        base = run(SIZE, imgs)
        out = run([*SIZE, pp.GaussianNoise(mean=0.02, sigma=0.1)], imgs, seed=3, epoch=1, indices=idx)
        draws = Draws(3, 1, idx, 1, prefix(3, 1, idx))
        z = draws.normal_field(2, base.shape[1:])
        torch.testing.assert_close(out, (base + 0.02 + 0.1 * z).clamp(0, 1), atol=1e-6, rtol=0)

    def test_statistics(self):
        """On mid-grey images the noise has the asked mean and spread, per image for a range."""
        grey = [np.full((32, 32, 3), 128, np.uint8)] * 64
        out = run([pp.GaussianNoise(sigma=(0.02, 0.08))], grey) - 128 / 255
        per_image = out.flatten(1).std(1)
        assert float(per_image.min()) > 0.015 and float(per_image.max()) < 0.085
        assert abs(float(out.mean())) < 2e-3
        flat = run([pp.GaussianNoise(mean=0.1, sigma=0.05, clip=False)], grey) - 128 / 255
        assert abs(float(flat.mean()) - 0.1) < 2e-3 and abs(float(flat.std()) - 0.05) < 2e-3

    def test_clip_off_keeps_values_beyond_the_range(self):
        black = [np.zeros((8, 8, 3), np.uint8)] * 4
        assert float(run([pp.GaussianNoise(sigma=0.2, clip=False)], black).min()) < 0
        assert float(run([pp.GaussianNoise(sigma=0.2)], black).min()) == 0.0

    def test_targets_stay_where_they_are(self):
        imgs = [np.zeros((20, 30, 3), np.uint8)] * 2
        out = pp.Compose([pp.GaussianNoise()])(imgs, boxes=[[[1, 2, 3, 4]], []])
        assert out["boxes"][0].tolist() == [[1.0, 2.0, 3.0, 4.0]]

    @pytest.mark.parametrize("make, name", [
        (lambda: pp.GaussianNoise(sigma=-0.1), "sigma"),
        (lambda: pp.GaussianNoise(sigma=(0.2, 0.1)), "sigma"),
        (lambda: pp.GaussianNoise(mean=float("nan")), "mean"),
        (lambda: pp.GaussianNoise(p=1.5), "p"),
    ])
    def test_bad_arguments(self, make, name):
        with pytest.raises(ValueError, match=name):
            make()

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_same_noise_on_the_gpu(self):
        """The noise alone (with the op minus without it, unclipped): the warps themselves differ
        by the devices' rounding (up to 2 grey levels, test_gpu_kernels), the noise by the
        float32 logarithm and cosine only."""
        imgs = varied_images(6)
        gpu_imgs = pp.ImageBatch.from_list(imgs).to("cuda")
        noisy = pp.Compose([*SIZE, pp.GaussianNoise(sigma=0.1, clip=False)])
        plain = pp.Compose(SIZE)
        cpu = noisy(imgs, seed=2) - plain(imgs, seed=2)
        gpu = (noisy(gpu_imgs, seed=2) - plain(gpu_imgs, seed=2)).cpu()
        torch.testing.assert_close(gpu, cpu, atol=2e-5, rtol=0)


def test_where_on_selects_per_sample_and_skips_the_select_when_the_flags_agree():
    from pixelpipe.ops.pixelwise import column, where_on

    x, out = torch.rand(4, 3, 5, 6), torch.rand(4, 3, 5, 6)
    mixed = np.array([True, False, True, False])
    assert torch.equal(where_on(mixed, out, x), torch.where(column(mixed, x), out, x))
    assert where_on(np.ones(4, dtype=bool), out, x) is out
    assert where_on(np.zeros(4, dtype=bool), out, x) is x
