"""How much of the GPU a Pipeline's batches take: kernel time per image, by kernel, from CUPTI.

A loader that shares the GPU with a training step slows the step by the SM time its own
kernels take (decoding on the CUDA decoder, colour conversion, the warp), whatever its host
side does. This runs a Pipeline over a file list (the README's imagenet_train preset, float16,
batch 256, files read from disk) with torch.profiler recording CUDA activity for --batches
batches after a warm-up, and prints the GPU time of every kernel name summed over those batches,
per image, with the wall time per image beside it; and, from a run without the profiler, the
CPU time of each of the process's threads per image (Python threads by name, others by the
name the system knows them by). The hardware JPEG engine's work is not a
kernel and does not appear (see benchmarks/gpu_jpeg_engine.py for its utilisation).

Usage (one GPU): python benchmarks/gpu_loader_kernels.py --data DIR [--repeat 8] [--batches 20]
    [--hw-fraction 0.75] [--roi auto|true|false] [--pipeline rn50|ssd]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict

import torch
from _common import add_gpu_decoding, file_list, gpu_decoding

BATCH = 256


def thread_times() -> dict[int, tuple[str, float]]:
    """{thread id: (its name, CPU seconds so far)} for every thread of this process (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--batches", type=int, default=20)
    add_gpu_decoding(ap)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--pipeline", default="rn50", choices=("rn50", "ssd"),
                    help="rn50: the imagenet_train preset over a file list; ssd: the bench's ssd ops with boxes")
    args = ap.parse_args()
    import pixelpipe as pp

    listed, total = file_list(args.data, args.repeat)
    reader: object = listed
    transforms = pp.presets.imagenet_train(dtype=torch.float16)
    if args.pipeline == "ssd":  # the bench's ssd ops over a COCO file of 7 random boxes per image
        from pixelpipe.readers import Coco
        from pixelpipe.tools.bench.coco_boxes import boxed_data
        from pixelpipe.tools.bench.pipelines import pipeline_ops

        boxed = boxed_data(args.data, 0, 7)
        reader = Coco(boxed.annotations, boxed.root)
        transforms = pp.Compose(pipeline_ops("ssd"), dtype=torch.float16)
    pipe = pp.Pipeline(reader, transforms, batch_size=BATCH, device="cuda", seed=0, drop_last=args.pipeline != "ssd",
                       gpu=gpu_decoding(args))

    def batches():  # type: ignore[no-untyped-def]
        while True:
            yield from pipe

    it = batches()
    for _ in range(10):
        next(it)
    torch.cuda.synchronize()
    before = thread_times()
    t_cpu = time.perf_counter()
    for _ in range(args.batches):
        next(it)
    torch.cuda.synchronize()
    cpu_wall = time.perf_counter() - t_cpu
    used = thread_times()
    names = {t.native_id: t.name for t in threading.enumerate()}
    by_name: dict[str, float] = defaultdict(float)
    for tid, (comm, secs) in used.items():
        spent = secs - before.get(tid, (comm, 0.0))[1]
        if spent > 0:
            by_name[names.get(tid, comm).rstrip("0123456789_-")] += spent
    cpu_images = args.batches * BATCH
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(args.batches):
            next(it)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    pipe.close()
    images = args.batches * BATCH
    kernels: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            counts[e.name] += 1
    total = sum(kernels.values())
    print(f"{torch.cuda.get_device_name()}, {total} samples ({args.repeat}x {args.data}), {args.batches} batches of {BATCH}, "
          f"{pipe.engine.gpu}")
    print(f"wall {1e6 * wall / images:.1f} us/image ({images / wall:,.0f} images/s); GPU kernels "
          f"{total / images:.1f} us/image over {sum(counts.values())} launches")
    print(f"host CPU time by thread (a run of {args.batches} batches without the profiler, "
          f"{1e6 * cpu_wall / cpu_images:.1f} us/image of wall time), us/image:")
    for name, secs in sorted(by_name.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{1e6 * secs / cpu_images:9.1f}  {name}")
    print(f"{'us/image':>9} {'launches':>9}  kernel")
    for name, t in sorted(kernels.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{t / images:9.2f} {counts[name]:9d}  {name[:100]}")


if __name__ == "__main__":
    main()
