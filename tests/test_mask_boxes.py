"""Compose(boxes_from_masks=True): each moved box is the box of its instance's warped mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe.data.errors import SampleError

CUDA = torch.cuda.is_available()


def disc(size: int, cx: float, cy: float, r: float) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    return (((xx + 0.5 - cx) ** 2 + (yy + 0.5 - cy) ** 2) <= r * r).astype(np.uint8)


def extent(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]


def scene(size: int = 96) -> tuple[np.ndarray, np.ndarray, list[list[float]]]:
    """An image with two discs, their masks as channels [H, W, 2] and their boxes."""
    a, b = disc(size, 30, 34, 14), disc(size, 64, 60, 10)
    image = np.repeat(((a | b) * 255)[:, :, None], 3, axis=2).astype(np.uint8)
    return image, np.stack([a, b], -1), [extent(a), extent(b)]


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if CUDA else []))
def test_rotated_discs_keep_tight_boxes(device: str) -> None:
    """Turned by 45 degrees, the corner rule's box of a disc grows by about sqrt(2); the mask's
    box stays the warped mask's extent exactly, while the default keeps the corner rule."""
    image, masks, boxes = scene()
    ops = [pp.RandomRotate((45, 45))]
    images = [torch.from_numpy(image).to(device)]
    corner = pp.Compose(ops)(images, boxes=[boxes], masks=[torch.from_numpy(masks).to(device)])
    tight = pp.Compose(ops, boxes_from_masks=True)(images, boxes=[boxes], masks=[torch.from_numpy(masks).to(device)])
    warped = tight["masks"][0].cpu().numpy()  # [2, H, W]
    for k in range(2):
        want = extent(warped[k])
        assert tight["boxes"][0][k].tolist() == want
        wide = corner["boxes"][0][k]
        width = float(wide[2] - wide[0])
        assert width > 1.3 * (want[2] - want[0])  # the corner rule's box is the larger one
    assert torch.equal(tight["image"], corner["image"])  # the pixels are the same either way


def test_instance_map_gives_the_same_boxes_as_channels() -> None:
    image, masks, boxes = scene()
    instance_map = (masks[..., 0] * 1 + masks[..., 1] * 2).astype(np.uint8)  # disjoint discs: labels 1 and 2
    t = pp.Compose([pp.RandomAffine(30, scale=(0.8, 1.2), shear=10)], boxes_from_masks=True)
    for seed in range(5):
        by_channels = t([image], seed=seed, boxes=[boxes], masks=[masks])
        by_map = t([image], seed=seed, boxes=[boxes], masks=[instance_map])
        torch.testing.assert_close(by_channels["boxes"][0], by_map["boxes"][0], rtol=0, atol=0)


def test_an_object_that_left_the_image_is_dropped() -> None:
    """Translated out of view, the disc's mask is empty: its box has visibility 0 and a
    SanitizeBoxes with any min_visibility drops it (with its label); the other stays."""
    image, masks, boxes = scene()
    shift = pp.RandomAffine(0, translate=(0.6, 0.0))
    t = pp.Compose([shift, pp.SanitizeBoxes(min_visibility=0.01)], boxes_from_masks=True)
    for seed in range(40):
        out = t([image], seed=seed, boxes=[boxes], masks=[masks], labels=[[1, 2]])
        warped = out["masks"][0].numpy()
        visible = [k for k in range(2) if warped[k].any()]
        assert out["labels"][0].tolist() == [k + 1 for k in visible]
        assert out["boxes"][0].tolist() == [extent(warped[k]) for k in visible]


def test_wrong_mask_channels_name_the_sample() -> None:
    image, masks, boxes = scene()
    t = pp.Compose([pp.RandomFlip(1.0)], boxes_from_masks=True)
    with pytest.raises(SampleError, match="3 boxes and 2 mask channels") as e:
        t([image, image], boxes=[boxes, boxes + [[1.0, 1.0, 5.0, 5.0]]], masks=[masks, masks])
    assert e.value.failures[0][0] == 1


def test_without_masks_or_boxes_nothing_changes() -> None:
    image, masks, boxes = scene()
    on = pp.Compose([pp.RandomRotate(20)], boxes_from_masks=True)
    off = pp.Compose([pp.RandomRotate(20)])
    torch.testing.assert_close(on([image], seed=2, boxes=[boxes])["boxes"][0], off([image], seed=2, boxes=[boxes])["boxes"][0])
    assert on.like(on.ops).targets.boxes_from_masks
