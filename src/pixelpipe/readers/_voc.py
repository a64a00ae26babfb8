"""Voc: images with Pascal VOC XML annotations."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._annotated import AnnotatedFiles
from ._base import MAX_BYTES, ReaderError

__all__ = ["VOC_CLASSES", "Voc"]

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
               "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")


class Voc(AnnotatedFiles):
    """A Pascal VOC dataset: ``Annotations/<id>.xml`` beside ``JPEGImages/<id>.jpg``.

    Args:
        root: the folder holding Annotations/ and JPEGImages/ (VOCdevkit/VOC2012, say).
        split: the image set: the ids listed in ``ImageSets/Main/<split>.txt`` ("train",
            "val", "trainval"); None: every XML file of Annotations/, sorted.
        classes: the class names; an object's label is its name's position in it plus 1 (the
            20 VOC classes by default: aeroplane is 1, tvmonitor 20; 0 stays the background,
            as torchvision's detection models count). An object of another name is an error.
        difficult: keep the objects marked difficult (default True).
        max_bytes: a larger image file is an error when read.

    Each sample's targets: "boxes" float64 [K, 4] (x0, y0, x1, y1) in pixels and "labels"
    int64 [K]. VOC's corners are 1-based pixel numbers, both inclusive: a box
    (xmin, ymin, xmax, ymax) covers [xmin - 1, xmax) x [ymin - 1, ymax) here. The image file is
    the XML's <filename> in JPEGImages/. Malformed XML fails here, naming the file.
    """

    def __init__(self, root: str | os.PathLike[str], split: str | None = "train",
                 classes: Sequence[str] = VOC_CLASSES, difficult: bool = True, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_bytes)
        self.root = os.fspath(root)
        self.classes = list(classes)
        index = {c: k + 1 for k, c in enumerate(self.classes)}
        folder = os.path.join(self.root, "Annotations")
        if split is None:
            if not os.path.isdir(folder):
                raise ReaderError(f"Voc: {folder!r} is not a folder")
            ids = sorted(f[:-4] for f in os.listdir(folder) if f.endswith(".xml"))
            what = folder
        else:
            what = os.path.join(self.root, "ImageSets", "Main", f"{split}.txt")
            try:
                with open(what, encoding="utf-8") as f:
                    ids = [line.split()[0] for line in f if line.strip()]
            except OSError as e:
                raise ReaderError(f"Voc: cannot read the image set {what!r}: {e}") from e
        for name in ids:
            xml = os.path.join(folder, f"{name}.xml")
            try:
                tree = ET.parse(xml).getroot()
                file = tree.findtext("filename") or f"{name}.jpg"
                t = _objects(tree, index, difficult)
            except (OSError, ET.ParseError, ValueError, TypeError) as e:
                raise ReaderError(f"Voc: {xml!r}: {e}") from e
            self._paths.append(os.path.join(self.root, "JPEGImages", file))
            self._targets.append(t)
        self._done(what)


def _objects(tree: ET.Element, index: dict[str, int], difficult: bool) -> dict[str, Any]:
    boxes, labels = [], []
    for obj in tree.iter("object"):
        name = (obj.findtext("name") or "").strip()
        if name not in index:
            raise ValueError(f"object {name!r} is none of the classes ({', '.join(index)})")
        is_hard = (obj.findtext("difficult") or "0").strip() == "1"
        if is_hard and not difficult:
            continue
        box = obj.find("bndbox")
        if box is None:
            raise ValueError(f"object {name!r} has no <bndbox>")
        x0, y0, x1, y1 = (float(box.findtext(k) or "nan") for k in ("xmin", "ymin", "xmax", "ymax"))
        boxes.append((x0 - 1, y0 - 1, x1, y1))
        labels.append(index[name])
    return {"boxes": np.array(boxes, dtype=np.float64).reshape(-1, 4), "labels": np.array(labels, dtype=np.int64)}
