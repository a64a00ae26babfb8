"""Mosaic: the batch-op contract (inputs kept, dtypes and layouts, rows follow their samples,
p=0 is the identity, seeds and epochs matter, empty batches), and each mosaic against YOLO's
construction written out here: the four images on a 2h x 2w canvas ([[A, B], [C, D]]), seen
through the h x w window placing the canvas centre at the drawn (cx, cy); boxes moved with
their image, cut to it and to the window, kept by YOLO's size and area rules (exact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import DTYPES, LAYOUTS, make_image, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

H, W = 16, 20
SIZE = [pp.Resize((H, W))]


def draws_of(indices, seed=0, epoch=0, pos=1) -> Draws:
    idx = np.asarray(indices)
    return Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))


def layout_of(op, indices, seed=0, epoch=0, pos=1):
    """Written out: each row's quadrants come from itself and the three rows after it in the
    order of (key, index), cyclically; the centre and whether it mixes from its own draws."""
    d = draws_of(indices, seed, epoch, pos)
    key = d.uniform_np(1)
    order = sorted(range(len(indices)), key=lambda r: (key[r], indices[r]))
    sources = np.empty((len(indices), 4), dtype=np.int64)
    for k, r in enumerate(order):
        sources[r] = [order[(k + q) % len(order)] for q in range(4)]
    lo, hi = op.center
    cx = np.round(W * (lo + (hi - lo) * d.uniform_np(2).astype(np.float64)))
    cy = np.round(H * (lo + (hi - lo) * d.uniform_np(3).astype(np.float64)))
    return sources, cx.astype(int), cy.astype(int), d.bernoulli_np(0, op.p)


def yolo_mosaic(images, cx, cy):
    """The canvas [[A, B], [C, D]] (HWC) seen through the window putting its centre at (cx, cy)."""
    canvas = np.concatenate([np.concatenate(images[:2], 1), np.concatenate(images[2:], 1)], 0)
    top, left = H - cy, W - cx
    return canvas[top:top + H, left:left + W]


def run(op, imgs, indices=None, dtype=torch.float32, layout="NCHW", seed=0, epoch=0, **values):
    return pp.Compose([*SIZE, op], dtype=dtype, layout=layout)(imgs, seed=seed, epoch=epoch, indices=indices, **values)


class TestMosaic:
    def test_contract(self):
        imgs = varied_images(12)
        idx = torch.arange(12) * 3 + 5
        before = [t.clone() for t in imgs]
        base = run(pp.Mosaic(), imgs, idx)["image"]
        assert all(torch.equal(a, b) for a, b in zip(before, imgs))
        for dtype in DTYPES:
            for layout in LAYOUTS:
                out = run(pp.Mosaic(), imgs, idx, dtype=dtype, layout=layout)["image"]
                assert out.dtype == dtype and out.is_contiguous()
                got = (out if layout == "NCHW" else out.permute(0, 3, 1, 2)).float()
                ref = base * (255 if dtype == torch.uint8 else 1)
                assert float((got - ref).abs().max()) <= (0.51 if dtype == torch.uint8 else 0.01), (dtype, layout)
        perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
        shuffled = run(pp.Mosaic(), [imgs[i] for i in perm], idx[perm])["image"]
        assert torch.equal(shuffled, base[perm]), "rows must follow their samples whatever the batch order"
        assert torch.equal(run(pp.Mosaic(p=0.0), imgs, idx)["image"], pp.Compose(SIZE)(imgs))
        for other in (run(pp.Mosaic(), imgs, idx, seed=1), run(pp.Mosaic(), imgs, idx, epoch=1)):
            assert not torch.equal(other["image"], base)
        assert run(pp.Mosaic(), [])["image"].shape[0] == 0

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_is_yolos_canvas_through_the_window(self, layout):
        imgs = [make_image(H, W, seed=k) for k in range(9)]
        idx = np.arange(9) * 2 + 1
        op = pp.Mosaic(p=0.7)
        out = run(op, imgs, idx, dtype=torch.uint8, layout=layout)["image"]
        out = out.permute(0, 2, 3, 1) if layout == "NCHW" else out
        sources, cx, cy, on = layout_of(op, idx)
        assert 0 < on.sum() < 9
        for i in range(9):
            expect = yolo_mosaic([imgs[s] for s in sources[i]], cx[i], cy[i]) if on[i] else imgs[i]
            np.testing.assert_array_equal(out[i].numpy(), expect)

    @pytest.mark.parametrize("form", ["list", "padded"])
    def test_boxes_labels_and_masks_follow(self, form):
        n = 6
        imgs = [make_image(H, W, seed=k) for k in range(n)]
        rng = np.random.default_rng(0)
        boxes, labels, masks = [], [], []
        for k in range(n):
            x0, y0 = rng.uniform(0, W - 6, 3), rng.uniform(0, H - 6, 3)
            boxes.append(np.stack([x0, y0, x0 + rng.uniform(2, 6, 3), y0 + rng.uniform(2, 6, 3)], 1))
            labels.append(np.arange(3) + 10 * k)
            masks.append(np.full((H, W), k + 1, np.uint8))
        op = pp.Mosaic(min_size=1.0, min_visibility=0.3)
        t = pp.Compose([op], box_format="xyxy", targets=form)
        out = t(imgs, boxes=boxes, labels=labels, masks=masks)
        sources, cx, cy, _ = layout_of(op, np.arange(n), pos=0)  # the op is first in this Compose
        for i in range(n):
            got_mask = out["masks"][i].numpy()
            np.testing.assert_array_equal(got_mask, yolo_mosaic([masks[s] for s in sources[i]], cx[i], cy[i]))
            expect_b, expect_l = [], []
            for q, s in enumerate(sources[i]):
                ox, oy = (q % 2) * W - (W - cx[i]), (q // 2) * H - (H - cy[i])  # the image's place in the window
                b = boxes[s] + [ox, oy, ox, oy]
                lo = [max(ox, 0), max(oy, 0)]
                hi = [min(ox + W, W), min(oy + H, H)]
                c = np.clip(b, lo * 2, hi * 2)
                bw, bh = c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]
                area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
                keep = (bw >= 1.0) & (bh >= 1.0) & (bw * bh >= 0.3 * area)
                expect_b.append(c[keep])
                expect_l.append(labels[s][keep])
            eb, el = np.concatenate(expect_b), np.concatenate(expect_l)
            if form == "list":
                gb, gl = out["boxes"][i].numpy(), out["labels"][i].numpy()
            else:
                c = int(out["box_counts"][i])
                gb, gl = out["boxes"][i, :c].numpy(), out["labels"][i, :c].numpy()
                assert (out["labels"][i, c:] == -1).all()
            np.testing.assert_allclose(gb, eb, atol=1e-4)
            np.testing.assert_array_equal(gl, el)

    def test_normalised_box_format(self):
        imgs = [make_image(H, W, seed=k) for k in range(4)]
        boxes = [np.array([[0.1, 0.2, 0.6, 0.7]])] * 4
        a = pp.Compose([pp.Mosaic(box_format="xyxyn")], box_format="xyxyn")(imgs, boxes=boxes)
        b = pp.Compose([pp.Mosaic()])(imgs, boxes=[bx * [W, H, W, H] for bx in boxes])
        for i in range(4):
            np.testing.assert_allclose(a["boxes"][i].numpy() * [W, H, W, H], b["boxes"][i].numpy(), atol=1e-4)

    def test_refuses_keypoints_and_drops_kept(self):
        imgs = [make_image(H, W)] * 2
        with pytest.raises(ValueError, match="keypoints"):
            pp.Compose([pp.Mosaic()])(imgs, keypoints=[[[1.0, 2.0]]] * 2)
        out = pp.Compose([pp.SanitizeBoxes(), pp.Mosaic()])(imgs, boxes=[[[1.0, 1.0, 9.0, 9.0]]] * 2)
        assert "kept" not in out

    @pytest.mark.parametrize(("kwargs", "name"), [({"p": 2}, "p"), ({"center": (0.8, 0.2)}, "center"),
                                                  ({"min_size": -1}, "min_size"), ({"min_visibility": 1.5},
                                                                                   "min_visibility"),
                                                  ({"box_format": "yxyx"}, "box_format")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.Mosaic(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_same_mosaic_on_the_gpu():
    imgs = [torch.from_numpy(make_image(H, W, seed=k)) for k in range(8)]
    t = pp.Compose([pp.Mosaic()], dtype=torch.uint8)
    cpu = t(imgs)["image"]
    gpu = t(pp.ImageBatch.from_list(imgs).to("cuda"))["image"]
    assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)
