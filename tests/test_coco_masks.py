"""The Coco reader's polygon masks, rasterised inside each object's window of whole pixels
(readers/_coco.py): the same label image as pycocotools' whole-image rasterisation, the twin
written here, for ellipses, random polygons of several parts, corners past every edge of the
image, fractional and integer corners, overlapping objects, and objects wholly outside."""

from __future__ import annotations

import json

import numpy as np
import pytest

mask_api = pytest.importorskip("pycocotools.mask", reason="needs pycocotools (the coco extra)")

from pixelpipe.readers import Coco  # noqa: E402
from pixelpipe.readers._coco import _polygon_window  # noqa: E402


def whole_image(segments: list[list[list[float]]], h: int, w: int) -> np.ndarray:
    out = np.zeros((h, w), dtype=np.uint8)
    for k, segm in enumerate(segments):
        out[mask_api.decode(mask_api.merge(mask_api.frPyObjects(segm, h, w))).astype(bool)] = k + 1
    return out


def random_objects(rng: np.random.Generator, h: int, w: int) -> list[list[list[float]]]:
    objects = []
    for _ in range(int(rng.integers(1, 9))):
        parts = []
        for _ in range(int(rng.integers(1, 3))):
            cx, cy = rng.uniform(-0.3 * w, 1.3 * w), rng.uniform(-0.3 * h, 1.3 * h)
            n = int(rng.integers(3, 20))
            angles = np.sort(rng.uniform(0, 2 * np.pi, n))
            radius = rng.uniform(1, 0.6 * max(h, w), n)
            xs, ys = cx + radius * np.cos(angles), cy + radius * np.sin(angles)
            if rng.random() < 0.3:
                xs, ys = np.round(xs), np.round(ys)  # integer corners: on the pixel grid
            parts.append(np.stack([xs, ys], 1).ravel().round(3).tolist())
        objects.append(parts)
    return objects


@pytest.mark.parametrize("seed", range(12))
def test_windowed_rasterisation_equals_the_whole_image_one(tmp_path, seed: int):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(20, 300)), int(rng.integers(20, 300))
    objects = random_objects(rng, h, w)
    anns = [{"id": k + 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, w, h], "area": float(w * h),
             "iscrowd": 0, "segmentation": parts} for k, parts in enumerate(objects)]
    doc = {"images": [{"id": 1, "file_name": "a.jpg", "height": h, "width": w}], "annotations": anns,
           "categories": [{"id": 1, "name": "thing"}]}
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    got = Coco(str(path), str(tmp_path), masks="instances").targets(0)["masks"]
    want = whole_image(objects, h, w)
    assert got.shape == (h, w)
    np.testing.assert_array_equal(got, want)
    assert want.any() or not any(_polygon_window(p, h, w) for p in objects)


def test_the_window_of_some_polygons():
    assert _polygon_window([[1.5, 2.2, 10.1, 2.2, 10.1, 7.9]], 100, 100) == (2, 1, 9, 12)
    assert _polygon_window([[-5, -5, 3, -5, 3, 3]], 10, 10) == (0, 0, 4, 4)  # cut at the top left
    assert _polygon_window([[5, 5, 30, 5, 30, 30]], 10, 20) == (5, 5, 10, 20)  # cut at the bottom right
    assert _polygon_window([[-9, -9, -2, -9, -2, -2]], 10, 10) is None  # wholly outside
    assert _polygon_window([[]], 10, 10) is None
