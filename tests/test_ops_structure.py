"""Per-sample choices among ops (OneOf, RandomChoice, SomeOf, RandomOrder) of each kind: the
contract, each sample's output equal to the output of the ops it chose (run on their own, in
the chosen order), the choice frequencies against the weights (chi-square, fixed seed), and
the planner fusing them like the ops they hold."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from helpers import check_op, run, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

SIZE = [pp.Resize((16, 16))]
# ops whose effect does not depend on their draws, so that a sample's output can be predicted
# from the op it chose alone
FLIP, ROT = pp.RandomFlip(1.0, 0.0), pp.RandomRotate((90, 90))
INVERT, GREY, BRIGHT = pp.RandomInvert(1.0), pp.RandomGrayscale(1.0), pp.ColorJitter(brightness=(1.5, 1.5))
POSTER, SOLAR, BLUR = pp.RandomPosterize(2, p=1.0), pp.RandomSolarize(0.5, p=1.0), pp.GaussianBlur(3, 1.0)


def steps_of(op: pp.Op, n: int, seed: int = 0, pos: int = 0) -> np.ndarray:
    idx = np.arange(n)
    return op.steps(Draws(seed, 0, idx, pos, prefix(seed, 0, idx)), n)


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


# chi-square 0.1% critical values by degrees of freedom (fixed seeds: a failure is a real bias)
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 5: 20.52}


def expected_rows(imgs, choice_rows, sequences, head=(), tail=()):
    """Per sample, the output of Compose([*head, *sequence, *tail]) for its sequence of ops."""
    out = []
    for k, seq in enumerate(choice_rows):
        out.append(run([*head, *sequences[seq], *tail], [imgs[k]])[0])
    return torch.stack(out)


# ============================================================================ OneOf
class TestOneOf:
    def test_contract_geometry(self):
        check_op(pp.OneOf([pp.RandomRotate(30), pp.RandomAffine(0, shear=20), FLIP], p=0.8), tail=SIZE,
                 p_zero=pp.OneOf([ROT, FLIP], p=0.0))

    def test_contract_colour(self):
        check_op(pp.OneOf([pp.ColorJitter(0.4, 0.4, 0.4), INVERT, pp.RGBShift()]), tail=SIZE,
                 p_zero=pp.OneOf([INVERT, GREY], p=0.0))

    def test_contract_pixel(self):
        check_op(pp.OneOf([pp.GaussianNoise(sigma=0.05), pp.RandomEqualize(), BLUR]), head=SIZE,
                 p_zero=pp.OneOf([POSTER, SOLAR], p=0.0))

    @pytest.mark.parametrize("ops, head, tail", [
        ([FLIP, ROT, pp.CenterCrop(12)], (), SIZE),
        ([INVERT, GREY, BRIGHT], SIZE, ()),
        ([POSTER, SOLAR, BLUR], SIZE, ()),
    ], ids=["geometry", "colour", "pixel"])
    def test_each_sample_gets_the_op_it_chose(self, ops, head, tail):
        imgs = varied_images(30)
        op = pp.OneOf(ops, weights=[1, 2, 1], p=0.8)
        out = run([*head, op, *tail], imgs)
        chosen = steps_of(op, 30, pos=len(head))[:, 0]
        assert set(chosen.tolist()) == {-1, 0, 1, 2}
        sequences = {-1: [], 0: [ops[0]], 1: [ops[1]], 2: [ops[2]]}
        torch.testing.assert_close(out, expected_rows(imgs, chosen, sequences, head, tail), atol=2e-6, rtol=0)

    def test_choices_follow_the_weights(self):
        op = pp.OneOf([FLIP, ROT, pp.RandomFlip(0.0, 1.0), pp.RandomAffine(10)], weights=[1, 2, 3, 4], p=0.7)
        chosen = steps_of(op, 10000, seed=3)[:, 0]
        counts = np.bincount(chosen + 1, minlength=5)
        probs = np.array([0.3, *(0.7 * np.array([1, 2, 3, 4]) / 10)])
        assert chi_square(counts, probs) < 18.47  # 4 degrees of freedom, 0.1%

    def test_inner_ops_draw_alike_whatever_was_chosen(self):
        """An inner op gives a sample the same parameters in a OneOf of 2 or of 3 ops."""
        imgs = varied_images(40)
        rot = pp.RandomRotate(40)
        a = run([pp.OneOf([rot, rot]), *SIZE], imgs)
        b = run([pp.OneOf([rot, rot, rot]), *SIZE], imgs)
        chose_first = (steps_of(pp.OneOf([rot, rot]), 40)[:, 0] == 0) & (steps_of(pp.OneOf([rot, rot, rot]), 40)[:, 0] == 0)
        assert chose_first.sum() > 5
        assert torch.equal(a[torch.from_numpy(chose_first)], b[torch.from_numpy(chose_first)])

    def test_planned_as_its_kind(self):
        t = pp.Compose([pp.RandomResizedCrop(16), pp.OneOf([FLIP, ROT]), pp.OneOf([INVERT, GREY]),
                        pp.OneOf([POSTER, BLUR])])
        assert len(t.stages) == 1
        assert "warp[RandomResizedCrop, OneOf]" in t.plan() and "pointwise[OneOf" in t.plan()
        assert "pixel[OneOf]" in t.plan()

    def test_boxes_follow_the_chosen_matrix(self):
        img = np.zeros((20, 30, 3), np.uint8)
        img[2:6, 3:9] = 255
        out = pp.Compose([pp.OneOf([FLIP, pp.RandomFlip(0.0, 1.0)])])([img] * 8, boxes=[[[3, 2, 9, 6]]] * 8,
                                                                         indices=np.arange(8))
        for k in range(8):
            ys, xs = np.nonzero(out["image"][k, 0].numpy() > 0.5)
            box = out["boxes"][k][0].tolist()
            assert box == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]

    def test_pickles(self):
        for op in (pp.OneOf([FLIP, ROT]), pp.RandomOrder([INVERT, GREY]), pp.SomeOf([POSTER, BLUR])):
            again = pickle.loads(pickle.dumps(op))
            assert type(again) is type(op) and repr(again) == repr(op) and again.kind == op.kind

    @pytest.mark.parametrize("make, match", [
        (lambda: pp.OneOf([]), "at least one"),
        (lambda: pp.OneOf([FLIP, INVERT]), "one kind"),
        (lambda: pp.OneOf([pp.Normalize([0.5], [0.5])]), "normalize"),
        (lambda: pp.OneOf([pp.MixUp(num_classes=3)]), "batch"),
        (lambda: pp.OneOf([FLIP, ROT], weights=[1]), "weights"),
        (lambda: pp.OneOf([FLIP, ROT], weights=[-1, 2]), "weights"),
        (lambda: pp.OneOf([FLIP], p=2), "p"),
        (lambda: pp.OneOf([pp.RandomRotate(10, border="reflect"), pp.RandomRotate(10, border="wrap")]), "border"),
    ])
    def test_bad_arguments(self, make, match):
        with pytest.raises(ValueError, match=match):
            make()
        with pytest.raises(TypeError, match="not a pixelpipe op"):
            pp.OneOf([lambda x: x])


class TestRandomChoice:
    def test_contract(self):
        check_op(pp.RandomChoice([ROT, FLIP, pp.RandomRotate((-90, -90))]), tail=SIZE)

    def test_always_one(self):
        chosen = steps_of(pp.RandomChoice([INVERT, GREY], weights=[3, 1]), 8000)[:, 0]
        counts = np.bincount(chosen, minlength=2)
        assert (chosen >= 0).all() and chi_square(counts, np.array([0.75, 0.25])) < CHI2_999[1]


# ============================================================================ SomeOf
class TestSomeOf:
    def test_contract(self):
        check_op(pp.SomeOf([POSTER, SOLAR, pp.GaussianNoise(sigma=0.05)], n=2), head=SIZE,
                 p_zero=pp.SomeOf([POSTER, SOLAR], n=1, p=0.0))

    @pytest.mark.parametrize("ops, head, tail", [
        ([ROT, FLIP, pp.CenterCrop(12)], (), SIZE),
        ([INVERT, GREY, BRIGHT], SIZE, ()),
        ([POSTER, SOLAR, BLUR], SIZE, ()),
    ], ids=["geometry", "colour", "pixel"])
    def test_each_sample_gets_its_ops_in_list_order(self, ops, head, tail):
        imgs = varied_images(16)
        op = pp.SomeOf(ops, n=2, p=0.9)
        out = run([*head, op, *tail], imgs)
        steps = steps_of(op, 16, pos=len(head))
        rows = [tuple(r) for r in steps.tolist()]
        sequences = {r: [ops[k] for k in r if k >= 0] for r in set(rows)}
        assert all(r[0] < r[1] for r in rows if r[0] >= 0) and len(set(rows)) >= 3
        torch.testing.assert_close(out, expected_rows(imgs, rows, sequences, head, tail), atol=2e-6, rtol=0)

    def test_subsets_are_uniform(self):
        steps = steps_of(pp.SomeOf([FLIP, ROT, pp.RandomFlip(0.0, 1.0), pp.RandomAffine(5)], n=2), 12000)
        code = steps[:, 0] * 4 + steps[:, 1]
        pairs = [a * 4 + b for a in range(4) for b in range(a + 1, 4)]
        counts = np.array([(code == c).sum() for c in pairs])
        assert counts.sum() == 12000 and chi_square(counts, np.full(6, 1 / 6)) < CHI2_999[5]

    def test_with_replacement(self):
        steps = steps_of(pp.SomeOf([INVERT, GREY], n=3, replace=True), 2000)
        assert steps.shape == (2000, 3) and (steps[:, 0] == steps[:, 1]).any()

    @pytest.mark.parametrize("n", [-1, 4, 1.5])
    def test_bad_n(self, n):
        with pytest.raises(ValueError, match="n must"):
            pp.SomeOf([INVERT, GREY, BRIGHT], n=n)


# ============================================================================ RandomOrder
class TestRandomOrder:
    def test_contract(self):
        check_op(pp.RandomOrder([pp.RandomRotate(30), pp.RandomAffine(0, shear=20)]), tail=SIZE)

    @pytest.mark.parametrize("ops, head, tail", [
        ([ROT, pp.Pad((0, 8)), FLIP], (), SIZE),
        ([pp.ColorJitter(contrast=(0.5, 0.5)), pp.RGBShift((40, 40), (0, 0), (-30, -30), p=1.0), GREY], SIZE, ()),
        ([POSTER, BLUR, SOLAR], SIZE, ()),
    ], ids=["geometry", "colour", "pixel"])
    def test_each_sample_in_its_order(self, ops, head, tail):
        """The order matters for each of these (rotate before or after padding the width; contrast
        blends towards the mean the shift moved; blur before or after posterizing)."""
        imgs = varied_images(20)
        op = pp.RandomOrder(ops)
        out = run([*head, op, *tail], imgs)
        rows = [tuple(r) for r in steps_of(op, 20, pos=len(head)).tolist()]
        assert len(set(rows)) >= 4 and all(sorted(r) == [0, 1, 2] for r in rows)
        sequences = {r: [ops[k] for k in r] for r in set(rows)}
        torch.testing.assert_close(out, expected_rows(imgs, rows, sequences, head, tail), atol=2e-5, rtol=0)

    def test_orders_are_uniform(self):
        steps = steps_of(pp.RandomOrder([INVERT, GREY, BRIGHT]), 12000)
        codes = steps[:, 0] * 9 + steps[:, 1] * 3 + steps[:, 2]
        _, counts = np.unique(codes, return_counts=True)
        assert len(counts) == 6 and chi_square(counts, np.full(6, 1 / 6)) < CHI2_999[5]


@pytest.mark.parametrize("make", [
    lambda: pp.OneOf([BLUR, pp.Cutout(5, num_holes=2, value="random"), POSTER, pp.RandomSharpness(0.5, p=0.7)]),
    lambda: pp.SomeOf([SOLAR, pp.GaussianNoise(0.1, p=1.0), pp.MedianBlur(3, p=1.0)], n=2),
    lambda: pp.RandomOrder([POSTER, SOLAR]),
], ids=["oneof", "someof", "order"])
def test_pixel_choice_gathered_is_apply(make):
    """apply_gathered (what a pixel structure runs on a GPU: the inner ops' draws hashed together,
    every (step, op) pair's rows uploaded in one copy, gathered and written back by index),
    run here on CPU tensors: the CPU's apply() bit for bit, per-pixel noise included, leaving
    x as it was."""
    op = make()
    n = 20
    x = torch.rand(n, 3, 14, 13, generator=torch.Generator().manual_seed(2))
    idx = np.arange(n) * 7 + 1
    epoch = np.arange(n) % 2
    draws = Draws(4, epoch, idx, 3, prefix(4, epoch, idx))
    params = op.sample(draws, np.tile([14.0, 13.0], (n, 1)))
    given = x.clone()
    want = op.apply(x.clone(), params, draws)
    assert not torch.equal(want, x)
    assert torch.equal(op.apply_gathered(given, params, draws, owned=False), want)
    assert torch.equal(given, x)
    assert torch.equal(op.apply_gathered(given, params, draws, owned=True), want)


@pytest.mark.parametrize("make", [
    lambda: [p for p in pp.RandAugment(3, 15).parts() if p.kind == "geometry"][0],
    lambda: [p for p in pp.TrivialAugmentWide().parts() if p.kind == "geometry"][0],
    lambda: pp.SomeOf([pp.RandomAffine(20, (0.1, 0.1)), pp.RandomFlip(), pp.RandomResizedCrop(32)], n=2, p=0.8),
    lambda: pp.RandomOrder([pp.RandomAffine(20, (0.1, 0.1)), pp.RandomFlip(), pp.RandomResizedCrop(32)]),
])
def test_geometry_sampled_per_step_rows_is_every_row_sampled(make):
    """A geometric structure samples each op only on the rows that took it at a step: the same
    matrices and sizes, bit for bit, as sampling every row at its current size and keeping the
    op's rows (a sample's draws are its own)."""
    from pixelpipe.ops.structure import inner_draws

    op = make()
    n = 300
    sizes = np.column_stack([np.linspace(40, 400, n), np.linspace(300, 30, n)])
    draws = Draws(4, 1, np.arange(n), 2)
    got = op.sample(draws, sizes)
    steps = got["steps"]
    matrix, cur = np.tile(np.eye(3), (n, 1, 1)), sizes.astype(np.float64)
    for j in range(steps.shape[1]):
        col = steps[:, j]
        step, out = np.tile(np.eye(3), (n, 1, 1)), cur.copy()
        for k in [int(k) for k in np.unique(col) if k >= 0]:
            inner = op.ops[k]
            m, s = inner.transform(inner.sample(inner_draws(draws, op.stream(k)), cur), cur)
            rows = col == k
            step[rows], out[rows] = m[rows], s[rows]
        matrix, cur = step @ matrix, out
    assert np.array_equal(got["matrix"], matrix)
    assert np.array_equal(got["out"], cur)
