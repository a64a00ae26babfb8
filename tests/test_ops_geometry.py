"""Geometric ops: one class per op, each running check_op plus the op's own semantics.

Expected pixels come from numpy slicing/padding and from formulas written out here (torchvision's
size rules), never from pixelpipe itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import check_op, hwc, make_image, run, varied_images

import pixelpipe as pp
from pixelpipe import Compose

U8 = torch.uint8


def plan_of(ops, sizes, seed=0, epoch=0, indices=None):
    """The first stage's StagePlan for images of the given (h, w) sizes."""
    sizes = torch.as_tensor(sizes, dtype=torch.float64).view(-1, 2)
    idx = torch.arange(len(sizes)) if indices is None else torch.as_tensor(indices)
    return Compose(ops).stages[0].sample(seed, epoch, idx, sizes)


def matrices_of(ops, sizes, **kw) -> torch.Tensor:
    """The first stage's folded matrices (float64 [N, 3, 3]) as a tensor."""
    return torch.from_numpy(plan_of(ops, sizes, **kw).matrix)


def torchvision_short_side(h: int, w: int, size: int, max_size: int | None = None) -> tuple[int, int]:
    """torchvision.transforms.v2.functional._geometry._compute_resized_output_size, as (h, w)."""
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


SIZE_GRID = [(h, w) for h in range(7, 400, 23) for w in range(5, 420, 19)]


# ============================================================================ Resize
class TestResize:
    def test_contract(self):
        check_op(pp.Resize((18, 22)), random=False)

    def test_torchvision_example(self):
        out = run([pp.Resize(256)], [np.zeros((375, 500, 3), np.uint8)], dtype=U8)
        assert out.shape == (1, 3, 256, 341)
        out = run([pp.Resize(256)], [np.zeros((500, 375, 3), np.uint8)], dtype=U8)
        assert out.shape == (1, 3, 341, 256)

    @pytest.mark.parametrize("size", [1, 17, 64, 256])
    def test_shorter_side_like_torchvision(self, size):
        got = torch.from_numpy(pp.Resize(size).output_size(np.array(SIZE_GRID, dtype=np.float64)))
        expect = [torchvision_short_side(h, w, size) for h, w in SIZE_GRID]
        assert got.to(torch.int64).tolist() == [list(e) for e in expect]

    def test_max_size_caps_the_longer_side(self):
        sizes = torch.tensor(SIZE_GRID, dtype=torch.float64)
        got = torch.from_numpy(pp.Resize(64, max_size=100).output_size(sizes.numpy()))
        h, w = sizes[:, 0], sizes[:, 1]
        long_in, short_in = torch.maximum(h, w), torch.minimum(h, w)
        long_out, short_out = got.max(1).values, got.min(1).values
        assert bool((long_out <= 100).all())
        capped = 64 * long_in / short_in > 100
        assert bool((long_out[capped] == 100).all())
        assert bool((short_out[~capped] == 64).all())
        # the aspect ratio is kept to within the one-pixel truncation of the shorter side
        ideal = 100 * short_in[capped] / long_in[capped]
        assert bool(((short_out[capped] - ideal).abs() <= 1.0).all())
        # orientation is kept: landscape stays landscape
        assert bool(((got[:, 1] >= got[:, 0]) == (w >= h)).all() | (h == w).any())

    def test_max_size_like_torchvision(self):
        for size, max_size in ((17, 40), (64, 100), (224, 300)):
            got = torch.from_numpy(pp.Resize(size, max_size=max_size).output_size(np.array(SIZE_GRID, dtype=np.float64)))
            expect = [torchvision_short_side(h, w, size, max_size) for h, w in SIZE_GRID]
            keep = [i for i, e in enumerate(expect) if min(e) > 0]  # torchvision gives 0 there
            assert [got[i].to(torch.int64).tolist() for i in keep] == [list(expect[i]) for i in keep]

    def test_exact_size(self):
        imgs = varied_images(6)
        out = run([pp.Resize((13, 29))], imgs, dtype=U8)
        assert out.shape == (6, 3, 13, 29)
        single = run([pp.Resize(15)], imgs[:1], dtype=U8)
        h, w = imgs[0].shape[:2]
        assert single.shape[2:] == torchvision_short_side(h, w, 15)

    def test_same_size_is_identity(self):
        img = make_image(23, 31)
        for interp in ("nearest", "bilinear", "bicubic"):
            out = run([pp.Resize((23, 31), interpolation=interp)], [img], dtype=U8)
            np.testing.assert_array_equal(hwc(out[0]), img)

    @pytest.mark.parametrize("interp", ["nearest", "bilinear", "bicubic"])
    @pytest.mark.parametrize("size", [(7, 9), (40, 50), (19, 61)])
    def test_constant_image_stays_constant(self, interp, size):
        # the filter's taps are renormalised at the edges: no dark border
        img = np.full((21, 27, 3), (200, 17, 90), np.uint8)
        out = run([pp.Resize(size, interpolation=interp)], [img], dtype=U8)
        assert out.shape[2:] == size
        assert bool((out[0] == torch.tensor([200, 17, 90]).view(3, 1, 1).to(U8)).all())


# ============================================================================ Crop
class TestCrop:
    def test_contract(self):
        check_op(pp.Crop(0.8, anchor=(0.25, 0.75)), tail=[pp.Resize((16, 16))], random=False)

    def test_absolute_anchor_is_slicing(self):
        img = make_image(30, 40)
        out = run([pp.Crop((10, 12), anchor=(3, 5))], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(out[0]), img[3:13, 5:17])

    @pytest.mark.parametrize("anchor, top, left", [
        ((0.0, 0.0), 0, 0), ((1.0, 1.0), 20, 28), ((0.5, 0.5), 10, 14), ((0.25, 0.75), 5, 21),
        ((1.0, 0.0), 20, 0)])
    def test_relative_anchor(self, anchor, top, left):
        img = make_image(30, 40)  # free space: 20 rows, 28 columns
        out = run([pp.Crop((10, 12), anchor=anchor)], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(out[0]), img[top:top + 10, left:left + 12])

    @pytest.mark.parametrize("shape", [(30, 40), (25, 57), (64, 21)])
    def test_fractions_of_each_image(self, shape):
        img = make_image(*shape)
        h, w = round(0.5 * shape[0]), round(0.25 * shape[1])
        out = run([pp.Crop((0.5, 0.25), anchor=(0.0, 1.0))], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(out[0]), img[:h, shape[1] - w:])

    def test_window_past_the_image_gets_the_fill(self):
        img = make_image(10, 12)
        out = hwc(run([pp.Crop((14, 12), anchor=(0.5, 0.5), fill=(7, 8, 9))], [img], dtype=U8)[0])
        np.testing.assert_array_equal(out[2:12], img)
        assert (out[:2] == [7, 8, 9]).all() and (out[12:] == [7, 8, 9]).all()

    def test_fraction_crops_differ_per_image_size(self):
        imgs = [make_image(20, 30), make_image(40, 60)]
        with pytest.raises(ValueError, match="different sizes"):
            run([pp.Crop(0.5)], imgs)


# ============================================================================ CenterCrop
class TestCenterCrop:
    def test_contract(self):
        check_op(pp.CenterCrop((13, 15)), random=False)

    @pytest.mark.parametrize("shape, size", [((30, 40), (10, 12)), ((31, 40), (10, 13)),
                                             ((25, 25), (24, 1)), ((9, 50), (9, 9))])
    def test_matches_torchvision_position(self, shape, size):
        img = make_image(*shape)
        # torchvision: crop_top = int(round((h - ch) / 2.0))
        top = round((shape[0] - size[0]) / 2.0)
        left = round((shape[1] - size[1]) / 2.0)
        out = run([pp.CenterCrop(size)], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(out[0]), img[top:top + size[0], left:left + size[1]])

    def test_fraction(self):
        img = make_image(40, 60)
        out = run([pp.CenterCrop(0.5)], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(out[0]), img[10:30, 15:45])


# ============================================================================ RandomResizedCrop
def crop_windows(plan, out_h, out_w):
    """(top, left, h, w) float64 [N] recovered from a RandomResizedCrop plan's matrix."""
    m = torch.from_numpy(plan.matrix)
    sx, sy = m[:, 0, 0], m[:, 1, 1]
    return -m[:, 1, 2] / sy, -m[:, 0, 2] / sx, out_h / sy, out_w / sx


class TestRandomResizedCrop:
    def test_contract(self):
        check_op(pp.RandomResizedCrop((18, 20)))

    @pytest.mark.parametrize("scale, ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.3, 0.6), (0.5, 2.0)),
                                              ((0.5, 0.5), (1.0, 1.0))])
    def test_window_area_and_ratio_in_range(self, scale, ratio):
        sizes = torch.tensor([(h, w) for h in range(20, 130, 9) for w in range(20, 130, 13)],
                             dtype=torch.float64)
        H, W = sizes[:, 0], sizes[:, 1]
        n_fallback = 0
        for seed in range(3):
            plan = plan_of([pp.RandomResizedCrop((12, 16), scale=scale, ratio=ratio)], sizes, seed=seed)
            top, left, h, w = crop_windows(plan, 12, 16)
            for v in (top, left, h, w):  # whole pixels
                assert float((v - v.round()).abs().max()) < 1e-9
            top, left, h, w = top.round(), left.round(), h.round(), w.round()
            assert bool(((top >= 0) & (left >= 0) & (top + h <= H) & (left + w <= W) & (h >= 1) & (w >= 1)).all())
            # torchvision's fallback: centred, full along one axis, ratio clamped into the range
            fallback = (top == torch.floor((H - h) / 2)) & (left == torch.floor((W - w) / 2)) & ((h == H) | (w == W))
            # the rest: area and ratio within range, up to the rounding of w and h to pixels
            area = H * W
            ok = ((w + 0.5) * (h + 0.5) >= scale[0] * area) & ((w - 0.5) * (h - 0.5) <= scale[1] * area) \
                & ((w + 0.5) / (h - 0.5) >= ratio[0]) & ((w - 0.5) / (h + 0.5) <= ratio[1])
            assert bool((ok | fallback).all()), sizes[~(ok | fallback)]
            n_fallback += int((fallback & ~ok).sum())
        if scale == (0.3, 0.6):
            assert n_fallback <= 3  # there is room for such windows in almost every image

    def test_fallback_is_centred_with_ratio_clamped(self):
        # no square of the whole area fits in a 30x90 image: torchvision takes the centred
        # 30x30 square (ratio clamped to 1)
        plan = plan_of([pp.RandomResizedCrop(10, scale=(1.0, 1.0), ratio=(1.0, 1.0))], [(30, 90)])
        top, left, h, w = (float(v[0]) for v in crop_windows(plan, 10, 10))
        assert (round(top), round(left), round(h), round(w)) == (0, 30, 30, 30)

    def test_is_crop_then_resize(self):
        imgs = varied_images(10, 30, 60, seed=3)
        idx = torch.arange(10) + 77
        op = pp.RandomResizedCrop((14, 18))
        out = run([op], imgs, dtype=U8, seed=9, indices=idx)
        sizes = [t.shape[:2] for t in imgs]
        plan = plan_of([op], sizes, seed=9, indices=idx)
        for i, img in enumerate(imgs):
            top, left, h, w = (round(float(v[i])) for v in crop_windows(plan, 14, 18))
            ref = run([pp.Crop((h, w), anchor=(top, left)), pp.Resize((14, 18))], [img], dtype=U8)
            assert torch.equal(out[i], ref[0]), i

    def test_windows_vary_and_cover_the_image(self):
        sizes = torch.tensor([[50.0, 70.0]]).expand(400, 2)
        top, left, h, w = crop_windows(plan_of([pp.RandomResizedCrop(8)], sizes), 8, 8)
        centre_y, centre_x = top + h / 2, left + w / 2
        assert len(set(zip(top.tolist(), left.tolist(), h.tolist()))) > 300
        # centres spread over the image rather than sitting in the middle
        assert float(centre_y.min()) < 15 and float(centre_y.max()) > 35
        assert float(centre_x.min()) < 20 and float(centre_x.max()) > 50


# ============================================================================ RandomFlip
class TestRandomFlip:
    def test_contract(self):
        check_op(pp.RandomFlip(0.5, 0.5), tail=[pp.Resize((16, 16))], p_zero=pp.RandomFlip(0.0, 0.0))

    @pytest.mark.parametrize("h, v", [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0)])
    def test_flip_is_exact(self, h, v):
        img = make_image(21, 34)
        out = hwc(run([pp.RandomFlip(h, v)], [img], dtype=U8)[0])
        ref = img[:, ::-1] if h else img
        ref = ref[::-1] if v else ref
        np.testing.assert_array_equal(out, ref)

    @pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
    def test_rate_is_p(self, p):
        n = 4000
        m = matrices_of([pp.RandomFlip(horizontal=p, vertical=1 - p)], torch.full((n, 2), 10.0))
        rate_h = float((m[:, 0, 0] < 0).double().mean())
        rate_v = float((m[:, 1, 1] < 0).double().mean())
        # 5 standard deviations of a binomial rate over 4000 samples is at most 0.04
        assert abs(rate_h - p) < 0.04 and abs(rate_v - (1 - p)) < 0.04
        # the two draws are independent
        both = float(((m[:, 0, 0] < 0) & (m[:, 1, 1] < 0)).double().mean())
        assert abs(both - p * (1 - p)) < 0.04


# ============================================================================ RandomRotate
class TestRandomRotate:
    def test_contract(self):
        check_op(pp.RandomRotate(30), tail=[pp.Resize((16, 16))], p_zero=pp.RandomRotate(30, p=0.0))

    def test_contract_expand(self):
        check_op(pp.RandomRotate((-40, 40), expand=True, border="reflect"), tail=[pp.Resize((16, 16))],
                 p_zero=pp.RandomRotate((-40, 40), p=0.0, expand=True, border="reflect"))

    @pytest.mark.parametrize("angle", [30.0, -55.0, 90.0, 135.0])
    def test_expand_size_holds_the_rotated_image(self, angle):
        h, w = 30, 50
        a = math.radians(angle)
        c, s = abs(math.cos(a)), abs(math.sin(a))
        exp_h, exp_w = math.ceil(w * s + h * c - 1e-6), math.ceil(w * c + h * s - 1e-6)
        op = pp.RandomRotate((angle, angle), expand=True)
        plan = plan_of([op], [(h, w)])
        assert plan.out_sizes[0].tolist() == [exp_h, exp_w]
        corners = torch.tensor([[0, 0, 1], [w, 0, 1], [0, h, 1], [w, h, 1]], dtype=torch.float64).T
        mapped = torch.from_numpy(plan.matrix[0]) @ corners
        assert float(mapped[0].min()) >= -1e-9 and float(mapped[0].max()) <= exp_w + 1e-9
        assert float(mapped[1].min()) >= -1e-9 and float(mapped[1].max()) <= exp_h + 1e-9
        # a white image keeps its whole area when expanded, loses the corners when not
        white = np.full((h, w, 3), 255, np.uint8)
        full = run([op], [white])
        cut = run([pp.RandomRotate((angle, angle))], [white])
        assert full.shape[2:] == (exp_h, exp_w) and cut.shape[2:] == (h, w)
        # up to half a pixel along the outline may move (edge pixels are partly covered)
        assert abs(float(full[0, 0].sum()) - h * w) < 0.5 * (h + w)
        if angle % 90:
            assert float(cut[0, 0].sum()) < 0.9 * h * w

    def test_angles_within_range(self):
        n = 500
        m = matrices_of([pp.RandomRotate((-10, 25))], torch.full((n, 2), 20.0))
        deg = torch.rad2deg(torch.atan2(m[:, 0, 1], m[:, 0, 0]))
        assert float(deg.min()) >= -10 - 1e-9 and float(deg.max()) <= 25 + 1e-9
        assert float(deg.min()) < -8 and float(deg.max()) > 23  # the whole range is used

    def test_p_is_the_rate_of_rotated_samples(self):
        n = 4000
        m = matrices_of([pp.RandomRotate((5, 10), p=0.3)], torch.full((n, 2), 20.0))
        rotated = m[:, 0, 1].abs() > 1e-12
        assert abs(float(rotated.double().mean()) - 0.3) < 0.04


# ============================================================================ RandomAffine
class TestRandomAffine:
    def test_contract(self):
        kw = {"degrees": 20, "translate": (0.1, 0.2), "scale": (0.8, 1.2), "shear": (-10, 10, -5, 5)}
        check_op(pp.RandomAffine(**kw), tail=[pp.Resize((16, 16))], p_zero=pp.RandomAffine(**kw, p=0.0))

    def test_translation_whole_pixels_in_range(self):
        sizes = torch.tensor([[40.0, 60.0]]).expand(600, 2)
        m = matrices_of([pp.RandomAffine(translate=(0.1, 0.2))], sizes)
        tx, ty = m[:, 0, 2], m[:, 1, 2]
        assert torch.equal(m[:, :2, :2], torch.eye(2, dtype=torch.float64).expand(600, 2, 2))
        assert float((tx - tx.round()).abs().max()) < 1e-9 and float((ty - ty.round()).abs().max()) < 1e-9
        assert float(tx.abs().max()) <= 6 and float(ty.abs().max()) <= 8
        assert float(tx.abs().max()) == 6 or float(ty.abs().max()) == 8 or len(set(tx.tolist())) > 10

    def test_translation_moves_pixels(self):
        img = make_image(30, 40)
        op = pp.RandomAffine(translate=(0.2, 0.2))
        for idx in range(4):
            m = matrices_of([op], [(30, 40)], indices=[idx])[0]
            tx, ty = round(float(m[0, 2])), round(float(m[1, 2]))
            out = hwc(run([op], [img], dtype=U8, indices=[idx])[0])
            ys, xs = slice(max(ty, 0), 30 + min(ty, 0)), slice(max(tx, 0), 40 + min(tx, 0))
            src = img[max(-ty, 0):30 + min(-ty, 0), max(-tx, 0):40 + min(-tx, 0)]
            np.testing.assert_array_equal(out[ys, xs], src)

    def test_scale_and_angle_in_range(self):
        m = matrices_of([pp.RandomAffine(degrees=(-15, 5), scale=(0.7, 1.1))], torch.full((800, 2), 30.0))
        lin = m[:, :2, :2]
        zoom = torch.sqrt(torch.linalg.det(lin))  # rotation has det 1, no shear
        deg = torch.rad2deg(torch.atan2(lin[:, 0, 1], lin[:, 0, 0]))
        assert float(zoom.min()) >= 0.7 - 1e-9 and float(zoom.max()) <= 1.1 + 1e-9
        assert float(deg.min()) >= -15 - 1e-9 and float(deg.max()) <= 5 + 1e-9
        assert float(zoom.max() - zoom.min()) > 0.35 and float(deg.max() - deg.min()) > 18

    def test_centre_is_fixed_without_translation(self):
        m = matrices_of([pp.RandomAffine(degrees=40, scale=(0.5, 2.0), shear=20)], [(30, 50)] * 20)
        centre = torch.tensor([25.0, 15.0, 1.0], dtype=torch.float64)
        torch.testing.assert_close(m @ centre, centre.expand(20, 3))


# ============================================================================ RandomPerspective
class TestRandomPerspective:
    def test_contract(self):
        check_op(pp.RandomPerspective(0.3, p=0.7), tail=[pp.Resize((16, 16))],
                 p_zero=pp.RandomPerspective(0.3, p=0.0))

    def test_corners_move_inwards_within_distortion(self):
        h, w, d = 40.0, 60.0, 0.3
        m = matrices_of([pp.RandomPerspective(d, p=1.0)], [(h, w)] * 200)
        corners = torch.tensor([[0, 0, 1], [w, 0, 1], [w, h, 1], [0, h, 1]], dtype=torch.float64).T
        mapped = m @ corners
        xy = (mapped[:, :2] / mapped[:, 2:]).transpose(1, 2)  # [N, 4, 2]
        inward = torch.tensor([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=torch.float64)
        move = (xy - corners[:2].T) * inward / torch.tensor([w / 2, h / 2], dtype=torch.float64)
        assert float(move.min()) >= -1e-9 and float(move.max()) <= d + 1e-9
        assert float(move.max()) > 0.9 * d  # the range is used

    def test_zero_distortion_is_identity(self):
        img = make_image(25, 33)
        out = run([pp.RandomPerspective(0.0, p=1.0)], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(out[0]), img)


# ============================================================================ Pad
NUMPY_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "wrap": "wrap"}


class TestPad:
    def test_contract(self):
        check_op(pp.Pad((1, 2, 3, 4), mode="reflect"), tail=[pp.Resize((16, 16))], random=False)

    @pytest.mark.parametrize("mode", list(NUMPY_MODE))
    @pytest.mark.parametrize("padding", [3, (2, 5), (1, 2, 3, 4), (0, 7, 0, 0), 40])
    @pytest.mark.parametrize("channels", [3, 0])
    def test_matches_numpy_pad(self, mode, padding, channels):
        img = make_image(23, 31, channels)
        out = run([pp.Pad(padding, mode=mode)], [img], dtype=U8, layout="NHWC")[0].numpy()
        p = (padding,) * 4 if isinstance(padding, int) else padding
        l, t, r, b = p if len(p) == 4 else (p[0], p[1], p[0], p[1])
        ref = np.pad(img, ((t, b), (l, r)) + ((0, 0),) * (img.ndim - 2), mode=NUMPY_MODE[mode])
        if channels == 0:
            ref = np.repeat(ref[..., None], 3, -1)
        np.testing.assert_array_equal(out, ref)

    def test_fill_colour(self):
        img = make_image(10, 12)
        out = hwc(run([pp.Pad((1, 2, 3, 4), fill=(10, 20, 30))], [img], dtype=U8)[0])
        assert out.shape == (16, 16, 3)
        np.testing.assert_array_equal(out[2:12, 1:13], img)
        mask = np.ones((16, 16), bool)
        mask[2:12, 1:13] = False
        assert (out[mask] == [10, 20, 30]).all()
