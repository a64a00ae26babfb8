"""Targets move with their images: boxes, keypoints and masks through every geometric op, on the
CPU and the GPU, from a Compose call and from a Pipeline.

The object is a white rectangle on black. Its box is the rectangle; after any op, the box of the
output's white pixels (threshold 0.5) must lie inside the moved box, and the moved box must hug
it: a rectangle's corners are its extremes under any affine or perspective map, so the enclosing
box of the moved corners is tight, up to the resampled edge (1 px; 2 px for perspective and
shrinking rotations, whose antialiased edges spread). Its mask is the rectangle as labels: warped
by nearest neighbour with the image's matrices, it equals the thresholded image when the image is
warped by nearest too (identical; the edge pixels may differ only where a source point falls
within rounding of a pixel boundary, which these sizes avoid).
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
from PIL import Image

import pixelpipe as pp
from pixelpipe import SampleError

H, W = 60, 80
RECT = (20, 15, 50, 40)  # x0, y0, x1, y1: pixels 20..49 x 15..39
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


def scene(n: int = 6) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """n images (white rectangle on black), their masks (label 3 inside) and boxes."""
    img = np.zeros((H, W, 3), np.uint8)
    x0, y0, x1, y1 = RECT
    img[y0:y1, x0:x1] = 255
    mask = np.zeros((H, W), np.int64)
    mask[y0:y1, x0:x1] = 3
    return [img] * n, [mask] * n, [np.array([RECT], np.float64)] * n


def white_box(image: torch.Tensor) -> tuple[float, float, float, float] | None:
    """(x0, y0, x1, y1) of the pixels above half in channel 0 of one CHW float image."""
    ys, xs = torch.nonzero(image[0] > 0.5, as_tuple=True)
    if len(ys) == 0:
        return None
    return float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1


GEOMETRY = [
    ("flip", [pp.RandomFlip(0.5, 0.5)], 1.0),
    ("rotate", [pp.RandomRotate(30)], 1.5),
    ("rotate-expand", [pp.RandomRotate(30, expand=True), pp.Resize((70, 90))], 2.0),
    ("affine", [pp.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10)], 2.0),
    ("perspective", [pp.RandomPerspective(0.3, p=1.0)], 2.0),
    ("resized-crop", [pp.RandomResizedCrop((48, 64), scale=(0.5, 1.0))], 1.0),
    ("crop", [pp.Crop((40, 50), anchor=(0.2, 0.3))], 1.0),
    ("center-crop", [pp.CenterCrop(0.8)], 1.0),
    ("pad", [pp.Pad((3, 5, 7, 9)), pp.Resize((50, 70))], 1.0),
    ("resize", [pp.Resize((45, 100))], 1.0),
    ("warp", [pp.Warp(lambda sizes, draws: torch.tensor([[1.0, 0.2, 3.0], [0.1, 0.9, -2.0], [0.0, 0.0, 1.0]],
                                                         dtype=torch.float64).repeat(len(sizes), 1, 1))], 1.5),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, ops, slack", GEOMETRY, ids=[g[0] for g in GEOMETRY])
def test_boxes_enclose_the_moved_object(name, ops, slack, device):
    images, _, boxes = scene()
    out = pp.Compose(ops)(images, seed=4, boxes=boxes, device=device)
    assert out["image"].device.type == device and out["boxes"][0].device.type == device
    for i in range(len(images)):
        box = out["boxes"][i].cpu()
        assert box.shape == (1, 4) and box.dtype == torch.float32
        seen = white_box(out["image"][i].cpu())
        if seen is None:  # moved out of the picture: the box is clipped to nothing
            assert float((box[0, 2] - box[0, 0]) * (box[0, 3] - box[0, 1])) < 2.0
            continue
        bx0, by0, bx1, by1 = box[0].tolist()
        sx0, sy0, sx1, sy1 = seen
        assert bx0 - 1 <= sx0 and by0 - 1 <= sy0 and sx1 <= bx1 + 1 and sy1 <= by1 + 1, (name, box, seen)
        assert sx0 - slack <= bx0 and sy0 - slack <= by0 and bx1 <= sx1 + slack and by1 <= sy1 + slack, (name, box, seen)


def _nearest(ops: list[pp.Op]) -> list[pp.Op]:
    """The same geometry resampled by nearest neighbour (a first op that sets the stage's filter)."""
    return [pp.Resize((H, W), interpolation="nearest"), *ops]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, ops, slack", GEOMETRY, ids=[g[0] for g in GEOMETRY])
def test_masks_follow_their_image_pixel_for_pixel(name, ops, slack, device):
    images, masks, _ = scene()
    out = pp.Compose(_nearest(ops), dtype=torch.uint8)(images, seed=9, masks=masks, device=device)
    m = out["masks"]
    assert m.dtype == torch.int64 and m.shape == out["image"].shape[:1] + out["image"].shape[2:]
    assert set(torch.unique(m).tolist()) <= {0, 3}
    assert torch.equal(m == 3, out["image"][:, 0] > 127), name


@pytest.mark.parametrize("border, fill", [("constant", 255), ("reflect", 0), ("replicate", 0), ("wrap", 0)])
def test_masks_take_the_border_rule_and_the_fill(border, fill):
    """Beyond a constant border the mask reads mask_fill (an ignore index); the other rules read
    the mask the way the image reads its pixels."""
    images, masks, _ = scene(4)
    images = [np.where(mk[..., None] == 3, 200, 50).astype(np.uint8) for mk in masks]
    ops = [pp.RandomRotate(40, border=border, interpolation="nearest")]
    out = pp.Compose(ops, dtype=torch.uint8, mask_fill=fill)(images, seed=2, masks=masks)
    m, img = out["masks"], out["image"][:, 0]
    assert torch.equal(m == 3, img == 200)
    if border == "constant":
        assert torch.equal(m == 255, img == 0) and bool((m == 255).any())


def test_mask_dtypes_and_channels():
    images, masks, _ = scene(3)
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.bool):
        ms = [torch.from_numpy(mk).to(dtype) for mk in masks]
        out = pp.Compose([pp.RandomFlip(1.0)])(images, masks=ms)
        assert out["masks"].dtype == dtype and out["masks"].shape == (3, H, W)
        assert torch.equal(out["masks"], torch.stack(ms).flip(-1))
    stacked = [np.stack([mk, 7 - mk], -1).astype(np.uint8) for mk in masks]  # [H, W, 2]
    nchw = pp.Compose([pp.RandomFlip(1.0)])(images, masks=stacked)["masks"]
    nhwc = pp.Compose([pp.RandomFlip(1.0)], layout="NHWC")(images, masks=stacked)["masks"]
    assert nchw.shape == (3, 2, H, W) and nhwc.shape == (3, H, W, 2)
    assert torch.equal(nchw.permute(0, 2, 3, 1), nhwc)
    assert torch.equal(nchw[:, 1], 7 - nchw[:, 0])


def test_keypoints_move_and_leave():
    images, _, _ = scene(2)
    pts = [np.array([[20.0, 15.0], [79.5, 59.5]]), np.array([[10.0, 10.0, 0.0]])]
    out = pp.Compose([pp.RandomFlip(1.0), pp.Crop((30, 70), anchor=(0, 0))])(images, keypoints=pts)
    k0, k1 = out["keypoints"]
    assert k0.tolist() == [[60.0, 15.0, 1.0], [0.5, 59.5, 0.0]]  # flipped; the second left the 30x70 crop
    assert k1.tolist() == [[70.0, 10.0, 0.0]]  # not labelled (visibility 0) stays 0, and it left too


def test_targets_through_several_stages_and_a_pixel_op():
    """Two stages (a border conflict) and a pixel op between: the boxes follow both warps."""
    images, masks, boxes = scene(4)
    ops = [pp.RandomRotate(20, border="reflect"), pp.GaussianNoise(0.0, 0.01), pp.Pad(4), pp.Resize((50, 60))]
    c = pp.Compose(ops)
    assert len(c.stages) == 2
    out = c(images, seed=1, boxes=boxes, masks=masks)
    assert out["masks"].shape == (4, 50, 60) and len(out["boxes"]) == 4
    for i in range(4):
        seen = white_box(out["image"][i])
        bx0, by0, bx1, by1 = out["boxes"][i][0].tolist()
        assert bx0 - 1 <= seen[0] and by0 - 1 <= seen[1] and seen[2] <= bx1 + 1 and seen[3] <= by1 + 1


def test_encoded_images_and_empty_box_lists():
    """PNG bytes (decoded by region, at a DCT scale for JPEGs) take their targets along; an image
    with no boxes stays valid; other values pass through."""
    images, masks, boxes = scene(3)
    blobs = []
    for im in images:
        buf = io.BytesIO()
        Image.fromarray(im).save(buf, "PNG")
        blobs.append(buf.getvalue())
    out = pp.Compose([pp.Resize((30, 40), interpolation="nearest")], dtype=torch.uint8)(
        blobs, boxes=[boxes[0], [], None], masks=masks, ids=[1, 2, 3])
    assert out["ids"] == [1, 2, 3]
    assert out["boxes"][0].tolist() == [[10.0, 7.5, 25.0, 20.0]]
    assert out["boxes"][1].shape == (0, 4) and out["boxes"][2].shape == (0, 4)
    assert torch.equal(out["masks"] == 3, out["image"][:, 0] > 127)


@pytest.mark.parametrize("kwargs, message", [
    ({"boxes": [[[5, 5, 1, 9]], []]}, "sample 0: boxes: .* x1 < x0"),
    ({"boxes": [[[0, 0, 1, float("nan")]], []]}, "sample 0: boxes: non-finite"),
    ({"boxes": [[], [[1, 2, 3]]]}, r"sample 1: boxes: expected shape \[K, 4\]"),
    ({"keypoints": [[[1, 2, 3, 4]], []]}, r"sample 0: keypoints: expected shape \[K, 2 or 3\]"),
    ({"masks": [np.zeros((H, W), np.int64), np.zeros((H, W - 1), np.int64)]}, "sample 1: masks: .* not the size"),
    ({"masks": [np.zeros((H, W), np.float32)] * 2}, "sample 0: masks: .* integer or bool"),
    ({"masks": [np.zeros((H, W), np.int64), np.zeros((H, W), np.int32)]}, "sample 1: masks: dtype"),
    ({"boxes": [[[1, 2, 3, 4]]]}, "boxes: 1 entries for 2 images"),
])
def test_bad_targets_name_the_sample(kwargs, message):
    images, _, _ = scene(2)
    with pytest.raises(ValueError, match=message):
        pp.Compose([pp.RandomFlip()])(images, **kwargs)


def test_the_same_sample_moves_the_same_in_any_batch():
    images, masks, boxes = scene(6)
    ops = pp.Compose([pp.RandomAffine(25, scale=(0.7, 1.3)), pp.Resize((40, 50))])
    whole = ops(images, seed=3, boxes=boxes, masks=masks)
    part = ops(images[4:], seed=3, indices=[4, 5], boxes=boxes[4:], masks=masks[4:])
    assert torch.equal(whole["boxes"][5], part["boxes"][1]) and torch.equal(whole["masks"][4:], part["masks"])


def _dict_samples(n: int) -> list[dict]:
    images, masks, boxes = scene(n)
    return [{"image": images[i], "label": i % 3, "boxes": boxes[i], "masks": masks[i], "id": f"s{i}"}
            for i in range(n)]


@pytest.mark.parametrize("cache", [None, "device"])
def test_a_pipeline_yields_what_its_reader_gives(cache):
    """Dict samples through a Pipeline: boxes, masks and other values in every batch, the same
    as a Compose call on those samples, cached epochs included."""
    samples = _dict_samples(7)
    ops = [pp.RandomRotate(15), pp.Resize((30, 40))]
    compose = pp.Compose(ops)
    with pp.Pipeline(samples, compose, 3, seed=5, cache=cache, num_threads=2) as pipe:
        for epoch in range(2):
            for batch in pipe:
                idx = batch["index"].tolist()
                assert batch["id"] == [f"s{i}" for i in idx] and len(batch["boxes"]) == 3
                want = compose([samples[i]["image"] for i in idx], seed=5, epoch=epoch, indices=idx,
                               boxes=[samples[i]["boxes"] for i in idx], masks=[samples[i]["masks"] for i in idx])
                assert torch.equal(batch["masks"], want["masks"])
                assert all(torch.equal(a, b) for a, b in zip(batch["boxes"], want["boxes"]))


def test_a_pipeline_applies_its_policy_to_a_bad_target():
    samples = _dict_samples(6)
    samples[2]["boxes"] = np.array([[9.0, 9.0, 1.0, 1.0]])
    with pp.Pipeline(samples, [pp.Resize((20, 20))], 3, shuffle=False, on_error="skip") as pipe:
        seen = [i for b in pipe for i, v in zip(b["index"].tolist(), b["valid"].tolist()) if v]
    assert 2 not in seen and [e[0] for e in pipe.errors] == [2] and "x1 < x0" in pipe.errors[0][2]
    with pp.Pipeline(samples, [pp.Resize((20, 20))], 3, shuffle=False) as pipe, pytest.raises(SampleError):
        list(pipe)


def test_cache_max_side_refuses_samples_with_targets():
    with pp.Pipeline(_dict_samples(4), [pp.Resize((20, 20))], 2, cache="device", cache_max_side=30) as pipe:
        with pytest.raises(ValueError, match="cache_max_side"):
            list(pipe)


def test_targets_of_reader_dicts_fast_and_slow_paths_agree():
    """The batch's targets from its samples' dicts: every sample a dict of numpy arrays (joined
    in one call each), the same values with a sample without targets (None), as a mapping
    that is not a dict, and as lists: the same rows, counts and labels."""
    from collections import UserDict

    from pixelpipe.data.targets import targets_of

    rng = np.random.default_rng(3)
    dicts = [{"boxes": rng.uniform(0, 50, (k, 4)).astype(np.float32) + [0, 0, 50, 50],
              "labels": rng.integers(0, 9, k)} for k in (3, 0, 5, 1)]
    dicts[1] = {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)}
    quick = targets_of(dicts)
    variants = [[UserDict(d) for d in dicts],
                [{"boxes": d["boxes"].tolist(), "labels": d["labels"].tolist()} for d in dicts],
                [*dicts[:1], None, *dicts[2:]]]
    for other in variants:
        slow = targets_of(other)
        assert np.array_equal(quick.boxes.data, slow.boxes.data)
        assert np.array_equal(quick.boxes.counts, slow.boxes.counts) and quick.boxes.counts.tolist() == [3, 0, 5, 1]
        assert np.array_equal(quick.boxes.labels, slow.boxes.labels) and quick.boxes.labels.dtype == np.int64
    assert targets_of([None, None]) is None and targets_of([{}, {"boxes": None}]) is None


@pytest.mark.parametrize("labels, message", [
    ([np.array([1, 2]), np.array([3.5])], "sample 1: labels: class ids must be integers"),
    ([np.array([1, 2]), np.array([[3]])], "sample 1: labels: (1, 1) for 1 boxes"),
    ([np.array([1]), np.array([3])], "sample 0: labels: (1,) for 2 boxes"),
])
def test_label_arrays_that_do_not_fit_are_named(labels, message):
    """Per-sample label arrays that the one-join path cannot take (a float class id, a 2-D
    array, a count that is not the boxes') go through the per-sample checks, which name the
    sample."""
    from pixelpipe.data.targets import targets_of

    boxes = [np.array([[0, 0, 5, 5], [1, 1, 4, 4]], np.float32), np.array([[2, 2, 3, 3]], np.float32)]
    with pytest.raises(SampleError, match=re.escape(message)):
        targets_of([{"boxes": b, "labels": lab} for b, lab in zip(boxes, labels)])
