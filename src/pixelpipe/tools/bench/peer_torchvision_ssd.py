"""torchvision's contender for the ssd pipeline on the GPU: nvJPEG batch decode, then per image
the v2 transforms on the image and its targets (a tv_tensors.BoundingBoxes and the labels).

The pipeline is torchvision's SSD recipe with pipelines.py's settings: RandomZoomOut (black
canvas, side 1-4x, p 0.5), RandomIoUCrop, RandomHorizontalFlip, Resize to 300x300, ColorJitter,
to float and Normalize, SanitizeBoundingBoxes (which also drops the dropped boxes' labels). v2
transforms draw one set of parameters per call, so the per-sample augmentation of a batch is one
call per image, as a torchvision user on the GPU writes it. The boxes stay on the CPU, where a
Dataset would give them (torchvision's box kernels are a few small tensor ops, which launch
faster there); the images are on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .batches import spans
from .peer_torchvision import encoded_tensors, gpu_decode
from .pipelines import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    JITTER,
    SSD_IOUS,
    SSD_RATIO,
    SSD_SCALE,
    SSD_SIZE,
    SSD_TRIALS,
    SSD_ZOOM,
    SSD_ZOOM_P,
)

RunPass = Callable[[int], Iterator[int]]


def v2_ssd() -> Any:
    """The ssd pipeline as one v2.Compose over (image, {"boxes": BoundingBoxes, "labels": ...})."""
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomZoomOut(fill=0, side_range=SSD_ZOOM, p=SSD_ZOOM_P),
        v2.RandomIoUCrop(min_scale=SSD_SCALE[0], max_scale=SSD_SCALE[1], min_aspect_ratio=SSD_RATIO[0],
                         max_aspect_ratio=SSD_RATIO[1], sampler_options=list(SSD_IOUS), trials=SSD_TRIALS),
        v2.RandomHorizontalFlip(),
        v2.Resize((SSD_SIZE, SSD_SIZE), antialias=True),
        v2.ColorJitter(*JITTER),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        v2.SanitizeBoundingBoxes(),
    ])


def transform_one(t: Any, image: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One CHW uint8 image and its xyxy pixel boxes through `t`: the float16 image and the boxes."""
    from torchvision import tv_tensors

    h, w = image.shape[-2:]
    target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(int(h), int(w))),
              "labels": labels}
    out, moved = t(tv_tensors.Image(image), target)
    return out.as_subclass(torch.Tensor).half(), moved["boxes"].as_subclass(torch.Tensor)


def gpu_ssd(blobs: Sequence[bytes], targets: Sequence[dict[str, np.ndarray]], batch: int,
            device: torch.device) -> RunPass:
    data = encoded_tensors(blobs)
    boxes = [torch.from_numpy(np.asarray(t["boxes"], np.float32)) for t in targets]
    labels = [torch.from_numpy(np.asarray(t["labels"], np.int64)) for t in targets]
    t = v2_ssd()

    def run(epoch: int) -> Iterator[int]:
        for start, k in spans(len(data), batch):
            images = gpu_decode(data[start : start + k], device)
            outs = [transform_one(t, img, boxes[start + j], labels[start + j]) for j, img in enumerate(images)]
            out = torch.stack([o[0] for o in outs])
            yield out.shape[0]

    return run
