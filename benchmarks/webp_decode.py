"""WebP decoding on the CPU: decode_region's Pillow path against its libwebp fast path
(pixelpipe.decode.webp), for whole images and rn50's random crops.

    python benchmarks/webp_decode.py [--data DIR] [--quality 90] [--threads 8] [--rounds 3]

The folder's JPEGs are re-encoded as WebP (outside the clock). Prints ms per image on one
thread, and images/s through a pool of 1 and of --threads threads (both paths give the GIL up
while libwebp decodes), each the best of --rounds passes over all images. The Pillow path is
decode_region with the fast path switched off, as it was before it existed.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch
from _common import arguments, read_jpegs
from PIL import Image

import pixelpipe.decode.cpu as cpu
from pixelpipe import Compose
from pixelpipe.decode import decode_region, webp
from pixelpipe.engine.sources import EncodedSource
from pixelpipe.tools.bench.pipelines import pipeline_ops

Region = tuple[int, int, int, int]


def to_webp(jpeg: bytes, quality: int) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).convert("RGB").save(buf, "WEBP", quality=quality)
    return buf.getvalue()


@contextlib.contextmanager
def path(name: str) -> Iterator[None]:
    """decode_region with ("pillow") or without ("libwebp") the fast path switched off."""
    fast = cpu.decode_webp_region
    if name == "pillow":
        cpu.decode_webp_region = lambda *a: None
    try:
        yield
    finally:
        cpu.decode_webp_region = fast


def rate(blobs: list[bytes], regions: list[Region | None], threads: int, rounds: int) -> float:
    """Images/s, best of `rounds` passes, decoding on a pool of `threads` threads."""
    def one(i: int) -> object:
        return decode_region(blobs[i], regions[i])

    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(min(len(blobs), 4 * threads))))  # warm-up
        for _ in range(rounds):
            t0 = time.perf_counter()
            list(pool.map(one, range(len(blobs))))
            best = max(best, len(blobs) / (time.perf_counter() - t0))
    return best


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not webp.available():
        raise SystemExit("no libwebp of Pillow's version could be loaded: nothing to compare")
    torch.set_num_threads(1)
    jpegs = read_jpegs(args.data)
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        blobs = list(pool.map(lambda j: to_webp(j, args.quality), jpegs))
    src = EncodedSource(blobs)
    plan = Compose(pipeline_ops("rn50")).stages[0].sample(0, 0, torch.arange(len(blobs)), src.sizes())
    crops: list[Region | None] = [tuple(r) for r in plan.regions().tolist()]
    area = sum((y1 - y0) * (x1 - x0) / (h * w) for (y0, x0, y1, x1), (h, w) in zip(crops, src.sizes().tolist()))
    mean_kb = sum(map(len, blobs)) / len(blobs) / 1e3
    print(f"{len(blobs)} images of {args.data} as WebP q={args.quality} ({mean_kb:.0f} kB on average); "
          f"{cpu_name()}, nproc={os.cpu_count()}; Pillow {Image.__version__}, libwebp {webp._library().version:06x}")
    print(f"rn50 crops cover {100 * area / len(crops):.0f}% of the image on average")
    t = args.threads
    print(f"{'task':<14}{'path':<9}{'ms/image':>10}{'img/s 1 thr':>13}{f'img/s {t} thr':>14}"
          f"{'speed-up 1 thr':>16}{f'speed-up {t} thr':>16}")
    for task, regions in (("whole image", [None] * len(blobs)), ("rn50 crop", crops)):
        base: tuple[float, float] | None = None
        for name in ("pillow", "libwebp"):
            with path(name):
                one, many = rate(blobs, regions, 1, args.rounds), rate(blobs, regions, t, args.rounds)
            base = base or (one, many)
            print(f"{task:<14}{name:<9}{1e3 / one:>10.2f}{one:>13.0f}{many:>14.0f}"
                  f"{one / base[0]:>15.2f}x{many / base[1]:>15.2f}x")


if __name__ == "__main__":
    main()
