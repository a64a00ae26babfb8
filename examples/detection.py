"""Object detection: torchvision's Faster R-CNN (MobileNetV3, 320 px) or SSDlite trained on a
COCO-format dataset, fed by a pixelpipe Pipeline.

    python examples/detection.py                              # a small synthetic COCO set, a few steps
    python examples/detection.py --model ssdlite --steps 50
    python examples/detection.py --data annotations/instances_train2017.json --images train2017

The pipeline reads the COCO annotations (pixelpipe.readers.Coco: boxes, category ids and, with
--masks, instance masks), decodes only the region of each JPEG the crop needs, and runs the
detection augmentations in one warp: for SSDlite the SSD recipe (RandomZoomOut, RandomIoUCrop,
Resize 320, flip, colour jitter), for Faster R-CNN RandomShortestSize and a LetterBox to one
size. SanitizeBoxes drops the boxes the crops cut away, with their labels, and
`to_detection` hands the targets to the model as torchvision's detection models take them.
The model gets float images in [0, 1]: torchvision's detection models normalise by themselves.

Without --data a synthetic COCO-format set (coloured rectangles on noise, three categories) is
written to a temporary folder. Needs torchvision (any version with these models).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

import pixelpipe as pp
from pixelpipe.data.targets import to_detection
from pixelpipe.readers import Coco

SIZE = 320
MEAN_FILL = (124, 116, 104)  # SSD's zoom-out canvas: the ImageNet mean colour


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="a COCO instances JSON (default: a synthetic set in a temporary folder)")
    p.add_argument("--images", help="the folder its file names are relative to (default: the JSON's folder)")
    p.add_argument("--model", choices=("fasterrcnn", "ssdlite"), default="fasterrcnn")
    p.add_argument("--masks", action="store_true", help="read instance masks too (needs pycocotools)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--synthetic", type=int, default=24, help="images in the synthetic set")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    return p.parse_args(argv)


def write_synthetic_coco(root: str, n: int, seed: int = 0) -> str:
    """n JPEGs under root/images with 1..4 coloured rectangles each, and root/instances.json."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    colours = {1: (220, 40, 40), 2: (40, 200, 60), 3: (50, 80, 230)}
    images, anns = [], []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(160, 320, size=2))
        img = rng.integers(60, 140, size=(h, w, 3), dtype=np.uint8)
        for _ in range(int(rng.integers(1, 5))):
            bw, bh = (int(v) for v in rng.integers(24, 100, size=2))
            x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            cat = int(rng.integers(1, 4))
            img[y : y + bh, x : x + bw] = colours[cat]
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": cat, "iscrowd": 0, "area": bw * bh,
                         "bbox": [x, y, bw, bh], "segmentation": [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]]})
        name = f"images/{i:05d}.jpg"
        Image.fromarray(img).save(os.path.join(root, name), quality=90)
        images.append({"id": i, "file_name": name, "height": h, "width": w})
    path = os.path.join(root, "instances.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns,
                   "categories": [{"id": k, "name": n} for k, n in ((1, "red"), (2, "green"), (3, "blue"))]}, f)
    return path


def augmentations(model: str) -> pp.Compose:
    """The training ops of each model's recipe, ending in SanitizeBoxes."""
    if model == "ssdlite":
        ops = [pp.RandomZoomOut(fill=MEAN_FILL), pp.RandomIoUCrop(), pp.Resize((SIZE, SIZE)), pp.RandomFlip(),
               pp.ColorJitter(0.125, 0.5, 0.5, 0.05, p=0.5)]
    else:
        ops = [pp.RandomShortestSize((224, 256, 288, 320), SIZE), pp.RandomFlip(), pp.LetterBox(SIZE, anchor=(0.0, 0.0))]
    return pp.Compose([*ops, pp.SanitizeBoxes(min_size=2.0)])


def batches(reader: Coco, compose: pp.Compose, batch_size: int, device: str, threads: int, steps: int,
            seed: int = 0) -> Iterator[tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]]:
    """(images, targets) for `steps` steps, as torchvision's detection models take them:
    a list of [3, H, W] float images and a list of target dicts. Samples repeated to fill the
    last batch of an epoch (valid False) are left out."""
    made = 0
    with pp.Pipeline(reader, compose, batch_size, seed=seed, device=device, num_threads=threads) as pipe:
        while made < steps:
            for batch in pipe:
                keep = batch["valid"].tolist()
                images = [x for x, k in zip(batch["image"], keep) if k]
                targets = [t for t, k in zip(to_detection(batch), keep) if k]
                yield images, targets
                made += 1
                if made == steps:
                    return


def build_model(name: str, num_classes: int) -> Any:
    from torchvision.models import detection

    if name == "ssdlite":
        return detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=num_classes)
    return detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                           num_classes=num_classes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory(prefix="pixelpipe-detection-")
        args.data = write_synthetic_coco(tmp.name, args.synthetic)
    reader = Coco(args.data, args.images, masks="instances" if args.masks else None, skip_empty=True)
    num_classes = max(reader.categories) + 1  # category ids as labels, 0 the background
    model = build_model(args.model, num_classes).to(args.device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=4e-5)
    start, seen = time.perf_counter(), 0
    for step, (images, targets) in enumerate(batches(reader, augmentations(args.model), args.batch_size,
                                                     args.device, args.threads, args.steps), 1):
        losses = model(images, targets)
        loss = sum(losses.values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(images)
        print(f"step {step}  loss {float(loss):.4f}  images/s {seen / (time.perf_counter() - start):.1f}", flush=True)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
