"""The bench with boxes (bench/coco_boxes.py, boxed_rows.py, the ssd pipeline, --boxes): random
boxes per image, the COCO file written for a folder and read back by pixelpipe's Coco reader, the
ssd pipeline end to end on the CPU with its boxes inside the 300x300 output, the DALI graph's
wiring (on a recording stand-in: DALI is not needed), and the peers' rows where their library
is missing. No timing is asserted."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pixelpipe.tools.bench import peer_dali_ssd, peer_torchvision_ssd
from pixelpipe.tools.bench.batches import spans
from pixelpipe.tools.bench.coco_boxes import (
    CATEGORIES,
    boxed_data,
    coco_json,
    found_annotations,
    image_sizes,
    random_boxes,
    write_coco,
)
from pixelpipe.tools.bench.images import image_files
from pixelpipe.tools.bench.pipelines import SSD_SIZE, pipeline_ops
from pixelpipe.tools.bench.runner import SSD_BOXES, WITHOUT_BOXES, run_bench
from pixelpipe.tools.cli import main

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five synthetic JPEGs of various sizes, one of them in a subfolder."""
    from pixelpipe.tools.datasets import synthetic

    root = tmp_path_factory.mktemp("jpegs")
    (root / "sub").mkdir()
    for i, (jpeg, _) in enumerate(synthetic(5, seed=4)):
        (root / ("sub" if i == 4 else "") / f"{i:02d}.jpg").write_bytes(jpeg)
    return root


def _square_scenes(n: int = 16) -> tuple[list[bytes], list[dict[str, np.ndarray]], np.ndarray]:
    """Black JPEGs of various sizes, each with one white rectangle, and that rectangle as its box."""
    from PIL import Image

    rng = np.random.default_rng(0)
    blobs, targets, sizes = [], [], []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(120, 260, 2))
        x0, y0 = int(rng.integers(0, w // 2)), int(rng.integers(0, h // 2))
        x1, y1 = int(rng.integers(x0 + 30, w)), int(rng.integers(y0 + 30, h))
        a = np.zeros((h, w, 3), np.uint8)
        a[y0:y1, x0:x1] = 255
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, "JPEG", quality=95)
        blobs.append(buf.getvalue())
        targets.append({"boxes": np.array([[x0, y0, x1, y1]], np.float32), "labels": np.array([1])})
        sizes.append((h, w))
    return blobs, targets, np.array(sizes)


def _box_on_its_object(image: np.ndarray, box: np.ndarray, tolerance: float = 4.0) -> bool | None:
    """Whether a normalised CHW output's bright pixels (the rectangle) span `box` (pixels), to
    within `tolerance`; None where the crop left no bright pixel."""
    bright = image.astype(np.float32).mean(0) > 0
    if not bright.any():
        return None
    ys, xs = np.nonzero(bright)
    seen = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64)
    return bool(np.abs(seen - np.asarray(box, np.float64)).max() <= tolerance)


# ----------------------------------------------------------------------------- random boxes
def test_random_boxes_lie_inside_their_images_and_depend_only_on_seed_and_index():
    sizes = np.array([[120, 300], [400, 90], [64, 64]])
    drawn = random_boxes(sizes, 9, seed=2)
    for t, (h, w) in zip(drawn, sizes, strict=True):
        b = t["boxes"]
        assert b.shape == (9, 4) and b.dtype == np.float32 and t["labels"].dtype == np.int64
        assert (b[:, 0] >= 0).all() and (b[:, 1] >= 0).all() and (b[:, 2] <= w).all() and (b[:, 3] <= h).all()
        assert (b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all()
        assert ((t["labels"] >= 1) & (t["labels"] <= CATEGORIES)).all()
    again = random_boxes(sizes[:2], 9, seed=2)  # image i's boxes do not depend on how many images
    assert all(np.array_equal(a["boxes"], b["boxes"]) for a, b in zip(again, drawn))
    other = random_boxes(sizes, 9, seed=3)
    assert not np.array_equal(other[0]["boxes"], drawn[0]["boxes"])
    assert random_boxes(sizes, 0)[0]["boxes"].shape == (0, 4)
    with pytest.raises(ValueError, match=">= 0"):
        random_boxes(sizes, -1)


# ----------------------------------------------------------------------------- the COCO file
def test_the_generated_coco_file_is_valid_json_that_the_coco_reader_reads_back(folder):
    from pixelpipe.readers import Coco

    files = image_files(str(folder))
    path = write_coco(folder, files, 6, seed=1)
    with open(path) as f:
        doc = json.load(f)
    assert {"images", "annotations", "categories"} <= set(doc)
    assert len(doc["images"]) == 5 and len(doc["annotations"]) == 30 and len(doc["categories"]) == CATEGORIES
    assert len({a["id"] for a in doc["annotations"]}) == 30
    assert "sub/04.jpg" in {m["file_name"] for m in doc["images"]}
    coco = Coco(path, folder)
    assert len(coco) == 5
    sizes = image_sizes([p.read_bytes() for p in files])
    expected = random_boxes(sizes, 6, seed=1)
    for i in range(5):
        assert Path(coco.sources(i)) == files[i]
        t = coco.targets(i)
        np.testing.assert_allclose(t["boxes"], expected[i]["boxes"], atol=1e-3)
        assert t["labels"].tolist() == expected[i]["labels"].tolist()


def test_coco_json_writes_xywh_with_areas():
    doc = coco_json(["a.jpg"], np.array([[50, 80]]), [{"boxes": np.array([[10, 5, 30, 25]], np.float32),
                                                      "labels": np.array([7])}])
    (ann,) = doc["annotations"]
    assert ann["bbox"] == [10.0, 5.0, 20.0, 20.0] and ann["area"] == 400.0 and ann["category_id"] == 7
    assert doc["images"][0] == {"id": 1, "file_name": "a.jpg", "height": 50, "width": 80}


def test_a_folder_in_cocos_layout_is_read_as_it_is(folder, tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "val").mkdir()
    files = image_files(str(folder))[:3]
    for p in files:
        (tmp_path / "val" / p.name).write_bytes(p.read_bytes())
    doc = coco_json([p.name for p in files], image_sizes([p.read_bytes() for p in files]),
                    random_boxes(image_sizes([p.read_bytes() for p in files]), 2, seed=9))
    (tmp_path / "annotations" / "instances_val.json").write_text(json.dumps(doc))
    assert found_annotations(str(tmp_path)) == (str(tmp_path / "annotations" / "instances_val.json"),
                                                 str(tmp_path / "val"))
    assert found_annotations(str(folder)) is None
    data = boxed_data(str(tmp_path), 0, 5)  # the file's boxes, not 5 random ones
    assert "COCO annotations" in data.what and data.box_count == 6 and data.root == str(tmp_path / "val")


def test_boxed_data_without_a_folder_boxes_the_synthetic_set():
    data = boxed_data(None, 3, 4)
    assert len(data.blobs) == 3 and data.box_count == 12 and data.annotations is None
    assert "4 random boxes per image (seed 0)" in data.what
    sample = data.samples()[1]
    assert set(sample) == {"image", "boxes", "labels"} and sample["image"] is data.blobs[1]


# ----------------------------------------------------------------------------- the ssd pipeline
def test_ssd_pipeline_boxes_come_out_within_the_image(folder):
    from pixelpipe.compose import Compose
    from pixelpipe.loader.pipeline import Pipeline
    from pixelpipe.readers import Memory

    data = boxed_data(str(folder), 0, SSD_BOXES)
    t = Compose(pipeline_ops("ssd"), dtype=torch.float16)
    kept = 0
    with Pipeline(Memory(data.samples()), t, 2, device="cpu", num_threads=1, seed=0) as pipe:
        for batch in pipe:
            assert batch["image"].shape[1:] == (3, SSD_SIZE, SSD_SIZE) and batch["image"].dtype == torch.float16
            for boxes, labels in zip(batch["boxes"], batch["labels"], strict=True):
                assert boxes.shape[1] == 4 and len(labels) == len(boxes)
                assert (boxes >= 0).all() and (boxes <= SSD_SIZE).all()
                assert (boxes[:, 2] - boxes[:, 0] >= 1).all() and (boxes[:, 3] - boxes[:, 1] >= 1).all()  # sanitised
                assert ((labels >= 1) & (labels <= CATEGORIES)).all()
                kept += len(boxes)
    assert kept > 0


def test_ssd_pipeline_boxes_stay_on_their_objects():
    from pixelpipe.compose import Compose

    blobs, targets, _ = _square_scenes()
    t = Compose(pipeline_ops("ssd"), dtype=torch.float16)
    checked = []
    for epoch in range(3):
        out = t(blobs, seed=1, epoch=epoch, boxes=[x["boxes"] for x in targets], labels=[x["labels"] for x in targets])
        for image, boxes in zip(out["image"], out["boxes"], strict=True):
            if len(boxes):
                checked.append(_box_on_its_object(image.numpy(), boxes[0].numpy()))
    assert all(c is not False for c in checked) and checked.count(True) >= 24


def test_ssd_bench_runs_on_the_cpu_with_the_generated_coco_set(folder, capsys):
    results = run_bench(str(folder), "ssd", "cpu", 2, 1, ["pillow"], 1, 8, True, True)
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert f"{SSD_BOXES} random boxes per image (seed 0) in a generated COCO file" in out["header"]
    assert [r.name for r in results] == ["pixelpipe (cpu)"] and results[0].images == 5
    assert "no ssd pipeline on the CPU" in captured.err  # the Pillow loop has none


def test_the_cli_takes_boxes(capsys):
    argv = ["bench", "--device", "cpu", "--pipeline", "rn50", "-n", "4", "--batch", "2", "--threads", "1",
            "--passes", "1", "--quiet", "--json"]
    assert main(argv + ["--boxes", "3", "--peers", "pillow"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "3 random boxes per image" in out["header"] and "pillow run without" in out["header"]
    assert [r["name"] for r in out["results"]] == ["pixelpipe (cpu)", WITHOUT_BOXES, "pillow loop (cpu)"]
    assert [r["images"] for r in out["results"]] == [4, 4, 4]
    assert main(argv + ["--peers", "none"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "boxes" not in out["header"] and [r["name"] for r in out["results"]] == ["pixelpipe (cpu)"]
    with pytest.raises(SystemExit, match="--boxes must be >= 0"):
        main(argv + ["--boxes", "-1"])
    with pytest.raises(SystemExit, match="--boxes must be >= 1"):
        main(["bench", "--device", "cpu", "--pipeline", "ssd", "--boxes", "0"])
    with pytest.raises(SystemExit):
        main(["bench", "--pipeline", "volume", "--boxes", "2"])
    assert "--boxes does not apply" in capsys.readouterr().err


def test_boxes_refuse_augment_only_and_cache():
    with pytest.raises(SystemExit, match="do not take boxes"):
        run_bench(None, "ssd", "cuda", 2, 1, [], 1, 2, True, True, augment_only=True)


# ----------------------------------------------------------------------------- GPU rows, on the CPU
def test_boxed_gpu_rows_on_a_cpu_device(folder, capsys):
    from pixelpipe.tools.bench.gpu_peers import run_gpu_bench

    data = boxed_data(str(folder), 0, 4)
    results = run_gpu_bench(data.blobs, data.what, "ssd", "cpu", 2, 1, ["all"], 1, True, True, boxed=data)
    names = [r.name for r in results]
    assert names == ["pixelpipe (files)", "pixelpipe (memory)", "torchvision", "kornia", "dali (files)",
                     "dali (memory)"]
    assert all(r.images == 5 and r.rate > 0 for r in results[:2])
    assert results[3].rate == 0 and results[3].note.startswith("failed: NotImplementedError: kornia")
    if importlib.util.find_spec("torchvision") is None:
        assert results[2].note.startswith("not installed") and "pip install torchvision" in results[2].note
    if importlib.util.find_spec("nvidia") is None:  # DALI runs only on CUDA: a failed row either way
        assert all(r.note.startswith("not installed") for r in results[4:])
    assert all(r.rate == 0 for r in results[4:])
    rn50 = run_gpu_bench(data.blobs, data.what, "rn50", "cpu", 2, 1, [], 1, True, True, boxed=data)
    # each of pixelpipe's rows beside its twin without boxes: the same files from disk, in memory
    assert [r.name for r in rn50] == ["pixelpipe (files)", "pixelpipe (memory)", f"{WITHOUT_BOXES} (files)",
                                      f"{WITHOUT_BOXES} (memory)"]
    assert all(r.images == 5 and r.rate > 0 for r in rn50)
    capsys.readouterr()


# ----------------------------------------------------------------------------- the peers' modules
def test_peer_modules_import_without_their_libraries_and_fail_on_use(monkeypatch):
    # an import of these raises ImportError (submodules too: an imported one would be found first)
    for name in ("nvidia.dali", "nvidia.dali.plugin.pytorch", "torchvision", "torchvision.transforms",
                 "torchvision.transforms.v2", "torchvision.io"):
        monkeypatch.setitem(sys.modules, name, None)
    blobs = boxed_data(None, 2, 1)
    with pytest.raises(ImportError):
        peer_dali_ssd.dali_ssd_memory(blobs.blobs, blobs.targets, image_sizes(blobs.blobs), 2, 1,
                                      torch.device("cuda", 0))
    with pytest.raises(ImportError):
        peer_torchvision_ssd.gpu_ssd(blobs.blobs, blobs.targets, 2, CPU)


def test_dali_boxes_are_relative_corners():
    boxes, labels = peer_dali_ssd.relative_boxes([{"boxes": np.array([[10, 20, 50, 40]], np.float32),
                                                   "labels": np.array([3])}], np.array([[100, 200]]))
    np.testing.assert_allclose(boxes[0], [[0.05, 0.2, 0.25, 0.4]], rtol=1e-6)
    assert boxes[0].dtype == np.float32 and labels[0].dtype == np.int32 and labels[0].tolist() == [3]


class _Node:
    """A stand-in for a DALI DataNode: remembers the call that made it; arithmetic makes nodes."""

    def __init__(self, op: str, args: tuple = (), kwargs: dict | None = None) -> None:
        self.op, self.args, self.kwargs = op, args, kwargs or {}

    def _arith(self, other: Any) -> _Node:
        return _Node("arith", (self, other))

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arith


class _Fn:
    """Records every fn.* call (nested names like fn.random.uniform too)."""

    OUTPUTS = {"random_bbox_crop": 4}

    def __init__(self, calls: list[_Node], prefix: str = "") -> None:
        self._calls, self._prefix = calls, prefix

    def __getattr__(self, name: str) -> Any:
        full = f"{self._prefix}{name}"
        if name in ("random", "decoders", "readers"):
            return _Fn(self._calls, full + ".")

        def call(*args: Any, **kwargs: Any) -> Any:
            nodes = [_Node(full, args, kwargs) for _ in range(self.OUTPUTS.get(full, 1))]
            self._calls.extend(nodes[:1])
            return nodes[0] if len(nodes) == 1 else tuple(nodes)

        return call


def test_the_dali_graph_moves_boxes_with_the_same_draws_as_the_pixels():
    calls: list[_Node] = []
    types = type("types", (), {"FLOAT": "float", "FLOAT16": "float16"})
    images, boxes, labels = peer_dali_ssd.augment(_Fn(calls), types, _Node("images"), _Node("boxes"), _Node("labels"))
    by = {c.op: c for c in calls}
    paste, bbox_paste = by["paste"], by["bbox_paste"]
    for key in ("ratio", "paste_x", "paste_y"):  # one draw for the canvas and its boxes
        assert paste.kwargs[key] is bbox_paste.kwargs[key]
    assert bbox_paste.kwargs["ltrb"] and bbox_paste.args[0].op == "boxes"
    crop = by["random_bbox_crop"]
    assert crop.args[0] is bbox_paste and crop.kwargs["allow_no_crop"] and crop.kwargs["bbox_layout"] == "xyXY"
    assert crop.kwargs["thresholds"] == [0.0, 0.1, 0.3, 0.5, 0.7, 0.9] and crop.kwargs["scaling"] == [0.3, 1.0]
    assert by["slice"].args[0] is paste  # the crop window of random_bbox_crop cuts the pasted image
    assert by["bb_flip"].kwargs["horizontal"] is by["crop_mirror_normalize"].kwargs["mirror"]  # one coin
    assert by["resize"].kwargs == {"resize_x": SSD_SIZE, "resize_y": SSD_SIZE}
    assert by["crop_mirror_normalize"].kwargs["dtype"] == "float16"
    assert images is by["crop_mirror_normalize"] and boxes.op == "pad" and labels.op == "pad"
    assert boxes.args[0] is by["bb_flip"]


@pytest.mark.skipif(importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None,
                    reason="needs nvidia-dali")
def test_the_dali_graph_keeps_boxes_on_their_objects():
    """The whole DALI pipeline in DALI's CPU-only mode (the CPU decoder, no device): each
    output box (relative) still frames its white rectangle after zoom-out, crop, flip, resize.
    DALI cuts the crop window at whole pixels while the boxes move by the exact window: up to a
    source pixel apart, which a crop enlarged 5x makes 5 output pixels (measured: median 0.8,
    99th percentile 3, largest 5.7 over 800 boxes), hence 8 pixels here."""
    blobs, targets, sizes = _square_scenes()
    plan = spans(len(blobs), 8)
    pipe = peer_dali_ssd.build_pipeline(peer_dali_ssd.memory_source(blobs, targets, sizes, plan), 8, 2, None,
                                        decoder="cpu", seed=1)
    pipe.build()
    checked = []
    for _ in range(6):
        images, boxes, labels = (out.as_array() for out in pipe.run())
        assert images.shape == (8, 3, SSD_SIZE, SSD_SIZE) and images.dtype == np.float16
        for k in range(8):
            if labels[k][0] >= 0:  # not padding: the box survived the crop
                checked.append(_box_on_its_object(images[k], boxes[k][0] * SSD_SIZE, tolerance=8.0))
    assert all(c is not False for c in checked) and checked.count(True) >= 24


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")
def test_torchvision_ssd_transform_keeps_boxes_on_their_objects():
    from PIL import Image

    blobs, targets, _ = _square_scenes()
    t = peer_torchvision_ssd.v2_ssd()
    torch.manual_seed(0)  # v2 draws from torch's global generator
    checked = []
    for _ in range(3):
        for blob, target in zip(blobs, targets, strict=True):
            image = torch.from_numpy(np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"))).permute(2, 0, 1)
            out, boxes = peer_torchvision_ssd.transform_one(t, image.contiguous(), torch.from_numpy(target["boxes"]),
                                                            torch.from_numpy(target["labels"]))
            assert out.shape == (3, SSD_SIZE, SSD_SIZE) and out.dtype == torch.float16
            assert (boxes >= 0).all() and (boxes <= SSD_SIZE).all()
            if len(boxes):
                checked.append(_box_on_its_object(out.numpy(), boxes[0].numpy(), tolerance=8.0))
    assert all(c is not False for c in checked) and checked.count(True) >= 24


@pytest.mark.gpu
@needs_cuda
def test_ssd_runs_against_every_installed_peer_on_the_gpu(folder, capsys):
    from pixelpipe.tools.bench.gpu_peers import run_gpu_bench

    data = boxed_data(str(folder), 0, SSD_BOXES)
    results = run_gpu_bench(data.blobs, data.what, "ssd", "cuda", 2, 2, ["dali", "torchvision"], 1, True, True,
                            boxed=data)
    for r in results:
        if not r.note.startswith("not installed"):
            assert r.rate > 0 and r.images == len(data.blobs), f"{r.name}: {r.note}"
    capsys.readouterr()
