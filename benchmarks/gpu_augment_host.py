"""Augmenting decoded batches on the GPU: host time against GPU time per call.

    python benchmarks/gpu_augment_host.py [--data DIR] [--pipelines rn50,rich] [--calls 40]

The first 256 JPEGs of DIR are decoded once (RGB) onto the GPU, as `pixelpipe bench
--augment-only` does; then, per pipeline: images/s of back-to-back Compose calls (the host
plans call k+1 while the GPU runs call k), the host's time per call (planning and launching),
and the GPU's time per call (CUDA events around a call on an idle GPU, the launch latency
included), plus the kernels' own time from torch.profiler. When the host's time per call is
the larger, planning bounds the rate, not the kernel. Needs CUDA and Triton.
"""

from __future__ import annotations

import time

import torch
from _common import arguments, read_jpegs


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--pipelines", default="rn50,rich")
    ap.add_argument("--calls", type=int, default=40)
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
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for e in range(10):
                t(images, seed=0, epoch=e, indices=idx)
            torch.cuda.synchronize()
        kernels = sum(ev.self_device_time_total for ev in prof.key_averages() if "kernel" in ev.key) / 1e3 / 10
        print(f"{name:9s} {rate:9,.0f} {sorted(host)[5]:13.2f} {sorted(gpu)[5]:12.2f} {kernels:16.2f}", flush=True)


if __name__ == "__main__":
    main()
