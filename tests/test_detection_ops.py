"""The detection ops: RandomIoUCrop, RandomZoomOut, ScaleJitter, RandomShortestSize, LetterBox.

Each is compared with its definition in torchvision v2 (or ultralytics' LetterBox), written out
here in plain Python from the same random numbers (pixelpipe's draws replace torch's generator):
the same parameters give the same window and the same boxes within 0.5 px (they agree to float
rounding). Then the contract of every op (check_op), and the white rectangle of test_targets:
its box encloses the output's white pixels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.data.targets import Targets

RNG = np.random.default_rng(0)
SIZES = [(int(h), int(w)) for h, w in RNG.integers(40, 160, size=(24, 2))]


def random_boxes(h: int, w: int, k: int) -> np.ndarray:
    xy = RNG.uniform(0, 1, size=(k, 2)) * [w - 4, h - 4]
    wh = RNG.uniform(0.1, 0.6, size=(k, 2)) * [w, h]
    return np.concatenate([xy, np.minimum(xy + np.maximum(wh, 2), [w, h])], 1)


def box_iou(boxes: np.ndarray, crop: list[float]) -> np.ndarray:
    l, t, r, b = crop
    iw = np.clip(np.minimum(boxes[:, 2], r) - np.maximum(boxes[:, 0], l), 0, None)
    ih = np.clip(np.minimum(boxes[:, 3], b) - np.maximum(boxes[:, 1], t), 0, None)
    inter = iw * ih
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / (area + (r - l) * (b - t) - inter)


def torchvision_iou_crop(op: pp.RandomIoUCrop, u: np.ndarray, h: int, w: int, boxes: np.ndarray):
    """torchvision.transforms.v2.RandomIoUCrop.make_params, line for line, with u (one sample's
    uniforms, in the op's draw order) for torch.rand; None: no crop."""
    per = 1 + 4 * op.trials
    for rnd in range(op.rounds):  # torchvision: `while True`
        base = rnd * per
        idx = min(int(u[base] * len(op.sampler_options)), len(op.sampler_options) - 1)  # torch.randint
        min_jaccard_overlap = op.sampler_options[idx]
        if min_jaccard_overlap >= 1.0:
            return None
        for trial in range(op.trials):
            q = u[base + 1 + 4 * trial : base + 5 + 4 * trial]
            r = op.min_scale + (op.max_scale - op.min_scale) * q[:2]
            new_w, new_h = int(w * r[0]), int(h * r[1])
            if new_h == 0:
                continue
            aspect_ratio = new_w / new_h
            if not (op.min_aspect_ratio <= aspect_ratio <= op.max_aspect_ratio):
                continue
            left, top = int((w - new_w) * q[2]), int((h - new_h) * q[3])
            right, bottom = left + new_w, top + new_h
            if left == right or top == bottom:
                continue
            cx, cy = 0.5 * (boxes[:, 0] + boxes[:, 2]), 0.5 * (boxes[:, 1] + boxes[:, 3])
            within = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
            if not within.any():
                continue
            if box_iou(boxes[within], [left, top, right, bottom]).max() < min_jaccard_overlap:
                continue
            return top, left, new_h, new_w, within
    return None


def run_boxes(ops, images, boxes, **kw):
    return pp.Compose(ops)(images, boxes=boxes, **kw)["boxes"]


@pytest.mark.parametrize("op", [pp.RandomIoUCrop(), pp.RandomIoUCrop(0.5, 0.9, 0.7, 1.5, [0.1, 0.5], trials=8, rounds=3)])
def test_iou_crop_is_torchvisions(op):
    images = [np.zeros((h, w, 3), np.uint8) for h, w in SIZES]
    boxes = [random_boxes(h, w, int(RNG.integers(0, 5))) for h, w in SIZES]
    out = run_boxes([op, pp.Resize((50, 50))], images, boxes, seed=7, epoch=1)
    draws = Draws(7, 1, np.arange(len(SIZES)), 0)
    u = draws.uniforms_np(range(op.rounds * (1 + 4 * op.trials))).astype(np.float64)
    crops = 0
    for i, (h, w) in enumerate(SIZES):
        tv = torchvision_iou_crop(op, u[i], h, w, boxes[i])
        top, left, ch, cw, within = (0, 0, h, w, np.ones(len(boxes[i]), bool)) if tv is None else tv
        crops += tv is not None
        # torchvision's F.crop of boxes: shift, clamp to the crop; then the resize to 50x50
        want = np.clip(boxes[i] - [left, top, left, top], 0, [cw, ch, cw, ch]) * ([50 / cw, 50 / ch] * 2)
        np.testing.assert_allclose(out[i].numpy()[within], want[within], atol=0.5)
    assert crops >= len(SIZES) // 4  # the comparison saw crops, not only whole images


def test_iou_crop_sees_the_boxes_as_earlier_ops_moved_them():
    """In one stage after a RandomZoomOut, RandomIoUCrop draws against the zoomed boxes: its
    window is what its sample() gives for the boxes moved by the zoom."""
    zoom, crop = pp.RandomZoomOut(p=1.0), pp.RandomIoUCrop()
    images = [np.zeros((h, w, 3), np.uint8) for h, w in SIZES]
    boxes = [random_boxes(h, w, 3) for h, w in SIZES]
    out = run_boxes([zoom, crop, pp.Resize((64, 64))], images, boxes, seed=1)
    sizes = np.array(SIZES, np.float64)
    idx = np.arange(len(SIZES))
    m, zoomed = zoom.transform(zoom.sample(Draws(1, 0, idx, 0), sizes), sizes)
    targets = Targets.from_args(len(SIZES), boxes=boxes)
    targets = Targets(targets.boxes.in_pixels("xyxy", sizes)).moved(m, zoomed)
    window = crop.sample(Draws(1, 0, idx, 1), zoomed, targets)
    for i in range(len(SIZES)):
        l, t, cw, ch = (window[k][i] for k in ("left", "top", "width", "height"))
        want = np.clip(targets.boxes.rows(slice(i, i + 1)).data - [l, t, l, t], 0, [cw, ch, cw, ch]) * ([64 / cw, 64 / ch] * 2)
        np.testing.assert_allclose(out[i].numpy(), want, atol=1e-3)


def test_zoom_out_is_torchvisions():
    op = pp.RandomZoomOut(side_range=(1.0, 3.0), p=0.5)
    sizes = np.array(SIZES, np.float64)
    params = op.sample(Draws(3, 0, np.arange(len(SIZES)), 0), sizes)
    u = Draws(3, 0, np.arange(len(SIZES)), 0).uniforms_np(4).astype(np.float64)
    for i, (h, w) in enumerate(SIZES):
        if u[i, 3] >= op.p:  # torchvision's _RandomApplyTransform: `if torch.rand(1) >= self.p: return inputs`
            assert (params["height"][i], params["width"][i], params["top"][i]) == (h, w, 0)
            continue
        r = op.side_range[0] + u[i, 0] * (op.side_range[1] - op.side_range[0])
        canvas_width, canvas_height = int(w * r), int(h * r)
        left, top = int((canvas_width - w) * u[i, 1]), int((canvas_height - h) * u[i, 2])
        assert (params["left"][i], params["top"][i], params["width"][i], params["height"][i]) == (
            left, top, canvas_width, canvas_height)
    # boxes: torchvision's F.pad shifts them by (left, top)
    img = [np.zeros((40, 50, 3), np.uint8)]
    out = pp.Compose([pp.RandomZoomOut(fill=(9, 9, 9), side_range=(2.0, 2.0), p=1.0)], dtype=torch.uint8)
    res = out(img, boxes=[[[0, 0, 50, 40]]], seed=0)
    x0, y0, x1, y1 = res["boxes"][0][0].int().tolist()
    assert res["image"].shape == (1, 3, 80, 100) and (x1 - x0, y1 - y0) == (50, 40)
    assert int(res["image"][0, 0, y0:y1, x0:x1].max()) == 0 and int(res["image"][0, 0].max()) == 9


@pytest.mark.parametrize("op, size_of", [
    (pp.ScaleJitter((120, 160), (0.5, 1.5)), "jitter"),
    (pp.RandomShortestSize((32, 48, 64), max_size=90), "shortest"),
    (pp.RandomShortestSize(50), "shortest"),
])
def test_aspect_keeping_resizes_are_torchvisions(op, size_of):
    sizes = np.array(SIZES, np.float64)
    draws = Draws(0, 0, np.arange(len(SIZES)), 0)
    u = float(0)
    m, out = op.transform(op.sample(draws, sizes), sizes)
    for i, (h, w) in enumerate(SIZES):
        u = float(draws.uniform_np(0)[i])
        if size_of == "jitter":  # ScaleJitter.make_params
            scale = op.scale_range[0] + u * (op.scale_range[1] - op.scale_range[0])
            r = min(op.target_size[1] / w, op.target_size[0] / h) * scale
        else:  # RandomShortestSize.make_params
            r = op.min_size[min(int(u * len(op.min_size)), len(op.min_size) - 1)] / min(h, w)
            if op.max_size is not None:
                r = min(r, op.max_size / max(h, w))
        assert tuple(out[i]) == (int(h * r), int(w * r))
        # resize_bounding_boxes scales by new / old per axis
        assert np.allclose([m[i, 0, 0], m[i, 1, 1]], [int(w * r) / w, int(h * r) / h])


@pytest.mark.parametrize("size, anchor, scale_up", [((64, 64), (0.5, 0.5), True), ((48, 80), (0.0, 0.0), True),
                                                     ((300, 300), (0.5, 0.5), False)])
def test_letterbox_is_ultralytics(size, anchor, scale_up):
    op = pp.LetterBox(size, anchor=anchor, scale_up=scale_up)
    sizes = np.array(SIZES, np.float64)
    m, out = op.transform({}, sizes)
    assert (out == size).all()
    for i, (h, w) in enumerate(SIZES):
        r = min(size[0] / h, size[1] / w)  # ultralytics.data.augment.LetterBox
        if not scale_up:
            r = min(r, 1.0)
        new_w, new_h = int(round(w * r)), int(round(h * r))
        dw, dh = (size[1] - new_w) * anchor[1], (size[0] - new_h) * anchor[0]
        top, left = int(round(dh - 0.1)), int(round(dw - 0.1))
        assert np.allclose(m[i], [[new_w / w, 0, left], [0, new_h / h, top], [0, 0, 1]]), (i, m[i])


class TestContract:
    def test_iou_crop(self):  # without boxes it crops nothing: deterministic there
        check_op(pp.RandomIoUCrop(), tail=[pp.Resize((12, 12))], random=False)

    def test_zoom_out(self):
        check_op(pp.RandomZoomOut(fill=50), tail=[pp.Resize((20, 20))], p_zero=pp.RandomZoomOut(fill=50, p=0.0))

    def test_scale_jitter(self):
        check_op(pp.ScaleJitter((24, 24), (0.5, 1.5)), tail=[pp.LetterBox(30)])

    def test_shortest_size(self):
        check_op(pp.RandomShortestSize((12, 16, 20), 28), tail=[pp.LetterBox((30, 30))])

    def test_letterbox(self):
        check_op(pp.LetterBox((20, 28), fill=114), random=False)


H, W = 60, 80
RECT = (20, 15, 50, 40)


@pytest.mark.parametrize("ops", [
    [pp.RandomZoomOut(p=1.0), pp.Resize((60, 60))],
    [pp.RandomIoUCrop(), pp.Resize((48, 48))],
    [pp.RandomZoomOut(p=1.0), pp.RandomIoUCrop(), pp.RandomFlip(), pp.Resize((50, 50))],
    [pp.ScaleJitter((60, 60), (0.5, 1.5)), pp.LetterBox((64, 64))],
    [pp.RandomShortestSize((30, 50), 70), pp.LetterBox(70, anchor=(0.0, 0.0))],
], ids=["zoom-out", "iou-crop", "ssd", "jitter-letterbox", "shortest-letterbox"])
def test_boxes_enclose_the_moved_rectangle(ops):
    img = np.zeros((H, W, 3), np.uint8)
    x0, y0, x1, y1 = RECT
    img[y0:y1, x0:x1] = 255
    out = pp.Compose(ops)([img] * 8, seed=2, boxes=[np.array([RECT], np.float64)] * 8)
    for i in range(8):
        ys, xs = torch.nonzero(out["image"][i, 0] > 0.5, as_tuple=True)
        bx0, by0, bx1, by1 = out["boxes"][i][0].tolist()
        sx0, sy0, sx1, sy1 = float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1
        assert abs(bx0 - sx0) <= 1 and abs(by0 - sy0) <= 1 and abs(bx1 - sx1) <= 1 and abs(by1 - sy1) <= 1


def test_the_same_sample_crops_the_same_in_any_batch():
    images = [np.zeros((h, w, 3), np.uint8) for h, w in SIZES]
    boxes = [random_boxes(h, w, 2) for h, w in SIZES]
    c = pp.Compose([pp.RandomZoomOut(), pp.RandomIoUCrop(), pp.Resize((40, 40))])
    whole = c(images, seed=4, boxes=boxes)["boxes"]
    part = c(images[5:9], seed=4, indices=range(5, 9), boxes=boxes[5:9])["boxes"]
    assert all(torch.equal(a, b) for a, b in zip(whole[5:9], part))


@pytest.mark.parametrize("make, name", [
    (lambda: pp.RandomIoUCrop(min_scale=0.8, max_scale=0.5), "min_scale"),
    (lambda: pp.RandomIoUCrop(trials=0), "trials"),
    (lambda: pp.RandomIoUCrop(sampler_options=[]), "sampler_options"),
    (lambda: pp.RandomZoomOut(side_range=(0.5, 2.0)), "side_range"),
    (lambda: pp.RandomZoomOut(p=1.5), "p"),
    (lambda: pp.ScaleJitter((10, 10), (0.0, 1.0)), "scale_range"),
    (lambda: pp.RandomShortestSize([]), "min_size"),
    (lambda: pp.RandomShortestSize(10, max_size=0), "max_size"),
    (lambda: pp.LetterBox(10, anchor=(2.0, 0.0)), "anchor"),
])
def test_bad_arguments_name_themselves(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_evaluation_forms():
    c = pp.Compose([pp.RandomZoomOut(), pp.RandomIoUCrop(), pp.ScaleJitter(64), pp.RandomShortestSize((32, 48)),
                    pp.LetterBox(64)]).eval()
    assert [repr(op) for op in c.ops] == [
        "ScaleJitter(target_size=(64, 64), scale_range=(1.0, 1.0), interpolation=None)",
        "RandomShortestSize(min_size=(48,), max_size=None, interpolation=None)",
        "LetterBox(size=(64, 64), fill=None, anchor=(0.5, 0.5), scale_up=True, interpolation=None)"]
