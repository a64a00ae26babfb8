"""How much a running Pipeline slows a training loop's Python: kernel launches per second of a
thread that launches small CUDA ops back to back (as a training step's forward and backward
do), alone and while a Pipeline delivers batches to another thread; and where the Pipeline's
planning thread spends its time (cProfile of that thread, by own time).

The launching thread's ops are tiny (one 4 KiB tensor), so the GPU is idle for them: what slows
them is the host, the GIL and the cores the Pipeline's threads take. A training loop with a
loader loses what this thread loses.

Usage (one GPU): python benchmarks/gpu_loader_interference.py --data DIR [--repeat 16]
    [--seconds 5] [--threads N] [--profile 20]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import threading
import time

import torch
from _common import file_list

BATCH = 256


def launches(seconds: float, stop: threading.Event | None = None) -> float:
    """Launches per second of small CUDA ops made back to back for `seconds`."""
    x = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(100):
            x.add_(1.0)
        n += 100
        if n % 10_000 == 0:
            torch.cuda.synchronize()  # keep the launch queue from filling
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--profile", type=int, default=20, help="batches to profile the planning thread over")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    import pixelpipe as pp
    from pixelpipe.loader import pipeline as pipeline_module

    listed, total = file_list(args.data, args.repeat)
    pipe = pp.Pipeline(listed, pp.presets.imagenet_train(dtype=torch.float16), batch_size=BATCH, device="cuda",
                       seed=0, drop_last=True, num_threads=args.threads)
    alone = launches(args.seconds)

    stop = threading.Event()
    delivered = [0]

    def consume() -> None:
        while not stop.is_set():
            for _ in pipe:
                delivered[0] += BATCH
                if stop.is_set():
                    return

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    time.sleep(3.0)  # the Pipeline's first batches and its warm-up
    d0, t0 = delivered[0], time.perf_counter()
    beside = launches(args.seconds)
    rate = (delivered[0] - d0) / (time.perf_counter() - t0)
    stop.set()
    consumer.join()
    pipe.close()
    print(f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPUs, {total} samples ({args.repeat}x {args.data}), "
          f"Pipeline threads {pipe.engine.num_threads}")
    print(f"launches/s alone {alone:,.0f}; beside the Pipeline {beside:,.0f} ({beside / alone:.2f} of alone) "
          f"while it delivered {rate:,.0f} images/s")

    # the planning thread's own time, by function (a fresh Pipeline, consumed at full speed)
    prof = cProfile.Profile()
    produce = pipeline_module.Pipeline._produce

    def profiled(self, *a, **k):  # type: ignore[no-untyped-def]
        prof.enable()
        try:
            yield from produce(self, *a, **k)
        finally:
            prof.disable()

    pipeline_module.Pipeline._produce = profiled  # type: ignore[method-assign]
    pipe = pp.Pipeline(listed, pp.presets.imagenet_train(dtype=torch.float16), batch_size=BATCH, device="cuda",
                       seed=0, drop_last=True, num_threads=args.threads)
    n = 0
    while n < args.profile:
        for _ in pipe:
            n += 1
            if n >= args.profile:
                break
    pipe.close()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(args.top)
    print(f"the planning thread over {args.profile} batches (own time; lock waits are idle time):")
    print(out.getvalue())


if __name__ == "__main__":
    main()
