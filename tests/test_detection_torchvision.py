"""The detection ops against torchvision v2 itself (skipped where torchvision is not installed):
the same parameters given to torchvision's functionals (pad, crop, resize on tv_tensors) give
boxes within 0.5 px, and masks that differ only at object edges (torchvision resizes masks by
its nearest rule, which picks a neighbouring source pixel where pixelpipe's centre rule does
not: at most 3% of the pixels, all within one source pixel of a label edge). Crops and pads alone: identical."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.data.targets import Targets

tv = pytest.importorskip("torchvision")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

RNG = np.random.default_rng(5)
SIZES = [(int(h), int(w)) for h, w in RNG.integers(60, 200, size=(16, 2))]


def scene(h: int, w: int, k: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    img = RNG.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
    mask = np.zeros((h, w), np.uint8)
    boxes = []
    for j in range(k):
        x0, y0 = int(RNG.integers(0, w - 10)), int(RNG.integers(0, h - 10))
        x1, y1 = int(RNG.integers(x0 + 4, w + 1)), int(RNG.integers(y0 + 4, h + 1))
        mask[y0:y1, x0:x1] = j + 1
        boxes.append((x0, y0, x1, y1))
    return img, mask, np.array(boxes, np.float64)


def edge_pixels(m: torch.Tensor) -> torch.Tensor:
    """Pixels with a differently labelled 4-neighbour."""
    e = torch.zeros_like(m, dtype=torch.bool)
    e[1:] |= m[1:] != m[:-1]
    e[:-1] |= m[1:] != m[:-1]
    e[:, 1:] |= m[:, 1:] != m[:, :-1]
    e[:, :-1] |= m[:, 1:] != m[:, :-1]
    return e


def test_ssd_geometry_matches_torchvision():
    zoom, crop = pp.RandomZoomOut(p=1.0), pp.RandomIoUCrop()
    data = [scene(h, w) for h, w in SIZES]
    out = pp.Compose([zoom, crop, pp.Resize((300, 300), interpolation="nearest")], dtype=torch.uint8)(
        [d[0] for d in data], seed=3, boxes=[d[2] for d in data], masks=[d[1] for d in data])
    sizes, idx = np.array(SIZES, np.float64), np.arange(len(SIZES))
    zp = zoom.sample(Draws(3, 0, idx, 0), sizes)
    m, zoomed = zoom.transform(zp, sizes)
    moved = Targets(Targets.from_args(len(SIZES), boxes=[d[2] for d in data]).boxes.in_pixels("xyxy", sizes))
    window = crop.sample(Draws(3, 0, idx, 1), zoomed, moved.moved(m, zoomed))
    for i, (img, mask, boxes) in enumerate(data):
        h, w = SIZES[i]
        l, t = int(zp["left"][i]), int(zp["top"][i])
        pad = [l, t, int(zp["width"][i]) - w - l, int(zp["height"][i]) - h - t]
        b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(h, w))
        mk = tv_tensors.Mask(torch.from_numpy(mask))
        b, mk = F.pad(b, pad), F.pad(mk, pad)
        top, left, ch, cw = (int(window[k][i]) for k in ("top", "left", "height", "width"))
        b, mk = F.crop(b, top, left, ch, cw), F.crop(mk, top, left, ch, cw)
        cropped = mk.clone()
        b, mk = F.resize(b, [300, 300]), F.resize(mk, [300, 300])
        np.testing.assert_allclose(out["boxes"][i].numpy(), b.numpy(), atol=0.5)
        differ = out["masks"][i] != mk
        # the two nearest rules pick source pixels at most one apart: a label edge moves by up
        # to one source pixel (several output pixels where the window is enlarged), and a strip
        # one source pixel thin may be kept by one rule and stepped over by the other
        grow = math.ceil(max(300 / ch, 300 / cw, 1.0)) + 1
        near = torch.nn.functional.max_pool2d(edge_pixels(mk)[None].float(), 2 * grow - 1, 1, grow - 1)[0] > 0
        assert float(differ.float().mean()) <= 0.03 and not (differ & ~near).any(), i
        exact = pp.Compose([zoom, crop, pp.Resize((ch, cw), interpolation="nearest")], dtype=torch.uint8)
        same = exact([img], seed=3, indices=[i], boxes=[boxes], masks=[mask])["masks"][0]  # RandomIoUCrop draws from the boxes
        if same.shape == cropped.shape:  # this sample's own window size: no resampling, identical
            assert torch.equal(same, cropped)


@pytest.mark.parametrize("op", [pp.ScaleJitter((128, 160), (0.5, 1.5)), pp.RandomShortestSize((64, 96, 128), 160)])
def test_aspect_resizes_then_letterbox_match_torchvision(op):
    data = [scene(h, w) for h, w in SIZES]
    box = pp.LetterBox((160, 160), anchor=(0.0, 0.0))
    out = pp.Compose([op, box])([d[0] for d in data], seed=1, boxes=[d[2] for d in data])
    sizes = np.array(SIZES, np.float64)
    _, resized = op.transform(op.sample(Draws(1, 0, np.arange(len(SIZES)), 0), sizes), sizes)
    for i, (_, _, boxes) in enumerate(data):
        h, w = SIZES[i]
        b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(h, w))
        b = F.resize(b, [int(resized[i, 0]), int(resized[i, 1])])
        r = min(160 / resized[i, 0], 160 / resized[i, 1])
        b = F.resize(b, [int(round(resized[i, 0] * r)), int(round(resized[i, 1] * r))])
        b = F.pad(b, [0, 0, 160 - b.canvas_size[1], 160 - b.canvas_size[0]])
        np.testing.assert_allclose(out["boxes"][i].numpy(), b.numpy(), atol=0.5)
