"""Augmenting decoded batches on the GPU: host time against GPU time per call.

    python benchmarks/gpu_augment_host.py [--data DIR] [--pipelines rn50,rich] [--calls 40]

The first 256 JPEGs of DIR are decoded once (RGB) onto the GPU, as `pixelpipe bench
--augment-only` does; then, per pipeline: images/s of back-to-back Compose calls (the host
plans call k+1 while the GPU runs call k), the host's time per call (planning and launching),
and the GPU's time per call (CUDA events around a call on an idle GPU, the launch latency
included), plus the kernels' own time from torch.profiler. When the host's time per call is
the larger, planning bounds the rate, not the kernel. With --ops N, each pipeline also prints
its N torch operations of most host time per call (with their count per call: host
synchronisations such as aten::item or aten::nonzero show up there) and its N kernels of most
GPU time per call. With --cprofile N, the N Python functions of most own time per call
(cProfile over 10 calls; then the N of most cumulative time). Needs CUDA and Triton.
"""

from __future__ import annotations

import time

import torch
from _common import arguments, read_jpegs


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--pipelines", default="rn50,rich")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--ops", type=int, default=0, help="print the N operations and kernels costing most")
    ap.add_argument("--cprofile", type=int, default=0, help="print the N Python functions of most own time")
    args = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    import pixelpipe as pp
    from pixelpipe.tools.bench.batches import decode_head
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    dev = torch.device("cuda")
    images = decode_head(read_jpegs(args.data, 256), 256, dev)
    idx = torch.arange(len(images))
    print(f"{len(images)} images, {torch.cuda.get_device_name()}")
    print(f"{'pipeline':9s} {'images/s':>9s} {'host ms/call':>13s} {'GPU ms/call':>12s} {'kernels ms/call':>16s}")
    for name in args.pipelines.split(","):
        c = pp.Compose(pipeline_ops(name), dtype=torch.float16)
        engine = pp.Engine(dev)
        t = lambda *a, c=c, engine=engine, **k: c(*a, engine=engine, **k)
        for e in range(3):
            t(images, seed=0, epoch=e, indices=idx)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for e in range(args.calls):
            t(images, seed=0, epoch=e, indices=idx)
        torch.cuda.synchronize()
        rate = args.calls * len(images) / (time.perf_counter() - t0)
        host, gpu = [], []
        for e in range(11):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            h0 = time.perf_counter()
            a.record()
            t(images, seed=0, epoch=e, indices=idx)
            b.record()
            host.append((time.perf_counter() - h0) * 1e3)
            b.synchronize()
            gpu.append(a.elapsed_time(b))
        activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.ops else [])
        with profile(activities=activities) as prof:
            for e in range(10):
                t(images, seed=0, epoch=e, indices=idx)
            torch.cuda.synchronize()
        events = prof.key_averages()
        kernels = sum(ev.self_device_time_total for ev in events if ev.device_type == torch.autograd.DeviceType.CUDA) / 1e3 / 10
        print(f"{name:9s} {rate:9,.0f} {sorted(host)[5]:13.2f} {sorted(gpu)[5]:12.2f} {kernels:16.2f}", flush=True)
        if args.ops:
            print_ops(events, args.ops, calls=10)
        if args.cprofile:
            import cProfile
            import io
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            for e in range(10):
                t(images, seed=0, epoch=e, indices=idx)
            torch.cuda.synchronize()
            prof.disable()
            for order in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats(order).print_stats(args.cprofile)
                print(f"    cProfile over 10 calls (seconds), by {order}:")
                print("\n".join("    " + line for line in out.getvalue().splitlines()[4:] if line.strip()))
        engine.close()


def print_ops(events: list, n: int, calls: int) -> None:
    """The n host operations of most self CPU time and the n kernels of most GPU time, per call."""
    cpu = sorted((ev for ev in events if ev.device_type == torch.autograd.DeviceType.CPU),
                 key=lambda ev: -ev.self_cpu_time_total)[:n]
    print("    host: self ms/call, count/call, operation")
    for ev in cpu:
        print(f"    {ev.self_cpu_time_total / 1e3 / calls:8.3f} {ev.count / calls:8.1f}  {ev.key[:90]}")
    gpu = sorted((ev for ev in events if ev.device_type == torch.autograd.DeviceType.CUDA),
                 key=lambda ev: -ev.self_device_time_total)[:n]
    print("    GPU: ms/call, count/call, kernel")
    for ev in gpu:
        print(f"    {ev.self_device_time_total / 1e3 / calls:8.3f} {ev.count / calls:8.1f}  {ev.key[:90]}")


if __name__ == "__main__":
    main()
