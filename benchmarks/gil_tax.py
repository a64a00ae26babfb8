"""What another thread's Python costs a training loop whose step is bound by its host launches.

A torchvision model (ResNet-18 by default: at batch 256 on an H200 its host issues a step about
as fast as the GPU runs it) trains on one synthetic batch on the GPU, the way
`train_throughput.py` trains it, while a background thread runs pure Python for LOAD ms out of
every PERIOD ms, in pieces of PIECE microseconds, each piece followed by a call that gives the
GIL up (as a loader's threads alternate short stretches of Python with C calls that release
it). Nothing of the background thread touches the GPU, so what the loop loses is the GIL alone.
For each load it prints training images/s, its share of the unloaded rate, the host's median
time issuing a step and the Python the background thread got through per period (it may get
less than it asks for when the loop holds the GIL).

    python benchmarks/gil_tax.py [--model resnet18] [--loads 0,2.5,5,10] [--period 25] [--piece 20]
        [--steps 100] [--warmup 15] [--rounds 2]

A Pipeline's threads held the GIL about 9.4-9.9 ms per batch of 256 (docs/design.md); at 10k
images/s a batch is 25.6 ms, hence the default period.
"""

from __future__ import annotations

import argparse
import threading
import time

import torch
from train_throughput import BATCH, training_step

import pixelpipe  # noqa: F401  (CUDA's hardware queues, as in a training script)


def background(load_ms: float, period_ms: float, piece_us: float, stop: threading.Event, got: list[float]) -> None:
    """Python for load_ms of every period_ms (in piece_us pieces, each followed by a GIL release)
    until `stop`; appends the thread's CPU seconds per period to `got`."""
    piece = piece_us * 1e-6
    while not stop.is_set():
        start, cpu = time.perf_counter(), time.thread_time()
        while time.perf_counter() - start < load_ms * 1e-3:
            end = time.perf_counter() + piece
            while time.perf_counter() < end:
                pass
            time.sleep(0)  # gives the GIL up, as a C call that releases it
        got.append(time.thread_time() - cpu)
        rest = period_ms * 1e-3 - (time.perf_counter() - start)
        if rest > 0:
            stop.wait(rest)


def run(step, x: torch.Tensor, warmup: int, steps: int) -> tuple[float, float]:
    """(images/s, median host ms issuing a step) over `steps` steps after `warmup`."""
    for _ in range(warmup):
        step(x)
    torch.cuda.synchronize()
    issue = []
    t0 = time.perf_counter()
    for _ in range(steps):
        h = time.perf_counter()
        step(x)
        issue.append(time.perf_counter() - h)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return steps * BATCH / wall, 1e3 * sorted(issue)[len(issue) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--loads", default="0,2.5,5,10", help="background Python, ms per period")
    ap.add_argument("--period", type=float, default=25.0, help="ms")
    ap.add_argument("--piece", type=float, default=20.0, help="us of Python between GIL releases")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2, help="the loads in turn, this many times")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    loads = [float(v) for v in args.loads.split(",")]
    step = training_step(args.model)
    x = torch.randn(BATCH, 3, 224, 224, device="cuda").to(torch.float16)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.model}, batch {BATCH}, "
          f"{args.steps} steps after {args.warmup}; background Python in {args.piece:g} us pieces, "
          f"period {args.period:g} ms", flush=True)
    results: dict[float, list[tuple[float, float, float]]] = {v: [] for v in loads}
    for r in range(args.rounds):
        for load in loads if r % 2 == 0 else loads[::-1]:
            stop, got = threading.Event(), []
            worker = None
            if load > 0:
                worker = threading.Thread(target=background, args=(load, args.period, args.piece, stop, got),
                                          daemon=True)
                worker.start()
            rate, issue = run(step, x, args.warmup, args.steps)
            stop.set()
            if worker is not None:
                worker.join()
            done = 1e3 * sorted(got)[len(got) // 2] if got else 0.0
            results[load].append((rate, issue, done))
            print(f"  round {r + 1}, load {load:g} ms: {rate:,.0f} images/s, host issuing {issue:.2f} ms a step, "
                  f"background got {done:.2f} ms of CPU per period", flush=True)
    base = max(v[0] for v in results[loads[0]]) if loads[0] == 0 else float("nan")
    print("\n| background Python, ms per period | training images/s (rounds) | of no load (best round) "
          "| host issuing a step, ms | background CPU got, ms per period |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for load in loads:
        rs = results[load]
        rates = " / ".join(f"{v[0]:,.0f}" for v in rs)
        best = max(v[0] for v in rs)
        print(f"| {load:g} | {rates} | {best / base:.2f} | {' / '.join(f'{v[1]:.2f}' for v in rs)} | "
              f"{' / '.join(f'{v[2]:.2f}' for v in rs)} |")


if __name__ == "__main__":
    main()
