"""RandomCrop and RandomRotate90: geometric ops that move whole pixels, so their outputs are
compared exactly (0 grey levels apart) with torchvision's definitions written out here in numpy
(pad, then slice at the drawn corner; numpy's rot90), given the parameters the op drew."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, hwc, make_image, run, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

U8 = torch.uint8
NP_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "wrap": "wrap"}


def params_of(op: pp.Op, shapes, seed: int = 0, epoch: int = 0, pos: int = 0, indices=None):
    """op's parameters for images of the given (h, w) shapes, drawn as the planner draws them."""
    idx = np.arange(len(shapes)) if indices is None else np.asarray(indices)
    draws = Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))
    return op.sample(draws, np.array(shapes, dtype=np.float64))


def torchvision_random_crop(img: np.ndarray, size, padding, pad_if_needed, mode, fill, u_top, u_left):
    """torchvision v2 RandomCrop._get_params + F.pad + F.crop on an HWC array, with its two
    randint draws given as uniforms in [0, 1) (randint(0, m + 1) = floor(u * (m + 1)))."""
    h, w = img.shape[:2]
    left, top, right, bottom = padding if padding is not None else (0, 0, 0, 0)
    ph, pw = h + top + bottom, w + left + right
    if pad_if_needed:
        if ph < size[0]:
            d = size[0] - ph
            top, bottom, ph = top + d, bottom + d, ph + 2 * d
        if pw < size[1]:
            d = size[1] - pw
            left, right, pw = left + d, right + d, pw + 2 * d
    pads = ((top, bottom), (left, right))
    kw = lambda c: {"constant_values": fill[c]} if mode == "constant" else {}
    padded = np.stack([np.pad(img[..., c], pads, mode=NP_MODE[mode], **kw(c)) for c in range(3)], -1)
    y = int(np.floor(u_top * (ph - size[0] + 1)))
    x = int(np.floor(u_left * (pw - size[1] + 1)))
    return padded[y:y + size[0], x:x + size[1]]


class TestRandomCrop:
    def test_contract(self):
        check_op(pp.RandomCrop(12))

    def test_contract_padded(self):
        check_op(pp.RandomCrop((20, 24), padding=4, pad_if_needed=True, border="reflect"))

    @pytest.mark.parametrize(("size", "padding", "pad_if_needed", "mode"), [
        ((16, 16), None, False, "constant"),
        ((32, 32), 4, False, "constant"),
        ((30, 40), (2, 5), True, "reflect"),
        ((50, 20), (1, 2, 3, 4), True, "replicate"),
        ((24, 24), 3, False, "wrap"),
    ])
    def test_exactly_torchvision_given_the_draws(self, size, padding, pad_if_needed, mode):
        imgs = [make_image(h, w, seed=k) for k, (h, w) in enumerate([(24, 32), (40, 30), (33, 33), (26, 29)])]
        op = pp.RandomCrop(size, padding=padding, pad_if_needed=pad_if_needed, fill=(9, 99, 199), border=mode)
        try:
            out = run([op], imgs, dtype=U8, seed=3, epoch=1)
        except ValueError as e:  # a window larger than a padded image: torchvision raises too
            assert not pad_if_needed and "pad_if_needed" in str(e)
            return
        idx = np.arange(len(imgs))
        draws = Draws(3, 1, idx, 0, prefix(3, 1, idx))
        u_top, u_left = draws.uniform_np(0), draws.uniform_np(1)
        pad4 = None if padding is None else pp.RandomCrop(1, padding=padding).padding
        for k, img in enumerate(imgs):
            expect = torchvision_random_crop(img, size, pad4, pad_if_needed, mode, (9, 99, 199), u_top[k], u_left[k])
            np.testing.assert_array_equal(hwc(out[k]), expect)

    def test_corners_cover_every_position(self):
        p = params_of(pp.RandomCrop(8), [(12, 10)] * 4000)
        x, y = -p["dx"], -p["dy"]
        assert set(np.unique(x)) == {0, 1, 2} and set(np.unique(y)) == {0, 1, 2, 3, 4}
        counts = np.bincount(y.astype(int))
        assert counts.min() > 700, counts  # 800 expected each

    def test_boxes_move_with_the_window(self):
        img = make_image(30, 40)
        op = pp.RandomCrop(20, padding=5)
        out = pp.Compose([op])([img], boxes=[[[10.0, 12.0, 30.0, 20.0]]], seed=1)
        p = params_of(op, [(30, 40)], seed=1)
        expect = np.clip(np.array([10, 12, 30, 20]) + [p["dx"][0], p["dy"][0]] * 2, 0, 20)
        np.testing.assert_allclose(out["boxes"][0][0].numpy(), expect, atol=1e-4)

    def test_too_small_names_the_sample_and_the_fix(self):
        with pytest.raises(ValueError, match=r"sample 1 .*pad_if_needed=True"):
            run([pp.RandomCrop(20)], [make_image(30, 30), make_image(10, 30)])
        assert run([pp.RandomCrop(20, pad_if_needed=True)], [make_image(10, 30)]).shape == (1, 3, 20, 20)

    def test_no_padding_leaves_the_stage_border_alone(self):
        """Without padding the window never leaves the image: the op must not fix the stage's
        border, so it folds with a rotation that asks for reflection."""
        t = pp.Compose([pp.RandomRotate(10, border="reflect"), pp.RandomCrop(8)])
        assert len(t.stages) == 1 and t.stages[0].border == "reflect"
        t = pp.Compose([pp.RandomRotate(10, border="reflect"), pp.RandomCrop(8, padding=2)])
        assert len(t.stages) == 2

    def test_eval_form_is_the_centred_window(self):
        img = make_image(31, 40)
        t = pp.Compose([pp.RandomCrop(20, padding=4)]).eval()
        out = t([img])
        padded = np.pad(img, ((4, 4), (4, 4), (0, 0)))
        top, left = round((39 - 20) / 2), round((48 - 20) / 2)
        np.testing.assert_array_equal((hwc(out[0]) * 255).round(), padded[top:top + 20, left:left + 20])

    @pytest.mark.parametrize(("kwargs", "name"), [
        ({"size": 0}, "size"), ({"size": 8, "padding": -1}, "padding"), ({"size": 8, "padding": (1, 2, 3)}, "padding"),
        ({"size": 8, "border": "symmetric"}, "border"), ({"size": 8, "fill": 300}, "fill"),
    ])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.RandomCrop(**kwargs)


class TestRandomRotate90:
    def test_contract(self):
        check_op(pp.RandomRotate90(0.8), tail=[pp.Resize((12, 12))], p_zero=pp.RandomRotate90(0.0))

    @pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic"])
    def test_exactly_numpy_rot90_on_squares(self, interpolation):
        imgs = [make_image(17, 17, seed=k) for k in range(20)]
        out = run([pp.RandomRotate90(1.0)], imgs, dtype=U8)
        if interpolation != "bilinear":  # the same through a stage of another filter
            out2 = run([pp.RandomRotate90(1.0), pp.Warp(lambda s, d: torch.eye(3, dtype=torch.float64).repeat(len(s), 1, 1),
                                                        interpolation=interpolation)], imgs, dtype=U8)
            assert torch.equal(out, out2)
        k = params_of(pp.RandomRotate90(1.0), [(17, 17)] * 20)["k"]
        assert set(k.tolist()) == {0, 1, 2, 3}
        for i, img in enumerate(imgs):
            np.testing.assert_array_equal(hwc(out[i]), np.rot90(img, k[i]))

    def test_odd_turns_swap_the_size(self):
        img = make_image(10, 16)
        op = pp.RandomRotate90(1.0)
        k = params_of(op, [(10, 16)] * 40)["k"]
        for i in range(8):
            out = run([op], [img], dtype=U8, indices=[i])
            np.testing.assert_array_equal(hwc(out[0]), np.rot90(img, k[i]))

    def test_mixed_sizes_need_a_fixed_size_op(self):
        imgs = [make_image(10, 16)] * 8
        with pytest.raises(ValueError, match="different sizes"):
            run([pp.RandomRotate90(1.0)], imgs)
        assert run([pp.RandomRotate90(1.0), pp.Resize((12, 12))], imgs).shape == (8, 3, 12, 12)

    def test_keypoints_turn_with_the_pixels(self):
        img = make_image(20, 20)
        op = pp.RandomRotate90(1.0)
        kp = [[[3.5, 7.5]]]  # the centre of pixel (row 7, column 3)
        for i in range(6):
            out = pp.Compose([op], dtype=U8)([img], keypoints=kp, indices=[i])
            x, y = out["keypoints"][0][0, :2].tolist()
            r, c = int(y - 0.5), int(x - 0.5)
            np.testing.assert_array_equal(hwc(out["image"][0])[r, c], img[7, 3])

    def test_turns_are_uniform_and_p_is_the_rate(self):
        k = params_of(pp.RandomRotate90(1.0), [(8, 8)] * 8000)["k"]
        counts = np.bincount(k, minlength=4)
        chi2 = ((counts - 2000) ** 2 / 2000).sum()
        assert chi2 < 16.3, counts  # 3 degrees of freedom, p = 0.001
        on = params_of(pp.RandomRotate90(0.3), [(8, 8)] * 8000)["k"] != 0
        assert abs(on.mean() - 0.3 * 0.75) < 0.02

    def test_bad_p(self):
        with pytest.raises(ValueError, match="p"):
            pp.RandomRotate90(1.5)


def test_random_crop_of_varied_images_keeps_values():
    """Every output pixel of an unpadded crop is an input pixel (whole-pixel translation)."""
    imgs = [img for img in varied_images(10, 20, 30) if img.shape[2] == 3]
    out = run([pp.RandomCrop(16)], imgs, dtype=U8)
    for o, img in zip(out, imgs):
        a = hwc(o)
        found = any(np.array_equal(a, img.numpy()[y:y + 16, x:x + 16])
                    for y in range(img.shape[0] - 15) for x in range(img.shape[1] - 15))
        assert found


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_whole_pixel_ops_are_exact_on_the_gpu():
    """Whole-pixel moves read one source pixel per output pixel: the GPU warp gives the CPU's
    bytes exactly."""
    imgs = [torch.from_numpy(make_image(24, 24, seed=k)) for k in range(16)]
    t = pp.Compose([pp.RandomCrop(20, padding=3, border="reflect"), pp.RandomRotate90(0.9)], dtype=U8)
    cpu = t(imgs, seed=2)
    gpu = t(pp.ImageBatch.from_list(imgs).to("cuda"), seed=2)
    assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)
