"""The host's planning time per batch, without a GPU: what a Compose call does before its
kernel launch (sampling every op, folding the matrices and colours, the regions, the
kernel's per-sample geometry), for a batch of ragged image sizes.

    python benchmarks/plan_host.py [--pipelines rn50,rich,val] [--batch 256] [--calls 400]
    PIXELPIPE_NATIVE=0 python benchmarks/plan_host.py ...   # the numpy twin of the C planner

Prints min / 20th percentile / median milliseconds per batch over `--calls` batches (new
epochs each, the first 50 not counted), with one torch thread. On the GPU path this work
bounds augment-only and cached epochs (benchmarks/gpu_augment_host.py shows host against
kernel time per call).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.kernels import color_slopes
from pixelpipe.tools.bench.pipelines import pipeline_ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipelines", default="rn50,rich,val")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = args.batch
    sizes = torch.from_numpy(rng.integers(200, 500, (n, 2)).astype(np.float64))  # ImageNet-like sides
    idx = torch.arange(n)
    planner = "C planner (pixelpipe.native)" if native.library() is not None else "numpy planner"
    print(f"{'pipeline':9s} {'min ms':>8s} {'p20 ms':>8s} {'median ms':>10s}   (batch {n}, {args.calls} calls, {planner})")
    for name in args.pipelines.split(","):
        t = pp.Compose(pipeline_ops(name), dtype=torch.float16)

        def plan(epoch: int, t: pp.Compose = t) -> None:
            stage = t.stages[0]
            p = stage.sample(0, epoch, idx, sizes)
            regions = p.regions()
            spec = p.warp_spec(p.uniform_size(), regions, origin=regions[:, :2])
            spec.packed_np()
            if p.needs_means:  # the GPU path folds the colours at four mean colours at once
                color_slopes(n, lambda m: t._pointwise_spec(stage, p, m, True))
            else:
                t._pointwise_spec(stage, p, None, True)

        times = []
        for e in range(args.calls):
            t0 = time.perf_counter()
            plan(e)
            times.append(time.perf_counter() - t0)
        ms = np.array(times[50:]) * 1e3
        print(f"{name:9s} {ms.min():8.3f} {np.percentile(ms, 20):8.3f} {np.median(ms):10.3f}", flush=True)


if __name__ == "__main__":
    main()
