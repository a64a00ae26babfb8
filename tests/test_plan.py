"""The planner: how op lists split into stages, and the per-sample regions and decode sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import make_image, run, varied_images

import pixelpipe as pp
from pixelpipe import Compose
from pixelpipe.ops import ColorOp
from pixelpipe.plan.stages import Stage


def kinds(c: Compose) -> list[str]:
    """Per stage "warp", or "warp+pixel" when pixel ops follow its warp."""
    assert all(isinstance(s, Stage) for s in c.stages)
    return ["warp+pixel" if s.pixels else "warp" for s in c.stages]


def plan_of(ops, sizes, seed=0, indices=None):
    sizes = torch.as_tensor(sizes, dtype=torch.float64).view(-1, 2)
    idx = torch.arange(len(sizes)) if indices is None else torch.as_tensor(indices)
    return Compose(ops).stages[0].sample(seed, 0, idx, sizes)


# ----------------------------------------------------------------------------- stages
def test_everything_fuses_into_one_stage():
    ops = [pp.RandomResizedCrop(16), pp.RandomFlip(), pp.RandomRotate(10), pp.ColorJitter(0.2, 0.2),
           pp.RandomGrayscale(0.1), pp.Normalize([0.5] * 3, [0.25] * 3)]
    c = Compose(ops)
    assert kinds(c) == ["warp"]
    stage = c.stages[0]
    assert [type(op).__name__ for _, op in stage.geometry] == ["RandomResizedCrop", "RandomFlip", "RandomRotate"]
    assert [type(op).__name__ for _, op in stage.colors] == ["ColorJitter", "RandomGrayscale"]
    assert stage.normalize is ops[-1]
    assert [pos for pos, _ in stage.ops] == [0, 1, 2, 3, 4]  # positions are the ops' places


def test_a_pixel_op_ends_its_stage_where_geometry_follows():
    c = Compose([pp.Resize((16, 16)), pp.Lambda(lambda x: x, name="noop"), pp.RandomFlip()])
    assert kinds(c) == ["warp+pixel", "warp"]
    text = c.plan()
    assert "2 stage(s)" in text
    lines = text.splitlines()
    assert "stage 0" in lines[1] and "Resize" in lines[1] and "pixel[noop]" in lines[1]
    assert "stage 1" in lines[2] and "RandomFlip" in lines[2]


def test_pixel_ops_join_the_stage_before_them_and_normalize_keeps_its_place():
    c = Compose([pp.Resize((16, 16)), pp.Lambda(lambda x: x, name="a"), pp.Normalize([0.5] * 3, [0.2] * 3),
                 pp.Lambda(lambda x: x, name="b")])
    assert kinds(c) == ["warp+pixel"]
    stage = c.stages[0]
    assert stage.normalize_at == 1 and [pos for pos, _ in stage.pixels] == [1, 3]
    assert "no normalize] -> pixel[a, normalize, b]" in c.plan()
    c = Compose([pp.Resize((16, 16)), pp.Normalize([0.5] * 3, [0.2] * 3), pp.Lambda(lambda x: x, name="a")])
    assert c.stages[0].normalize_at == 0 and "clamp; normalize] -> pixel[a]" in c.plan()


def test_colour_after_a_pixel_op_starts_a_stage_and_batch_ops_come_last():
    c = Compose([pp.Resize((16, 16)), pp.Lambda(lambda x: x), pp.ColorJitter(0.2)])
    assert kinds(c) == ["warp+pixel", "warp"]

    class Mix(pp.BatchOp):
        def apply(self, batch, params, draws):
            return batch

    c = Compose([pp.Resize((16, 16)), Mix()])
    assert c.program.batch_ops and "then on the batch: Mix" in c.plan()
    with pytest.raises(ValueError, match="batch ops .* come last"):
        Compose([pp.Resize((16, 16)), Mix(), pp.RandomFlip()])


def test_an_op_of_no_known_kind_is_refused():
    with pytest.raises(TypeError, match="GeometryOp, ColorOp, PixelOp or BatchOp"):
        Compose([pp.Op()])


def test_conflicting_borders_give_two_stages():
    c = Compose([pp.RandomRotate(10, border="reflect"), pp.Pad(4, mode="constant"), pp.Resize((16, 16))])
    assert kinds(c) == ["warp", "warp"]
    assert c.stages[0].border == "reflect" and c.stages[1].border == "constant"
    assert "border=reflect" in c.plan() and "border=constant" in c.plan()


def test_conflicting_interpolation_or_fill_gives_two_stages():
    c = Compose([pp.Resize(20, interpolation="bicubic"), pp.RandomRotate(10, interpolation="nearest")])
    assert kinds(c) == ["warp", "warp"]
    assert [s.interpolation for s in c.stages] == ["bicubic", "nearest"]
    c = Compose([pp.RandomRotate(10, fill=(1, 2, 3)), pp.Crop(8, fill=(4, 5, 6))])
    assert kinds(c) == ["warp", "warp"]


def test_unset_settings_join_the_stage():
    c = Compose([pp.RandomRotate(10, border="reflect"), pp.RandomFlip(), pp.Resize((16, 16))])
    assert kinds(c) == ["warp"] and c.stages[0].border == "reflect"
    c = Compose([pp.Pad(3, mode="wrap"), pp.Pad(2, mode="wrap")])
    assert kinds(c) == ["warp"] and c.stages[0].border == "wrap"


def test_two_stages_run_and_resample_twice():
    # reflect-rotate then constant-pad: the pad's zeros must not be reflected
    imgs = [make_image(20, 24, seed=i) for i in range(4)]  # a stage boundary needs one size
    out = run([pp.RandomRotate(20, border="reflect"), pp.Pad(3, fill=(0, 0, 0))], imgs, dtype=torch.uint8)
    assert out.shape == (4, 3, 26, 30)
    assert int(out[:, :, :3].max()) == 0 and int(out[:, :, :, -3:].max()) == 0
    # the rotation's corners were reflected, not filled: the 20x24 interior is nowhere black
    inner = out[:, :, 3:-3, 3:-3].float().sum(1)
    assert float(inner.min()) > 0


def test_split_without_lambda_error_does_not_mention_lambda():
    with pytest.raises(ValueError, match="different sizes") as info:
        run([pp.RandomRotate(20, border="reflect"), pp.Pad(3), pp.Resize((16, 16))], varied_images(4))
    assert "Lambda" not in str(info.value)


def test_normalize_then_geometry_is_refused():
    with pytest.raises(ValueError, match="Normalize"):
        Compose([pp.Normalize([0.5] * 3, [0.2] * 3), pp.RandomFlip()])
    with pytest.raises(ValueError, match="Normalize"):
        Compose([pp.Resize(8), pp.Normalize([0.5] * 3, [0.2] * 3), pp.ColorJitter(0.1)])
    # a Lambda may follow Normalize
    c = Compose([pp.Resize(8), pp.Normalize([0.5] * 3, [0.2] * 3), pp.Lambda(lambda x: x)])
    assert kinds(c) == ["warp+pixel"]


def test_only_lambda_still_converts():
    c = Compose([pp.Lambda(lambda x: x)])
    assert kinds(c) == ["warp+pixel"]
    assert "warp[none]" in c.plan()


def test_plan_text_lists_dtype_layout_and_normalize():
    c = Compose([pp.Resize(8), pp.ColorJitter(0.1), pp.Normalize([0.5] * 3, [0.2] * 3)],
                dtype=torch.bfloat16, layout="NHWC", channels=1)
    text = c.plan()
    assert text.splitlines()[0].startswith("Plan: 3 ops -> 1 stage(s)")
    assert "NHWC" in text and "bfloat16" in text and "1 channel" in text
    assert "pointwise[ColorJitter; clamp; normalize]" in text


# ----------------------------------------------------------------------------- regions
def test_random_resized_crop_region_is_the_window():
    sizes = [(h, w) for h in (30, 57, 120) for w in (25, 64, 101)] * 4
    plan = plan_of([pp.RandomResizedCrop(10)], sizes, seed=3, indices=range(100, 136))
    m = plan.matrix
    top, left = -m[:, 1, 2] / m[:, 1, 1], -m[:, 0, 2] / m[:, 0, 0]
    h, w = 10 / m[:, 1, 1], 10 / m[:, 0, 0]
    window = np.stack([top, left, top + h, left + w], 1).round().astype(np.int64)
    assert np.array_equal(plan.regions(), window)


def test_random_resized_crop_with_flip_region_is_the_window():
    sizes = [(40, 60)] * 16
    crop = plan_of([pp.RandomResizedCrop(10)], sizes, seed=2).regions()
    flipped = plan_of([pp.RandomResizedCrop(10), pp.RandomFlip(0.5, 0.5)], sizes, seed=2).regions()
    assert np.array_equal(crop, flipped)


def test_resize_region_is_the_whole_image():
    sizes = [(30, 40), (17, 90), (200, 3)]
    for op in (pp.Resize((10, 12)), pp.Resize(7), pp.Resize((400, 500))):
        regions = plan_of([op], sizes).regions()
        assert regions.tolist() == [[0, 0, h, w] for h, w in sizes]


def test_crop_region_is_the_crop():
    regions = plan_of([pp.Crop((10, 12), anchor=(3, 5))], [(30, 40)]).regions()
    assert regions.tolist() == [[3, 5, 13, 17]]
    # a window past the image is clipped to the image
    regions = plan_of([pp.Crop((10, 12), anchor=(25, 35))], [(30, 40)]).regions()
    assert regions.tolist() == [[25, 35, 30, 40]]


@pytest.mark.parametrize("angle", [30.0, -15.0, 45.0])
def test_rotation_region_is_the_bounding_box(angle):
    # rotate a 100x100 image about its centre, keep the central 20x30: the region is the
    # bounding box of the rotated 20x30 rectangle about (50, 50)
    plan = plan_of([pp.RandomRotate((angle, angle)), pp.CenterCrop((20, 30))], [(100, 100)])
    a = math.radians(angle)
    half_w = (30 * abs(math.cos(a)) + 20 * abs(math.sin(a))) / 2
    half_h = (30 * abs(math.sin(a)) + 20 * abs(math.cos(a))) / 2
    expect = [math.floor(50 - half_h), math.floor(50 - half_w), math.ceil(50 + half_h), math.ceil(50 + half_w)]
    assert plan.regions().tolist() == [expect]


def test_rotation_of_the_whole_image_needs_the_whole_image():
    plan = plan_of([pp.RandomRotate((20, 20))], [(40, 60)])
    assert plan.regions().tolist() == [[0, 0, 40, 60]]


def test_reflect_border_past_the_image_takes_the_whole_axis():
    plan = Compose([pp.Crop((10, 10), anchor=(25, 5), border="reflect")]).stages[0].sample(
        0, 0, torch.arange(1), torch.tensor([[30.0, 40.0]], dtype=torch.float64))
    assert plan.regions().tolist() == [[0, 5, 30, 15]]


def test_regions_are_at_least_one_pixel():
    # a window entirely outside the image still names one pixel
    regions = plan_of([pp.Crop((5, 5), anchor=(50, 50))], [(20, 20)]).regions()
    y0, x0, y1, x1 = regions[0].tolist()
    assert 0 <= y0 < y1 <= 20 and 0 <= x0 < x1 <= 20


def test_empty_plan_regions():
    assert plan_of([pp.Resize((8, 8))], torch.zeros(0, 2)).regions().shape == (0, 4)


# ----------------------------------------------------------------------------- decode sizes
@pytest.mark.parametrize("shape", [(40, 60), (64, 64), (120, 80)])
def test_min_decode_size_halves_when_the_output_shrinks_2x(shape):
    h, w = shape
    same = plan_of([pp.Resize((h, w))], [shape])
    half = plan_of([pp.Resize((h // 2, w // 2))], [shape])
    quarter = plan_of([pp.Resize((h // 4, w // 4))], [shape])
    assert same.min_decode_size(same.regions()).tolist() == [[h, w]]
    assert half.min_decode_size(half.regions()).tolist() == [[h // 2, w // 2]]
    assert quarter.min_decode_size(quarter.regions()).tolist() == [[h // 4, w // 4]]


def test_min_decode_size_never_exceeds_the_region_when_upscaling():
    plan = plan_of([pp.Resize((300, 400))], [(30, 40)])
    assert plan.min_decode_size(plan.regions()).tolist() == [[30, 40]]


def test_min_decode_size_of_a_crop_follows_its_own_shrink():
    # RandomResizedCrop: each window shrinks to the 16x16 output by its own factor
    plan = plan_of([pp.RandomResizedCrop(16, scale=(0.5, 1.0))], [(128, 128)] * 8)
    regions = plan.regions()
    hw = regions[:, 2:] - regions[:, :2]
    assert np.array_equal(plan.min_decode_size(regions), np.maximum(np.full_like(hw, 16), np.minimum(hw, 16)))


def test_color_matrix_at_stacked_means_equals_one_by_one():
    """The GPU path folds the colour chain at four mean colours per sample in one evaluation
    (ColorJitter carries the K means through its chain at once): each slice equals folding at
    that mean alone."""
    ops = [pp.RandomResizedCrop(32), pp.ColorJitter(0.4, 0.4, 0.4, 0.1), pp.RandomGrayscale(0.5)]
    sizes = torch.tensor([[60.0, 80.0], [90.0, 50.0], [40.0, 40.0], [70.0, 100.0], [64.0, 64.0]])
    plan = pp.Compose(ops).stages[0].sample(5, 2, torch.arange(5), sizes)
    means = torch.rand(4, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 255
    stacked = plan.color_matrix(means)
    assert stacked.shape == (4, 5, 3, 4)
    for k in range(4):
        one = plan.color_matrix(means[k])
        assert torch.allclose(stacked[k], one, rtol=0, atol=1e-9), k
    assert not torch.allclose(stacked[0], stacked[1])  # the contrast term follows the mean


class _MeanShift(ColorOp):
    """A user colour op that needs the mean and does not take stacked means: x + (128 - mean) * p."""

    needs_mean = True

    def sample(self, draws, sizes):
        return {"p": draws.uniform_np(0).astype(np.float64)}

    def color(self, params, means):
        assert means.ndim == 2  # never handed [K, N, 3]
        m = np.zeros((means.shape[0], 3, 4))
        m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
        m[:, :, 3] = (128.0 - means) * params["p"].reshape(-1, 1)
        return m


def test_stacked_means_for_an_op_without_them_tile_its_parameters():
    ops = [pp.Resize((8, 8)), _MeanShift(), pp.ColorJitter(contrast=0.5)]
    sizes = torch.tensor([[20.0, 30.0], [16.0, 16.0], [9.0, 40.0]])
    plan = pp.Compose(ops).stages[0].sample(1, 0, torch.arange(3), sizes)
    means = torch.rand(4, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 255
    stacked = plan.color_matrix(means)
    for k in range(4):
        assert torch.allclose(stacked[k], plan.color_matrix(means[k]), rtol=0, atol=1e-9), k
    # the user op's shift follows the mean it was given
    assert not torch.allclose(stacked[0, :, :, 3], stacked[1, :, :, 3])


def test_stacked_means_without_mean_ops_repeat_one_fold():
    plan = plan_of([pp.Resize((8, 8)), pp.ColorJitter(brightness=0.5, saturation=0.3), pp.RandomGrayscale(0.5)],
                   [(20, 30), (16, 16)])
    stacked = plan.color_matrix(torch.rand(3, 2, 3, dtype=torch.float64) * 255)
    assert stacked.shape == (3, 2, 3, 4)
    for k in range(3):
        assert torch.equal(stacked[k], plan.color_matrix(None))


@pytest.mark.parametrize("ops", [
    [pp.RandomResizedCrop(24), pp.RandomFlip(0.5, 0.5)],
    [pp.RandomAffine(30, translate=(0.1, 0.1), scale=(0.5, 2.0), shear=(-10, 10, -5, 5)), pp.Resize((16, 20))],
    [pp.RandomPerspective(0.6, p=1.0), pp.RandomRotate(45), pp.Resize((16, 16))],
])
def test_inverse_and_max_scale_fast_forms_equal_the_general_ones(ops):
    """Affine plans invert in closed form and take the antialiasing stretch from the linear
    part; both must equal LAPACK's inverse and the 3x3-grid stretch of the general path."""
    from pixelpipe.kernels.spec import WarpSpec

    g = torch.Generator().manual_seed(2)
    sizes = torch.randint(20, 400, (64, 2), generator=g).to(torch.float64)
    plan = pp.Compose(ops).stages[0].sample(3, 1, torch.arange(64), sizes)
    inv = plan.inverse()
    assert np.allclose(inv, np.linalg.inv(plan.matrix), rtol=1e-12, atol=1e-12)
    spec = plan.warp_spec(plan.uniform_size(), plan.regions())
    fast = spec.max_scale()
    # the general path, forced by a last row that is not exactly (0, 0, 1) but as good as
    nudged = inv.copy()
    nudged[:, 2, 0] += 1e-300
    general = WarpSpec(nudged, spec.image_size, spec.origin, spec.clip, spec.out_size).max_scale()
    assert np.allclose(fast, general, rtol=1e-12, atol=0)


@pytest.mark.parametrize("perspective", [False, True])
def test_a_singular_warp_is_named(perspective):
    """A Warp whose matrix has no inverse fails with the sample's place in the batch, not
    with NaNs in the output or a LAPACK message."""
    def collapse_sample_2(sizes, draws):
        m = torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1)
        if perspective:
            m[:, 2, 0] = 0.001
        m[2, 1, 1] = 0.0  # sample 2: every row maps to y = 0
        return m

    plan = plan_of([pp.Warp(collapse_sample_2, size=(8, 8))], [(10, 10)] * 4)
    with pytest.raises(ValueError, match="sample 2 .*no inverse"):
        plan.inverse()
    with pytest.raises(ValueError, match="sample 2"):
        pp.Compose([pp.Warp(collapse_sample_2, size=(8, 8))])([torch.zeros(10, 10, 3, dtype=torch.uint8)] * 4)
