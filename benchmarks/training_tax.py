"""What a loader's kinds of work cost a training loop that runs beside them, one kind at a time.

A torchvision model (ResNet-18 by default: at batch 256 on an H200 its host issues a step
about as fast as the GPU runs it) trains on one synthetic batch on the GPU, the way
`train_throughput.py` trains it, while a background thread does one kind of a loader's work,
LOAD units out of every PERIOD ms (`--kind`):

- python: LOAD ms of pure Python, in pieces of PIECE microseconds, each followed by a call that
  gives the GIL up (as a loader's threads alternate short stretches of Python with C calls that
  release it). Nothing touches the GPU: what the loop can lose is the GIL alone.
- launches: LOAD x 100 CUDA calls (a one-element kernel launch and an event record, in turn) on
  a stream of the thread's own, with next to no GPU work: what the loop can lose is the CUDA
  driver's time and locks, shared by the threads of one process.
- gpu: LOAD ms of GPU work on a stream of the thread's own, in kernels of about PIECE
  microseconds (matrix products sized once to take that long), a few launches: what the loop can
  lose is the GPU's SMs and memory.
- pipeline: LOAD batches a period of a Pipeline over --data (train_throughput.py's: the
  imagenet_train preset, batch 256, files read from disk), drawn on a stream of the thread's
  own and dropped: what the loop loses to a Pipeline running beside it, apart from waiting for
  its batches (1.0 with the default period is about 10k images/s).
- waits: LOAD x 10 times a period, a one-block kernel of about PIECE microseconds
  (torch.cuda._sleep) on a stream of the thread's own and a wait for its event, as a decoder
  thread waits for each image's kernels: what the loop can lose is the driver's time while
  the thread waits (spinning, under CUDA's default schedule; `--sched` changes it).

For each load it prints training images/s, its share of the unloaded rate, the host's median
time issuing a step and what the background thread got done per period (CPU ms for python,
calls for launches, launched GPU ms for gpu: it may get less than it asks for).

    python benchmarks/training_tax.py [--kind python|launches|gpu|waits] [--model resnet18]
        [--loads 0,2.5,5,10] [--period 25] [--piece 20] [--steps 100] [--warmup 15] [--rounds 2]
        [--sched auto|spin|yield|blocking] [--threads 1] [--data DIR (--kind pipeline)]
        [--switch-interval 0.005]

A Pipeline's threads held the GIL about 9.4-9.9 ms per batch of 256 (docs/design.md); at 10k
images/s a batch is 25.6 ms, hence the default period.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import file_list
from train_throughput import BATCH, SCHED, endless, set_sched, timed_steps, training_step

import pixelpipe  # noqa: F401  (CUDA's hardware queues, as in a training script)


def each_period(period_ms: float, stop: threading.Event, got: list[float], once: Callable[[], float],
                after: Callable[[], Any] | None = None) -> None:
    """once() at the start of every period_ms until `stop`, what it returns appended to `got`;
    after(), if given, once the period is over."""
    while not stop.is_set():
        start = time.perf_counter()
        got.append(once())
        rest = period_ms * 1e-3 - (time.perf_counter() - start)
        if rest > 0:
            stop.wait(rest)
        if after is not None:
            after()


def background(load_ms: float, period_ms: float, piece_us: float, stop: threading.Event, got: list[float]) -> None:
    """Python for load_ms of every period_ms (in piece_us pieces, each followed by a GIL release)
    until `stop`; appends the thread's CPU seconds per period to `got`."""
    piece = piece_us * 1e-6

    def once() -> float:
        start, cpu = time.perf_counter(), time.thread_time()
        while time.perf_counter() - start < load_ms * 1e-3:
            end = time.perf_counter() + piece
            while time.perf_counter() < end:
                pass
            time.sleep(0)  # gives the GIL up, as a C call that releases it
        return time.thread_time() - cpu

    each_period(period_ms, stop, got, once)


def launches(load: float, period_ms: float, piece_us: float, stop: threading.Event, got: list[float]) -> None:
    """load x 100 CUDA calls every period_ms on a stream of its own (launches of a one-element
    kernel and event records, in turn); appends the calls made per period to `got`."""
    stream, one, event = torch.cuda.Stream(), torch.zeros(1, device="cuda"), torch.cuda.Event()
    calls = int(load * 100)

    def once() -> float:
        for k in range(calls):
            if k % 2:
                event.record(stream)
            else:
                one.add_(1.0)
        return float(calls)

    with torch.cuda.stream(stream):
        each_period(period_ms, stop, got, once, stream.synchronize)


def gpu_work(load_ms: float, period_ms: float, piece_us: float, stop: threading.Event, got: list[float]) -> None:
    """load_ms of GPU work every period_ms on a stream of its own, in matrix products of about
    piece_us each (sized once); appends the GPU ms launched per period to `got`."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        n = 512
        while True:  # grow the product until one takes about piece_us
            a = torch.randn(n, n, device="cuda", dtype=torch.float16)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a @ a
            start.record(stream)
            for _ in range(5):
                a @ a
            end.record(stream)
            end.synchronize()
            each_us = 1e3 * start.elapsed_time(end) / 5
            if each_us >= piece_us or n >= 8192:
                break
            n *= 2
        count = max(1, round(load_ms * 1e3 / each_us))

        def once() -> float:
            for _ in range(count):
                a @ a
            return count * each_us / 1e3

        each_period(period_ms, stop, got, once, stream.synchronize)


def waits(load: float, period_ms: float, piece_us: float, stop: threading.Event, got: list[float]) -> None:
    """load x 10 times every period_ms: a one-block kernel of about piece_us on a stream of its
    own, then a wait for its event; appends the waits made per period to `got`."""
    stream, done = torch.cuda.Stream(), torch.cuda.Event()
    cycles = int(piece_us * 1.5e3)  # about 1.5 GHz: a kernel of about piece_us
    times = int(load * 10)

    def once() -> float:
        for _ in range(times):
            torch.cuda._sleep(cycles)
            done.record(stream)
            done.synchronize()
        return float(times)

    with torch.cuda.stream(stream):
        each_period(period_ms, stop, got, once)


def pipeline_load(load: float, period_ms: float, piece_us: float, stop: threading.Event, got: list[float],
                  data: str = "", device: str = "cuda") -> None:
    """A Pipeline over the JPEGs of `data` (listed 60 times; imagenet_train in float16, batch
    256, as train_throughput.py's pixelpipe loader) drawn `load` batches every period_ms on a
    stream of the thread's own and dropped, so the loop never waits for its batches; appends
    the batches per period each draw achieved. The first batches are drawn before the first
    append (start-up is not timed beside the loop)."""
    from contextlib import nullcontext

    import pixelpipe as pp

    listed, _ = file_list(data, 60)
    pipe = pp.Pipeline(listed, pp.presets.imagenet_train(dtype=torch.float16), batch_size=BATCH, device=device,
                       seed=0, drop_last=True)
    stream = torch.cuda.Stream() if device == "cuda" else None
    every = period_ms * 1e-3 / load

    try:
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            batches = endless(lambda: iter(pipe))
            for _ in range(3):
                next(batches)
            while not stop.is_set():
                start = time.perf_counter()
                next(batches)
                rest = every - (time.perf_counter() - start)
                if rest > 0 and stop.wait(rest):
                    break  # stopped while waiting: this draw's period is not a whole one
                got.append(period_ms * 1e-3 / (time.perf_counter() - start))
    finally:
        pipe.close()


KINDS = {"python": background, "launches": launches, "gpu": gpu_work, "waits": waits, "pipeline": pipeline_load}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=sorted(KINDS), default="python")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--loads", default="0,2.5,5,10", help="units of --kind per period (see above)")
    ap.add_argument("--period", type=float, default=25.0, help="ms")
    ap.add_argument("--piece", type=float, default=20.0,
                    help="us of Python between GIL releases (python), of one GPU kernel (gpu, waits)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2, help="the loads in turn, this many times")
    ap.add_argument("--threads", type=int, default=1,
                    help="background threads sharing each load (a Pipeline's Python runs on five)")
    ap.add_argument("--sched", choices=sorted(SCHED), default=None,
                    help="how the process's threads wait for the GPU (train_throughput.py's --sched)")
    ap.add_argument("--data", default=None, help="a folder of JPEGs (--kind pipeline)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval, seconds (Python's default 0.005): how long a thread waiting "
                         "for the GIL lets its holder run before asking for it")
    args = ap.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if args.kind == "pipeline":
        if args.data is None or args.threads != 1:
            ap.error("--kind pipeline needs --data and one thread")
        KINDS["pipeline"] = functools.partial(pipeline_load, data=args.data)
    if args.sched is not None:
        set_sched(args.sched)
    torch.backends.cudnn.benchmark = True
    loads = [float(v) for v in args.loads.split(",")]
    step = training_step(args.model)
    x = torch.randn(BATCH, 3, 224, 224, device="cuda").to(torch.float16)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.model}, batch {BATCH}, "
          f"{args.steps} steps after {args.warmup}; background {args.kind}, pieces of {args.piece:g} us, "
          f"period {args.period:g} ms", flush=True)
    results: dict[float, list[tuple[float, float, float]]] = {v: [] for v in loads}
    for r in range(args.rounds):
        for load in loads if r % 2 == 0 else loads[::-1]:
            stop = threading.Event()
            parts: list[list[float]] = [[] for _ in range(args.threads)] if load > 0 else []
            workers = [threading.Thread(target=KINDS[args.kind], args=(load / args.threads, args.period, args.piece,
                                                                       stop, part), daemon=True) for part in parts]
            for w in workers:  # --threads threads share the load; what they got is summed
                w.start()
            waited = time.perf_counter()
            while not all(parts) and time.perf_counter() - waited < 120:  # each worker under way
                time.sleep(0.01)
            t = timed_steps(step, itertools.repeat(x), args.warmup, args.steps)
            rate, issue = t.rate, t.issue_ms[len(t.issue_ms) // 2]
            stop.set()
            for w in workers:
                w.join()
            done = sum(sorted(p)[len(p) // 2] for p in parts if p) * (1e3 if args.kind == "python" else 1.0)
            results[load].append((rate, issue, done))
            print(f"  round {r + 1}, load {load:g} ms: {rate:,.0f} images/s, host issuing {issue:.2f} ms a step, "
                  f"background got {done:.2f} per period", flush=True)
    base = max(v[0] for v in results[loads[0]]) if loads[0] == 0 else float("nan")
    print(f"\n| background {args.kind}, per period | training images/s (rounds) | of no load (best round) "
          "| host issuing a step, ms | background got, per period |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for load in loads:
        rs = results[load]
        rates = " / ".join(f"{v[0]:,.0f}" for v in rs)
        best = max(v[0] for v in rs)
        print(f"| {load:g} | {rates} | {best / base:.2f} | {' / '.join(f'{v[1]:.2f}' for v in rs)} | "
              f"{' / '.join(f'{v[2]:.2f}' for v in rs)} |")


if __name__ == "__main__":
    main()
