"""The benchmark pipelines, defined once for pixelpipe (its peers define the same ones)."""

from __future__ import annotations

import math

from ...ops import (
    CenterCrop,
    ColorJitter,
    Normalize,
    Op,
    RandomAffine,
    RandomFlip,
    RandomResizedCrop,
    Resize,
)
from ...presets import IMAGENET_MEAN, IMAGENET_STD

PIPELINES = ("rn50", "rich", "val")
# DALI and kornia express shear as a matrix factor; 0.1 is atan(0.1) degrees for us
SHEAR_FACTOR = 0.1
SHEAR_DEGREES = math.degrees(math.atan(SHEAR_FACTOR))


def pipeline_ops(name: str, size: int = 224) -> list[Op]:
    """rn50: random resized crop, flip, normalise. rich: rn50 plus rotation (+-7 degrees), shear
    (+-0.1) and colour jitter (0.2, 0.2, 0.2, hue 0.05). val: resize 256, centre crop 224,
    normalise."""
    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if name == "rn50":
        return [RandomResizedCrop(size), RandomFlip(0.5), norm]
    if name == "rich":
        return [RandomResizedCrop(size), RandomFlip(0.5),
                RandomAffine(degrees=7, shear=(-SHEAR_DEGREES, SHEAR_DEGREES)),
                ColorJitter(0.2, 0.2, 0.2, 0.05), norm]
    if name == "val":
        return [Resize(round(size * 256 / 224)), CenterCrop(size), norm]
    raise ValueError(f"pipeline must be one of {', '.join(PIPELINES)}, got {name!r}")
