"""NVIDIA DALI's contender for the maskrcnn pipeline (nvidia.dali 2.x), from DALI's documented
operators. The same graph runs in DALI's CPU-only mode with the CPU decoder (build_pipeline's
decoder="cpu", device_id None), which tests/test_bench_maskrcnn.py runs where DALI is installed.

Files: fn.readers.coco reads the same COCO instances file the pixelpipe row reads, with
`pixelwise_masks=True` (each sample's masks as one label image, [H, W, 1] int32 holding each
object's category id: the reader rasterises the polygons; cast to uint8 for fn.resize), boxes as corners relative to the image,
shuffled. Memory: four
fn.external_source nodes feed the encoded files, the boxes (float32 [K, 4], relative corners),
the labels (int32 [K]) and the label images (uint8 [H, W, 1]), batch by batch, in step.

Then, per sample: decode on the GPU ("mixed"); fn.resize of the image (linear, antialiased) and
of its label image (nearest) so that the longer side is MASKRCNN_SIZE; one coin flips image,
mask (fn.flip) and boxes (fn.bb_flip); fn.crop_mirror_normalize pads the image to MASKRCNN_SIZE
square at the top left, normalises and writes float16 CHW; fn.crop pads the mask the same way.
Boxes and labels are padded to the longest of the batch (fn.pad, -1). Boxes stay relative to
the resized image (pixelpipe gives pixels of the padded square).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .peer_dali import Batches
from .peer_dali_ssd import detection_reader, fed_columns, relative_boxes
from .pipelines import IMAGENET_MEAN, IMAGENET_STD, MASKRCNN_SIZE

RunPass = Callable[[int], Iterator[int]]
OUTPUTS = ["images", "masks", "boxes", "labels"]


def augment(fn: Any, types: Any, images: Any, masks: Any, boxes: Any, labels: Any,
            size: int = MASKRCNN_SIZE) -> tuple[Any, Any, Any, Any]:
    """The maskrcnn graph on decoded images (HWC uint8) and their label images (HW1), boxes
    (relative corners) and labels: the images, masks, boxes and labels it outputs."""
    images = fn.resize(images, resize_longer=size, antialias=True)
    masks = fn.resize(masks, resize_longer=size, interp_type=types.INTERP_NN, antialias=False)
    flip = fn.random.coin_flip(probability=0.5)
    masks = fn.flip(masks, horizontal=flip)
    boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
    images = fn.crop_mirror_normalize(images, crop=(size, size), crop_pos_x=0.0, crop_pos_y=0.0,
                                      out_of_bounds_policy="pad", fill_values=0.0, mirror=flip,
                                      dtype=types.FLOAT16, output_layout="CHW",
                                      mean=[255 * m for m in IMAGENET_MEAN], std=[255 * s for s in IMAGENET_STD])
    masks = fn.crop(masks, crop=(size, size), crop_pos_x=0.0, crop_pos_y=0.0, out_of_bounds_policy="pad",
                    fill_values=0)
    return images, masks, fn.pad(boxes, fill_value=-1.0), fn.pad(labels, fill_value=-1)


def build_pipeline(source: tuple[Batches, Batches, Batches, Batches] | tuple[str, str], batch: int, threads: int,
                   device_id: int | None, decoder: str = "mixed", seed: int | None = None,
                   size: int = MASKRCNN_SIZE) -> Any:
    """The DALI pipeline: `source` is (images, boxes, labels, masks) batches for
    external_source, or (annotations file, image folder) for fn.readers.coco. decoder "cpu"
    with device_id None runs the same graph on the CPU alone (DALI's CPU-only mode; for tests)."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=seed)
    def pipe() -> Any:
        if isinstance(source[0], str):
            annotations, root = source
            encoded, boxes, labels, masks = fn.readers.coco(
                file_root=root, annotations_file=annotations, ltrb=True, ratio=True, pixelwise_masks=True,
                random_shuffle=True, name="coco")
            masks = fn.cast(masks, dtype=types.UINT8)  # int32 from the reader; fn.resize takes uint8
        else:
            encoded, boxes, labels = fed_columns(fn, types, *source[:3])
            masks = fn.external_source(source=source[3], cycle="quiet", batch=True, device="cpu",
                                       dtype=types.UINT8, ndim=3, layout="HWC")
        images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB)
        if decoder == "mixed":
            masks = masks.gpu()
        return augment(fn, types, images, masks, boxes, labels, size)

    return pipe()


def memory_source(blobs: Sequence[bytes], targets: Sequence[dict[str, np.ndarray]], sizes: np.ndarray,
                  plan: list[tuple[int, int]]) -> tuple[Batches, Batches, Batches, Batches]:
    """The four external_source columns (files, relative boxes, labels, HW1 label images)."""
    files = [np.frombuffer(bytearray(b), dtype=np.uint8) for b in blobs]  # writable copies
    boxes, labels = relative_boxes(targets, sizes)
    masks = [np.ascontiguousarray(np.asarray(t["masks"], dtype=np.uint8)[..., None]) for t in targets]
    return (Batches(files, plan, repeat=False), Batches(boxes, plan, repeat=False),
            Batches(labels, plan, repeat=False), Batches(masks, plan, repeat=False))


def dali_maskrcnn_memory(blobs: Sequence[bytes], targets: Sequence[dict[str, np.ndarray]], sizes: np.ndarray,
                         batch: int, threads: int, device: torch.device) -> RunPass:
    """external_source of the in-memory files, boxes and label images; `sizes` are the images'
    (height, width), to make the boxes relative."""
    return detection_reader(build_pipeline, lambda plan: memory_source(blobs, targets, sizes, plan), OUTPUTS,
                            len(blobs), batch, threads, device)


def dali_maskrcnn_coco(annotations: str, root: str, total: int, batch: int, threads: int,
                       device: torch.device) -> RunPass:
    """fn.readers.coco (pixelwise masks) over a COCO instances file of `total` images under `root`."""
    return detection_reader(build_pipeline, (annotations, root), OUTPUTS, total, batch, threads, device)
