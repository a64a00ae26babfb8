"""The GPU bench's contenders when the samples carry boxes: the ssd and maskrcnn pipelines, or
any pipeline with `--boxes N` (what the targets cost pixelpipe).

pixelpipe reads dict samples (image, boxes, labels) from memory, and, when the data came from a
folder, the same COCO file from disk through its Coco reader. For ssd, DALI runs its detection
operators (peer_dali_ssd.py: fn.readers.coco from disk, external_source from memory) and
torchvision its v2 transforms with tv_tensors (peer_torchvision_ssd.py); kornia has no ssd
pipeline here and shows as a failed row. For maskrcnn (boxes and instance masks), pixelpipe's
file row reads the COCO file's masks through its Coco reader (pycocotools), DALI runs
peer_dali_maskrcnn.py, and torchvision and kornia have no maskrcnn pipeline here (failed rows
saying so). For the other pipelines a row "without boxes" times
pixelpipe on the same images without them (in the same rounds: the per-round ratios are what
the boxes cost; from a folder, "without boxes (files)" reads the same files as a file list and
"without boxes (memory)" holds them in memory, each the twin of pixelpipe's row of that
name), and the peers run their usual rows, without boxes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import torch

from .coco_boxes import BoxedData, image_sizes

RunPass = Callable[[int], Iterator[int]]
Row = tuple[str, Callable[[], RunPass], str]  # (row name, factory, note), as gpu_peers.Row


def _none(peer: str, pipeline: str, who: str) -> NoReturn:
    raise NotImplementedError(f"{peer} has no {pipeline} pipeline in this bench ({who})")


def dali_rows(boxed: BoxedData, from_file: Callable[..., RunPass], from_memory: Callable[..., RunPass],
              reader: str, targets: str, device: torch.device, batch: int, threads: int) -> list[Row]:
    """DALI's rows for a detection pipeline: from the COCO file (when there is one) through
    from_file(annotations, root, total, batch, threads, device), then from memory through
    from_memory(blobs, targets, sizes, batch, threads, device)."""
    total, blobs = len(boxed.blobs), boxed.blobs
    rows: list[Row] = []
    if boxed.annotations is not None:
        rows.append(("dali (files)", lambda: from_file(boxed.annotations, boxed.root, total, batch, threads, device),
                     f"{reader} over the same file, mixed decoder, {threads} threads"))
    rows.append(("dali (memory)" if rows else "dali",
                 lambda: from_memory(blobs, boxed.targets, image_sizes(blobs), batch, threads, device),
                 f"external_source of the same bytes and {targets}, mixed decoder, {threads} threads"))
    return rows


def boxed_contenders(boxed: BoxedData, pipeline: str, device: torch.device, batch: int, threads: int,
                     peers: Sequence[str], over: Callable[[Any, int], RunPass]) -> list[Row]:
    """pixelpipe's rows (from disk first when there is a COCO file, then from memory) and each
    asked-for peer's (names from gpu_peers.parse_peers), in run order. over(reader, total):
    one pass of pixelpipe's Pipeline over a reader of `total` samples (gpu_peers makes it)."""
    from ...readers import Memory
    from . import peer_dali, peer_dali_maskrcnn, peer_dali_ssd, peer_kornia, peer_torchvision, peer_torchvision_ssd

    total, blobs, samples = len(boxed.blobs), boxed.blobs, boxed.samples()
    rows: list[Row] = []
    if boxed.annotations is not None:
        def from_disk() -> RunPass:  # the reader is made when the row is built, not when the table is
            from ...readers import Coco

            masks = "instances" if pipeline == "maskrcnn" else None
            return over(Coco(boxed.annotations, boxed.root, masks=masks), total)

        rows.append(("pixelpipe (files)", from_disk,
                     f"Pipeline over the Coco reader, {threads} threads, files read from disk (page cache warm)"))
    rows.append(("pixelpipe (memory)" if rows else "pixelpipe",
                 lambda: over(Memory(samples), total),
                 f"Pipeline over dict samples (image, boxes, labels), {threads} threads"))
    if pipeline == "ssd":
        dali = dali_rows(boxed, peer_dali_ssd.dali_ssd_coco, peer_dali_ssd.dali_ssd_memory, "fn.readers.coco",
                         "boxes", device, batch, threads)
        table = {
            "torchvision": [("torchvision", lambda: peer_torchvision_ssd.gpu_ssd(blobs, boxed.targets, batch, device),
                             "nvJPEG batch decode, v2 per image with BoundingBoxes (boxes on the CPU)")],
            "kornia": [("kornia", lambda: _none("kornia", "ssd", "dali and torchvision do"), "")],
            "dali": dali,
        }
    elif pipeline == "maskrcnn":
        dali = dali_rows(boxed, peer_dali_maskrcnn.dali_maskrcnn_coco, peer_dali_maskrcnn.dali_maskrcnn_memory,
                         "fn.readers.coco (pixelwise masks)", "boxes and masks", device, batch, threads)
        table = {"torchvision": [("torchvision", lambda: _none("torchvision", "maskrcnn", "dali does"), "")],
                 "kornia": [("kornia", lambda: _none("kornia", "maskrcnn", "dali does"), "")], "dali": dali}
    else:  # pixelpipe without boxes too, in the same rounds: what the boxes cost
        if boxed.files is not None:  # the files row's twin: the same files, read as a file list
            def plain_files() -> RunPass:
                from .images import write_file_list

                return over(write_file_list(boxed.files), total)

            rows.append(("without boxes (files)", plain_files,
                         f"pixelpipe over a file list of the same files, no boxes, {threads} threads"))
        rows.append(("without boxes (memory)" if boxed.files is not None else "without boxes",
                     lambda: over(Memory(list(blobs)), total),
                     f"pixelpipe over the same images in memory, no boxes, {threads} threads"))
        table = {
            "torchvision": [("torchvision", lambda: peer_torchvision.gpu_full(blobs, pipeline, batch, device),
                             "nvJPEG batch decode, v2 per image; no boxes")],
            "kornia": [("kornia", lambda: peer_kornia.kornia_full(blobs, pipeline, batch, device),
                        "nvJPEG decode, resize to 256x256, kornia batch; no boxes")],
            "dali": [("dali", lambda: peer_dali.dali_full(blobs, pipeline, batch, threads, device),
                      f"mixed decoder, {threads} threads; no boxes")],
        }
    for peer in peers:
        rows += table[peer]
    return rows
