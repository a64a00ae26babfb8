"""examples/detection.py: its data path (a COCO-format set through the SSD and Faster R-CNN
recipes to torchvision's target dicts) everywhere; a few training steps where torchvision is."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from helpers import write_coco

from pixelpipe.readers import Coco

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "detection.py"


def load():
    spec = importlib.util.spec_from_file_location("example_detection", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", ["ssdlite", "fasterrcnn"])
def test_the_data_path_gives_what_torchvision_models_take(model, tmp_path):
    ex = load()
    reader = Coco(write_coco(tmp_path, 10, seed=4, fmt="JPEG"), skip_empty=True)
    steps = list(ex.batches(reader, ex.augmentations(model), 4, "cpu", 1, steps=4))
    assert len(steps) == 4
    for images, targets in steps:
        assert len(images) == len(targets) >= 1
        for x, t in zip(images, targets):
            assert x.shape == (3, ex.SIZE, ex.SIZE) and x.dtype == torch.float32 and 0 <= float(x.min()) <= float(x.max()) <= 1
            assert sorted(t) == ["boxes", "labels"] and t["boxes"].dtype == torch.float32 and t["labels"].dtype == torch.int64
            b = t["boxes"]
            assert ((b[:, 2] - b[:, 0] >= 2) & (b[:, 3] - b[:, 1] >= 2)).all() and (b >= 0).all() and (b <= ex.SIZE).all()


def test_the_synthetic_set_is_coco(tmp_path):
    ex = load()
    reader = Coco(ex.write_synthetic_coco(str(tmp_path), 3))
    assert len(reader) == 3 and reader.categories == {1: "red", 2: "green", 3: "blue"}
    assert all(len(reader.targets(i)["boxes"]) >= 1 for i in range(3))


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")
@pytest.mark.parametrize("model", ["ssdlite", "fasterrcnn"])
def test_training_steps(model, capsys):
    assert load().main(["--model", model, "--steps", "2", "--batch-size", "2", "--synthetic", "6",
                        "--device", "cpu", "--threads", "1"]) == 0
    assert capsys.readouterr().out.count("loss") == 2
