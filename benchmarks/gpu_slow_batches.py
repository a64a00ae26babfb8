"""Where a slow batch's time goes: every batch of a GPU Pipeline timed step by step.

Per batch: planning (Engine.prepare, on the producer thread: headers, sampling, the decoder's
per-image set-up), the GPU decode (Engine.decode on its lane's thread: host time of the call),
the finish (Engine.finish on the finisher thread: host time launching the kernels), the kernels'
GPU time (CUDA events around the finish, on its stream) and the consumer's wait (host time in
next() of the training loop, here a loop that only takes batches). The batches whose consumer
wait is in the slowest tenth are set beside the median ones: the step that grows is the one that
holds the pipeline back.

Usage: python benchmarks/gpu_slow_batches.py --data DIR [--pipeline rn50] [--epochs 8]
       [--threads 8] [--files]   (--files: a Pipeline over a file list, else in memory)
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

import torch

STEPS = ("plan", "decode", "finish", "kernels", "consumer wait")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--pipeline", default="rn50")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--files", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="list the folder's images this many times")
    ap.add_argument("--read-threads", type=int, default=None, help="a file reader's read-ahead threads")
    ap.add_argument("--hw-fraction", type=float, default=0.75, help="GpuDecoding(hw_fraction=...)")
    ap.add_argument("--gc", choices=("on", "freeze", "off"), default="on",
                    help="the garbage collector: as it is, gc.freeze() after the set-up, or disabled")
    args = ap.parse_args()
    import pixelpipe as pp
    from pixelpipe.readers import Memory
    from pixelpipe.tools.bench.images import write_file_list
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    times: dict[int, dict[str, float]] = defaultdict(dict)
    lock = threading.Lock()

    def timed(step: str, fn, key_of):  # type: ignore[no-untyped-def]
        def wrapper(self, *a, **k):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            out = fn(self, *a, **k)
            key = key_of(a, out)
            with lock:
                times[key][step] = times[key].get(step, 0.0) + time.perf_counter() - t
            return out
        return wrapper

    real_finish = pp.Engine.finish

    def finish(self, prepared):  # type: ignore[no-untyped-def]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t = time.perf_counter()
        out = real_finish(self, prepared)
        b.record()
        with lock:
            times[id(prepared)]["finish"] = time.perf_counter() - t
            times[id(prepared)]["_events"] = (a, b)  # type: ignore[assignment]
        out["_key"] = id(prepared)
        return out

    pp.Engine.prepare = timed("plan", pp.Engine.prepare, lambda a, out: id(out))
    pp.Engine.decode = timed("decode", pp.Engine.decode, lambda a, out: id(a[0]))
    pp.Engine.finish = finish
    if args.read_threads is not None:
        import pixelpipe.loader.pipeline as pipeline_module

        pipeline_module.READ_THREADS = args.read_threads
    files = sorted(p for p in Path(args.data).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg")) * args.repeat
    source = write_file_list([str(p) for p in files]) if args.files else Memory([p.read_bytes() for p in files])
    t = pp.Compose(pipeline_ops(args.pipeline), dtype=torch.float16)
    rows = []
    import gc

    if args.gc == "freeze":
        gc.collect()
        gc.freeze()
    elif args.gc == "off":
        gc.disable()
    gpu = pp.GpuDecoding(hw_fraction=args.hw_fraction)
    with pp.Pipeline(source, t, args.batch, device="cuda", num_threads=args.threads, gpu=gpu) as pipe:
        for epoch in range(args.epochs):
            it = iter(pipe)
            while True:
                w = time.perf_counter()
                batch = next(it, None)
                if batch is None:
                    break
                rows.append((epoch, batch.pop("_key"), time.perf_counter() - w))
        torch.cuda.synchronize()
    per = []
    for epoch, key, wait in rows:
        if epoch == 0:
            continue  # the first epoch starts the decoder and the caches
        got = times.get(key, {})
        a, b = got.get("_events", (None, None))
        per.append({"plan": got.get("plan", 0.0) * 1e3, "decode": got.get("decode", 0.0) * 1e3,
                    "finish": got.get("finish", 0.0) * 1e3,
                    "kernels": a.elapsed_time(b) if a is not None else 0.0, "consumer wait": wait * 1e3})
    per.sort(key=lambda r: r["consumer wait"])
    tenth = max(1, len(per) // 10)
    slow, mid = per[-tenth:], per[len(per) // 2 - tenth // 2: len(per) // 2 + tenth // 2 + 1]
    total = sum(r["consumer wait"] for r in per)
    elapsed = sum(r["consumer wait"] for r in per)
    print(f"{args.pipeline}, {'files' if args.files else 'memory'} (read threads {args.read_threads}, "
          f"hw_fraction {args.hw_fraction}, gc {args.gc}), "
          f"{len(files)} images, batch {args.batch}, {args.threads} threads, {len(per)} batches after the first "
          f"epoch; consumer waited {total:.0f} ms in all: {len(per) * args.batch / max(elapsed, 1e-9) * 1e3:,.0f} "
          "images/s taken")
    print(f"{'ms per batch':<16}" + "".join(f"{s:>15}" for s in STEPS))
    for name, group in (("median batches", mid), ("slowest tenth", slow), ("all, mean", per)):
        print(f"{name:<16}" + "".join(f"{statistics.fmean(r[s] for r in group):>15.2f}" for s in STEPS))
    print("consumer wait quantiles (ms): " + ", ".join(
        f"p{q}: {per[min(len(per) - 1, int(q / 100 * len(per)))]['consumer wait']:.1f}" for q in (10, 50, 90, 99)))


if __name__ == "__main__":
    main()
