"""The maskrcnn bench pipeline (`pixelpipe bench --pipeline maskrcnn`): LetterBox 1024 + flip +
normalise with boxes and instance masks. The generated masks (an ellipse per box, a polygon in
the COCO file, label images in memory), pixelpipe's rows through cli.main on the CPU, the GPU
rows on a CPU device (peers without a maskrcnn pipeline are rows saying so), and DALI's graph in
its CPU-only mode where DALI is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from pixelpipe.tools.bench.coco_boxes import (
    POLYGON_POINTS,
    boxed_data,
    ellipse_polygon,
    image_sizes,
    instance_masks,
    write_coco,
)
from pixelpipe.tools.bench.pipelines import MASKRCNN_SIZE, pipeline_ops


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pixelpipe.tools.datasets import synthetic

    root = tmp_path_factory.mktemp("jpegs")
    for i, (jpeg, _) in enumerate(synthetic(4, seed=7)):
        (root / f"{i:02d}.jpg").write_bytes(jpeg)
    return root


def test_a_box_mask_is_the_ellipse_inscribed_in_it():
    poly = np.array(ellipse_polygon(np.array([10.0, 20.0, 50.0, 40.0]))).reshape(-1, 2)
    assert poly.shape == (POLYGON_POINTS, 2)
    assert poly[:, 0].min() == pytest.approx(10.0) and poly[:, 0].max() == pytest.approx(50.0)
    assert poly[:, 1].min() == pytest.approx(20.0, abs=0.01) and poly[:, 1].max() == pytest.approx(40.0, abs=0.01)
    targets = [{"boxes": np.array([[0, 0, 40, 40], [20, 20, 60, 60]], np.float32)}]
    (mask,) = instance_masks(np.array([[64, 80]]), targets)
    assert mask.shape == (64, 80) and mask.dtype == np.uint8 and mask.flags.writeable
    assert set(np.unique(mask).tolist()) == {0, 1, 2}
    assert mask[40, 40] == 2  # the later box over the earlier one where they overlap
    area = (mask == 2).sum()
    assert abs(area - np.pi * 20 * 20) < 0.08 * np.pi * 20 * 20  # a 16-gon is about the ellipse
    with pytest.raises(ValueError, match="at most 255 masks"):
        instance_masks(np.array([[8, 8]]), [{"boxes": np.zeros((256, 4), np.float32)}])


def test_boxed_data_with_masks_from_the_synthetic_set_and_from_a_folder(folder: Path):
    data = boxed_data(None, 3, 2, masks=True)
    for blob_size, t in zip(image_sizes(data.blobs), data.targets):
        assert t["masks"].shape == tuple(blob_size) and t["masks"].max() == 2
    assert "random boxes and masks" in data.what
    on_disk = boxed_data(str(folder), 0, 3, masks=True)
    doc = json.loads(Path(on_disk.annotations).read_text())
    assert all(len(a["segmentation"][0]) == 2 * POLYGON_POINTS for a in doc["annotations"])
    assert all(t["masks"].max() == 3 for t in on_disk.targets)
    plain = json.loads(Path(write_coco(folder, sorted(folder.glob("*.jpg")), 2)).read_text())
    assert all("segmentation" not in a for a in plain["annotations"])  # ssd's file has none


@pytest.mark.skipif(importlib.util.find_spec("pycocotools") is None, reason="needs pycocotools (the coco extra)")
def test_the_coco_readers_masks_agree_with_the_in_memory_ones_along_edges_only(folder: Path):
    from pixelpipe.readers import Coco

    data = boxed_data(str(folder), 0, 3, masks=True)
    coco = Coco(data.annotations, data.root, masks="instances")
    for i, t in enumerate(data.targets):
        theirs = coco.targets(i)["masks"]
        assert theirs.shape == t["masks"].shape
        assert (theirs != t["masks"]).mean() < 0.02  # pycocotools and Pillow rasterise edges differently


def test_the_pipeline_fits_every_image_into_a_padded_square():
    from pixelpipe.ops import LetterBox

    ops = pipeline_ops("maskrcnn")
    assert isinstance(ops[0], LetterBox) and ops[0].size == (MASKRCNN_SIZE, MASKRCNN_SIZE)
    assert ops[0].anchor == (0.0, 0.0)


def test_pixelpipe_rows_on_the_cpu(capsys: pytest.CaptureFixture[str]):
    from pixelpipe.tools import cli

    assert cli.main(["bench", "--device", "cpu", "-n", "4", "--batch", "2", "--threads", "1", "--passes", "1",
                     "--pipeline", "maskrcnn", "--peers", "pillow", "--json", "--quiet"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    (row,) = doc["results"]
    assert row["name"] == "pixelpipe (cpu)" and row["images"] == 4 and row["images_per_s"] > 0
    assert "7 random boxes and masks per image" in doc["header"]
    assert "peer 'pillow' has no maskrcnn pipeline on the CPU" in out.err


def test_gpu_rows_on_a_cpu_device(folder: Path, capsys: pytest.CaptureFixture[str]):
    from pixelpipe.tools.bench.gpu_peers import run_gpu_bench

    data = boxed_data(str(folder), 0, 2, masks=True)
    results = run_gpu_bench(data.blobs, data.what, "maskrcnn", "cpu", 2, 1, ["all"], 1, True, True, boxed=data)
    names = [r.name for r in results]
    assert names == ["pixelpipe (files)", "pixelpipe (memory)", "torchvision", "kornia", "dali (files)",
                     "dali (memory)"]
    if importlib.util.find_spec("pycocotools") is not None:
        assert results[0].images == 4 and results[0].rate > 0
    else:  # the file row reads the COCO file's masks with pycocotools
        assert results[0].rate == 0 and results[0].note.startswith("not installed")
    assert results[1].images == 4 and results[1].rate > 0
    for r, peer in zip(results[2:4], ("torchvision", "kornia")):
        assert r.rate == 0 and f"{peer} has no maskrcnn pipeline in this bench" in r.note
    assert all(r.rate == 0 for r in results[4:])  # DALI runs only on CUDA: a failed row either way
    capsys.readouterr()


@pytest.mark.skipif(importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None,
                    reason="needs nvidia-dali")
def test_the_dali_graph_moves_masks_and_boxes_with_the_pixels():
    """DALI's CPU-only mode (the CPU decoder, no device), at a 128-pixel square: each image's
    longer side fitted to 128 at the top left, and every instance's mask pixels inside its box
    (relative to the fitted image) after the same flip, within 1.5 pixels."""
    from pixelpipe.tools.bench import peer_dali_maskrcnn
    from pixelpipe.tools.bench.batches import spans

    data = boxed_data(None, 6, 3, masks=True)
    sizes = image_sizes(data.blobs)
    plan = spans(6, 3)
    source = peer_dali_maskrcnn.memory_source(data.blobs, data.targets, sizes, plan)
    pipe = peer_dali_maskrcnn.build_pipeline(source, 3, 1, None, decoder="cpu", seed=3, size=128)
    pipe.build()
    checked = 0
    for b in range(2):  # external_source hands the samples over in order
        images, masks, boxes, labels = (out.as_array() for out in pipe.run())
        assert images.shape == (3, 3, 128, 128) and images.dtype == np.float16
        assert masks.shape == (3, 128, 128, 1) and masks.dtype == np.uint8
        for k in range(3):
            h, w = sizes[3 * b + k]
            fh, fw = h * 128 / max(h, w), w * 128 / max(h, w)
            assert not masks[k, int(np.ceil(fh)) + 1:].any() and not masks[k, :, int(np.ceil(fw)) + 1:].any()
            for j, (box, label) in enumerate(zip(boxes[k], labels[k])):
                ys, xs = np.nonzero(masks[k, :, :, 0] == j + 1)
                if label < 0 or len(xs) == 0:
                    continue  # padding, or a mask a later one covered
                x0, y0, x1, y1 = box * np.array([fw, fh, fw, fh])
                assert x0 - 1.5 <= xs.min() and xs.max() + 1 <= x1 + 1.5, (b, k, j)
                assert y0 - 1.5 <= ys.min() and ys.max() + 1 <= y1 + 1.5, (b, k, j)
                checked += 1
    assert checked >= 12
