"""Targets drawn by show: outlines, mask overlays and keypoint dots where the targets are, and
moved with the pixels in the augmented columns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe.tools.show_targets import MASK_ALPHA, draw_targets, palette

H, W = 60, 80


def scene():
    img = np.full((H, W, 3), 40, np.uint8)
    mask = np.zeros((H, W), np.uint8)
    mask[10:30, 5:25] = 1
    return img, mask, np.array([[5.0, 10.0, 25.0, 30.0]]), np.array([[[50.0, 40.0, 2.0], [70.0, 45.0, 0.0]]])


def test_draw_targets_puts_each_target_where_it_is():
    img, mask, boxes, kp = scene()
    out = draw_targets(img, tile=80, boxes=boxes, labels=[3], masks=mask, keypoints=kp)
    assert out.shape == img.shape and np.array_equal(img, scene()[0])  # the input is untouched
    assert tuple(out[10, 15]) == palette(3)  # the box's top edge, in its label's colour
    assert tuple(out[29, 5]) == palette(3)  # bottom-left corner (x1, y1 exclusive)
    inside = np.round(40 * (1 - MASK_ALPHA) + np.array(palette(1)) * MASK_ALPHA)
    np.testing.assert_array_equal(out[20, 15], inside)  # the mask's overlay
    assert tuple(out[45, 40]) == (40, 40, 40)  # away from every target
    assert tuple(out[40, 50]) != (40, 40, 40)  # a visible keypoint
    assert tuple(out[45, 70]) == (40, 40, 40)  # an invisible one is not drawn


def test_channel_masks_and_bad_sizes():
    img, mask, _, _ = scene()
    channels = np.stack([mask, np.zeros_like(mask)])  # [C, H, W]: channel 0 is label 1
    np.testing.assert_array_equal(draw_targets(img, 80, masks=channels), draw_targets(img, 80, masks=mask))
    with pytest.raises(ValueError, match="the mask is"):
        draw_targets(img, 80, masks=mask[:10])


def test_show_moves_the_targets_with_the_pixels():
    img, mask, boxes, kp = scene()
    t = pp.Compose([pp.RandomFlip(horizontal=1.0)], dtype=torch.uint8)
    kw = dict(columns=1, tile=W, quiet=True)
    plain = np.asarray(pp.show([img], t, **kw))
    drawn = np.asarray(pp.show([img], t, boxes=[boxes], box_labels=[[3]], masks=[mask], keypoints=[kp], **kw))
    assert plain.shape == drawn.shape and not np.array_equal(plain, drawn)
    # the grid: a titles row, then the original tile and the flipped one, each W x W with the
    # H x W image centred vertically
    from pixelpipe.tools.show import GAP, HEADER

    top = HEADER + (W - H) // 2
    original = drawn[top:top + H, GAP:GAP + W]
    flipped = drawn[top:top + H, 2 * GAP + W:2 * GAP + 2 * W]
    assert tuple(original[10, 15]) == palette(3)
    assert tuple(flipped[10, W - 1 - 15]) == palette(3)  # the box went with the flip
    assert tuple(flipped[10, 15]) != palette(3)
    assert np.array_equal(drawn, np.asarray(pp.show([img], t, boxes=[boxes], box_labels=[[3]], masks=[mask],
                                                    keypoints=[kp], **kw)))  # reproducible


def test_show_draws_a_pipeline_batch_dict_and_checks_counts():
    img, mask, boxes, _ = scene()
    out = pp.Compose([pp.Resize((H, W))], dtype=torch.uint8)([img], boxes=[boxes], masks=[mask])
    grid = np.asarray(pp.show(out, columns=0, tile=W))
    assert (grid == np.array(palette(0), np.uint8)).all(-1).any()  # the box, in box 0's colour
    with pytest.raises(ValueError, match="boxes must have one entry per image"):
        pp.show([img, img], boxes=[boxes], columns=1, tile=W)
