"""RandomHSV against Python's colorsys (float64, per pixel), given the drawn parameters:
within 2e-5 in [0, 1] units (float32 arithmetic), i.e. at most 1 grey level after rounding."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix
from pixelpipe.ops.hsv import hsv_to_rgb, rgb_to_hsv

SIZE = [pp.Resize((16, 16))]


def params_of(op: pp.Op, n: int, pos: int = 0):
    idx = np.arange(n)
    return op.sample(Draws(0, 0, idx, pos, prefix(0, 0, idx)), np.tile([16.0, 16.0], (n, 1)))


def colorsys_jitter(img: np.ndarray, hue: float, sat: float, val: float) -> np.ndarray:
    """HWC float in [0, 1] through colorsys: H + hue mod 1, S * sat and V * val clamped."""
    out = np.empty_like(img, dtype=np.float64)
    for i in range(img.shape[0]):
        for j in range(img.shape[1]):
            h, s, v = colorsys.rgb_to_hsv(*img[i, j].astype(np.float64))
            out[i, j] = colorsys.hsv_to_rgb((h + hue) % 1.0, min(max(s * sat, 0.0), 1.0), min(max(v * val, 0.0), 1.0))
    return out


def photos() -> list[np.ndarray]:
    imgs = [make_image(12, 14, seed=k) for k in range(5)]
    special = np.zeros((12, 14, 3), np.uint8)
    special[:4] = (255, 0, 0)
    special[4:8] = (90, 90, 90)  # grey: hue 0, saturation 0
    special[8:, :7] = (0, 255, 255)
    special[8:, 7:] = (255, 255, 254)
    return imgs + [special]


class TestRandomHSV:
    def test_contract(self):
        check_op(pp.RandomHSV(0.2, 0.5, 0.3, p=0.8), head=SIZE, p_zero=pp.RandomHSV(0.2, 0.5, 0.3, p=0.0))

    def test_matches_colorsys(self):
        imgs = photos()
        op = pp.RandomHSV(0.5, (0.3, 1.8), (0.5, 1.5), p=1.0)
        out = run([op], imgs)
        p = params_of(op, len(imgs))
        for k, img in enumerate(imgs):
            expect = colorsys_jitter(img / 255.0, p["hue"][k], p["saturation"][k], p["value"][k])
            np.testing.assert_allclose(out[k].permute(1, 2, 0).numpy(), expect, atol=2e-5, rtol=0)

    def test_conversion_round_trip_and_torchvision_hue_of_primaries(self):
        x = run(SIZE, varied_images(6))
        torch.testing.assert_close(hsv_to_rgb(rgb_to_hsv(x)), x, atol=2e-6, rtol=0)
        red = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)
        assert torch.allclose(rgb_to_hsv(red).flatten(), torch.tensor([0.0, 1.0, 1.0]))
        green = torch.tensor([0.0, 1.0, 0.0]).view(1, 3, 1, 1)
        assert abs(float(rgb_to_hsv(green)[0, 0]) - 1 / 3) < 1e-7

    def test_half_turn_differs_from_color_jitter_hue(self):
        """The two hues agree on grey and disagree on saturated colours: HSV keeps the largest
        channel (red -> cyan), YIQ keeps the grey level."""
        red = [np.full((4, 4, 3), (200, 30, 30), np.uint8)]
        hsv = run([pp.RandomHSV((0.5, 0.5), p=1.0)], red, dtype=torch.uint8)[0, :, 0, 0].tolist()
        assert hsv == [30, 200, 200]
        yiq = run([pp.ColorJitter(hue=(0.5, 0.5))], red, dtype=torch.uint8)[0, :, 0, 0].tolist()
        assert yiq != hsv

    def test_grey_output_is_left_alone(self):
        imgs = varied_images(4)
        assert torch.equal(run([*SIZE, pp.RandomHSV(0.3, p=1.0)], imgs, channels=1), run(SIZE, imgs, channels=1))

    @pytest.mark.parametrize(("kwargs", "name"), [({"hue": 0.7}, "hue"), ({"hue": (-0.6, 0)}, "hue"),
                                                  ({"saturation": -1}, "saturation"), ({"value": (2, 1)}, "value"),
                                                  ({"p": 2}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.RandomHSV(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_agrees_on_the_gpu():
    x = run(SIZE, varied_images(8))
    op = pp.RandomHSV(0.3, 0.5, 0.5, p=0.8)
    params = params_of(op, 8)
    draws = Draws(0, 0, np.arange(8), 0)
    torch.testing.assert_close(op.apply(x.cuda(), params, draws).cpu(), op.apply(x, params, draws), atol=2e-6, rtol=0)
