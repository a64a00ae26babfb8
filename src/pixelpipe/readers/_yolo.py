"""Yolo: images with YOLO text labels (one ``.txt`` per image, one object per line)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from ._annotated import AnnotatedFiles
from ._base import IMAGE_EXTENSIONS, MAX_BYTES, ReaderError

__all__ = ["Yolo"]


class Yolo(AnnotatedFiles):
    """A YOLO-format dataset (ultralytics / darknet): ``images/.../x.jpg`` with
    ``labels/.../x.txt``, each line ``class cx cy w h`` in fractions of the image's width and
    height, or ``class x1 y1 x2 y2 ...`` (a segment's polygon, read as its enclosing box).

    Args:
        images: the folder of images (walked recursively, sorted).
        labels: the folder of label files, mirroring `images`; default: `images` with its last
            "images" path component replaced by "labels" (the ultralytics layout). An image
            without a label file has no boxes (a background image).
        classes: the class names (a dataset YAML's `names`), kept as `classes`.
        extensions: the file name extensions that count as images.
        max_bytes: a larger image file is an error when read.

    The boxes stay normalised centres and sizes: the reader's `box_format` is "cxcywhn", so
    build the Compose with ``box_format=reader.box_format`` (its output boxes then come in the
    same form, what YOLO losses take). Labels are the class numbers as written (from 0).
    Malformed lines fail here, naming the file and the line. Keypoints (pose labels) are not
    read.
    """

    box_format = "cxcywhn"

    def __init__(self, images: str | os.PathLike[str], labels: str | os.PathLike[str] | None = None,
                 classes: Sequence[str] | None = None, extensions: Iterable[str] = IMAGE_EXTENSIONS,
                 max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_bytes)
        self.images = os.fspath(images)
        if not os.path.isdir(self.images):
            raise ReaderError(f"Yolo: images folder {self.images!r} does not exist")
        if labels is None:  # the last "images" component of the path becomes "labels"
            parts = os.path.normpath(self.images).split(os.sep)
            if "images" not in parts:
                raise ReaderError(f"Yolo: {self.images!r} has no 'images' folder to mirror: give labels=")
            parts[len(parts) - 1 - parts[::-1].index("images")] = "labels"
            labels = os.sep.join(parts)
        self.labels_dir = os.fspath(labels)
        self.classes = None if classes is None else list(classes)
        exts = tuple("." + e.lower().lstrip(".") for e in ((extensions,) if isinstance(extensions, str) else extensions))
        if not exts:
            raise ReaderError("Yolo: extensions is empty; nothing would count as an image")
        for folder, dirs, files in os.walk(self.images):
            dirs.sort()
            for name in sorted(files):
                if name.lower().endswith(exts):
                    path = os.path.join(folder, name)
                    rel = os.path.splitext(os.path.relpath(path, self.images))[0] + ".txt"
                    self._paths.append(path)
                    self._targets.append(_parse(os.path.join(self.labels_dir, rel)))
        self._done(self.images)


def _parse(path: str) -> dict[str, np.ndarray]:
    boxes, labels = [], []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    except OSError as e:
        raise ReaderError(f"Yolo: cannot read {path!r}: {e}") from e
    for n, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        try:
            cls, values = int(fields[0]), np.array([float(v) for v in fields[1:]])
        except ValueError:
            raise ReaderError(f"Yolo: {path}:{n}: not a class number and coordinates: {line!r}") from None
        if len(values) == 4:
            box = values
        elif len(values) >= 6 and len(values) % 2 == 0:  # a polygon: its enclosing box
            xs, ys = values[0::2], values[1::2]
            box = np.array([(xs.min() + xs.max()) / 2, (ys.min() + ys.max()) / 2, xs.max() - xs.min(), ys.max() - ys.min()])
        else:
            raise ReaderError(f"Yolo: {path}:{n}: expected 'class cx cy w h' or a polygon 'class x1 y1 x2 y2 x3 y3 "
                              f"...', got {len(fields)} fields")
        if not np.isfinite(box).all():
            raise ReaderError(f"Yolo: {path}:{n}: non-finite coordinates: {line!r}")
        boxes.append(box)
        labels.append(cls)
    return {"boxes": np.array(boxes, dtype=np.float64).reshape(-1, 4), "labels": np.array(labels, dtype=np.int64)}
