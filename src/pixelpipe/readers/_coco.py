"""Coco: images with COCO instances (or person keypoints) annotations."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from typing import Any

import numpy as np

from . import _coco_native
from ._annotated import AnnotatedFiles, resolve
from ._base import MAX_BYTES, ReaderError

__all__ = ["Coco"]

MASKS = (None, "instances", "semantic")


def _mask_api() -> Any:
    try:
        from pycocotools import mask
    except ImportError:
        raise ImportError("Coco(masks=...) decodes COCO's polygons and run-length encodings with pycocotools: "
                          "pip install 'pixelpipe[coco]' (or pycocotools)") from None
    return mask


def _polygon_window(polygons: list[Any], h: int, w: int) -> tuple[int, int, int, int] | None:
    """(y0, x0, y1, x1): the whole pixels around the polygons' corners, x0 and y0 not below 0
    (a corner left of or above the image keeps its negative coordinate, as in a whole-image
    rasterisation), x1 and y1 not past the image; None when that leaves nothing. The whole
    image where a corner is not a finite number. Plain Python: a polygon has a few dozen."""
    xs = [float(v) for p in polygons for v in p[0::2]]
    ys = [float(v) for p in polygons for v in p[1::2]]
    if not xs or not ys:
        return None
    if not all(map(math.isfinite, xs + ys)):
        return (0, 0, h, w)
    x0, y0 = max(0, math.floor(min(xs))), max(0, math.floor(min(ys)))
    x1, y1 = min(w, math.ceil(max(xs)) + 1), min(h, math.ceil(max(ys)) + 1)
    return (y0, x0, y1, x1) if x1 > x0 and y1 > y0 else None


class Coco(AnnotatedFiles):
    """A COCO-format dataset: an instances JSON (``instances_train2017.json``, or
    ``person_keypoints_*.json``) and the folder of its images.

    Args:
        annotations: the JSON file.
        root: the folder the images' ``file_name`` is relative to (default: the JSON's folder).
        masks: None (default: no masks), "instances" (one label image per sample: pixel value
            k + 1 where box k's object is, 0 elsewhere; a later object overwrites an earlier
            one where they overlap) or "semantic" (the category id of the object there, 0
            elsewhere). Polygons and run-length encodings are decoded by pycocotools when a
            sample is read (the `coco` extra); uint8 when the values fit, int32 otherwise.
        crowd: keep the "iscrowd" annotations (default False: left out, as torchvision's
            detection references do).
        skip_empty: leave out images with no (kept) annotation.
        max_bytes: a larger image file is an error when read.

    Samples are the JSON's images sorted by id. Each sample's targets: "boxes" float64 [K, 4]
    (x0, y0, x1, y1) in pixels (COCO's [x, y, width, height] converted, clipped to the image;
    empty boxes left out with their annotation), "labels" int64 [K] (the category ids, as
    torchvision's COCO models count them: 1..90, 0 is the background), "image_id", and, in a
    keypoints file, "keypoints" float64 [K, J, 3] (x, y, v with COCO's v: 0 not labelled, 1
    hidden, 2 visible). `categories` maps category ids to names. The sample's "label" is None.

    Example:
        >>> coco = Coco("annotations/instances_val2017.json", "val2017", masks="instances")  # doctest: +SKIP
        >>> with pp.Pipeline(coco, pp.Compose([pp.LetterBox(640), pp.SanitizeBoxes()]), 16) as pipe:
        ...     targets = to_detection(next(iter(pipe)))                                       # doctest: +SKIP
    """

    def __init__(self, annotations: str | os.PathLike[str], root: str | os.PathLike[str] | None = None,
                 masks: str | None = None, crowd: bool = False, skip_empty: bool = False,
                 max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_bytes)
        if masks not in MASKS:
            raise ReaderError(f"Coco: masks must be None, 'instances' or 'semantic', got {masks!r}")
        self.masks = masks
        self._mask = _mask_api() if masks is not None else None
        self.native_masks = True  # polygons through readers/_coco_native.py where it is built
        self.annotations = os.fspath(annotations)
        self.root = os.fspath(root) if root is not None else os.path.dirname(self.annotations)
        try:
            with open(self.annotations, "rb") as f:
                data = json.load(f)
            images, anns = data["images"], data.get("annotations", [])
            self.categories: dict[int, str] = {int(c["id"]): str(c.get("name", c["id"]))
                                               for c in data.get("categories", [])}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ReaderError(f"Coco: cannot read {self.annotations!r} as COCO annotations: {e!r}") from e
        per_image: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for a in anns:
            if crowd or not a.get("iscrowd", 0):
                per_image[a.get("image_id")].append(a)
        joints = max((len(a.get("keypoints") or ()) // 3 for a in anns), default=0)
        self._segments: list[list[Any]] = []
        self._sizes: list[tuple[int, int]] = []
        for img in sorted(images, key=lambda m: m["id"]):
            try:
                t, segments = self._parse(img, per_image.get(img["id"], []), joints)
            except (KeyError, TypeError, ValueError) as e:
                raise ReaderError(f"Coco: {self.annotations!r}: image {img.get('id')!r} "
                                  f"({img.get('file_name')!r}): malformed annotation: {e!r}") from e
            if skip_empty and not len(t["boxes"]):
                continue
            self._paths.append(resolve(self.root, img["file_name"]))
            self._targets.append(t)
            self._segments.append(segments)
            self._sizes.append((int(img["height"]), int(img["width"])))
        self._done(self.annotations)
        most = max((len(s) for s in self._segments), default=0) if masks == "instances" else max(self.categories or [0])
        self._dtype = np.uint8 if most < 256 else np.int32

    @staticmethod
    def _parse(img: dict[str, Any], anns: list[dict[str, Any]], joints: int) -> tuple[dict[str, Any], list[Any]]:
        h, w = float(img["height"]), float(img["width"])
        xywh = np.array([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4)
        boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
        boxes = np.clip(boxes, 0.0, [w, h, w, h])
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        kept = [a for a, k in zip(anns, keep.tolist()) if k]
        t: dict[str, Any] = {"boxes": boxes[keep], "image_id": img["id"],
                             "labels": np.array([int(a["category_id"]) for a in kept], dtype=np.int64)}
        if joints:
            kp = np.zeros((len(kept), joints, 3))
            for k, a in enumerate(kept):
                v = np.asarray(a.get("keypoints") or (), dtype=np.float64).reshape(-1, 3)
                kp[k, : len(v)] = v
            t["keypoints"] = kp
        return t, [(a.get("segmentation"), int(a["category_id"])) for a in kept]

    def _complete(self, targets: list[dict[str, Any]], indices: list[int]) -> None:
        """The samples' masks, rasterised now, where masks were asked for."""
        if self._mask is not None:
            for t, i in zip(targets, indices):
                t["masks"] = self._rasterise(i)

    def _rasterise(self, i: int) -> np.ndarray:
        """Sample i's label image. A polygon object is rasterised by pycocotools inside the
        window of whole pixels around its corners (clipped to the image) and written there:
        the same pixels as a whole-image rasterisation (an integer shift of the corners shifts
        pycocotools' 5x grid by whole cells; tests/test_coco_masks.py compares), for the
        window's area instead of the image's: 3.4 -> 0.53 ms per sample of seven objects on
        ImageNet-sized images (one core). Whole-image rasterisation held a Pipeline's file reads
        to 324 samples/s on an H200 host (pycocotools holds the GIL, so the reader threads take
        turns). Where native/coco_masks.c is built, the polygon objects of a sample go to
        pycocotools' C functions in one call without the GIL (readers/_coco_native.py; set
        `native_masks = False` on the reader for the Python calls, its twin)."""
        h, w = self._sizes[i]
        out = np.zeros((h, w), dtype=self._dtype)
        lib = _coco_native.library() if self.native_masks else None
        pending: list[Any] = []  # polygon objects for one C call, written before any later object

        def flush() -> None:
            if pending:
                _coco_native.rasterise(lib, out, pending)
                pending.clear()

        for k, (segm, category) in enumerate(self._segments[i]):
            if not segm:
                continue
            value = k + 1 if self.masks == "instances" else category
            if isinstance(segm, list):  # polygons
                window = _polygon_window(segm, h, w)
                if window is None:
                    continue
                if lib is not None and _coco_native.takes(segm):
                    pending.append((window, segm, value))  # shifted into the window in C
                    continue
                flush()
                y0, x0, y1, x1 = window
                shifted = [[float(v) - (y0 if j & 1 else x0) for j, v in enumerate(p)] for p in segm]
                rle = self._mask.merge(self._mask.frPyObjects(shifted, y1 - y0, x1 - x0))
                out[y0:y1, x0:x1][self._mask.decode(rle).astype(bool)] = value
                continue
            flush()
            if isinstance(segm.get("counts"), list):  # uncompressed run lengths
                rle = self._mask.frPyObjects(segm, h, w)
            else:
                rle = segm
            out[self._mask.decode(rle).astype(bool)] = value
        flush()
        return out

    def __repr__(self) -> str:
        masks = f", masks={self.masks!r}" if self.masks else ""
        return f"Coco({self.annotations!r}, samples={len(self)}, boxes={int(self.box_counts().sum())}{masks})"
