"""Where a training step's GPU time goes beside each loader: CUPTI's kernel and copy records
(torch.profiler, CUDA activity only) over timed steps, split by CUDA stream.

For each loader of --loaders (train_throughput.py's: synthetic, pixelpipe, dali) it trains
--model for --warmup steps, then records --steps steps, and prints per step:

- window: the GPU time from the first to the last training kernel of the recorded steps;
- training busy: the union of the training stream's kernels (the stream with the most kernels:
  the loop's default stream), and its gaps (window - busy: the stream had nothing running);
- training kernels' summed time, and for the kernels that take most of it, how much longer each
  ran than in the synthetic run (the same kernels slowed by what runs beside them: SMs, memory);
- the other streams' kernels and copies (the loader's), and how much of their time overlapped a
  training kernel.

A step that grows beside a loader grows either in its gaps (its kernels waited: for the host,
for an implicit synchronisation, for a copy) or in its kernels (they ran slower: shared SMs or
memory bandwidth). This tells which.

Usage (one GPU): python benchmarks/train_profile.py --data DIR [--model resnet18]
    [--loaders synthetic,pixelpipe,dali] [--steps 30] [--warmup 20] [--repeat 60] [--cuda-graph]
"""

from __future__ import annotations

import argparse
import gc
from collections import defaultdict

import torch
from _common import add_gpu_decoding, add_profiled_training, file_list
from train_throughput import BATCH, LOADERS, training_step

TOP = 8  # training kernels compared with the synthetic run


def record(model_name: str, batches, warmup: int, steps: int,
           cuda_graph: bool = False) -> list[tuple[str, int, int, int, bool]]:
    """(name, stream, start ns, end ns, is_kernel) of every GPU record over `steps` steps."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step = training_step(model_name, cuda_graph)
    for _ in range(warmup):
        step(next(batches))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(next(batches))
        torch.cuda.synchronize()
    out = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != DeviceType.CUDA or e.duration_ns() <= 0:
            continue
        name = e.name()
        kernel = not name.startswith(("Memcpy", "Memset"))
        out.append((name, e.device_resource_id(), e.start_ns(), e.start_ns() + e.duration_ns(), kernel))
    return out


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def overlap(xs: list[tuple[int, int]], busy: list[tuple[int, int]]) -> int:
    """ns of the intervals `xs` that fall inside the (merged, sorted) `busy` intervals."""
    import bisect

    starts = [a for a, _ in busy]
    total = 0
    for a, b in xs:
        i = max(0, bisect.bisect_right(starts, a) - 1)
        while i < len(busy) and busy[i][0] < b:
            total += max(0, min(b, busy[i][1]) - max(a, busy[i][0]))
            i += 1
    return total


def analyse(recs: list[tuple[str, int, int, int, bool]], steps: int) -> dict:
    per_stream: dict[int, int] = defaultdict(int)
    for _, s, _, _, k in recs:
        per_stream[s] += k
    train = max(per_stream, key=per_stream.get)
    tk = [(n, a, b) for n, s, a, b, k in recs if s == train and k]
    window = max(b for _, _, b in tk) - min(a for _, a, _ in tk)
    busy = union([(a, b) for _, a, b in tk])
    names: dict[str, list[int]] = defaultdict(list)
    for n, a, b in tk:
        names[n].append(b - a)
    other_k = [(a, b) for n, s, a, b, k in recs if s != train and k]
    other_c = [(a, b) for n, s, a, b, k in recs if s != train and not k]
    lo_names: dict[str, int] = defaultdict(int)
    for n, s, a, b, k in recs:
        if s != train:
            lo_names[n[:60]] += b - a
    ms = 1e-6 / steps
    return {"stream": train, "window": window * ms, "busy": sum(b - a for a, b in busy) * ms,
            "ksum": sum(b - a for _, a, b in tk) * ms, "names": names,
            "other_kernels": sum(b - a for a, b in other_k) * ms, "other_copies": sum(b - a for a, b in other_c) * ms,
            "overlap": overlap(union(other_k), busy) * ms, "streams": len(per_stream),
            "loader_top": sorted(lo_names.items(), key=lambda kv: -kv[1])[:6], "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_profiled_training(ap)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--cuda-graph", action="store_true", help="the training step as one CUDA graph (train_throughput.py)")
    add_gpu_decoding(ap)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    listed, n = file_list(args.data, args.repeat)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.model}, batch {BATCH}, "
          f"{args.steps} recorded steps after {args.warmup}; per step, ms of GPU time", flush=True)
    base = None
    print("| loader | window | training busy | gaps | training kernels | other streams' kernels | "
          "their copies | of those kernels beside a training kernel |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    results = {}
    for name in args.loaders.split(","):
        batches, stop = LOADERS[name](args, listed)
        try:
            r = analyse(record(args.model, batches, args.warmup, args.steps, args.cuda_graph), args.steps)
        finally:
            stop()
            del batches
            gc.collect()
            torch.cuda.empty_cache()
        results[name] = r
        base = base or r
        print(f"| {name} | {r['window']:.2f} | {r['busy']:.2f} | {r['window'] - r['busy']:.2f} | {r['ksum']:.2f} | "
              f"{r['other_kernels']:.2f} | {r['other_copies']:.2f} | {r['overlap']:.2f} |", flush=True)
    for name, r in results.items():
        if r is base:
            continue
        slow = []
        for k, durs in base["names"].items():
            if k in r["names"]:
                a, b = sum(durs) / len(durs), sum(r["names"][k]) / len(r["names"][k])
                slow.append((sum(durs), k, a, b))
        slow.sort(reverse=True)
        print(f"\n{name}: the training kernels taking most time, mean us alone -> beside the loader")
        for _, k, a, b in slow[:TOP]:
            print(f"  {a / 1e3:8.1f} -> {b / 1e3:8.1f}  ({b / a:.2f}x)  {k[:90]}")
        print(f"{name}: the other streams' records, ms per step: "
              + "; ".join(f"{k} {v * 1e-6 / r['steps']:.2f}" for k, v in r["loader_top"]))


if __name__ == "__main__":
    main()
