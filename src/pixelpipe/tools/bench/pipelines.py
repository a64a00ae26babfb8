"""The benchmark pipelines, defined once for pixelpipe (its peers define the same ones); a preset's
name (presets.PRESETS) works as a pipeline too (the CPU bench's Pillow loop has each of them)."""

from __future__ import annotations

import math

from ...ops import (
    CenterCrop,
    ColorJitter,
    Normalize,
    Op,
    RandAugment,
    RandomAffine,
    RandomErasing,
    RandomFlip,
    RandomResizedCrop,
    Resize,
)
from ...presets import IMAGENET_MEAN, IMAGENET_STD, PRESETS

PIPELINES = ("rn50", "rich", "val", "randaugment")
# what `pixelpipe bench --pipeline` takes: the pipelines, then the presets of one image per
# output (a preset with a batch op, yolo's Mosaic, has no per-image peer to compare with)
BENCH_PIPELINES = PIPELINES + tuple(n for n in PRESETS if n not in ("yolo",))
# DALI and kornia express shear as a matrix factor; 0.1 is atan(0.1) degrees for us
SHEAR_FACTOR = 0.1
SHEAR_DEGREES = math.degrees(math.atan(SHEAR_FACTOR))


def pipeline_ops(name: str, size: int = 224) -> list[Op]:
    """rn50: random resized crop, flip, normalise. rich: rn50 plus rotation (+-7 degrees), shear
    (+-0.1) and colour jitter (0.2, 0.2, 0.2, hue 0.05). val: resize 256, centre crop 224,
    normalise. randaugment: rn50's crop and flip, RandAugment(2, 9), normalise, RandomErasing(0.25)
    with noise. A preset's name: its ops at this size (normalised: the presets' default)."""
    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if name == "rn50":
        return [RandomResizedCrop(size), RandomFlip(0.5), norm]
    if name == "rich":
        return [RandomResizedCrop(size), RandomFlip(0.5),
                RandomAffine(degrees=7, shear=(-SHEAR_DEGREES, SHEAR_DEGREES)),
                ColorJitter(0.2, 0.2, 0.2, 0.05), norm]
    if name == "val":
        return [Resize(round(size * 256 / 224)), CenterCrop(size), norm]
    if name == "randaugment":
        return [RandomResizedCrop(size), RandomFlip(0.5), RandAugment(2, 9), norm, RandomErasing(0.25, value="random")]
    if name in PRESETS:
        return list(PRESETS[name](size).ops)
    raise ValueError(f"pipeline must be one of {', '.join(BENCH_PIPELINES)}, got {name!r}")
