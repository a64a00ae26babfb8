"""AugMix: the op contract; its draws (the mixing weights sum to one, the operations and depths
uniform: chi-square over 10,000 samples, fixed seed); the bilinear affine warp its chains use
against whole-pixel shifts written out (exact); and each sample against torchvision's
definition written out here, m x + sum_c w_c chain_c(x) with the chains' colour and pixel
operations as test_ops_policies writes them, for the samples whose chains hold no geometry
(within 1 grey level on 99.9% of values)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run, torchvision_pixel_op

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix
from pixelpipe.ops.augmix import affine_warp
from pixelpipe.ops.structure import inner_draws

SIZE = [pp.Resize((16, 16))]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


def draws_at(n: int, pos: int = 0, seed: int = 0) -> Draws:
    idx = np.arange(n)
    return Draws(seed, 0, idx, pos, prefix(seed, 0, idx))


class TestAugMix:
    def test_contract(self):
        check_op(pp.AugMix(), head=SIZE, p_zero=pp.AugMix(p=0.0))

    def test_weights_depths_and_choices(self):
        op = pp.AugMix(severity=3, mixture_width=3)
        n = 10_000
        p = op.sample(draws_at(n), np.tile([16.0, 16.0], (n, 1)))
        np.testing.assert_allclose(p["m"] + p["w"].sum(1), 1.0, atol=1e-12)
        assert abs(p["m"].mean() - 0.5) < 0.01  # Beta(1, 1)
        depth = (p["ops"] >= 0).sum(2).ravel()
        counts = np.bincount(depth, minlength=4)[1:]
        assert counts.sum() == 3 * n and ((counts - n) ** 2 / n).sum() < 13.82, counts  # 2 dof, 0.1%
        chosen = p["ops"][p["ops"] >= 0]
        k = len(op._ops)
        c = np.bincount(chosen, minlength=k)
        assert k == 13 and ((c - c.sum() / k) ** 2 / (c.sum() / k)).sum() < 32.91, c  # 12 dof, 0.1%

    def test_severity_bounds_the_bins(self):
        op = pp.AugMix(severity=2)
        rotate = next(o for o in op._ops if o.name == "Rotate")
        m = rotate.sample(draws_at(2000), np.tile([16.0, 16.0], (2000, 1)))["magnitude"]
        assert set(np.round(np.abs(m), 9)) == {0.0, round(30 / 9, 9)}  # bins 0 and 1 of linspace(0, 30, 10)

    def test_affine_warp_shifts_whole_pixels(self):
        x = torch.rand(3, 3, 10, 12)
        m = np.tile(np.eye(3), (3, 1, 1))
        m[:, 0, 2], m[:, 1, 2] = [2, -3, 0], [1, 0, -4]
        out = affine_warp(x, m)
        for i, (dx, dy) in enumerate([(2, 1), (-3, 0), (0, -4)]):
            expect = torch.zeros(3, 10, 12)
            ys, xs = slice(max(dy, 0), 10 + min(dy, 0)), slice(max(dx, 0), 12 + min(dx, 0))
            src_y, src_x = slice(max(-dy, 0), 10 - max(dy, 0)), slice(max(-dx, 0), 12 - max(dx, 0))
            expect[:, ys, xs] = x[i][:, src_y, src_x]
            torch.testing.assert_close(out[i], expect, atol=1e-5, rtol=0)

    def test_is_torchvisions_mix_of_chains(self):
        op = pp.AugMix(severity=5, mixture_width=2, chain_depth=1, p=0.9)
        n = 200
        imgs = [make_image(20, 24, seed=k % 10) for k in range(n)]
        out = run([op], imgs).numpy()
        base = run([], imgs).numpy()
        draws = draws_at(n)
        sizes = np.tile([20.0, 24.0], (n, 1))
        p = op.sample(draws, sizes)
        diffs, checked = [], 0
        for i in range(n):
            x = imgs[i] / 255.0
            if not p["on"][i]:
                np.testing.assert_array_equal(out[i], base[i])
                continue
            ks = p["ops"][i, :, 0]
            if any(op._ops[k].name in GEOMETRIC for k in ks):
                continue
            mix = p["m"][i] * x
            for c, k in enumerate(ks):
                e = op.entry(c, 0, int(k))
                mag = op._ops[k].sample(inner_draws(draws, e, np.array([i])), sizes[i:i + 1])["magnitude"][0]
                mix = mix + p["w"][i, c] * torchvision_pixel_op(op._ops[k].name, x, float(mag))
            diffs.append(np.abs(out[i].transpose(1, 2, 0) - np.clip(mix, 0, 1)).ravel() * 255)
            checked += 1
        d = np.concatenate(diffs)
        assert checked > 40, checked
        assert (d <= 1.0 + 1e-3).mean() >= 0.999 and d.mean() < 0.05, (d.max(), d.mean())

    @pytest.mark.parametrize(("kwargs", "name"), [({"severity": 0}, "severity"), ({"severity": 11}, "severity"),
                                                  ({"mixture_width": 0}, "mixture_width"),
                                                  ({"chain_depth": 0}, "chain_depth"), ({"alpha": 0}, "alpha"),
                                                  ({"p": 1.5}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.AugMix(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_agrees_on_the_gpu():
    x = run(SIZE, [make_image(24, 24, seed=k) for k in range(16)])
    op = pp.AugMix()
    draws = draws_at(16)
    params = op.sample(draws, np.tile([16.0, 16.0], (16, 1)))
    cpu = op.apply(x, params, draws)
    gpu = op.apply(x.cuda(), params, draws).cpu()
    assert float((gpu - cpu).abs().max()) * 255 <= 2.0 and float((gpu - cpu).abs().mean()) * 255 < 0.1
