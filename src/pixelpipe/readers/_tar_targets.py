"""Targets of a tar shard's sample (webdataset layout): boxes, labels and keypoints from its
`.json` member, a label mask from its `.seg.png` (or `.mask.png`) member.

The `.json` member is an object; its "boxes" ([K, 4]), "labels" (one class id per box) and
"keypoints" ([K, 2 or 3] or [K, J, 2 or 3]) become the sample's targets, and "box_format"
(default "xyxy"; any of pixelpipe's box formats, the normalised ones divided by the image's
width and height) says how its boxes are written. The mask is a single-channel PNG (mode L, P,
I;16 or I) of the image's size: an integer label image, read as it is stored (a palette image's
indices, not its colours). Anything else in the JSON ("label", "caption", ...) is left alone.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from ..data.targets import BOX_FORMATS, convert_boxes

__all__ = ["MASK_EXTS", "tar_targets"]

MASK_EXTS = ("seg.png", "mask.png")  # the label mask's member, first present wins
_SINGLE_CHANNEL = ("1", "L", "P", "I;16", "I;16B", "I;16L", "I")


def tar_targets(group: dict[str, Any], image_ext: str, source: str) -> dict[str, Any] | None:
    """The sample's targets from its members' bytes (None: it has none). A ValueError naming
    the member says what is wrong."""
    out: dict[str, Any] = {}
    raw = group.get("json")
    if raw is not None:
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{source}: .json member is not valid JSON: {e}") from None
        if isinstance(value, dict):
            out.update(_from_json(value, group[image_ext], source))
    mask_ext = next((e for e in MASK_EXTS if group.get(e) is not None), None)
    if mask_ext is not None:
        out["masks"] = _mask(group[mask_ext], f"{source} (.{mask_ext})")
    return out or None


def _from_json(value: dict[str, Any], image: bytes, source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "boxes" in value:
        fmt = value.get("box_format", "xyxy")
        if fmt not in BOX_FORMATS:
            raise ValueError(f"{source}: .json box_format must be one of {', '.join(BOX_FORMATS)}, got {fmt!r}")
        try:
            boxes = np.asarray(value["boxes"], dtype=np.float64).reshape(-1, 4)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: .json boxes must be [K, 4] numbers") from None
        wh = _size(image, source) if fmt.endswith("n") else None
        out["boxes"] = convert_boxes(boxes, fmt, "xyxy", wh)
    if "labels" in value:
        try:
            out["labels"] = np.asarray(value["labels"], dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: .json labels must be integers, one per box") from None
    if "keypoints" in value:
        try:
            out["keypoints"] = np.asarray(value["keypoints"], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: .json keypoints must be numbers ([K, 2 or 3] or [K, J, 2 or 3])") from None
    return out


def _size(image: bytes, source: str) -> np.ndarray:
    """(width, height) of the image, from its header (for normalised boxes)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(image)) as im:
            return np.array(im.size, dtype=np.float64)
    except Exception as e:  # any decoder complaint is the sample's
        raise ValueError(f"{source}: cannot read the image's size for normalised boxes: {e}") from None


def _mask(data: bytes, source: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.mode not in _SINGLE_CHANNEL:
                raise ValueError(f"{source}: a label mask must be a single-channel PNG (L, P, I;16 or I), "
                                 f"got mode {im.mode}")
            a = np.array(im)  # a writable copy (torch refuses read-only arrays)
    except ValueError:
        raise
    except Exception as e:  # a corrupt PNG is the sample's failure
        raise ValueError(f"{source}: the mask does not decode: {e}") from None
    return a.astype(np.uint8) if a.dtype == bool else a
