"""The detection readers: Coco (boxes, category ids, polygon and RLE masks through pycocotools,
keypoints), Voc (XML) and Yolo (text labels), on tiny sets written here; and a Pipeline over
each, through the detection ops to torchvision's target dicts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import COCO_CATEGORIES, make_image, write_coco
from PIL import Image

import pixelpipe as pp
from pixelpipe.data.targets import to_detection
from pixelpipe.readers import Coco, ReaderError, Voc, Yolo

COCO_API = importlib.util.find_spec("pycocotools") is not None
needs_coco = pytest.mark.skipif(not COCO_API, reason="needs pycocotools (the coco extra)")


def objects(path: Path) -> list[np.ndarray]:
    """The rectangles write_coco drew, per image sorted by id: [K, 5] (x0, y0, x1, y1, category)."""
    images = sorted(json.loads(path.read_text())["images"], key=lambda m: m["id"])
    return [np.array(m["objects"], np.float64).reshape(-1, 5) for m in images]


def test_coco_boxes_labels_and_ids(tmp_path):
    path = write_coco(tmp_path, 6)
    coco = Coco(path)
    want = objects(path)
    assert len(coco) == 6 and coco.categories == COCO_CATEGORIES and coco.labels is None
    for i in range(6):
        s = coco.read(i)
        assert s.label is None and s.source.endswith(f"{i:04d}.png") and s.targets["image_id"] == 100 + i
        assert s.targets["boxes"].tolist() == want[i][:, :4].tolist()  # COCO's xywh as xyxy; the crowd left out
        assert s.targets["labels"].tolist() == want[i][:, 4].astype(int).tolist()
        assert "masks" not in s.targets and "keypoints" not in s.targets
    crowd = Coco(path, crowd=True).read(0).targets
    assert len(crowd["boxes"]) == 4 and crowd["boxes"][-1].tolist() == [0, 0, 5, 5]
    empty = sum(len(w) == 0 for w in want)
    assert len(Coco(path, skip_empty=True)) == 6 - empty
    assert "Coco(" in repr(coco) and f"boxes={sum(map(len, want))}" in repr(coco)


@needs_coco
def test_coco_masks_from_polygons_and_run_lengths(tmp_path):
    path = write_coco(tmp_path, 6, seed=1)
    want = objects(path)
    inst, sem = Coco(path, masks="instances"), Coco(path, masks="semantic")
    for i in range(6):
        m, s = inst.targets(i)["masks"], sem.targets(i)["masks"]
        assert m.dtype == np.uint8 and m.shape == Image.open(inst.sources(i)).size[::-1]
        for k, (x0, y0, x1, y1, cat) in enumerate(want[i].astype(int)):
            mine = m == k + 1
            later = np.zeros_like(mine)  # pixels a later rectangle covered
            for (a0, b0, a1, b1, _) in want[i][k + 1 :].astype(int):
                later[b0:b1, a0:a1] = True
            rect = np.zeros_like(mine)
            rect[y0:y1, x0:x1] = True
            # RLE: exact; polygons: pycocotools rasterises the outline's edges its own way
            assert (mine == (rect & ~later)).mean() > 0.97, (i, k)
            assert (s[mine] == cat).all()
    with pytest.raises(ReaderError, match="masks"):
        Coco(path, masks="polygons")


def test_read_raw_gives_what_read_many_gives(tmp_path):
    """An annotated reader's read_raw (a Pipeline's read-ahead) is read_many without a Sample
    per file: the same bytes, paths and targets, each sample's dict its own (changing one
    changes neither the reader nor another read); an index out of range is named."""
    path = write_coco(tmp_path, 6, seed=3)
    coco = Coco(path)
    order = [4, 0, 5, 0]
    datas, paths, targets = coco.read_raw(order)
    samples = coco.read_many(order)
    for s, d, p, t, i in zip(samples, datas, paths, targets, order):
        assert s.data == d and s.source == p == coco.sources(i) and s.index == i
        assert t.keys() == s.targets.keys() == coco.targets(i).keys()
        assert all(np.array_equal(t[k], s.targets[k]) for k in t)
    targets[1]["boxes"] = None
    assert targets[3]["boxes"] is not None and coco.targets(0)["boxes"] is not None
    for bad in ([0, 6], [-1]):
        with pytest.raises(IndexError, match="out of range for Coco of 6"):
            coco.read_raw(bad)
    # indices as a numpy array, as a user may give them
    assert [s.index for s in coco.read_many(np.array([2, 3]))] == [2, 3] and coco.read_raw([])[0] == []


def test_a_subclass_targets_method_is_used_by_the_read_ahead(tmp_path):
    """A subclass that changes targets(i) gets its targets in read_raw and read_many too."""
    class Tagged(Coco):
        def targets(self, i):
            return {**super().targets(i), "tag": i * 10}

    path = write_coco(tmp_path, 4, seed=4)
    reader = Tagged(path)
    assert [t["tag"] for t in reader.read_raw([2, 1])[2]] == [20, 10]
    assert [s.targets["tag"] for s in reader.read_many([3])] == [30]


@needs_coco
def test_coco_read_raw_carries_the_masks(tmp_path):
    path = write_coco(tmp_path, 4, seed=5)
    coco = Coco(path, masks="instances")
    for t, i in zip(coco.read_raw([3, 1])[2], [3, 1]):
        assert np.array_equal(t["masks"], coco.targets(i)["masks"])


@needs_coco
def test_a_pipeline_over_coco_gives_detection_targets(tmp_path):
    path = write_coco(tmp_path, 8, seed=2)
    coco = Coco(path, masks="instances")
    compose = pp.Compose([pp.RandomZoomOut(p=0.5), pp.RandomIoUCrop(), pp.Resize((64, 64)), pp.RandomFlip(),
                          pp.SanitizeBoxes(min_area=4)])
    with pp.Pipeline(coco, compose, 4, seed=0, num_threads=1) as pipe:
        for batch in pipe:
            assert batch["masks"].shape == (4, 64, 64) and (batch["label"] == -1).all()  # no image labels
            for d in to_detection(batch):
                k = len(d["boxes"])
                assert d["labels"].shape == (k,) and d["masks"].shape == (k, 64, 64)
                assert set(d["labels"].tolist()) <= set(COCO_CATEGORIES)
                for box, mask in zip(d["boxes"], d["masks"]):  # a mask's pixels lie in its box (nearest: +1 px)
                    ys, xs = torch.nonzero(mask, as_tuple=True)
                    if len(xs):
                        assert xs.min() >= box[0] - 1 and xs.max() < box[2] + 1
                        assert ys.min() >= box[1] - 1 and ys.max() < box[3] + 1


def test_coco_keypoints(tmp_path):
    path = write_coco(tmp_path, 4, seed=3, keypoints=True)
    coco = Coco(path)
    t = coco.targets(0)
    assert t["keypoints"].shape == (3, 2, 3)
    x0, y0, x1, y1 = t["boxes"][0]
    assert t["keypoints"][0].tolist() == [[x0 + 0.5, y0 + 0.5, 2], [x1 - 0.5, y1 - 0.5, 2]]
    out = pp.Compose([pp.RandomFlip(1.0), pp.Resize((32, 32))])([make_image(*coco_size(coco, 0))], **{
        k: [t[k]] for k in ("boxes", "labels", "keypoints")})
    kx0, _, kx1, _ = out["boxes"][0][0].tolist()
    assert abs(out["keypoints"][0][0, 0, 0] - (kx1 - 0.5 * 32 / coco_size(coco, 0)[1])) < 1e-4


def coco_size(coco: Coco, i: int) -> tuple[int, int]:
    w, h = Image.open(coco.sources(i)).size
    return h, w


def test_coco_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ReaderError, match="bad.json"):
        Coco(bad)
    bad.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.jpg", "height": 9, "width": 9}],
                               "annotations": [{"image_id": 1, "category_id": 1, "bbox": [1, 2]}]}))
    with pytest.raises(ReaderError, match="image 1 .*malformed"):
        Coco(bad)
    bad.write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(ReaderError, match="no images"):
        Coco(bad)


def write_voc(root: Path) -> list[tuple[str, list[tuple[str, int, int, int, int, int]]]]:
    """Three VOC images with their XML; returns (id, objects) with objects as (name, xmin,
    ymin, xmax, ymax, difficult) in VOC's 1-based inclusive pixels."""
    sets = [("a", [("dog", 5, 6, 20, 30, 0), ("cat", 1, 1, 40, 10, 1)]), ("b", []), ("c", [("person", 10, 3, 11, 4, 0)])]
    for d in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for name, objs in sets:
        Image.fromarray(make_image(40, 50)).save(root / "JPEGImages" / f"{name}.jpg")
        xml = "".join(f"<object><name>{o}</name><difficult>{h}</difficult><bndbox><xmin>{a}</xmin><ymin>{b}</ymin>"
                      f"<xmax>{c}</xmax><ymax>{e}</ymax></bndbox></object>" for o, a, b, c, e, h in objs)
        (root / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename><size><width>50</width><height>40</height></size>{xml}</annotation>")
    (root / "ImageSets/Main/train.txt").write_text("a\nc\n")
    return sets


def test_voc(tmp_path):
    sets = write_voc(tmp_path)
    voc = Voc(tmp_path)
    assert len(voc) == 2 and voc.sources(1).endswith("JPEGImages/c.jpg") and voc.classes[0] == "aeroplane"
    t = voc.targets(0)
    assert t["boxes"].tolist() == [[4, 5, 20, 30], [0, 0, 40, 10]] and t["labels"].tolist() == [12, 8]
    assert Voc(tmp_path, difficult=False).targets(0)["labels"].tolist() == [12]
    every = Voc(tmp_path, split=None)
    assert len(every) == 3 and len(every.targets(1)["boxes"]) == 0
    with pp.Pipeline(every, pp.Compose([pp.LetterBox(32), pp.SanitizeBoxes()]), 3, shuffle=False) as pipe:
        batch = next(iter(pipe))
    assert [t.tolist() for t in batch["labels"]] == [[12, 8], [], [15]]
    # 50x40 -> 32x26, 3 rows of padding above
    np.testing.assert_allclose(batch["boxes"][0][0].numpy(), [4 * 0.64, 3 + 5 * 0.65, 20 * 0.64, 3 + 30 * 0.65], atol=1e-5)
    (tmp_path / "Annotations" / "c.xml").write_text("<annotation><object><name>unicorn</name></object></annotation>")
    with pytest.raises(ReaderError, match="c.xml.*unicorn"):
        Voc(tmp_path)
    with pytest.raises(ReaderError, match="val.txt"):
        Voc(tmp_path, split="val")
    assert sets


def test_yolo(tmp_path):
    images, labels = tmp_path / "data" / "images" / "train", tmp_path / "data" / "labels" / "train"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    for name in ("a", "b", "c"):
        Image.fromarray(make_image(40, 80)).save(images / f"{name}.png")
    (labels / "a.txt").write_text("0 0.5 0.5 0.25 0.5\n2 0.1 0.1 0.2 0.2\n")
    (labels / "c.txt").write_text("1 0.1 0.2 0.3 0.2 0.3 0.6\n")  # a polygon
    yolo = Yolo(images, classes=["x", "y", "z"])
    assert len(Yolo(images, extensions="png")) == 3  # one extension as a string, as Folder takes it
    with pytest.raises(ReaderError, match="lists no images"):
        Yolo(images, extensions=["jpg"])
    with pytest.raises(ReaderError, match="extensions is empty"):
        Yolo(images, extensions=[])
    assert len(yolo) == 3 and yolo.labels_dir == str(labels) and yolo.box_format == "cxcywhn"
    assert len(yolo.targets(1)["boxes"]) == 0  # no label file: a background image
    np.testing.assert_allclose(yolo.targets(2)["boxes"], [[0.2, 0.4, 0.2, 0.4]])
    compose = pp.Compose([pp.Resize((20, 40))], box_format=yolo.box_format)
    with pp.Pipeline(yolo, compose, 3, shuffle=False) as pipe:
        batch = next(iter(pipe))
    np.testing.assert_allclose(batch["boxes"][0].numpy(), [[0.5, 0.5, 0.25, 0.5], [0.1, 0.1, 0.2, 0.2]], atol=1e-6)
    det = to_detection(batch, yolo.box_format)
    assert det[0]["boxes"].tolist() == [[15, 5, 25, 15], [0, 0, 8, 4]] and det[0]["labels"].tolist() == [0, 2]
    (labels / "b.txt").write_text("1 0.5 0.5\n")
    with pytest.raises(ReaderError, match=r"b.txt:1: expected"):
        Yolo(images)
    with pytest.raises(ReaderError, match="no 'images' folder"):
        Yolo(tmp_path)
