"""Augmentation policies (AutoAugment, RandAugment, TrivialAugmentWide): the op contract; the
choice frequencies over 10,000 samples against each policy's probabilities (chi-square, fixed
seed); the magnitudes against torchvision's tables written out here; the folded geometric
matrices against torchvision's matrices multiplied in step order (1e-9); and each sample's
colour and pixel operations against torchvision's float definitions written out here in numpy,
run in the chosen order with a clamp after each (on uint8 images that are not resampled: at
most 1 grey level apart on 99.9% of the values, under 0.05 on average; equalize and posterize
act on rounded grey levels, where a float rounding may land a value one level over)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run, torchvision_pixel_op

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix
from pixelpipe.ops.policies import POLICIES
from pixelpipe.ops.structure import inner_draws

SIZE = [pp.Resize((16, 16))]
CHI2_999 = {13: 34.53, 25: 52.62}  # chi-square 0.1% critical values by degrees of freedom
RANDAUGMENT_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
                   "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


def draws_at(n: int, seed: int = 0, pos: int = 0, indices=None) -> Draws:
    idx = np.arange(n) if indices is None else np.asarray(indices)
    return Draws(seed, 0, idx, pos, prefix(seed, 0, idx))


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def magnitudes(policy, draws: Draws, sizes: np.ndarray) -> dict[int, np.ndarray]:
    """Each entry's per-sample magnitude, drawn from the entry's own stream as the policy does."""
    return {e: op.sample(inner_draws(draws, e), sizes)["magnitude"]
            for e, op in enumerate(policy.entries) if op is not None}


# ----------------------------------------------------------------------------- the contract
class TestContract:
    def test_rand_augment(self):
        check_op(pp.RandAugment(2, 9), head=SIZE, p_zero=pp.RandAugment(0))

    def test_trivial_augment_wide(self):
        check_op(pp.TrivialAugmentWide(), head=SIZE)

    @pytest.mark.parametrize("policy", ["imagenet", "cifar10", "svhn"])
    def test_auto_augment(self, policy):
        check_op(pp.AutoAugment(policy), head=SIZE)

    def test_folds_into_one_warp_and_one_pixel_step(self):
        t = pp.Compose([pp.RandomResizedCrop(32), pp.RandomFlip(), pp.RandAugment(2, 9),
                        pp.Normalize([0.5] * 3, [0.5] * 3), pp.RandomErasing(0.25)])
        assert len(t.stages) == 1
        assert "warp[RandomResizedCrop, RandomFlip, RandAugment]" in t.plan()
        assert "pixel[RandAugment, normalize, RandomErasing]" in t.plan()

    def test_pickles(self):
        t = pp.Compose([pp.AutoAugment(), pp.RandAugment(), pp.TrivialAugmentWide()])
        imgs = [make_image(20, 20, seed=k) for k in range(6)]
        assert torch.equal(pickle.loads(pickle.dumps(t))(imgs), t(imgs))

    def test_after_normalize_is_an_error_naming_the_policy(self):
        with pytest.raises(ValueError, match=r"op 1 \(RandAugment\) comes after Normalize"):
            pp.Compose([pp.Normalize([0.5] * 3, [0.5] * 3), pp.RandAugment()])
        with pytest.raises(ValueError, match=r"ops\[0\] \(RandAugment\) is a compound op"):
            pp.OneOf([pp.RandAugment(), pp.RandomFlip()])

    def test_eval_drops_them(self):
        t = pp.Compose([pp.Resize((16, 16)), pp.RandAugment(), pp.AutoAugment(), pp.TrivialAugmentWide()])
        assert [type(op).__name__ for op in t.eval().ops] == ["Resize"]


# ----------------------------------------------------------------------------- choices
class TestChoices:
    def test_rand_augment_steps_are_uniform(self):
        op = pp.RandAugment(2, 9)
        chosen = op.choices(draws_at(10_000, seed=7), 10_000)
        names = [e.name if e is not None else "Identity" for e in op.entries]
        for j in range(2):
            col = chosen[:, j]
            k = np.where(col >= 0, col - 14 * j, 0)  # Identity is -1: the 0th operation
            assert (col[col >= 0] // 14 == j).all(), "step j must take its own entries"
            assert [names[14 * j + i] for i in range(14)] == RANDAUGMENT_OPS
            counts = np.bincount(k, minlength=14)
            assert chi_square(counts, np.full(14, 1 / 14)) < CHI2_999[13], counts
        assert (chosen[:, 0] != chosen[:, 1] - 14).any(), "the two steps must draw independently"

    def test_trivial_augment_is_uniform(self):
        op = pp.TrivialAugmentWide()
        chosen = op.choices(draws_at(10_000, seed=3), 10_000)[:, 0]
        counts = np.bincount(np.where(chosen >= 0, chosen, 0), minlength=14)
        assert chi_square(counts, np.full(14, 1 / 14)) < CHI2_999[13], counts

    @pytest.mark.parametrize("policy", ["imagenet", "cifar10", "svhn"])
    def test_auto_augment_sub_policies_and_probabilities(self, policy):
        op = pp.AutoAugment(policy)
        n = 10_000
        chosen = op.choices(draws_at(n, seed=11), n)
        table = POLICIES[policy]
        for j in range(2):
            col = chosen[:, j]
            assert (col[col >= 0] % 2 == j).all()
            counts = np.bincount(np.where(col >= 0, col // 2, 25), minlength=26)
            probs = np.array([sub[j][1] / 25 for sub in table] + [1 - sum(sub[j][1] for sub in table) / 25])
            keep = probs > 0  # an operation of probability 0 never fires
            assert counts[~keep].sum() == 0
            assert chi_square(counts[keep], probs[keep]) < CHI2_999[25], counts

    def test_signs_and_trivial_bins(self):
        op = pp.TrivialAugmentWide()
        sizes = np.tile([32.0, 48.0], (8000, 1))
        mags = magnitudes(op, draws_at(8000), sizes)
        rotate = mags[RANDAUGMENT_OPS.index("Rotate")]
        bins = np.round(np.abs(rotate) / (135.0 / 30)).astype(int)
        assert np.allclose(np.abs(rotate), bins * 135.0 / 30)
        assert chi_square(np.bincount(bins, minlength=31), np.full(31, 1 / 31)) < 59.70  # 30 dof, 0.1%
        assert abs((rotate < 0).mean() - 0.5 * (1 - (bins == 0).mean())) < 0.02

    def test_samples_differ_within_a_batch(self):
        chosen = pp.RandAugment(2, 9).choices(draws_at(64), 64)
        assert len({tuple(r) for r in chosen.tolist()}) > 30


# ----------------------------------------------------------------------------- magnitudes
def test_rand_augment_magnitudes_are_torchvision_tables():
    """Bin 9 of 31 on a 40x60 (h x w) image, torchvision's tables written out."""
    op = pp.RandAugment(1, 9)
    sizes = np.tile([40.0, 60.0], (2000, 1))
    mags = magnitudes(op, draws_at(2000), sizes)
    t = 9 / 30
    expect = {"ShearX": 0.3 * t, "ShearY": 0.3 * t, "TranslateX": 150 / 331 * 60 * t, "TranslateY": 150 / 331 * 40 * t,
              "Rotate": 30 * t, "Brightness": 0.9 * t, "Color": 0.9 * t, "Contrast": 0.9 * t, "Sharpness": 0.9 * t,
              "Posterize": 8 - round(9 / (30 / 4)), "Solarize": 1 - t}
    for e, name in enumerate(RANDAUGMENT_OPS):
        if name in expect:
            np.testing.assert_allclose(np.abs(mags[e]), expect[name], rtol=1e-12, err_msg=name)
            signed = name not in ("Posterize", "Solarize")
            assert ((mags[e] < 0).mean() > 0.4) == signed, name
    assert expect["Posterize"] == 7


def test_auto_augment_magnitudes_are_the_policy_bins():
    op = pp.AutoAugment("imagenet")
    mags = magnitudes(op, draws_at(500), np.tile([32.0, 32.0], (500, 1)))
    # sub-policy 0: Posterize bin 8 of 10 -> 8 - round(8 / 2.25) = 4 bits; Rotate bin 9 -> 30 degrees
    assert (mags[0] == 4).all() and np.allclose(np.abs(mags[1]), 30.0)
    # sub-policy 14: Color bin 4 -> 0.4, Contrast bin 8 -> 0.8
    assert np.allclose(np.abs(mags[28]), 0.4) and np.allclose(np.abs(mags[29]), 0.8)


# ----------------------------------------------------------------------------- geometry
def torchvision_matrix(name: str, m: float, h: float, w: float) -> np.ndarray:
    """torchvision's forward matrix of one geometric operation, in pixel coordinates (x, y, 1)
    with y down: F.affine's shear (atan(m) degrees, center=[0, 0]: the forward map is
    [[1, -tan(sx)], [0, 1]]), its translation [int(m), 0], F.rotate's m degrees counter-clockwise
    about the centre."""
    if name == "ShearX":
        return np.array([[1, -m, 0], [0, 1, 0], [0, 0, 1.0]])
    if name == "ShearY":
        return np.array([[1, 0, 0], [-m, 1, 0], [0, 0, 1.0]])
    if name == "TranslateX":
        return np.array([[1, 0, math.trunc(m)], [0, 1, 0], [0, 0, 1.0]])
    if name == "TranslateY":
        return np.array([[1, 0, 0], [0, 1, math.trunc(m)], [0, 0, 1.0]])
    a = math.radians(m)
    c, s = math.cos(a), math.sin(a)
    centre = np.array([[1, 0, w / 2], [0, 1, h / 2], [0, 0, 1.0]])
    return centre @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1.0]]) @ np.linalg.inv(centre)


@pytest.mark.parametrize("make", [lambda: pp.RandAugment(3, 20), pp.TrivialAugmentWide,
                                  lambda: pp.AutoAugment("svhn")], ids=["rand", "trivial", "auto-svhn"])
def test_folded_matrix_is_torchvision_matrices_in_step_order(make):
    op = make()
    n, h, w = 300, 30.0, 50.0
    sizes = np.tile([h, w], (n, 1))
    plan = pp.Compose([op]).stages[0].sample(0, 0, np.arange(n), sizes)
    draws = draws_at(n)
    chosen = op.choices(draws, n)
    mags = magnitudes(op, draws, sizes)
    moved = 0
    for k in range(n):
        m = np.eye(3)
        for e in chosen[k]:
            if e >= 0 and op.entries[e].name in GEOMETRIC:
                m = torchvision_matrix(op.entries[e].name, mags[e][k], h, w) @ m
        np.testing.assert_allclose(plan.matrix[k], m, atol=1e-9)
        moved += not np.allclose(m, np.eye(3))
    assert moved > n // 4


def test_translations_move_whole_pixels():
    """Samples whose steps were translations (or Identity) only: the image shifted exactly,
    the uncovered band black (torchvision's fill)."""
    op = pp.RandAugment(2, 9)
    n = 400
    img = make_image(24, 24)
    out = run([op], [img] * n, dtype=torch.uint8)
    draws = draws_at(n)
    chosen = op.choices(draws, n)
    mags = magnitudes(op, draws, np.tile([24.0, 24.0], (n, 1)))
    checked = 0
    for k in range(n):
        names = [op.entries[e].name if e >= 0 else "Identity" for e in chosen[k]]
        if not set(names) <= {"Identity", "TranslateX", "TranslateY"}:
            continue
        dx = sum(math.trunc(mags[e][k]) for e, nm in zip(chosen[k], names) if nm == "TranslateX")
        dy = sum(math.trunc(mags[e][k]) for e, nm in zip(chosen[k], names) if nm == "TranslateY")
        expect = np.zeros_like(img)
        src = img[max(0, -dy):24 - max(0, dy), max(0, -dx):24 - max(0, dx)]
        expect[max(0, dy):max(0, dy) + src.shape[0], max(0, dx):max(0, dx) + src.shape[1]] = src
        np.testing.assert_array_equal(out[k].permute(1, 2, 0).numpy(), expect)
        checked += 1
    assert checked >= 8, checked


def test_boxes_follow_the_policy_geometry():
    op = pp.TrivialAugmentWide()
    n = 40
    img = make_image(30, 40)
    box = np.array([8.0, 6.0, 20.0, 18.0])
    out = pp.Compose([op])([img] * n, boxes=[[box]] * n)
    plan = pp.Compose([op]).stages[0].sample(0, 0, np.arange(n), np.tile([30.0, 40.0], (n, 1)))
    corners = np.array([[box[0], box[1], 1], [box[2], box[1], 1], [box[0], box[3], 1], [box[2], box[3], 1]]).T
    for k in range(n):
        p = plan.matrix[k] @ corners
        xy = p[:2] / p[2]
        expect = np.clip([xy[0].min(), xy[1].min(), xy[0].max(), xy[1].max()], 0, [40, 30, 40, 30])
        got = out["boxes"][k]
        if len(got):
            np.testing.assert_allclose(got[0].numpy(), expect, atol=1e-3)


# ----------------------------------------------------------------------------- colour and pixels
@pytest.mark.parametrize("make", [lambda: pp.RandAugment(3, 15), pp.TrivialAugmentWide,
                                  lambda: pp.AutoAugment("imagenet"), lambda: pp.AutoAugment("cifar10")],
                         ids=["rand", "trivial", "auto-imagenet", "auto-cifar10"])
def test_colour_and_pixel_operations_are_torchvision_in_order(make):
    op = make()
    n = 240
    imgs = [make_image(20, 24, seed=k % 16) for k in range(n)]
    out = run([op], imgs).numpy()
    draws = draws_at(n)
    chosen = op.choices(draws, n)
    mags = magnitudes(op, draws, np.tile([20.0, 24.0], (n, 1)))
    diffs, checked = [], 0
    for k in range(n):
        names = [op.entries[e].name if e >= 0 else "Identity" for e in chosen[k]]
        if GEOMETRIC & set(names):
            continue  # the geometric ones are checked above
        x = imgs[k] / 255.0
        for e, name in zip(chosen[k], names):
            if name != "Identity":
                x = torchvision_pixel_op(name, x, float(mags[e][k]))
        diffs.append(np.abs(out[k].transpose(1, 2, 0) - x).ravel() * 255)
        checked += 1
    d = np.concatenate(diffs)
    assert checked > n // 5, checked
    assert (d <= 1.0 + 1e-3).mean() >= 0.999 and d.mean() < 0.05, (d.max(), d.mean())


# ----------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(("make", "name"), [
    (lambda: pp.RandAugment(-1), "num_ops"), (lambda: pp.RandAugment(2, 31), "magnitude"),
    (lambda: pp.RandAugment(2, 1, num_magnitude_bins=1), "num_magnitude_bins"),
    (lambda: pp.RandAugment(2, 9, interpolation="area"), "interpolation"),
    (lambda: pp.TrivialAugmentWide(0), "num_magnitude_bins"), (lambda: pp.AutoAugment("coco"), "policy"),
    (lambda: pp.AutoAugment(fill=300), "fill"),
])
def test_bad_arguments(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def pixel_part_case(make):
    """A policy's pixel part with 24 random images, their draws (scattered indices, per-row
    epochs) and the part's parameters for them."""
    part = next(p for p in make().parts() if p.kind == "pixel")
    n = 24
    x = torch.rand(n, 3, 20, 18, generator=torch.Generator().manual_seed(1))
    idx = np.arange(n) * 5 + 2
    epoch = np.arange(n) % 3
    draws = Draws(3, epoch, idx, 2, prefix(3, epoch, idx))
    return part, x, draws, part.sample(draws, np.tile([20.0, 18.0], (n, 1)))


@pytest.mark.parametrize("make", [lambda: pp.RandAugment(3, 9), pp.TrivialAugmentWide, pp.AutoAugment,
                                  lambda: pp.TimmRandAugment(2, 9.0, 0.5)], ids=["rand", "trivial", "auto", "timm"])
def test_pixel_part_apply_owned_is_apply(make):
    """The pixel part's apply_owned (the CPU engine's pieces, which it may overwrite: rows
    written back into x, every operation's draws hashed in one evaluation) against apply() (a
    copy of x, each operation's draws on their own): the same numbers, for rows chosen
    consecutively or not, with per-row epochs; apply() leaves x as it was."""
    part, x, draws, params = pixel_part_case(make)
    steps = params["steps"]
    assert len(np.unique(steps[steps >= 0])) > 3  # several operations, on scattered rows
    given = x.clone()
    plain = part.apply(given, params, draws)
    assert torch.equal(given, x)
    owned = part.apply_owned(given, params, draws)
    assert torch.equal(owned, plain) and not torch.equal(plain, x)


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize("make", [lambda: pp.RandAugment(3, 9), pp.TrivialAugmentWide, pp.AutoAugment,
                                  lambda: pp.TimmRandAugment(2, 9.0, 0.5)], ids=["rand", "trivial", "auto", "timm"])
def test_pixel_part_gathered_is_apply(make, owned):
    """apply_gathered (what the pixel part runs on a GPU: the draws of every operation hashed
    together, the rows and per-row numbers in one upload, each operation's torch form through
    apply_columns) run here on CPU tensors: the CPU's apply() bit for bit, writing into x only
    when it owns it; also where one operation takes every row of a step."""
    part, x, draws, params = pixel_part_case(make)
    n, steps = len(x), params["steps"]
    assert len(np.unique(steps[steps >= 0])) > 3
    one = {**params, "steps": np.concatenate([np.full((n, 1), steps[steps >= 0][0]), steps], 1)}
    for p in (params, one):
        given = x.clone()
        want = part.apply(x.clone(), p, draws)
        got = part.apply_gathered(given, p, draws, owned=owned)
        assert torch.equal(got, want)
        if not owned:
            assert torch.equal(given, x)
        elif p is params:  # written into x itself
            assert got.data_ptr() == given.data_ptr()


@pytest.mark.parametrize("name, magnitudes", [("Brightness", [-0.3, 0.0, 0.5]), ("Color", [-0.9, 0.2, 0.9]),
                                              ("Contrast", [-0.5, 0.1, 0.7]), ("Sharpness", [-0.9, 0.4, 0.9]),
                                              ("Posterize", [0, 4, 8]), ("Solarize", [0.0, 0.5, 1.0]),
                                              ("AutoContrast", [0, 0, 0]), ("Equalize", [0, 0, 0]),
                                              ("Invert", [0, 0, 0])])
def test_operation_with_columns_is_its_apply(name, magnitudes):
    """augment_space.apply_columns (the numbers of `operands`, given as device columns) gives
    the operation's apply() bit for bit, tiny images included."""
    from pixelpipe.ops.augment_space import _apply, apply_columns, operands

    m = np.array(magnitudes, dtype=np.float64)
    for shape in ((3, 3, 17, 15), (3, 1, 2, 5)):
        x = torch.rand(*shape, generator=torch.Generator().manual_seed(4))
        cols = {k: torch.from_numpy(v.astype(np.float32 if v.dtype.kind == "f" else np.int32)).view(-1, 1, 1, 1)
                for k, v in operands(name, m).items()}
        assert torch.equal(apply_columns(name, x.clone(), cols), _apply(name, x.clone(), m))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("make", [lambda: pp.RandAugment(2, 9), pp.TrivialAugmentWide, pp.AutoAugment],
                         ids=["rand", "trivial", "auto"])
def test_agree_on_the_gpu(make):
    """The same draws on both devices; values within 2 grey levels (the warps' roundings differ
    by device by one level here and there, test_gpu_kernels), on average well under one.

    AutoAugment's ImageNet policy is mostly Equalize, Posterize and Solarize, which amplify
    those one-level differences: an Equalize table maps a pixel that moved into the next bin
    several levels away, a Solarize threshold flips it to 255 - x (measured on an H100: mean
    0.99 level, 3.9% of the values more than 2 apart; each operation alone at most 0.48 and,
    Equalize aside, under 1%). Its bounds say so."""
    imgs = [make_image(40, 48, seed=k) for k in range(32)]
    op = make()
    t = pp.Compose([pp.RandomResizedCrop(32), op], dtype=torch.uint8)
    cpu = t(imgs, seed=4).float()
    gpu = t(pp.ImageBatch.from_list([torch.from_numpy(i) for i in imgs]).to("cuda"), seed=4)
    assert gpu.is_cuda
    diff = (gpu.cpu().float() - cpu).abs()
    mean, far = (1.5, 0.06) if isinstance(op, pp.AutoAugment) else (0.5, 0.01)
    assert float(diff.mean()) < mean and float((diff > 2).float().mean()) < far
