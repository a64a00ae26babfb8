"""Boxed data for the bench: random boxes per image (seeded), a COCO instances file that holds
them, and the images with their targets as every contender of the ssd pipeline (and of
`--boxes N`) gets them. For the maskrcnn pipeline each box also has an instance mask: the
ellipse inscribed in it, written to the COCO file as a polygon (POLYGON_POINTS corners) and
given to the in-memory contenders as label images (pixel value k + 1 where box k's ellipse is,
a later box over an earlier one: the Coco reader's masks="instances").

A folder of images is given COCO annotations the way a detection dataset has them: the boxes
are drawn, written to a COCO instances JSON in a temporary folder (removed at exit), and read
back with pixelpipe's `Coco` reader, so the targets every contender starts from are what that
reader gives. DALI's `fn.readers.coco` reads the same file. A folder that already holds
``annotations/instances_*.json`` (COCO's layout) is read as it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .images import image_files, load_images, temporary_folder

CATEGORIES = 80  # COCO's detection classes; labels are drawn from 1..CATEGORIES
SIDE = (0.05, 0.5)  # a random box's width and height, as fractions of the image's
POLYGON_POINTS = 16  # corners of the polygon that stands for a box's elliptic mask


@dataclass
class BoxedData:
    """Encoded images with their targets: "boxes" float32 [K, 4] (x0, y0, x1, y1 in pixels of
    the image as displayed), "labels" int64 [K] and, with masks, "masks" (uint8 [H, W] instance
    label image) per image. `annotations` and `root`: the
    COCO file and its image folder when the images came from a folder (None for the synthetic
    set), and `files` the images' paths in the order of `blobs`. `what` describes the data
    (with where the boxes came from) for the bench's header."""

    blobs: list[bytes]
    targets: list[dict[str, np.ndarray]]
    what: str
    annotations: str | None = None
    root: str | None = None
    files: list[str] | None = None

    def samples(self) -> list[dict[str, Any]]:
        """Dict samples (image, boxes, labels) for a `Memory` reader."""
        return [{"image": b, **t} for b, t in zip(self.blobs, self.targets)]

    @property
    def box_count(self) -> int:
        return sum(len(t["boxes"]) for t in self.targets)


def image_sizes(blobs: Sequence[bytes]) -> np.ndarray:
    """(height, width) of each encoded image as displayed (EXIF orientation applied), int64 [N, 2]."""
    from ...decode import read_header

    return np.array([read_header(b).oriented_size for b in blobs], dtype=np.int64).reshape(-1, 2)


def random_boxes(sizes: np.ndarray, k: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """k boxes per image of `sizes` ([N, 2], height and width): each side a fraction in SIDE of
    the image's, at a uniform position inside it; labels uniform in 1..CATEGORIES. Image i's
    boxes depend only on (seed, i)."""
    if k < 0:
        raise ValueError(f"boxes per image must be >= 0, got {k}")
    out = []
    for i, (h, w) in enumerate(np.asarray(sizes, dtype=np.float64)):
        rng = np.random.default_rng((seed, i))
        bw, bh = rng.uniform(*SIDE, k) * w, rng.uniform(*SIDE, k) * h
        x0, y0 = rng.uniform(0, 1, k) * (w - bw), rng.uniform(0, 1, k) * (h - bh)
        boxes = np.stack([x0, y0, x0 + bw, y0 + bh], 1).astype(np.float32).reshape(k, 4)
        out.append({"boxes": boxes, "labels": rng.integers(1, CATEGORIES + 1, k).astype(np.int64)})
    return out


def ellipse_polygon(box: np.ndarray, points: int = POLYGON_POINTS) -> list[float]:
    """The ellipse inscribed in `box` (x0, y0, x1, y1) as a COCO polygon [x, y, x, y, ...]."""
    x0, y0, x1, y1 = (float(v) for v in box)
    t = np.arange(points) * (2 * np.pi / points)
    xs, ys = (x0 + x1) / 2 + (x1 - x0) / 2 * np.cos(t), (y0 + y1) / 2 + (y1 - y0) / 2 * np.sin(t)
    return np.stack([xs, ys], 1).reshape(-1).round(2).tolist()


def instance_masks(sizes: np.ndarray, targets: Sequence[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """Each image's label image (uint8 [H, W]): k + 1 inside box k's ellipse polygon, 0 elsewhere,
    later boxes over earlier ones (Pillow's polygon fill; pycocotools rasterises the file's
    polygons for the Coco reader, within a pixel of these along the edges)."""
    from PIL import Image, ImageDraw

    out = []
    for (h, w), t in zip(np.asarray(sizes), targets):
        if len(t["boxes"]) > 255:
            raise ValueError(f"at most 255 masks per image fit a uint8 label image, got {len(t['boxes'])}")
        im = Image.new("L", (int(w), int(h)), 0)
        draw = ImageDraw.Draw(im)
        for k, box in enumerate(np.asarray(t["boxes"], dtype=np.float64)):
            draw.polygon(ellipse_polygon(box), fill=k + 1)
        out.append(np.array(im))  # a writable copy (torch takes it as it is)
    return out


def coco_json(names: Sequence[str], sizes: np.ndarray, targets: Sequence[dict[str, np.ndarray]],
              masks: bool = False) -> dict[str, Any]:
    """A COCO instances document: image i is `names[i]` of `sizes[i]` (height, width), its boxes
    written as COCO's [x, y, width, height] with their area, none of them crowds; with `masks`,
    each box's ellipse polygon as its segmentation."""
    images, anns = [], []
    for i, (name, (h, w), t) in enumerate(zip(names, sizes, targets)):
        images.append({"id": i + 1, "file_name": name, "height": int(h), "width": int(w)})
        for box, label in zip(np.asarray(t["boxes"], dtype=np.float64), t["labels"]):
            x, y, bw, bh = float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])
            ann = {"id": len(anns) + 1, "image_id": i + 1, "category_id": int(label),
                   "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0}
            if masks:
                ann["segmentation"] = [ellipse_polygon(box)]
            anns.append(ann)
    categories = [{"id": c, "name": f"class{c}", "supercategory": "none"} for c in range(1, CATEGORIES + 1)]
    return {"info": {"description": "pixelpipe bench: random boxes"}, "images": images,
            "annotations": anns, "categories": categories}


def write_coco(folder: str | os.PathLike[str], files: Sequence[Path], k: int, seed: int = 0,
               masks: bool = False) -> str:
    """Draw k random boxes per image of `files` (all under `folder`) and write them as a COCO
    instances JSON in a new temporary folder (removed at exit); returns the JSON's path. The
    images' file_name is their path relative to `folder`. masks: each box's ellipse polygon too."""
    blobs_sizes = image_sizes([p.read_bytes() for p in files])
    names = [str(p.relative_to(folder)) for p in files]
    doc = coco_json(names, blobs_sizes, random_boxes(blobs_sizes, k, seed), masks)
    path = os.path.join(temporary_folder("coco"), "instances_bench.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def found_annotations(folder: str) -> tuple[str, str] | None:
    """COCO's layout in `folder`: the first ``annotations/instances_*.json`` and the image folder
    it names (``instances_val2017.json`` -> ``val2017/`` where that exists, else `folder`)."""
    found = sorted(Path(folder).glob("annotations/instances_*.json"))
    if not found:
        return None
    split = Path(folder) / found[0].stem.removeprefix("instances_")
    return str(found[0]), str(split if split.is_dir() else folder)


def boxed_data(data: str | None, n: int, k: int, seed: int = 0, masks: bool = False) -> BoxedData:
    """The images and targets of a boxed bench run. No `data`: the synthetic set (n images) with
    k random boxes each. A folder with COCO annotations: those. A folder of images: k random
    boxes each, through a generated COCO file read back by pixelpipe's Coco reader. masks: each
    image's instance label image too (the generated ellipses; a given COCO file's own masks,
    which pycocotools decodes)."""
    from ...readers import Coco

    if data is None:
        blobs, what = load_images(None, n, seed)
        sizes = image_sizes(blobs)
        targets = random_boxes(sizes, k, seed)
        if masks:
            for t, m in zip(targets, instance_masks(sizes, targets)):
                t["masks"] = m
        return BoxedData(blobs, targets, f"{what}, {k} random boxes{' and masks' if masks else ''} per image "
                                         f"(seed {seed})")
    given = found_annotations(data)
    if given is not None:
        annotations, root = given
        how = f"COCO annotations {annotations}"
    else:
        annotations, root = write_coco(data, image_files(data), k, seed, masks), data
        how = f"{k} random boxes{' and masks' if masks else ''} per image (seed {seed}) in a generated COCO file"
    coco = Coco(annotations, root)  # boxes only: the masks below come without pycocotools where they can
    files = [coco.sources(i) for i in range(len(coco))]
    blobs = [Path(f).read_bytes() for f in files]
    targets = [{"boxes": np.asarray(t["boxes"], np.float32), "labels": np.asarray(t["labels"], np.int64)}
               for t in (coco.targets(i) for i in range(len(coco)))]
    if masks:
        if given is not None:
            made = Coco(annotations, root, masks="instances")
            label_images = [made.targets(i)["masks"] for i in range(len(made))]
        else:
            label_images = instance_masks(image_sizes(blobs), targets)
        for t, m in zip(targets, label_images):
            t["masks"] = m
    return BoxedData(blobs, targets, f"{data} ({len(blobs)} files), {how}", annotations, root, files)
