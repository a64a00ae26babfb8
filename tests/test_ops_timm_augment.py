"""TimmRandAugment against timm's RandAugment written out here (timm.data.auto_augment's
level_to_arg functions and Pillow operations): the op contract; the configuration string; the
choices over 10,000 samples (uniform among the fifteen, each firing with prob: chi-square,
fixed seed); the levels N(m, mstd) clipped to [0, 10]; each operation's argument at a fixed
level against timm's formulas (exact); the levels operations against Pillow on uint8 images
that are not resampled (SolarizeAdd, Posterize, Solarize, Invert: exact; the enhance factors:
at most 1 grey level, under 0.6 on average, 0.85 for Contrast, whose mean Pillow rounds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run
from PIL import Image, ImageEnhance, ImageOps

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix
from pixelpipe.ops.timm_augment import INCREASING, PLAIN

SIZE = [pp.Resize((16, 16))]


def draws_at(n: int, pos: int = 0, seed: int = 0) -> Draws:
    idx = np.arange(n)
    return Draws(seed, 0, idx, pos, prefix(seed, 0, idx))


def timm_arg(name: str, level: float, width: int = 100, height: int = 80) -> float:
    """timm's level_to_arg (with the positive sign where it draws one), written out."""
    t = level / 10
    enhance = ("Color", "Contrast", "Brightness", "Sharpness")
    if name in enhance:
        return t * 1.8 + 0.1
    if name.removesuffix("Increasing") in enhance:
        return 1 + 0.9 * t
    return {"Rotate": 30 * t, "ShearX": 0.3 * t, "ShearY": 0.3 * t, "TranslateXRel": 0.45 * t * width,
            "TranslateYRel": 0.45 * t * height, "Posterize": int(t * 4), "PosterizeIncreasing": 4 - int(t * 4),
            "Solarize": min(256, int(t * 256)), "SolarizeIncreasing": 256 - min(256, int(t * 256)),
            "SolarizeAdd": min(128, int(t * 110)), "AutoContrast": 0.0, "Equalize": 0.0, "Invert": 0.0}[name]


class TestTimmRandAugment:
    def test_contract(self):
        check_op(pp.TimmRandAugment(), head=SIZE, p_zero=pp.TimmRandAugment(prob=0.0))

    def test_from_config(self):
        op = pp.TimmRandAugment.from_config("rand-m9-mstd0.5-inc1")
        assert (op.num_ops, op.magnitude, op.magnitude_std, op.increasing) == (2, 9.0, 0.5, True)
        op = pp.TimmRandAugment.from_config("rand-m7-n3-p0.3", fill=0)
        assert (op.num_ops, op.magnitude, op.prob, op.increasing, op.fill) == (3, 7.0, 0.3, True, (0.0, 0.0, 0.0))
        assert pp.TimmRandAugment.from_config("rand-m9-inc0").names == PLAIN
        for bad in ("augmix-m9", "rand-q3", "rand-m"):
            with pytest.raises(ValueError, match="config"):
                pp.TimmRandAugment.from_config(bad)

    def test_choices_are_uniform_and_fire_with_prob(self):
        op = pp.TimmRandAugment(num_ops=2, prob=0.5)
        n = 10_000
        chosen = op.choices(draws_at(n, seed=4), n)
        assert list(op.names) == list(INCREASING)
        for j in range(2):
            col = chosen[:, j]
            fired = col >= 0
            assert abs(fired.mean() - 0.5) < 0.02
            counts = np.bincount(col[fired] - 15 * j, minlength=15)
            expected = fired.sum() / 15
            assert ((counts - expected) ** 2 / expected).sum() < 36.12, counts  # 14 dof, 0.1%

    def test_levels_are_clipped_normals(self):
        rot = next(e for e in pp.TimmRandAugment().entries if e.name == "Rotate")
        arg = rot.sample(draws_at(20_000), np.tile([80.0, 100.0], (20_000, 1)))["arg"]
        level = np.abs(arg) / 30 * 10
        assert level.max() <= 10 and abs(level.mean() - 8.99) < 0.02 and abs(level.std() - 0.49) < 0.02
        assert abs((arg < 0).mean() - 0.5) < 0.02

    @pytest.mark.parametrize("name", sorted(set(INCREASING) | set(PLAIN)))
    @pytest.mark.parametrize("level", [0.0, 3.0, 9.0, 10.0])
    def test_arguments_are_timms(self, name, level):
        entries = pp.TimmRandAugment(magnitude=level, magnitude_std=0.0, increasing=name in INCREASING).entries
        op = next(e for e in entries if e.name == name)
        arg = op.sample(draws_at(400), np.tile([80.0, 100.0], (400, 1)))["arg"]
        expect = timm_arg(name, level)
        if name in ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"):  # a random sign
            np.testing.assert_allclose(np.abs(arg), expect, atol=1e-12)
            assert level == 0 or 0.4 < (arg < 0).mean() < 0.6
        elif name in ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing"):
            both = {round(expect, 12), round(max(0.1, 2 - expect), 12)}  # 1 +- 0.9 t, at least 0.1
            assert set(np.round(arg, 12)) == both
        else:
            np.testing.assert_allclose(arg, expect, atol=1e-12)

    @pytest.mark.parametrize(("name", "pil"), [
        ("SolarizeAdd", lambda im, a: im.point([min(255, i + int(a)) if i < 128 else i for i in range(256)] * 3)),
        ("PosterizeIncreasing", lambda im, a: ImageOps.posterize(im, int(a)) if a < 8 else im),
        ("SolarizeIncreasing", lambda im, a: ImageOps.solarize(im, int(a))),
        ("Invert", lambda im, a: ImageOps.invert(im)),
    ])
    def test_levels_operations_are_pillows(self, name, pil):
        imgs = [make_image(20, 24, seed=k) for k in range(6)]
        op = next(e for e in pp.TimmRandAugment(magnitude=6.0, magnitude_std=2.0).entries if e.name == name)
        params = op.sample(draws_at(6), np.tile([20.0, 24.0], (6, 1)))
        x = run([], imgs)
        out = (op.apply(x, params, draws_at(6)) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
        for k, img in enumerate(imgs):
            np.testing.assert_array_equal(out[k], np.asarray(pil(Image.fromarray(img), params["arg"][k])))

    @pytest.mark.parametrize(("name", "enhance"), [("ColorIncreasing", ImageEnhance.Color),
                                                   ("BrightnessIncreasing", ImageEnhance.Brightness),
                                                   ("ContrastIncreasing", ImageEnhance.Contrast)])
    def test_enhance_factors_are_pillows(self, name, enhance):
        imgs = [make_image(20, 24, seed=k) for k in range(6)]
        op = next(e for e in pp.TimmRandAugment(magnitude=7.0).entries if e.name == name)
        params = op.sample(draws_at(6), np.tile([20.0, 24.0], (6, 1)))
        x = run([], imgs)
        out = (op.apply(x, params, draws_at(6)) * 255).round().permute(0, 2, 3, 1).numpy()
        for k, img in enumerate(imgs):
            ref = np.asarray(enhance(Image.fromarray(img)).enhance(float(params["arg"][k])), dtype=np.float64)
            d = np.abs(out[k] - ref)
            # Pillow rounds its result, and Contrast's mean to a whole grey level first
            assert d.max() <= 1.0 + 1e-6 and d.mean() < (0.85 if name == "ContrastIncreasing" else 0.6), (d.max(),
                                                                                                          d.mean())

    def test_translations_and_fill(self):
        """A TranslateXRel of arg pixels moves the image by -arg (Pillow's (1, 0, arg) data);
        the uncovered band takes the ImageNet mean colour."""
        op = pp.TimmRandAugment(num_ops=1, magnitude=10.0, magnitude_std=0.0, prob=1.0)
        n = 200
        plan = pp.Compose([op]).stages[0].sample(0, 0, np.arange(n), np.tile([20.0, 40.0], (n, 1)))
        assert pp.Compose([op]).stages[0].fill == (124.0, 116.0, 104.0)
        k = op.names.index("TranslateXRel")
        rows = np.flatnonzero(op.choices(draws_at(n), n)[:, 0] == k)
        assert len(rows) > 3
        for r in rows:
            assert abs(abs(plan.matrix[r, 0, 2]) - 0.45 * 40) < 1e-9 and np.allclose(plan.matrix[r, :2, :2], np.eye(2))

    @pytest.mark.parametrize(("kwargs", "name"), [({"num_ops": -1}, "num_ops"), ({"magnitude": 11}, "magnitude"),
                                                  ({"magnitude_std": -1}, "magnitude_std"), ({"prob": 2}, "prob"),
                                                  ({"translate_pct": 2}, "translate_pct"), ({"fill": 300}, "fill")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.TimmRandAugment(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_agrees_on_the_gpu():
    """The same draws on both devices; values within 2 grey levels (the warps' roundings differ
    by device), on average well under one."""
    imgs = [make_image(40, 48, seed=k) for k in range(32)]
    t = pp.Compose([pp.RandomResizedCrop(32), pp.TimmRandAugment(prob=1.0)], dtype=torch.uint8)
    cpu = t(imgs, seed=4).float()
    gpu = t(pp.ImageBatch.from_list([torch.from_numpy(i) for i in imgs]).to("cuda"), seed=4)
    diff = (gpu.cpu().float() - cpu).abs()
    assert gpu.is_cuda and float(diff.mean()) < 0.5 and float((diff > 2).float().mean()) < 0.01
