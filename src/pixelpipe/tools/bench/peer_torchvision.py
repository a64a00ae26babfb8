"""torchvision contenders for the GPU bench: nvJPEG decode + v2 transforms, and a CPU DataLoader.

v2 transforms draw one set of parameters per call, so a per-sample random augmentation of a
batch means one call per image; that is what a user of torchvision on the GPU writes, and what
is timed here. The CPU contender is the classic recipe: a DataLoader whose workers decode with
Pillow and run the same v2 transforms, then a pinned, non-blocking copy to the GPU.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ...data.batch import ImageBatch
from .batches import CROP, VAL_RESIZE, augment_spans, spans
from .pipelines import IMAGENET_MEAN, IMAGENET_STD, SHEAR_DEGREES

RunPass = Callable[[int], Iterator[int]]
JPEG_MAGIC = b"\xff\xd8\xff"


def v2_ops(pipeline: str) -> list[Any]:
    """The pipeline (a bench pipeline or a preset, as pillow_loop.pillow_ops has them) as a list
    of torchvision.transforms.v2 transforms, uint8 CHW in, float32 normalised out (the caller
    halves it)."""
    from torchvision.transforms import v2

    tail = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if pipeline in ("val", "imagenet_val"):
        return [v2.Resize(VAL_RESIZE, antialias=True), v2.CenterCrop(CROP), *tail]
    ops = [v2.RandomResizedCrop(CROP, antialias=True), v2.RandomHorizontalFlip()]
    if pipeline == "rich":
        ops += [v2.RandomAffine(degrees=7, shear=SHEAR_DEGREES),
                v2.ColorJitter(0.2, 0.2, 0.2, 0.05)]
    elif pipeline in ("randaugment", "deit"):  # on uint8, as torchvision's RandAugment expects; erasing after Normalize
        if pipeline == "deit":  # bicubic, as the preset
            ops[0] = v2.RandomResizedCrop(CROP, interpolation=v2.InterpolationMode.BICUBIC, antialias=True)
        return ops + [v2.RandAugment(2, 9)] + tail + [v2.RandomErasing(0.25, value="random")]
    elif pipeline == "simclr":
        ops += [v2.RandomApply([v2.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8), v2.RandomGrayscale(0.2),
                v2.RandomApply([v2.GaussianBlur(23, (0.1, 2.0))], p=0.5)]
    elif pipeline == "light":
        ops = [v2.RandomResizedCrop(CROP, scale=(0.35, 1.0), antialias=True), v2.RandomHorizontalFlip(),
               v2.RandomApply([v2.ColorJitter(0.1, 0.1)], p=0.5)]
    elif pipeline == "heavy":
        ops += [v2.RandomApply([v2.RandomAffine(15, (0.1, 0.1), (0.9, 1.1), 10)], p=0.5),
                v2.RandomPerspective(0.3, p=0.3),
                v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), v2.RandomGrayscale(0.2)]
    elif pipeline == "fastai_like":
        ops = [v2.Resize(CROP, antialias=True), v2.CenterCrop(CROP), v2.RandomHorizontalFlip(),
               v2.RandomPerspective(0.2, p=0.75), v2.RandomApply([v2.RandomRotation(10)], p=0.75),
               v2.RandomApply([v2.RandomAffine(0, scale=(1.0, 1.1))], p=0.75),
               v2.RandomApply([v2.ColorJitter(brightness=0.2)], p=0.75),
               v2.RandomApply([v2.ColorJitter(contrast=(0.8, 1.25))], p=0.75)]
    elif pipeline not in ("rn50", "imagenet_train"):
        raise ValueError(f"no torchvision pipeline {pipeline!r}")
    return ops + tail


def encoded_tensors(blobs: Sequence[bytes]) -> list[torch.Tensor]:
    """The files as 1-D uint8 CPU tensors (what decode_jpeg takes); JPEG only."""
    others = sum(not b.startswith(JPEG_MAGIC) for b in blobs)
    if others:
        raise ValueError(f"torchvision's GPU decoder reads JPEG only; {others} of {len(blobs)} "
                         "files are not JPEG")
    return [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]


def gpu_decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Batched nvJPEG decode: CHW uint8 RGB tensors on the device."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


def gpu_full(blobs: Sequence[bytes], pipeline: str, batch: int, device: torch.device) -> RunPass:
    from torchvision.transforms import v2

    data = encoded_tensors(blobs)
    t = v2.Compose(v2_ops(pipeline))

    def run(epoch: int) -> Iterator[int]:
        for start, k in spans(len(data), batch):
            images = gpu_decode(data[start : start + k], device)
            out = torch.stack([t(img).half() for img in images])
            yield out.shape[0]

    return run


def gpu_augment(images: ImageBatch, total: int, pipeline: str, device: torch.device) -> RunPass:
    from torchvision.transforms import v2

    # CHW and contiguous, as decode_jpeg gives them (made outside the clock)
    chw = [img.permute(2, 0, 1).contiguous().to(device) for img in images.tolist()]
    t = v2.Compose(v2_ops(pipeline))
    plan = augment_spans(total, images)

    def run(epoch: int) -> Iterator[int]:
        for _, k in plan:
            out = torch.stack([t(img).half() for img in chw[:k]])
            yield out.shape[0]

    return run


class PilDataset(Dataset):
    """Encoded images decoded with Pillow (RGB) and transformed on the CPU: float16 CHW."""

    def __init__(self, blobs: Sequence[bytes], pipeline: str) -> None:
        from torchvision.transforms import v2

        self.blobs = list(blobs)
        self.transform = v2.Compose([v2.ToImage(), *v2_ops(pipeline)])

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(self.blobs[i])) as im:
            rgb = im.convert("RGB")
        return self.transform(rgb).half().as_subclass(torch.Tensor)


def cpu_loader(blobs: Sequence[bytes], pipeline: str, batch: int, threads: int,
               device: torch.device) -> RunPass:
    """A DataLoader with `threads` persistent workers (started in the warm-up pass)."""
    loader = DataLoader(
        PilDataset(blobs, pipeline), batch_size=batch, num_workers=threads,
        pin_memory=device.type == "cuda", persistent_workers=threads > 0)

    def run(epoch: int) -> Iterator[int]:
        for x in loader:
            out = x.to(device, non_blocking=True)
            yield out.shape[0]

    return run
