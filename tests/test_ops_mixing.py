"""Batch ops that mix samples (MixUp, CutMix): the batch-op contract (check_mix: what check_op
checks, for an op whose output depends on the batch by design, with the promises the module
docstring makes instead of full batch-size independence), each op's definition written out
here per sample with its own draws (torchvision's formulas), and the Beta draws against the
distribution's closed-form CDF."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import DTYPES, LAYOUTS, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix
from pixelpipe.ops.mixing import beta_np

SIZE = [pp.Resize((16, 16))]
K = 7


def labels_of(n: int) -> torch.Tensor:
    return torch.arange(n) % K


def mix(op, imgs, labels=None, seed=0, epoch=0, indices=None, dtype=torch.float32, layout="NCHW", **values):
    labels = labels_of(len(imgs)) if labels is None else labels
    return pp.Compose([*SIZE, op], dtype=dtype, layout=layout)(imgs, seed=seed, epoch=epoch, indices=indices,
                                                               label=labels, **values)


def draws_of(indices, seed=0, epoch=0, pos=1) -> Draws:
    idx = np.asarray(indices)
    return Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))


def pairing(indices, seed=0, epoch=0, pos=1) -> np.ndarray:
    """Written out: each row's partner is the next row in the order of (key, index), cyclically."""
    key = draws_of(indices, seed, epoch, pos).uniform_np(1)
    order = sorted(range(len(indices)), key=lambda r: (key[r], indices[r]))
    partner = np.empty(len(indices), dtype=np.int64)
    for k, r in enumerate(order):
        partner[r] = order[(k + 1) % len(order)]
    return partner


def one_hot(labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(labels, K).float()


def check_mix(op, p_zero) -> None:
    """The contract of a mixing batch op."""
    imgs = varied_images(16)
    idx = torch.arange(16) * 5 + 3
    before = [t.clone() for t in imgs]
    labels = labels_of(16)
    base = mix(op, imgs, labels, indices=idx)
    assert all(torch.equal(a, b) for a, b in zip(before, imgs)) and torch.equal(labels, labels_of(16))
    # dtypes and layouts: the same mixing, the image's dtype and layout kept
    for dtype in DTYPES:
        for layout in LAYOUTS:
            out = mix(op, imgs, indices=idx, dtype=dtype, layout=layout)
            assert out["image"].dtype == dtype and out["image"].is_contiguous() or layout == "NHWC"
            got = out["image"].float() if layout == "NCHW" else out["image"].permute(0, 3, 1, 2).float()
            ref = base["image"] * (255 if dtype == torch.uint8 else 1)
            assert float((got - ref).abs().max()) <= (0.51 if dtype == torch.uint8 else 0.01), (dtype, layout)
            assert torch.equal(out["label"], base["label"])
    assert base["label"].shape == (16, K) and torch.allclose(base["label"].sum(1), torch.ones(16))
    # per-sample randomness, seed and epoch
    weights = base["label"].max(1).values
    assert len(set(weights.tolist())) > 4
    for other in (mix(op, imgs, indices=idx, seed=1), mix(op, imgs, indices=idx, epoch=1)):
        assert not torch.equal(other["label"], base["label"])
    # the order of a batch does not matter: rows follow their samples
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    shuffled = mix(op, [imgs[i] for i in perm], labels[perm], indices=idx[perm])
    assert torch.equal(shuffled["image"], base["image"][perm]) and torch.equal(shuffled["label"], base["label"][perm])
    # p=0: the images as they are, one-hot labels
    off = mix(p_zero, imgs, indices=idx)
    assert torch.equal(off["image"], pp.Compose(SIZE)(imgs)) and torch.equal(off["label"], one_hot(labels))
    # an empty batch
    empty = mix(op, [], torch.zeros(0, dtype=torch.int64))
    assert empty["image"].shape[0] == 0 and empty["label"].shape == (0, K)


# ============================================================================ the Beta draws
@pytest.mark.parametrize("alpha, cdf", [
    (0.5, lambda x: 2 / math.pi * np.arcsin(np.sqrt(x))),
    (1.0, lambda x: x),
    (2.0, lambda x: 3 * x**2 - 2 * x**3),
])
def test_beta_draws_follow_the_distribution(alpha, cdf):
    """Kolmogorov-Smirnov distance of 20,000 draws to the closed-form CDF, below the 1% critical
    value 1.63 / sqrt(n)."""
    lam = np.sort(beta_np(draws_of(np.arange(20000)), 2, alpha))
    n = len(lam)
    f = cdf(lam)
    ks = max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max())
    assert ks < 1.63 / math.sqrt(n), ks


def test_beta_moments_for_small_alpha():
    lam = beta_np(draws_of(np.arange(20000)), 2, 0.2)
    assert abs(lam.mean() - 0.5) < 0.01 and abs(lam.var() - 1 / (4 * 1.4)) < 0.01
    assert ((lam >= 0) & (lam <= 1)).all()


# ============================================================================ MixUp
class TestMixUp:
    def test_contract(self):
        check_mix(pp.MixUp(0.8, num_classes=K), pp.MixUp(0.8, num_classes=K, p=0.0))

    def test_is_the_blend_with_the_partner(self):
        imgs = varied_images(10)
        idx = np.arange(10) + 50
        op = pp.MixUp(0.4, num_classes=K, p=0.7)
        out = mix(op, imgs, indices=idx, seed=2)
        base = pp.Compose(SIZE)(imgs)
        d = draws_of(idx, seed=2)
        lam = np.where(d.bernoulli_np(0, 0.7), beta_np(d, 2, 0.4), 1.0)
        partner = pairing(idx, seed=2)
        w = torch.from_numpy(lam).float().view(10, 1, 1, 1)
        torch.testing.assert_close(out["image"], w * base + (1 - w) * base[partner], atol=1e-6, rtol=0)
        hot = one_hot(labels_of(10))
        torch.testing.assert_close(out["label"], w.view(10, 1) * hot + (1 - w.view(10, 1)) * hot[partner])

    def test_lambda_is_the_samples_own_in_any_batch(self):
        """The weight a sample keeps of its own label (distinct labels) is the same in a batch of 5
        as in a batch of 40; its partner may differ."""
        imgs = varied_images(40)
        labels = torch.arange(40)
        op = pp.MixUp(1.0, num_classes=40)
        big = pp.Compose([*SIZE, op])(imgs, label=labels, indices=np.arange(40) + 7)
        rows = [3, 17, 22, 31, 39]
        small = pp.Compose([*SIZE, op])([imgs[r] for r in rows], label=labels[rows], indices=np.arange(40)[rows] + 7)
        own = lambda out, lab: out["label"].gather(1, lab.view(-1, 1)).view(-1)
        torch.testing.assert_close(own(small, labels[rows]), own(big, labels)[rows])

    def test_invalid_rows_are_neither_mixed_nor_partners(self):
        imgs = varied_images(8)
        valid = torch.tensor([True, False, True, True, False, True, True, True])
        out = mix(pp.MixUp(1.0, num_classes=K), imgs, valid=valid)
        base = pp.Compose(SIZE)(imgs)
        for r in (1, 4):
            assert torch.equal(out["image"][r], base[r]) and torch.equal(out["label"][r], one_hot(labels_of(8))[r])
        assert (out["label"][valid][:, [1, 4]] == 0).all()  # classes 1 and 4 are only the invalid rows'

    def test_soft_labels_and_smoothing(self):
        imgs = varied_images(6)
        soft = torch.softmax(torch.randn(6, K, generator=torch.Generator().manual_seed(1)), 1)
        out = mix(pp.MixUp(num_classes=K, p=0.0), imgs, soft)
        assert torch.equal(out["label"], soft)
        smooth = mix(pp.MixUp(num_classes=K, p=0.0, label_smoothing=0.1), imgs)["label"]
        torch.testing.assert_close(smooth, one_hot(labels_of(6)) * 0.9 + 0.1 / K)

    def test_through_a_pipeline(self):
        from pixelpipe.tools.datasets import synthetic

        with pp.Pipeline(synthetic(12), [pp.Resize((8, 8)), pp.MixUp(num_classes=1000)], batch_size=6,
                         num_threads=1) as pipe:
            batch = next(iter(pipe))
        assert batch["label"].shape == (6, 1000) and torch.allclose(batch["label"].sum(1), torch.ones(6))

    @pytest.mark.parametrize("make, call, match", [
        (lambda: pp.MixUp(num_classes=K), {"masks": [np.zeros((20, 20), np.uint8)] * 4}, "masks"),
        (lambda: pp.MixUp(num_classes=K), {"labels_missing": True}, "label"),
        (lambda: pp.MixUp(), {}, "num_classes"),
        (lambda: pp.MixUp(num_classes=3), {}, "outside"),
    ])
    def test_refusals(self, make, call, match):
        imgs = [np.zeros((20, 20, 3), np.uint8)] * 4
        if call.pop("labels_missing", False):
            with pytest.raises(KeyError, match=match):
                pp.Compose([make()])(imgs)
            return
        with pytest.raises(ValueError, match=match):
            pp.Compose([make()])(imgs, label=torch.arange(4) + 1, **call)

    @pytest.mark.parametrize("kwargs, name", [({"alpha": 0}, "alpha"), ({"num_classes": 0}, "num_classes"),
                                              ({"p": 2}, "p"), ({"label_smoothing": 1.0}, "label_smoothing")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.MixUp(**kwargs)


# ============================================================================ CutMix
def torchvision_box(h: int, w: int, lam: float, u_y: float, u_x: float) -> tuple[int, int, int, int]:
    """torchvision's CutMix box for one sample, written out, with the op's uniforms for the
    centre: (y0, x0, y1, x1)."""
    r_x, r_y = int(u_x * w), int(u_y * h)
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * w), int(r * h)
    return max(r_y - r_h_half, 0), max(r_x - r_w_half, 0), min(r_y + r_h_half, h), min(r_x + r_w_half, w)


class TestCutMix:
    def test_contract(self):
        check_mix(pp.CutMix(1.0, num_classes=K), pp.CutMix(1.0, num_classes=K, p=0.0))

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_is_torchvisions_box_from_the_partner(self, layout):
        n = 12
        imgs = varied_images(n)
        idx = np.arange(n) + 9
        masks = [np.full(im.shape[:2], i, np.uint8) for i, im in enumerate(imgs)]
        op = pp.CutMix(1.0, num_classes=K, p=0.8)
        out = mix(op, imgs, indices=idx, seed=4, layout=layout, masks=masks)
        image = out["image"] if layout == "NCHW" else out["image"].permute(0, 3, 1, 2)
        base = pp.Compose(SIZE)(imgs)
        d = draws_of(idx, seed=4)
        beta = beta_np(d, 2, 1.0)
        on = d.bernoulli_np(0, 0.8)
        u_y, u_x = d.uniform_np(2 + 50), d.uniform_np(3 + 50)
        partner = pairing(idx, seed=4)
        expect, weights = base.clone(), []
        expect_masks = torch.arange(n, dtype=torch.uint8).view(n, 1, 1).repeat(1, 16, 16)
        for k in range(n):
            y0, x0, y1, x1 = torchvision_box(16, 16, beta[k], u_y[k], u_x[k]) if on[k] else (0, 0, 0, 0)
            expect[k, :, y0:y1, x0:x1] = base[partner[k], :, y0:y1, x0:x1]
            expect_masks[k, y0:y1, x0:x1] = int(partner[k])
            weights.append(1 - (y1 - y0) * (x1 - x0) / 256)
        assert torch.equal(image, expect)
        masks_out = out["masks"] if layout == "NCHW" or out["masks"].dim() == 3 else out["masks"][..., 0]
        assert torch.equal(masks_out, expect_masks)
        w = torch.tensor(weights).view(n, 1)
        hot = one_hot(labels_of(n))
        torch.testing.assert_close(out["label"], w * hot + (1 - w) * hot[partner])
        assert 0 < sum(x < 1 for x in weights) < n

    def test_refuses_boxes(self):
        with pytest.raises(ValueError, match="boxes"):
            pp.Compose([pp.CutMix(num_classes=K)])([np.zeros((8, 8, 3), np.uint8)] * 2, label=torch.arange(2),
                                                   boxes=[[[0, 0, 4, 4]], []])

    def test_mixes_after_mixup(self):
        """Soft labels from a MixUp are mixed again, as they are."""
        imgs = varied_images(8)
        out = mix(pp.MixUp(num_classes=K), imgs)
        both = pp.Compose([*SIZE, pp.MixUp(num_classes=K), pp.CutMix(num_classes=K)])(imgs, label=labels_of(8))
        assert both["label"].shape == (8, K) and torch.allclose(both["label"].sum(1), torch.ones(8))
        assert not torch.equal(both["label"], out["label"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", [pp.MixUp(0.8, num_classes=K), pp.CutMix(1.0, num_classes=K)],
                         ids=lambda op: type(op).__name__)
def test_same_mixing_on_the_gpu(op):
    """The op alone on the same batch on both devices."""
    x = pp.Compose(SIZE)(varied_images(8))
    idx = np.arange(8)
    d = draws_of(idx)
    params = op.sample(d, np.tile([16.0, 16.0], (8, 1)))
    cpu = op.apply({"image": x, "label": labels_of(8)}, params, d)
    gpu = op.apply({"image": x.cuda(), "label": labels_of(8).cuda()}, params, d)
    torch.testing.assert_close(gpu["image"].cpu(), cpu["image"], atol=1e-6, rtol=0)
    torch.testing.assert_close(gpu["label"].cpu(), cpu["label"], atol=1e-6, rtol=0)
