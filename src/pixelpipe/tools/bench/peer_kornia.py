"""kornia contenders for the GPU bench (kornia.augmentation, 0.9).

kornia augments a batch tensor, so every image must first have the same size: each decoded
image is resized to 256x256 (bilinear, antialiased; the aspect ratio is not kept). Augment-only
does that once, outside the clock; full decodes with torchvision's nvJPEG and resizes inside it.
The crop windows are then drawn on the 256x256 image rather than on the original, which changes
which pixels are read, not how much work the augmentation does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from ...data.batch import ImageBatch
from .batches import CROP, augment_spans, spans
from .pipelines import IMAGENET_MEAN, IMAGENET_STD, SHEAR_DEGREES

RunPass = Callable[[int], Iterator[int]]
SIDE = 256  # every image is resized to SIDE x SIDE before kornia sees it


def kornia_transform(pipeline: str, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """float [N, 3, H, W] in [0, 1] -> normalised float16 [N, 3, 224, 224], parameters drawn
    per sample by kornia.augmentation.AugmentationSequential."""
    import kornia.augmentation as K

    if pipeline == "val":
        ops = [K.CenterCrop((CROP, CROP))]
    else:
        ops = [K.RandomResizedCrop((CROP, CROP), scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
               K.RandomHorizontalFlip(p=0.5)]
        if pipeline == "rich":
            ops += [K.RandomAffine(degrees=7, shear=SHEAR_DEGREES, p=1.0),
                    K.ColorJitter(0.2, 0.2, 0.2, 0.05, p=1.0)]
        elif pipeline == "randaugment":  # kornia's m runs over 0..30 as torchvision's 31 bins
            ops.append(K.auto.RandAugment(n=2, m=9))
        elif pipeline == "simclr":
            ops += [K.ColorJitter(0.8, 0.8, 0.8, 0.2, p=0.8), K.RandomGrayscale(p=0.2),
                    K.RandomGaussianBlur((23, 23), (0.1, 2.0), p=0.5)]
        elif pipeline != "rn50":
            raise ValueError(f"unknown pipeline {pipeline!r}")
    ops.append(K.Normalize(torch.tensor(IMAGENET_MEAN, device=device),
                           torch.tensor(IMAGENET_STD, device=device)))
    if pipeline == "randaugment":
        ops.append(K.RandomErasing(p=0.25))
    aug = K.AugmentationSequential(*ops).to(device)

    def apply(x: torch.Tensor) -> torch.Tensor:
        return aug(x).half()

    return apply


def square(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """CHW uint8 images -> float [N, 3, SIDE, SIDE] in [0, 255] (bilinear, antialiased)."""
    out = [F.interpolate(img[None].float(), size=(SIDE, SIDE), mode="bilinear",
                         antialias=True, align_corners=False) for img in images]
    return torch.cat(out)


def kornia_augment(images: ImageBatch, total: int, pipeline: str, device: torch.device) -> RunPass:
    """Augment-only: the decoded batch, resized to SIDE x SIDE once (untimed), as uint8."""
    apply = kornia_transform(pipeline, device)
    chw = [img.permute(2, 0, 1).to(device) for img in images.tolist()]
    batch = square(chw).round_().clamp_(0, 255).to(torch.uint8)
    plan = augment_spans(total, images)

    def run(epoch: int) -> Iterator[int]:
        for _, k in plan:
            out = apply(batch[:k].float().div_(255))
            yield out.shape[0]

    return run


def kornia_full(blobs: Sequence[bytes], pipeline: str, batch: int, device: torch.device) -> RunPass:
    """Full: torchvision nvJPEG batch decode, per-image resize to SIDE x SIDE, kornia."""
    from .peer_torchvision import encoded_tensors, gpu_decode

    data = encoded_tensors(blobs)
    apply = kornia_transform(pipeline, device)

    def run(epoch: int) -> Iterator[int]:
        for start, k in spans(len(data), batch):
            images = gpu_decode(data[start : start + k], device)
            out = apply(square(images).div_(255))
            yield out.shape[0]

    return run
