"""NVIDIA DALI's contender for the ssd pipeline (nvidia.dali 2.x), from DALI's documented
operators. The same graph runs in DALI's CPU-only mode with the CPU decoder (build_pipeline's
decoder="cpu", device_id None): tests/test_bench_boxes.py checks there, with DALI 2.4, that every
box still frames its object; the mixed decoder and the GPU operators run only on a GPU.

Files: fn.readers.coco reads the same COCO instances file the pixelpipe row reads (boxes as
corners, relative to the image: ltrb=True, ratio=True), shuffled. Memory: three
fn.external_source nodes feed the encoded files (1-D uint8), their boxes (float32 [K, 4],
corners relative to the image) and labels (int32 [K]), batch by batch, in step.

Then, per sample: decode on the GPU ("mixed"); zoom-out with probability 0.5 (fn.paste on a
black canvas 1-4x the image's side, fn.bbox_paste moving the boxes with the same draws); the SSD
crop (fn.random_bbox_crop on the CPU: minimum IoU from 0.0-0.9 or no crop, scale 0.3-1.0,
aspect ratio 0.5-2.0) applied with fn.slice on the GPU; a horizontal flip (fn.bb_flip for the
boxes, crop_mirror_normalize's mirror for the pixels, one coin for both); fn.resize to 300x300;
colour jitter (fn.color_twist); fn.crop_mirror_normalize to float16 CHW. Boxes and labels are
padded to the longest of the batch (fn.pad, -1) so that DALIGenericIterator can hand them over as
tensors. Boxes stay relative to the image (pixelpipe and torchvision give pixels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .batches import spans
from .peer_dali import HUE_DEGREES, Batches, _device_id
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
OUTPUTS = ["images", "boxes", "labels"]


def relative_boxes(targets: Sequence[dict[str, np.ndarray]], sizes: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each sample's boxes as DALI's readers give them with ratio=True (corners divided by the
    image's width and height, float32 [K, 4]) and its labels as int32 [K]."""
    boxes, labels = [], []
    for t, (h, w) in zip(targets, np.asarray(sizes, dtype=np.float64)):
        scale = np.array([w, h, w, h], dtype=np.float64)
        boxes.append(np.ascontiguousarray(np.asarray(t["boxes"], np.float64).reshape(-1, 4) / scale, dtype=np.float32))
        labels.append(np.ascontiguousarray(t["labels"], dtype=np.int32))
    return boxes, labels


def augment(fn: Any, types: Any, images: Any, boxes: Any, labels: Any) -> tuple[Any, Any, Any]:
    """The ssd graph on decoded images (HWC uint8; on the GPU, or the CPU in CPU-only mode) and
    their boxes (relative corners, on the CPU): the images, boxes and labels it outputs."""
    lo, hi = SSD_ZOOM
    zoom = fn.cast(fn.random.coin_flip(probability=SSD_ZOOM_P), dtype=types.FLOAT)
    ratio = 1.0 + zoom * (fn.random.uniform(range=(lo, hi)) - 1.0)  # 1.0: no zoom-out
    px, py = fn.random.uniform(range=(0.0, 1.0)), fn.random.uniform(range=(0.0, 1.0))
    images = fn.paste(images, ratio=ratio, paste_x=px, paste_y=py, fill_value=(0, 0, 0))
    boxes = fn.bbox_paste(boxes, ratio=ratio, paste_x=px, paste_y=py, ltrb=True)
    anchor, shape, boxes, labels = fn.random_bbox_crop(
        boxes, labels, device="cpu", bbox_layout="xyXY", thresholds=[m for m in SSD_IOUS if m < 1.0],
        allow_no_crop=any(m >= 1.0 for m in SSD_IOUS), scaling=list(SSD_SCALE), aspect_ratio=list(SSD_RATIO),
        num_attempts=SSD_TRIALS)
    images = fn.slice(images, anchor, shape, axis_names="WH", out_of_bounds_policy="trim_to_shape")
    flip = fn.random.coin_flip(probability=0.5)
    boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
    images = fn.resize(images, resize_x=SSD_SIZE, resize_y=SSD_SIZE)
    bright, contrast, sat, _ = JITTER
    images = fn.color_twist(images, brightness=fn.random.uniform(range=(1 - bright, 1 + bright)),
                            contrast=fn.random.uniform(range=(1 - contrast, 1 + contrast)),
                            saturation=fn.random.uniform(range=(1 - sat, 1 + sat)),
                            hue=fn.random.uniform(range=(-HUE_DEGREES, HUE_DEGREES)))
    images = fn.crop_mirror_normalize(images, mirror=flip, dtype=types.FLOAT16, output_layout="CHW",
                                      mean=[255 * m for m in IMAGENET_MEAN], std=[255 * s for s in IMAGENET_STD])
    return images, fn.pad(boxes, fill_value=-1.0), fn.pad(labels, fill_value=-1)


def fed_columns(fn: Any, types: Any, files: Batches, boxes: Batches, labels: Batches) -> tuple[Any, Any, Any]:
    """external_source nodes of the encoded files (1-D uint8), boxes (float32 [K, 4]) and
    labels (int32 [K]), fed batch by batch in step."""
    return (fn.external_source(source=files, cycle="quiet", batch=True, device="cpu", dtype=types.UINT8, ndim=1),
            fn.external_source(source=boxes, cycle="quiet", batch=True, device="cpu", dtype=types.FLOAT, ndim=2),
            fn.external_source(source=labels, cycle="quiet", batch=True, device="cpu", dtype=types.INT32, ndim=1))


def build_pipeline(source: tuple[Batches, Batches, Batches] | tuple[str, str], batch: int, threads: int,
                   device_id: int | None, decoder: str = "mixed", seed: int | None = None) -> Any:
    """The DALI pipeline: `source` is (images, boxes, labels) batches for external_source, or
    (annotations file, image folder) for fn.readers.coco. decoder "cpu" with device_id None
    runs the same graph on the CPU alone (DALI's CPU-only mode; for tests). seed None: DALI
    draws one."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id, seed=seed)
    def pipe() -> Any:
        if isinstance(source[0], str):
            annotations, root = source
            encoded, boxes, labels = fn.readers.coco(file_root=root, annotations_file=annotations, ltrb=True,
                                                     ratio=True, random_shuffle=True, name="coco")
        else:
            encoded, boxes, labels = fed_columns(fn, types, *source)
        images = fn.decoders.image(encoded, device=decoder, output_type=types.RGB)
        return augment(fn, types, images, boxes, labels)

    return pipe()


def detection_reader(build: Callable[..., Any], source: Any, outputs: Sequence[str], total: int, batch: int,
                     threads: int, device: torch.device) -> RunPass:
    """A run pass over the detection pipeline `build(source, batch, threads, device_id)` makes,
    read through DALIGenericIterator with `outputs` (the first is the images); one pass = the
    batches of `total` samples, counting them. `source`: (annotations, root) for the COCO
    reader, or a function of those batches' plan giving the external_source columns."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    plan = spans(total, batch)
    pipe = build(source if isinstance(source, tuple) else source(plan), batch, threads, _device_id(device))
    pipe.build()
    it = DALIGenericIterator([pipe], list(outputs))

    def run(epoch: int) -> Iterator[int]:
        for _, size in plan:  # a reader fills its last batch with samples of the next pass: not counted
            out = next(it)[0][outputs[0]]
            yield min(out.shape[0], size)

    return run


def memory_source(blobs: Sequence[bytes], targets: Sequence[dict[str, np.ndarray]], sizes: np.ndarray,
                  plan: list[tuple[int, int]]) -> tuple[Batches, Batches, Batches]:
    """The three external_source columns (files, relative boxes, labels) over the batches of `plan`."""
    files = [np.frombuffer(bytearray(b), dtype=np.uint8) for b in blobs]  # writable copies
    boxes, labels = relative_boxes(targets, sizes)
    return Batches(files, plan, repeat=False), Batches(boxes, plan, repeat=False), Batches(labels, plan, repeat=False)


def dali_ssd_memory(blobs: Sequence[bytes], targets: Sequence[dict[str, np.ndarray]], sizes: np.ndarray,
                    batch: int, threads: int, device: torch.device) -> RunPass:
    """external_source of the in-memory files and their boxes; `sizes` are the images' (height,
    width), to make the boxes relative."""
    return detection_reader(build_pipeline, lambda plan: memory_source(blobs, targets, sizes, plan), OUTPUTS,
                            len(blobs), batch, threads, device)


def dali_ssd_coco(annotations: str, root: str, total: int, batch: int, threads: int,
                  device: torch.device) -> RunPass:
    """fn.readers.coco over a COCO instances file of `total` images under `root`."""
    return detection_reader(build_pipeline, (annotations, root), OUTPUTS, total, batch, threads, device)
