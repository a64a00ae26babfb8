"""`pixelpipe bench`: run a pipeline with pixelpipe and its peers in one process, print img/s.

Every contender gets the same encoded images in memory, the same batch size and the same
number of threads, runs one warm-up pass, then is timed over `passes` passes. Results are
printed as a table with each peer's ratio to pixelpipe (and as JSON with --json).

On the CPU (--device cpu, or auto on a machine without CUDA) the peer is the Pillow loop
(pillow_loop.py) unless --peers says otherwise; it runs the pipeline's own ops (rn50, rich,
val or a preset's), so the ratio compares like work. `--peers torchvision` adds torchvision's
DataLoader with one worker process per thread, each running the same ops as v2 transforms
(peer_torchvision.v2_ops).

With boxes (the ssd and maskrcnn pipelines, or --boxes N with any pipeline) every image carries
N random boxes and labels (coco_boxes.py: from a generated COCO file when --data is a folder of
images), maskrcnn's also an instance mask per box; pixelpipe reads them as dict samples and
moves them with the images. The detection pipelines' peers (dali; torchvision for ssd) do the
same on the GPU; the other pipelines' peers run without boxes, so
`--boxes N` also times pixelpipe on the same images without boxes, in the same rounds (the row
"without boxes"; the per-round ratios are with / without): what the targets cost pixelpipe.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ...data.threads import default_threads_for
from .coco_boxes import boxed_data
from .images import image_files, load_images, written
from .machine import cpu_model
from .pipelines import BENCH_PIPELINES, DETECTION, pipeline_ops
from .timing import Result, in_rounds, report, time_runs

WITHOUT_BOXES = "without boxes"  # the row that times pixelpipe without the --boxes, beside the one with
SSD_BOXES = 7  # the detection pipelines' boxes per image unless --boxes says (COCO has about 7 on average)


@contextmanager
def pixelpipe_cpu(blobs: Sequence[Any], pipeline: str, batch: int,
                  threads: int) -> Iterator[Callable[[int], Iterator[int]]]:
    """The user's path: a Pipeline over the in-memory files, or dict samples with their targets
    (Memory takes both; one pass = one epoch, shuffled, the last batch padded and only its valid
    samples counted), reading ahead of the loop and into the next epoch. Closed on leaving, so that its work ahead does not run while a peer is timed."""
    from ...compose import Compose
    from ...loader.pipeline import Pipeline
    from ...readers import Memory

    t = Compose(pipeline_ops(pipeline), dtype=torch.float16)
    with Pipeline(Memory(list(blobs)), t, batch, device="cpu", num_threads=threads, prefetch=2) as pipe:

        def run(epoch: int) -> Iterator[int]:
            for b in pipe:
                yield int(b["valid"].sum())

        yield run


def pillow_cpu(blobs: Sequence[bytes], pipeline: str, batch: int, threads: int) -> Callable[[int], Iterator[int]]:
    from .pillow_loop import pillow_batches

    def run(epoch: int) -> Iterator[int]:
        for out in pillow_batches(blobs, batch, threads, pipeline, seed=epoch * len(blobs)):
            yield out.shape[0]

    return run


def torchvision_cpu(blobs: Sequence[bytes], pipeline: str, batch: int, threads: int) -> Callable[[int], Iterator[int]]:
    """torchvision as its users run it on the CPU: a DataLoader with `threads` worker processes,
    each decoding with Pillow and running the pipeline's v2 transforms one image at a time."""
    from .peer_torchvision import cpu_loader

    return cpu_loader(blobs, pipeline, batch, threads, torch.device("cpu"))


CPU_PEERS = {"pillow": pillow_cpu, "torchvision": torchvision_cpu}


def run_bench(data: str | None, pipeline: str, device: str, batch: int | None, threads: int | None,
              peers: Sequence[str] | None, passes: int, n: int, as_json: bool, quiet: bool, augment_only: bool = False,
              cache: bool = False, rounds: int = 1, seconds: float = 0.0, boxes: int | None = None) -> list[Result]:
    """Time pixelpipe and its peers on `pipeline` (pipelines.BENCH_PIPELINES) and print the
    table. device "auto": CUDA where torch sees it, else the CPU. peers None: the device's
    default (the Pillow loop on the CPU, none on CUDA). boxes: random boxes per image (None:
    none, or SSD_BOXES for the detection pipelines, ssd and maskrcnn; maskrcnn's boxes come
    with instance masks)."""
    if pipeline not in BENCH_PIPELINES:
        raise SystemExit(f"pixelpipe bench: unknown pipeline {pipeline!r}; choose from {', '.join(BENCH_PIPELINES)}")
    if pipeline in DETECTION and boxes is None:
        boxes = SSD_BOXES
    if boxes is not None and boxes < (1 if pipeline == "ssd" else 0):
        raise SystemExit(f"pixelpipe bench: --boxes must be >= {1 if pipeline == 'ssd' else 0} with --pipeline "
                         f"{pipeline}, got {boxes} (the SSD crop samples around each image's boxes)")
    if boxes is not None and (augment_only or cache):
        raise SystemExit("pixelpipe bench: --augment-only and --cache do not take boxes (--pipeline ssd or "
                         "maskrcnn, --boxes)")
    boxed = None if boxes is None else boxed_data(data, n, boxes, masks=pipeline == "maskrcnn")
    blobs, what = (boxed.blobs, boxed.what) if boxed is not None else load_images(data, n)
    items = blobs if boxed is None else boxed.samples()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if peers is None:
        peers = [] if device.startswith("cuda") else ["pillow"]
    threads = threads or default_threads_for(device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(f"pixelpipe bench: --device {device}: torch sees no CUDA device "
                             f"(torch {torch.__version__}); use --device cpu")
        from .gpu_peers import run_gpu_bench

        # read from disk, as users do (with boxes, boxed_rows.py reads the COCO file instead); the
        # built-in set is written to a temporary folder for that
        files = None
        if boxed is None and not augment_only:
            files = written(blobs) if data is None else [str(p) for p in image_files(data)]
            what += ", written to a temporary folder for the files rows" if data is None else ""
        return run_gpu_bench(blobs, what, pipeline, device, batch or 256, threads, peers, passes, as_json, quiet,
                             augment_only=augment_only, cache=cache, rounds=rounds, seconds=seconds, files=files,
                             boxed=boxed)
    if augment_only or cache:
        raise SystemExit("pixelpipe bench: --augment-only and --cache need a CUDA device")
    if rounds < 1:
        raise SystemExit(f"pixelpipe bench: rounds must be >= 1, got {rounds}")
    batch = batch or 64
    torch.set_num_threads(1)  # per-sample work runs on the pool threads; OpenMP on top oversubscribes
    for peer in peers:
        if peer not in CPU_PEERS:
            print(f"note: peer {peer!r} has no CPU runner; CPU peers: {', '.join(CPU_PEERS)}", file=sys.stderr)
        elif pipeline in DETECTION:
            print(f"note: peer {peer!r} has no {pipeline} pipeline on the CPU", file=sys.stderr)
    peers = [p for p in peers if p in CPU_PEERS and pipeline not in DETECTION]

    def ours(samples: Sequence[Any] = items, name: str = "pixelpipe (cpu)",
             note: str = f"Pipeline, {threads} threads") -> Result:
        with pixelpipe_cpu(samples, pipeline, batch, threads) as run:
            return time_runs(name, run, passes, len(blobs), quiet, note, seconds)

    def theirs(peer: str) -> Result:
        name, note = ((f"{peer} DataLoader (cpu)", f"{threads} worker processes") if peer == "torchvision"
                      else (f"{peer} loop (cpu)", f"{threads} threads"))
        return time_runs(name, CPU_PEERS[peer](blobs, pipeline, batch, threads), passes,
                         len(blobs), quiet, note, seconds)

    jobs = [ours]
    if boxed is not None and pipeline not in DETECTION:  # in the same rounds, so that drift falls on both
        jobs.append(lambda: ours(blobs, WITHOUT_BOXES, f"pixelpipe, the same images without boxes, {threads} threads"))
    results, per_round = in_rounds(jobs + [lambda p=p: theirs(p) for p in peers], rounds)
    header = (f"pixelpipe bench: pipeline={pipeline} device=cpu batch={batch} threads={threads} "
              f"passes={passes} rounds={rounds} data={what}\n{cpu_model()}, "
              f"{os.cpu_count()} cores, torch {torch.__version__}")
    if boxed is not None and peers:
        header += f"\nboxes: pixelpipe's first row carries {boxes} per image; {', '.join(peers)} run without"
    report(results, per_round, header, as_json)
    return results


