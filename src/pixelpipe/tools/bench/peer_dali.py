"""NVIDIA DALI contenders for the GPU bench (nvidia.dali, 2.x).

Files: fn.readers.file reads the files of a DALI file list from disk, shuffled, as its users
run it (the same list pixelpipe's file row reads). Full: fn.external_source feeds the encoded
files from memory (1-D uint8 numpy arrays); the "mixed" decoder
decodes on the GPU (with the ROI crop fused into the decoder for rn50 and rich). Augment-only:
fn.external_source feeds the already decoded HWC uint8 GPU images and fn.random_resized_crop
replaces the fused crop. Both read through DALIGenericIterator, so the timed output is a torch
tensor, as a training loop would get it.

The source cycles for ever and each pass pulls exactly its batches from the iterator; DALI keeps
its prefetch queue (default depth) full across passes, as it does with its own readers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ...data.batch import ImageBatch
from .batches import CROP, VAL_RESIZE, augment_spans, spans
from .pipelines import IMAGENET_MEAN, IMAGENET_STD, SHEAR_FACTOR

RunPass = Callable[[int], Iterator[int]]
AREA, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
HUE_DEGREES = 0.05 * 360  # ColorJitter's hue 0.05 (of a turn) in DALI's degrees


class Batches:
    """One pass of batches; iter() starts the pass again, which is what cycle= needs."""

    def __init__(self, items: Sequence[Any], plan: list[tuple[int, int]], repeat: bool) -> None:
        self.items, self.plan, self.repeat = items, plan, repeat

    def __iter__(self) -> Iterator[list[Any]]:
        for start, k in self.plan:
            yield list(self.items[:k] if self.repeat else self.items[start : start + k])


def _device_id(device: torch.device) -> int:
    if device.type != "cuda":
        raise ValueError(f"DALI runs on a CUDA device, not {device}")
    return device.index if device.index is not None else torch.cuda.current_device()


def build_pipeline(source: Batches | str, pipeline: str, batch: int, threads: int, device_id: int,
                   decoded: bool) -> Any:
    """The DALI pipeline for `pipeline`; `decoded` says whether the source gives HWC GPU images
    (augment-only) or encoded files; a str source is a file list fn.readers.file reads."""
    from nvidia.dali import fn, pipeline_def, types

    norm = {"dtype": types.FLOAT16, "output_layout": "CHW",
            "mean": [255 * m for m in IMAGENET_MEAN], "std": [255 * s for s in IMAGENET_STD]}

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id)
    def pipe() -> Any:
        if isinstance(source, str):
            encoded, _ = fn.readers.file(file_list=source, random_shuffle=True, name="files")
        elif decoded:
            images = fn.external_source(source=source, cycle="quiet", batch=True, device="gpu",
                                        layout="HWC", dtype=types.UINT8, ndim=3)
        else:
            encoded = fn.external_source(source=source, cycle="quiet", batch=True, device="cpu",
                                         dtype=types.UINT8, ndim=1)
        if pipeline == "val":
            if not decoded:
                images = fn.decoders.image(encoded, device="mixed", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=VAL_RESIZE)
            return fn.crop_mirror_normalize(images, crop=(CROP, CROP), **norm)
        if decoded:
            images = fn.random_resized_crop(images, size=(CROP, CROP), random_area=AREA,
                                           random_aspect_ratio=RATIO)
        else:
            images = fn.decoders.image_random_crop(encoded, device="mixed", output_type=types.RGB,
                                                   random_area=AREA, random_aspect_ratio=RATIO)
            images = fn.resize(images, resize_x=CROP, resize_y=CROP)
        if pipeline == "rich":
            images = _rich(fn, images)
        elif pipeline != "rn50":
            raise ValueError(f"unknown pipeline {pipeline!r}")
        return fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(probability=0.5), **norm)

    return pipe()


def _rich(fn: Any, images: Any) -> Any:
    """Rotation (+-7 degrees), x shear (+-0.1) about the centre, colour jitter, per sample."""
    images = fn.rotate(images, angle=fn.random.uniform(range=(-7.0, 7.0)), keep_size=True,
                       fill_value=0)
    sx = fn.random.uniform(range=(-SHEAR_FACTOR, SHEAR_FACTOR))
    matrix = fn.transforms.shear(shear=fn.stack(sx, sx * 0.0), center=[CROP / 2, CROP / 2])
    images = fn.warp_affine(images, matrix=matrix, fill_value=0)
    return fn.color_twist(images, brightness=fn.random.uniform(range=(0.8, 1.2)),
                          contrast=fn.random.uniform(range=(0.8, 1.2)),
                          saturation=fn.random.uniform(range=(0.8, 1.2)),
                          hue=fn.random.uniform(range=(-HUE_DEGREES, HUE_DEGREES)))


def _reader(source: Batches | str, pipeline: str, batch: int, threads: int, device: torch.device,
            decoded: bool, plan: list[tuple[int, int]]) -> RunPass:
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    pipe = build_pipeline(source, pipeline, batch, threads, _device_id(device), decoded)
    pipe.build()
    it = DALIGenericIterator([pipe], ["images"])

    def run(epoch: int) -> Iterator[int]:
        for _, size in plan:  # a reader fills its last batch with samples of the next pass: not counted
            out = next(it)[0]["images"]
            yield min(out.shape[0], size)

    return run


def dali_full(blobs: Sequence[bytes], pipeline: str, batch: int, threads: int,
              device: torch.device) -> RunPass:
    files = [np.frombuffer(bytearray(b), dtype=np.uint8) for b in blobs]  # writable copies
    plan = spans(len(files), batch)
    return _reader(Batches(files, plan, repeat=False), pipeline, batch, threads, device,
                   decoded=False, plan=plan)


def dali_files(file_list: str, total: int, pipeline: str, batch: int, threads: int,
               device: torch.device) -> RunPass:
    """fn.readers.file over a DALI file list ("path label" lines) of `total` files."""
    return _reader(file_list, pipeline, batch, threads, device, decoded=False, plan=spans(total, batch))


def dali_augment(images: ImageBatch, total: int, pipeline: str, threads: int,
                 device: torch.device) -> RunPass:
    plan = augment_spans(total, images)
    return _reader(Batches(images.tolist(), plan, repeat=True), pipeline, len(images), threads,
                   device, decoded=True, plan=plan)
