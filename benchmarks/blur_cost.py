"""What GaussianBlur adds to the rn50 pipeline, augment-only: decoded images already on the device.

    python benchmarks/blur_cost.py [--data DIR] [--device cuda] [--rounds 7] [--seconds 2]
        [--kernel 23] [--p 0.5] [--wait-each]

Times two Composes on the same decoded batch (the first 256 images of DIR, or the built-in
synthetic set), in alternating rounds: rn50 (RandomResizedCrop(224), flip, normalise) and rn50
with GaussianBlur(kernel, sigma=(0.1, 2.0), p) after the flip, float16 NCHW; the calls of a
round follow each other as `pixelpipe bench --augment-only` times them (and as a training loop
makes them: nothing waits for the device between calls), the device waited for once at the
round's end, inside the clock (`--wait-each`: after every call). Prints each one's
median round in images/s with its range, and the median (range) of the per-round ratio
blurred / plain: the share of throughput the blur keeps. The catalogue's target is at least
0.95 (at most 5% slower).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import pixelpipe as pp
from pixelpipe.tools.bench.batches import decode_head
from pixelpipe.tools.bench.images import load_images


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="folder of images (default: built-in synthetic JPEGs)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--kernel", type=int, default=23)
    ap.add_argument("--p", type=float, default=0.5)
    ap.add_argument("--wait-each", action="store_true",
                    help="wait for the device after every call (default: as pixelpipe bench times augment-only "
                         "contenders, calls back to back and one wait at the end of the round)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    blobs, _ = load_images(args.data, args.batch)
    images = decode_head(blobs, args.batch, dev)
    norm = pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    composes = {
        "rn50": pp.Compose([pp.RandomResizedCrop(224), pp.RandomFlip(0.5), norm], dtype=torch.float16),
        f"rn50 + GaussianBlur({args.kernel}, p={args.p})": pp.Compose(
            [pp.RandomResizedCrop(224), pp.RandomFlip(0.5),
             pp.GaussianBlur(args.kernel, sigma=(0.1, 2.0), p=args.p), norm], dtype=torch.float16),
    }
    engine = pp.Engine(dev)
    n = len(images)
    epochs = iter(range(10**9))

    def wait() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def one_round(t: pp.Compose) -> float:
        done, t0 = 0, time.perf_counter()
        while True:
            t(images, seed=0, epoch=next(epochs), indices=torch.arange(n), engine=engine)
            done += n
            if args.wait_each:
                wait()
            if time.perf_counter() - t0 >= args.seconds:
                wait()  # inside the clock: the round ends when the device has done its calls
                return done / (time.perf_counter() - t0)

    names = list(composes)
    for t in composes.values():  # warm-up: compiles the kernels
        t(images, seed=0, epoch=0, indices=torch.arange(n), engine=engine)
    rates: dict[str, list[float]] = {k: [] for k in names}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            rates[name].append(one_round(composes[name]))
    engine.close()
    ratios = [b / a for a, b in zip(rates[names[0]], rates[names[1]])]
    how = "each call waited for" if args.wait_each else "calls back to back, one wait a round"
    print(f"{n} decoded images on {dev}, float16, {args.rounds} rounds of >= {args.seconds} s, {how}")
    print("| pipeline | images/s (median round) | range |")
    print("| --- | ---: | ---: |")
    for name in names:
        print(f"| {name} | {statistics.median(rates[name]):,.0f} | {min(rates[name]):,.0f}-{max(rates[name]):,.0f} |")
    print(f"blurred / plain per round: median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
