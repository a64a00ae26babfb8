"""The host's planning time per batch, without a GPU: what a Compose call does before its
kernel launch (sampling every op, folding the matrices and colours, the regions, the
kernel's per-sample geometry), for a batch of ragged image sizes. The ssd pipeline's batches
carry 7 boxes per image (coco_boxes.random_boxes, as the COCO reader gives them), and its
time also holds the targets' host work of a GPU batch: the targets made from the samples'
dicts (Pipeline), put in pixels (Engine.prepare), moved through the stage's matrices
(Engine.finish) and put in their output form with SanitizeBoxes's rules.

    python benchmarks/plan_host.py [--pipelines rn50,rich,val,ssd] [--batch 256] [--calls 400]
    PIXELPIPE_NATIVE=0 python benchmarks/plan_host.py ...   # the numpy twin of the C planner
    python benchmarks/plan_host.py --pipelines ssd --profile 20   # where the time goes

Prints min / 20th percentile / median milliseconds per batch over `--calls` batches (new
epochs each, the first 50 not counted) and the median per image, with one torch thread;
for ssd also the median of its parts (targets in, plan, targets out). `--profile K`: the K
functions of most own time under cProfile, in microseconds per image. On the GPU path this
work bounds augment-only and cached epochs and the ssd pipeline
(benchmarks/gpu_augment_host.py shows host against kernel time per call).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.data.targets import targets_of
from pixelpipe.kernels import color_slopes
from pixelpipe.plan import fast
from pixelpipe.tools.bench.coco_boxes import random_boxes
from pixelpipe.tools.bench.pipelines import pipeline_ops

BOXES = 7  # per image, as benchmarks/gpu_loader_kernels.py --pipeline ssd


def planner(t: pp.Compose, idx: torch.Tensor, sizes: torch.Tensor,
            dicts: list[dict[str, np.ndarray]] | None) -> Callable[[int, list[float]], None]:
    """plan(epoch, parts): one batch's host work, its parts' seconds appended to `parts`."""
    program, stage = t.program, t.stages[0]
    form = program.form(0)
    hw = sizes.numpy()

    def plan(epoch: int, parts: list[float]) -> None:
        t0 = time.perf_counter()
        targets = None
        if dicts is not None:  # Pipeline._targets, then Engine.prepare
            targets = targets_of(dicts)
            assert targets is not None and targets.boxes is not None
            targets = replace(targets, boxes=targets.boxes.in_pixels(program.targets.box_format, hw))
        t1 = time.perf_counter()
        p = stage.sample(0, epoch, idx, sizes, targets)
        regions = p.regions()
        spec = p.warp_spec(p.uniform_size(), regions, origin=regions[:, :2])
        spec.packed_np()
        if p.needs_means:  # the GPU path folds the colours at four mean colours at once
            color_slopes(len(idx), lambda m: p.pointwise(m, form))
        else:
            p.pointwise(None, form)
        t2 = time.perf_counter()
        if targets is not None:  # Engine._move and _outputs
            moved = fast.move_targets(targets, p.matrix, p.out_sizes)
            program.targets.outputs(moved, spec.out_size, torch.device("cpu"))
        t3 = time.perf_counter()
        parts += [t3 - t0, t1 - t0, t2 - t1, t3 - t2]

    return plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipelines", default="rn50,rich,val,ssd")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--profile", type=int, default=0, help="print the K functions of most own time")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = args.batch
    sizes = torch.from_numpy(rng.integers(200, 500, (n, 2)).astype(np.float64))  # ImageNet-like sides
    coco = torch.from_numpy(rng.integers(300, 641, (n, 2)).astype(np.float64))  # COCO-like sides
    dicts = [{"boxes": t["boxes"].astype(np.float64), "labels": t["labels"], "image_id": i}
             for i, t in enumerate(random_boxes(coco.numpy(), BOXES))]
    idx = torch.arange(n)
    which = "C planner (pixelpipe.native)" if native.library() is not None else "numpy planner"
    print(f"{'pipeline':9s} {'min ms':>8s} {'p20 ms':>8s} {'median ms':>10s} {'us/image':>9s}   "
          f"(batch {n}, {args.calls} calls, {which})")
    for name in args.pipelines.split(","):
        t = pp.Compose(pipeline_ops(name), dtype=torch.float16)
        boxed = name == "ssd"
        plan = planner(t, idx, coco if boxed else sizes, dicts if boxed else None)
        parts: list[float] = []
        profile = cProfile.Profile() if args.profile else None
        for e in range(args.calls):
            if profile is not None and e == 50:
                profile.enable()
            plan(e, parts)
        if profile is not None:
            profile.disable()
        ms = np.array(parts).reshape(-1, 4)[50:] * 1e3
        total = ms[:, 0]
        print(f"{name:9s} {total.min():8.3f} {np.percentile(total, 20):8.3f} {np.median(total):10.3f} "
              f"{np.median(total) * 1e3 / n:9.1f}", flush=True)
        if boxed:
            med = np.median(ms, 0)
            print(f"{'':9s} median ms: targets in {med[1]:.3f}, plan {med[2]:.3f}, targets out {med[3]:.3f}")
        if profile is not None:
            _top(profile, args.profile, args.calls - 50, n)


def _top(profile: cProfile.Profile, k: int, batches: int, n: int) -> None:
    """The k functions of most own time over `batches` batches of n, in microseconds per
    image (own and cumulative)."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:k]
    print(f"    {'own us/img':>10s} {'cum us/img':>10s} {'calls/batch':>11s}  function")
    images = batches * n
    for (file, line, fn), (_, ncalls, own, cum, _) in rows:
        where = f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{line}"
        print(f"    {own * 1e6 / images:10.2f} {cum * 1e6 / images:10.2f} {ncalls / batches:11.1f}  {fn} ({where})")


if __name__ == "__main__":
    main()
