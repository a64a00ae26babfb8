"""A fractional crop that a Resize follows in the same stage is resampled from its exact window,
as Pillow's ``resize(size, filter, box=window)`` resamples it; integer crops, and a crop that
ends the geometry, keep whole-pixel windows (torchvision's rounding).

Tolerances (grey levels, mean absolute error per photo, 24 ImageNet photos of 15 sizes):
- decoded images, and JPEG bytes with exact_resize=True (full-size decode, Pillow's pixels):
  <= 0.5 against Pillow's BILINEAR with the same box (measured 0.12-0.25: float resampling
  against Pillow's fixed-point weights and uint8 between its passes, and the filter's taps at
  the window's edges, which Pillow reads from beyond the box and pixelpipe drops).
- JPEG bytes by default (JPEGs that shrink 2x or more decoded at a reduced DCT scale): the
  deviation docs/ops.md states for Resize, <= 4.5 per photo and <= 1.5 on average (measured at
  most 3.0 per photo, 0.75-1.3 on average); the window itself adds nothing to it.
"""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest
import torch
from helpers import need_sample
from PIL import Image

import pixelpipe as pp

EXACT_MAE = 0.5
DEFAULT_MAE, DEFAULT_MEAN_MAE = 4.5, 1.5
FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}


@functools.cache
def _blobs() -> tuple[bytes, ...]:
    files = sorted(need_sample().glob("*.JPEG"))[::20][:24]
    if len(files) < 20:
        pytest.skip("the ImageNet sample holds fewer than 480 JPEGs")
    return tuple(f.read_bytes() for f in files)


def _decoded(blob: bytes) -> Image.Image:
    return Image.open(io.BytesIO(blob)).convert("RGB")


def _window(size: tuple, anchor: tuple, relative: bool, h: int, w: int) -> tuple[float, float, float, float]:
    """Pillow's box (left, upper, right, lower) of Crop(size, anchor) on an h x w image, unrounded."""
    sides = [s * full if isinstance(s, float) else float(s) for s, full in zip(size, (h, w))]
    starts = [a * (full - s) if relative else float(a) for a, s, full in zip(anchor, sides, (h, w))]
    return starts[1], starts[0], starts[1] + sides[1], starts[0] + sides[0]


def _out_size(resize: int | tuple[int, int], box: tuple[float, ...]) -> tuple[int, int]:
    """Resize's output (h, w) for the window `box`: torchvision's rule on the window's sides."""
    if isinstance(resize, tuple):
        return resize
    bw, bh = box[2] - box[0], box[3] - box[1]
    long = int(np.floor(resize * max(bw, bh) / min(bw, bh) * (1 + 1e-12)))
    return (resize, long) if bw >= bh else (long, resize)


# (crop size, anchor, anchor relative?, resize, interpolation)
CASES = [
    ((0.5, 0.5), (0.5, 0.5), True, (64, 64), "bilinear"),
    ((0.875, 0.875), (0.5, 0.5), True, (112, 150), "bilinear"),
    ((0.7, 0.45), (0.2, 0.9), True, (64, 64), "bilinear"),
    ((0.5, 0.5), (10, 20), False, (48, 40), "bilinear"),
    ((0.6, 0.6), (0.5, 0.5), True, 56, "bilinear"),
    ((0.5, 0.5), (0.5, 0.5), True, (64, 64), "bicubic"),
]
IDS = ["center-0.5", "center-0.875", "crop-0.7x0.45", "crop-absolute-anchor", "resize-short-side", "bicubic"]


def _ops(case: tuple) -> list[pp.Op]:
    size, anchor, relative, resize, interpolation = case
    crop = pp.CenterCrop(size) if anchor == (0.5, 0.5) else pp.Crop(size, anchor=anchor)
    return [crop, pp.Resize(resize, interpolation=interpolation)]


def _errors(case: tuple, source: str) -> list[float]:
    """Per photo, the mean absolute error of Compose([crop, Resize]) against Pillow's resize of
    the same window, from decoded images or from JPEG bytes ("exact" / "default")."""
    size, anchor, relative, resize, interpolation = case
    t = pp.Compose(_ops(case), dtype=torch.uint8, layout="NHWC", exact_resize=source == "exact")
    errors = []
    for blob in _blobs():
        pil = _decoded(blob)
        box = _window(size, anchor, relative, pil.height, pil.width)
        oh, ow = _out_size(resize, box)
        want = np.asarray(pil.resize((ow, oh), FILTERS[interpolation], box=box), dtype=np.float64)
        given = torch.from_numpy(np.asarray(pil).copy()) if source == "decoded" else blob
        got = t([given])[0].numpy().astype(np.float64)
        assert got.shape == want.shape, (got.shape, want.shape)
        errors.append(float(np.abs(got - want).mean()))
    return errors


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fractional_window_matches_pillow_box_resize(case):
    decoded = _errors(case, "decoded")
    assert max(decoded) <= EXACT_MAE, decoded


@pytest.mark.parametrize("case", CASES[:3], ids=IDS[:3])
def test_jpeg_bytes_exact_resize_matches_pillow_and_the_default_keeps_its_deviation(case):
    exact = _errors(case, "exact")
    default = _errors(case, "default")
    assert max(exact) <= EXACT_MAE, exact
    assert max(default) <= DEFAULT_MAE and np.mean(default) <= DEFAULT_MEAN_MAE, default


def test_the_photos_come_in_several_sizes():
    sizes = {_decoded(b).size for b in _blobs()}
    assert len(_blobs()) >= 20 and len(sizes) >= 10, sizes


# ----------------------------------------------------------------------------- the plan
def _plan(ops: list[pp.Op], h: int, w: int, stage: int = 0):
    sizes = np.array([[h, w]], dtype=np.float64)
    return pp.Compose(ops).stages[stage].sample(0, 0, np.arange(1), sizes)


def _window_map(top: float, left: float, h: float, w: float, out_h: int, out_w: int) -> np.ndarray:
    sy, sx = out_h / h, out_w / w
    return np.array([[sx, 0.0, -left * sx], [0.0, sy, -top * sy], [0.0, 0.0, 1.0]])


def test_crop_then_resize_maps_the_exact_window():
    plan = _plan([pp.CenterCrop(0.5), pp.Resize((64, 64))], 75, 101)
    np.testing.assert_allclose(plan.matrix[0], _window_map(18.75, 25.25, 37.5, 50.5, 64, 64), rtol=1e-12)
    np.testing.assert_array_equal(plan.out_sizes, [[64, 64]])
    # the region read is the window rounded outwards
    np.testing.assert_array_equal(plan.regions(), [[18, 25, 57, 76]])


def test_colour_ops_between_crop_and_resize_keep_the_exact_window():
    plan = _plan([pp.Crop(0.5, anchor=(0.0, 1.0)), pp.ColorJitter(0.4), pp.Resize((30, 20))], 75, 101)
    np.testing.assert_allclose(plan.matrix[0], _window_map(0.0, 50.5, 37.5, 50.5, 30, 20), rtol=1e-12)


@pytest.mark.parametrize("h, w", [(75, 101), (31, 40), (224, 225)])
def test_pixel_sizes_keep_torchvision_windows_before_a_resize(h, w):
    # torchvision: top = int(round((h - ch) / 2.0)), a whole pixel, then the crop is resized
    plan = _plan([pp.CenterCrop((13, 16)), pp.Resize((26, 48))], h, w)
    top, left = round((h - 13) / 2.0), round((w - 16) / 2.0)
    np.testing.assert_allclose(plan.matrix[0], _window_map(top, left, 13, 16, 26, 48), rtol=1e-12)


def test_a_pixel_side_beside_a_fractional_one_stays_whole():
    plan = _plan([pp.CenterCrop((0.5, 16)), pp.Resize((30, 32))], 75, 101)
    np.testing.assert_allclose(plan.matrix[0], _window_map(18.75, round(85 / 2), 37.5, 16, 30, 32), rtol=1e-12)


@pytest.mark.parametrize("ops, stage", [
    ([pp.CenterCrop(0.5)], 0),  # the crop ends the geometry
    ([pp.CenterCrop(0.5), pp.RandomFlip(0.0), pp.Resize((20, 20))], 0),  # another geometric op comes next
    ([pp.CenterCrop(0.5), pp.Lambda(lambda x: x), pp.Resize((20, 20))], 0),  # the Resize is in the next stage
], ids=["alone", "flip-between", "next-stage"])
def test_other_crops_keep_whole_pixels(ops, stage):
    plan = _plan(ops, 75, 101, stage)
    m = plan.matrix[0]
    crop_only = _plan(ops[:1], 75, 101).matrix[0]
    # 37.5 x 50.5 rounds (half to even) to 38 x 50, at round(25.5), round(18.5)
    np.testing.assert_array_equal(crop_only[:2, 2], [-26.0, -18.0])
    if len(ops) == 1 or isinstance(ops[1], pp.Lambda):
        np.testing.assert_array_equal(m, crop_only)
        np.testing.assert_array_equal(plan.out_sizes, [[38, 50]])
    else:
        np.testing.assert_allclose(m, _window_map(18, 26, 38, 50, 20, 20), rtol=1e-12)


def test_resize_short_side_of_an_exact_window_is_not_lost_to_rounding():
    # 0.9 * 84 x 0.9 * 686: the exact long side is 108 * 686 / 84 = 882; the quotient of the
    # float sides lands a rounding error below it
    plan = _plan([pp.CenterCrop(0.9), pp.Resize(108)], 84, 686)
    np.testing.assert_array_equal(plan.out_sizes, [[108, 882]])


# ----------------------------------------------------------------------------- targets
def test_boxes_and_keypoints_follow_the_exact_window():
    image = torch.zeros(75, 101, 3, dtype=torch.uint8)
    boxes = [np.array([[30.0, 20.0, 60.0, 50.0]])]
    keypoints = [np.array([[40.0, 30.0], [50.5, 37.5]])]
    out = pp.Compose([pp.CenterCrop(0.5), pp.Resize((64, 64))])([image], boxes=boxes, keypoints=keypoints)
    sx, sy = 64 / 50.5, 64 / 37.5  # the window: left 25.25, top 18.75, 50.5 x 37.5
    want_box = [(30 - 25.25) * sx, (20 - 18.75) * sy, (60 - 25.25) * sx, (50 - 18.75) * sy]
    np.testing.assert_allclose(out["boxes"][0].numpy(), [[min(v, 64.0) for v in want_box]], atol=1e-4)
    want_points = [[(40 - 25.25) * sx, (30 - 18.75) * sy], [32.0, 32.0]]  # the window's centre -> the output's
    np.testing.assert_allclose(out["keypoints"][0].numpy()[:, :2], want_points, atol=1e-4)


def test_masks_follow_the_image_through_the_exact_window():
    """A label mask warped by nearest neighbour lands where the image, warped by nearest through
    the same matrices, does; both are Pillow's NEAREST resize of the window."""
    rng = np.random.default_rng(0)
    labels = np.kron(rng.integers(0, 10, (15, 20)), np.ones((5, 5), np.int64))[:73, :97]  # blocks of 5 px
    image = torch.from_numpy(np.repeat((labels * 20).astype(np.uint8)[:, :, None], 3, 2))
    t = pp.Compose([pp.CenterCrop(0.5), pp.Resize((44, 60), interpolation="nearest")], dtype=torch.uint8)
    out = t([image], masks=[labels])
    mask, grey = out["masks"][0].numpy(), out["image"][0, 0].numpy()
    np.testing.assert_array_equal(mask * 20, grey)
    box = _window((0.5, 0.5), (0.5, 0.5), True, 73, 97)
    pil = np.asarray(Image.fromarray(labels.astype(np.uint8)).resize((60, 44), Image.Resampling.NEAREST, box=box))
    assert (pil == mask).mean() >= 0.99, (pil != mask).sum()
