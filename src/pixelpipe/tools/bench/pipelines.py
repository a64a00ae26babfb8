"""The benchmark pipelines, defined once for pixelpipe (its peers define the same ones); a preset's
name (presets.PRESETS) works as a pipeline too (the CPU bench's Pillow loop has each of them).
ssd and maskrcnn are the detection pipelines: their samples carry boxes and labels, maskrcnn's
also instance masks (coco_boxes.py). The video
pipeline (video.py) augments every frame of a clip with video_ops."""

from __future__ import annotations

import math

from ...ops import (
    BatchOp,
    CenterCrop,
    ColorJitter,
    LetterBox,
    Normalize,
    Op,
    RandAugment,
    RandomAffine,
    RandomErasing,
    RandomFlip,
    RandomIoUCrop,
    RandomResizedCrop,
    RandomZoomOut,
    Resize,
    SanitizeBoxes,
)
from ...presets import IMAGENET_MEAN, IMAGENET_STD, PRESETS

PIPELINES = ("rn50", "rich", "val", "randaugment", "ssd", "maskrcnn")
DETECTION = ("ssd", "maskrcnn")  # pipelines whose samples carry boxes (and maskrcnn's masks)
# what `pixelpipe bench --pipeline` takes: the pipelines, then the presets of one image per
# output (a preset with a batch op, yolo's Mosaic, has no per-image peer to compare with)
BENCH_PIPELINES = PIPELINES + tuple(n for n, make in PRESETS.items()
                                    if not any(isinstance(op, BatchOp) for op in make().ops))
# DALI and kornia express shear as a matrix factor; 0.1 is atan(0.1) degrees for us
SHEAR_FACTOR = 0.1
SHEAR_DEGREES = math.degrees(math.atan(SHEAR_FACTOR))
# ssd: the output side, the zoom-out's canvas side range and probability, the IoU crop's minimum
# IoUs (1.0: no crop), scales, aspect ratios and trials, and the colour jitter (rich's)
SSD_SIZE = 300
SSD_ZOOM, SSD_ZOOM_P = (1.0, 4.0), 0.5
SSD_IOUS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
SSD_SCALE, SSD_RATIO, SSD_TRIALS = (0.3, 1.0), (0.5, 2.0), 40
JITTER = (0.2, 0.2, 0.2, 0.05)
# maskrcnn: every image fitted into a MASKRCNN_SIZE square keeping its aspect, at the top left
MASKRCNN_SIZE = 1024
# video: clips of CLIP_FRAMES frames CLIP_STRIDE apart, normalised with the Kinetics statistics
CLIP_FRAMES, CLIP_STRIDE = 16, 2
VIDEO_MEAN, VIDEO_STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)


def pipeline_ops(name: str, size: int = 224) -> list[Op]:
    """rn50: random resized crop, flip, normalise. rich: rn50 plus rotation (+-7 degrees), shear
    (+-0.1) and colour jitter (0.2, 0.2, 0.2, hue 0.05). val: resize 256, centre crop 224,
    normalise. randaugment: rn50's crop and flip, RandAugment(2, 9), normalise, RandomErasing(0.25)
    with noise. ssd: zoom-out (canvas side 1-4x, p 0.5, black), the SSD IoU crop, flip, resize to
    300x300 (whatever `size`), rich's colour jitter, normalise, and SanitizeBoxes (the boxes that
    left the picture or shrank below a pixel dropped), as torchvision's SSD recipe. maskrcnn:
    LetterBox to 1024x1024 (the aspect kept, the image at the top left, padded right and bottom
    with black, as Mask R-CNN's batches are), flip, normalise; its boxes and instance masks
    follow (masks by nearest; `size` is ignored). A preset's
    name: its ops at this size (normalised: the presets' default)."""
    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if name == "rn50":
        return [RandomResizedCrop(size), RandomFlip(0.5), norm]
    if name == "rich":
        return [RandomResizedCrop(size), RandomFlip(0.5),
                RandomAffine(degrees=7, shear=(-SHEAR_DEGREES, SHEAR_DEGREES)),
                ColorJitter(*JITTER), norm]
    if name == "val":
        return [Resize(round(size * 256 / 224)), CenterCrop(size), norm]
    if name == "randaugment":
        return [RandomResizedCrop(size), RandomFlip(0.5), RandAugment(2, 9), norm, RandomErasing(0.25, value="random")]
    if name == "ssd":
        return [RandomZoomOut(side_range=SSD_ZOOM, p=SSD_ZOOM_P),
                RandomIoUCrop(*SSD_SCALE, *SSD_RATIO, sampler_options=SSD_IOUS, trials=SSD_TRIALS),
                RandomFlip(0.5), Resize((SSD_SIZE, SSD_SIZE)), ColorJitter(*JITTER), norm, SanitizeBoxes()]
    if name == "maskrcnn":
        return [LetterBox(MASKRCNN_SIZE, anchor=(0.0, 0.0)), RandomFlip(0.5), norm]
    if name in PRESETS:
        return list(PRESETS[name](size).ops)
    raise ValueError(f"pipeline must be one of {', '.join(BENCH_PIPELINES)}, got {name!r}")


def video_ops(size: int = 224) -> list[Op]:
    """The video pipeline's ops for each frame of a clip (one draw per clip): random resized
    crop, flip, normalise with the Kinetics statistics."""
    return [RandomResizedCrop(size), RandomFlip(0.5), Normalize(VIDEO_MEAN, VIDEO_STD)]
