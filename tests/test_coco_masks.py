"""The Coco reader's polygon masks, rasterised inside each object's window of whole pixels
(readers/_coco.py), through pycocotools' C functions in one call per sample
(readers/_coco_native.py) or its Python calls: the same label image as pycocotools'
whole-image rasterisation, the twin written here, for ellipses, random polygons of several
parts, corners past every edge of the image, fractional and integer corners, overlapping
objects, objects wholly outside, and run-length objects between polygons (the order kept)."""

from __future__ import annotations

import json

import numpy as np
import pytest

mask_api = pytest.importorskip("pycocotools.mask", reason="needs pycocotools (the coco extra)")

from pixelpipe.readers import Coco, _coco_native  # noqa: E402
from pixelpipe.readers._coco import _polygon_window  # noqa: E402

NATIVE = [False] + ([True] if _coco_native.library() is not None else [])


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


def write(tmp_path, h: int, w: int, segmentations: list) -> str:
    anns = [{"id": k + 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, w, h], "area": float(w * h),
             "iscrowd": 0, "segmentation": segm} for k, segm in enumerate(segmentations)]
    doc = {"images": [{"id": 1, "file_name": "a.jpg", "height": h, "width": w}], "annotations": anns,
           "categories": [{"id": 1, "name": "thing"}]}
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    return str(path)


def labels(path: str, root, native: bool) -> np.ndarray:
    coco = Coco(path, str(root), masks="instances")
    coco.native_masks = native
    return coco.targets(0)["masks"]


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("seed", range(12))
def test_windowed_rasterisation_equals_the_whole_image_one(tmp_path, seed: int, native: bool):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(20, 300)), int(rng.integers(20, 300))
    objects = random_objects(rng, h, w)
    got = labels(write(tmp_path, h, w, objects), tmp_path, native)
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


@pytest.mark.parametrize("native", NATIVE)
def test_boxes_and_run_lengths_between_polygons_keep_their_order(tmp_path, native: bool):
    h, w = 40, 50
    square = [[5.0, 5.0, 30.0, 5.0, 30.0, 30.0, 5.0, 30.0]]
    rle = mask_api.encode(np.asfortranarray((np.arange(h * w).reshape(h, w) % 7 == 0).astype(np.uint8)))
    rle["counts"] = rle["counts"].decode()
    segmentations = [square, rle, [[20.0, 0.0, 49.0, 0.0, 49.0, 39.0]]]
    got = labels(write(tmp_path, h, w, segmentations), tmp_path, native)
    want = np.zeros((h, w), np.uint8)
    want[mask_api.decode(mask_api.merge(mask_api.frPyObjects(square, h, w))).astype(bool)] = 1
    want[mask_api.decode(rle).astype(bool)] = 2
    want[mask_api.decode(mask_api.merge(mask_api.frPyObjects(segmentations[2], h, w))).astype(bool)] = 3
    np.testing.assert_array_equal(got, want)
    assert {1, 2, 3} <= set(np.unique(got).tolist())


def test_a_four_value_polygon_goes_to_pycocotools_python_calls():
    """pycocotools reads a list whose first polygon has 4 values as boxes (and refuses fewer):
    such objects are not given to the C call, so they behave as pycocotools' Python calls do."""
    assert not _coco_native.takes([[1.0, 2.0, 3.0, 4.0]]) and not _coco_native.takes([])
    assert _coco_native.takes([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0]])


@pytest.mark.skipif(len(NATIVE) == 1, reason="native/coco_masks.c was not built here (no C compiler)")
def test_reader_threads_rasterise_side_by_side_through_the_c_call(tmp_path):
    """The C call releases the GIL: two threads rasterising the same samples give the labels
    one thread gives (each thread's label images its own)."""
    import threading

    rng = np.random.default_rng(99)
    path = write(tmp_path, 120, 160, random_objects(rng, 120, 160))
    coco = Coco(path, str(tmp_path), masks="instances")
    want = coco.targets(0)["masks"]
    got: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: got.extend(coco.targets(0)["masks"] for _ in range(20)))
               for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(got) == 40 and all(np.array_equal(g, want) for g in got)
