"""FiveCrop and TenCrop against torchvision's five_crop / ten_crop written out in numpy
(slices at the corners and at round((H - h) / 2)): exact on uint8 images."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_image

import pixelpipe as pp
from pixelpipe.eval import FiveCrop, TenCrop


def torchvision_five(img: np.ndarray, h: int, w: int) -> list[np.ndarray]:
    H, W = img.shape[:2]
    top, left = int(round((H - h) / 2)), int(round((W - w) / 2))
    return [img[:h, :w], img[:h, W - w:], img[H - h:, :w], img[H - h:, W - w:], img[top:top + h, left:left + w]]


@pytest.mark.parametrize("shape", [(30, 40), (31, 27), (20, 20)])
def test_five_crop_is_torchvision(shape):
    imgs = [make_image(*shape, seed=k) for k in range(3)]
    out = FiveCrop((12, 16), dtype=torch.uint8, layout="NHWC")(imgs)
    assert out.shape == (3, 5, 12, 16, 3)
    for k, img in enumerate(imgs):
        for v, expect in enumerate(torchvision_five(img, 12, 16)):
            np.testing.assert_array_equal(out[k, v].numpy(), expect)


@pytest.mark.parametrize("vertical", [False, True])
def test_ten_crop_is_torchvision(vertical):
    img = make_image(25, 33)
    out = TenCrop(10, vertical_flip=vertical, dtype=torch.uint8, layout="NHWC")([img])
    flipped = img[::-1] if vertical else img[:, ::-1]
    expect = torchvision_five(img, 10, 10) + torchvision_five(flipped, 10, 10)
    assert out.shape == (1, 10, 10, 10, 3)
    for v, e in enumerate(expect):
        np.testing.assert_array_equal(out[0, v].numpy(), e)


def test_before_and_after_fold_into_each_view():
    imgs = [make_image(50, 70, seed=k) for k in range(4)]
    norm = pp.Normalize([0.5] * 3, [0.25] * 3)
    five = FiveCrop(24, before=[pp.Resize(32)], after=[norm])
    out = five(imgs)
    assert out.shape == (4, 5, 3, 24, 24) and out.dtype == torch.float32
    assert len(five) == 5 and all(len(v.stages) == 1 for v in five.views)
    centre = pp.Compose([pp.Resize(32), pp.CenterCrop(24), norm])(imgs)
    assert torch.equal(out[:, 4], centre)
