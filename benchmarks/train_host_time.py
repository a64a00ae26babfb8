"""Where the training thread's host time goes beside each loader: its CPU time and its time off
the CPU per step; Python's garbage collections by thread; and the process's CUDA calls.

train_throughput.py shows that beside a Pipeline the host issues a ResNet-18 step in 24-36 ms
against 19.3 ms with synthetic data, and train_profile.py that the step's GPU time grows in the
gaps this leaves. This tells what holds the host up:

- CPU ms a step: the training thread's own CPU time (time.thread_time) while issuing a step. If
  it grows beside a loader, the thread runs slower on its core (shared caches, clocks, a
  spinning wait inside a CUDA call).
- off the CPU: wall time issuing minus CPU time: waiting for the GIL, for the backward pass
  (run on autograd's thread), for room in the launch queue, for a lock in the driver.
- CPU of each kind of thread a step (/proc's per-thread times, Python threads by name): for
  a Pipeline's Python threads, the most they can have held the GIL.

These come from --steps steps without the profiler; the CUDA calls below from as many after,
under it.

Also the garbage collections each thread ran (gc.callbacks), for a Pipeline how many batches
were handed over before their kernels finished, and the process's CUDA runtime calls per step
by name (count and ms; CUPTI's records through torch.profiler), by the profiler's thread
number: on torch 2.11 number 2 held autograd's backward thread and number 1 the training
thread together with every thread the profiler did not start (the loader's, nvImageCodec's,
DALI's): what the loader asks of the driver per step, set beside what DALI asks.

Usage (one GPU): python benchmarks/train_host_time.py --data DIR [--model resnet18]
    [--loaders synthetic,pixelpipe,dali] [--steps 30] [--warmup 20] [--repeat 60]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import threading
import time
from collections import defaultdict

import torch
from _common import add_gpu_decoding, add_profiled_training, file_list
from train_throughput import LOADERS, timed_steps, training_step


def profile_steps(model_name: str, batches, warmup: int, steps: int
                  ) -> tuple[list[tuple], list[float], list[float], dict[str, float]]:
    """Over `steps` steps after `warmup`: each step's host ms issuing it and the training
    thread's CPU ms meanwhile, and each thread's CPU seconds by name (`thread_times`); then
    over as many steps under torch.profiler, its CUDA runtime records (thread, name, start us,
    end us). The times come from the steps without the profiler."""
    from torch.profiler import ProfilerActivity, profile

    step = training_step(model_name)
    for _ in range(warmup):
        step(next(batches))
    torch.cuda.synchronize()
    before = thread_times()
    timed = timed_steps(step, batches, 0, steps)  # the warm-up above: its threads' CPU not counted
    after = thread_times()
    spent: dict[str, float] = defaultdict(float)
    for tid, (name, seconds) in after.items():
        spent[name] += seconds - before.get(tid, (name, 0.0))[1]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(next(batches))
        torch.cuda.synchronize()
    calls = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == torch.autograd.DeviceType.CPU and e.name().startswith(("cuda", "cu")):
            calls.append((e.start_thread_id(), e.name(), e.start_ns() / 1e3, (e.start_ns() + e.duration_ns()) / 1e3))
    return calls, timed.issue_ms, timed.cpu_ms, dict(spent)


def thread_times() -> dict[int, tuple[str, float]]:
    """Every thread of this process: native id -> (name, CPU seconds so far). The name is the
    Python thread's (its number dropped: "pixelpipe-read_3" -> "pixelpipe-read"), "training"
    for the main thread, else the kernel's name of the thread (nvImageCodec's, DALI's,
    autograd's: "native: python3")."""
    python = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    base = f"/proc/{os.getpid()}/task"
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir(base):
        tid = int(entry)
        try:
            with open(f"{base}/{entry}/schedstat") as f:
                seconds = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            try:
                with open(f"{base}/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / tick
            except (OSError, ValueError, IndexError):
                continue
        if tid == main:
            name = "training"
        elif tid in python:
            name = re.sub(r"[_-]?\d+$", "", python[tid])
        else:
            try:
                with open(f"{base}/{entry}/comm") as f:
                    name = "native: " + f.read().strip()
            except OSError:
                continue
        out[tid] = (name, seconds)
    return out


class Collections:
    """Python's cyclic garbage collections while installed (gc.callbacks): per thread that ran
    them, the count and milliseconds by generation."""

    def __init__(self) -> None:
        self.spent: dict[tuple[str, int], list[float]] = defaultdict(list)
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            who = "training" if threading.current_thread() is threading.main_thread() else threading.current_thread().name
            self.spent[(who, info["generation"])].append(1e3 * (time.perf_counter() - self._start))

    def report(self, steps: int) -> None:
        for (who, gen), times in sorted(self.spent.items()):
            print(f"  garbage collections of generation {gen} on {who}: {len(times) / steps:.2f} a step, "
                  f"{sum(times) / steps:.3f} ms a step (max {max(times):.2f} ms)")


def watch_hand_over() -> list[bool]:
    """Count, for each batch a Pipeline hands over, whether its kernels were still running (its
    event not reached): then the training stream waits for them on the GPU."""
    from pixelpipe.loader import pipeline

    pending: list[bool] = []
    original = pipeline.hand_over

    def watched(batch, event, stream) -> None:  # type: ignore[no-untyped-def]
        pending.append(not event.query())
        original(batch, event, stream)

    pipeline.hand_over = watched
    return pending


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else float("nan")


def report(name: str, calls: list[tuple], wall: list[float], cpu: list[float], steps: int) -> None:
    issue, own = sum(wall) / steps, sum(cpu) / steps
    print(f"\n{name}: a step issued in {issue:.2f} ms (median {median(wall):.2f}); the training thread's CPU "
          f"{own:.2f} ms, off the CPU {issue - own:.2f} ms")
    per: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t, n, start, end in calls:
        per[t][n].append((end - start) / 1e3)
    for t, names in sorted(per.items()):
        total = sum(map(sum, names.values())) / steps
        top = sorted(names.items(), key=lambda kv: -sum(kv[1]))[:6]
        what = ", ".join(f"{n} {len(v) / steps:.1f}x {sum(v) / steps:.2f} ms (max {max(v):.2f})" for n, v in top)
        print(f"  profiler thread {t}: {total:.2f} ms a step in CUDA calls: {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_profiled_training(ap)
    add_gpu_decoding(ap)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    listed, n = file_list(args.data, args.repeat)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.model}, {args.steps} steps after "
          f"{args.warmup}, {n} samples")
    pending = watch_hand_over()
    for name in args.loaders.split(","):
        pending.clear()
        try:
            batches, stop = LOADERS[name](args, listed)
        except Exception as e:  # a missing peer is a line, not the end of the run
            print(f"\n{name}: failed: {type(e).__name__}: {e}", flush=True)
            continue
        collections = Collections()
        gc.callbacks.append(collections)
        calls, wall, cpu, spent = profile_steps(args.model, batches, args.warmup, args.steps)
        gc.callbacks.remove(collections)
        stop()
        del batches
        gc.collect()
        torch.cuda.empty_cache()
        report(name, calls, wall, cpu, args.steps)
        for who, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
            if seconds > 0:
                print(f"  CPU of {who} threads: {1e3 * seconds / args.steps:.2f} ms a step")
        collections.report(args.steps)
        if pending:
            print(f"  batches whose GPU work was still running when handed over: {sum(pending)} of {len(pending)}")


if __name__ == "__main__":
    main()
