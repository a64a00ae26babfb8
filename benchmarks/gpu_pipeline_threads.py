"""Where a GPU Pipeline's time goes: each of its threads' busy time per epoch.

    python benchmarks/gpu_pipeline_threads.py [--data DIR] [--pipelines rn50,rich] [--epochs 8] [--lanes 1]

Wraps the steps of each thread of a Pipeline (batch 256, 8 threads, prefetch 2) with timers:
the planning thread's `Engine.prepare` (headers, sampling, the decoder's per-image calls),
the decode thread's `Compose.decode` and, inside it, nvImageCodec's decode call, and the
finishing thread's `Engine.finish` (the kernels' launches); with several decoder lanes
each lane's decode call is listed under the thread that made it, and split (where the batch is
decoded in one native call, native/decode.c) into the time inside nvImageCodec and the wait for
the GIL afterwards. With the decode queue (GpuDecoder's decode_ahead, the default) the decode
thread only waits for batches a native thread decodes: "the wait for the decode queue", with
the time that thread spent in nvImageCodec for the batch and the time from its end until the
decode thread held the GIL again. A thread busy for (nearly) the whole epoch is the bottleneck.
With --files the Pipeline reads the folder's JPEGs through a file list (listed --repeat times)
instead of holding them in memory. Each run also prints the CPU time every thread of the
process used over the timed epochs, in cores (CPU seconds per second): the Pipeline's Python
threads by name, the others (nvImageCodec's, torch's) by their system name, grouped; where a
Pipeline's threads and its libraries' share the machine's cores. Linux only (/proc).
Needs CUDA, Triton and nvImageCodec.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import Any

import torch
from _common import arguments, epochs_rate, file_list, read_jpegs

EVENTS: list[tuple[str, str, float]] = []


def timed(name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            EVENTS.append((name, threading.current_thread().name, time.perf_counter() - t0))
    return wrapper


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--pipelines", default="rn50,rich")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lanes", type=int, default=1, help="decoder lanes (GpuDecoding lanes; its default 1)")
    ap.add_argument("--switch", type=float, default=None, help="sys.setswitchinterval (s) for the run")
    ap.add_argument("--files", action="store_true", help="a Pipeline over a file list of the JPEGs")
    ap.add_argument("--repeat", type=int, default=1, help="with --files: the list holds the JPEGs this many times")
    args = ap.parse_args()
    if args.switch is not None:
        sys.setswitchinterval(args.switch)
    import pixelpipe as pp
    from pixelpipe.decode import nvimgcodec_c
    from pixelpipe.readers import Memory
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    pp.Engine.prepare = timed("plan a batch (Engine.prepare)", pp.Engine.prepare)
    pp.Engine.decode = timed("decode a batch (Engine.decode)", pp.Engine.decode)
    pp.Engine.finish = timed("launch the kernels (Engine.finish)", pp.Engine.finish)
    def split(name: str, fn: Any) -> Any:
        step = timed(name, fn)

        def run_and_split(self: Any, *args: Any) -> Any:
            self.last_times = None
            try:
                return step(self, *args)
            finally:
                if self.last_times is not None:  # native/decode.c (or the queue's thread): the call's parts
                    issued, waited, back = self.last_times
                    thread = threading.current_thread().name
                    EVENTS.append(("    in nvImageCodec (issue + wait)", thread, waited - issued))
                    EVENTS.append(("    then taking the GIL back", thread, back - waited))
        return run_and_split

    nvimgcodec_c.CDecoder._run = split("  of it, nvImageCodec's decode call", nvimgcodec_c.CDecoder._run)
    # decoding ahead (the default): the wait for the batch the queue's thread decodes
    nvimgcodec_c.CDecoder._collect = split("  of it, the wait for the decode queue", nvimgcodec_c.CDecoder._collect)
    if args.files:
        listed, total = file_list(args.data, args.repeat)
    else:
        blobs = read_jpegs(args.data)
        total = len(blobs)
    for name in args.pipelines.split(","):
        source = pp.readers.FileList(listed) if args.files else Memory(list(blobs))
        cpu: dict[str, float] = {}

        def start(cpu: dict[str, float] = cpu) -> None:
            EVENTS.clear()
            cpu.update(thread_cpu())
            cpu["wall"] = time.perf_counter()

        with pp.Pipeline(source, pp.Compose(pipeline_ops(name), dtype=torch.float16), 256,
                         device="cuda", num_threads=8, prefetch=2, gpu=pp.GpuDecoding(lanes=args.lanes)) as pipe:
            rate = epochs_rate(pipe, args.epochs, on_start=start)
            used = cores_used(cpu, thread_cpu(), time.perf_counter() - cpu["wall"])
        epoch = total / rate
        busy: dict[tuple[str, str], float] = collections.defaultdict(float)
        for step, thread, seconds in EVENTS:
            busy[(step, thread)] += seconds / args.epochs
        print(f"{name}, {args.lanes} lane(s), switch interval {sys.getswitchinterval() * 1e3:g} ms: "
              f"{rate:,.0f} images/s, {epoch * 1e3:.1f} ms per epoch")
        for (step, thread), seconds in sorted(busy.items(), key=lambda kv: -kv[1]):
            if seconds > 0.0005:
                print(f"  {step:40s} {thread:28s} {seconds * 1e3:7.1f} ms/epoch ({seconds / epoch:4.0%})")
        print(f"  CPU over the timed epochs: {sum(used.values()):.2f} cores in all")
        for who, cores in sorted(used.items(), key=lambda kv: -kv[1]):
            if cores >= 0.01:
                print(f"    {who:40s} {cores:5.2f} cores")


def thread_cpu() -> dict[str, float]:
    """CPU seconds each thread of this process has used (user + system, from /proc), keyed by
    who it is: a Python thread's name (threading), else its system name with its id."""
    ticks = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        who = names.get(int(task)) or f"{comm} [{task}]"
        out[who] = (int(rest[11]) + int(rest[12])) / ticks  # utime, stime (fields 14 and 15)
    return out


def cores_used(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores per thread group between two thread_cpu() snapshots `seconds` apart: Python threads
    by name, the others by system name (their ids dropped, so a library's pool is one line)."""
    out: dict[str, float] = collections.defaultdict(float)
    for who, used in after.items():
        group = who.split(" [")[0] + " (threads)" if " [" in who else who
        out[group] += (used - before.get(who, 0.0)) / seconds
    return dict(out)


if __name__ == "__main__":
    main()
