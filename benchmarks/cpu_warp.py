"""The CPU's general warp: images/s of pipelines with and without rotation / perspective, and the
rotated-to-unrotated cost ratio, printed as a table.

    python benchmarks/cpu_warp.py [--data DIR] [--n 64] [--threads 2] [--rounds 5] [--reference]

Each pipeline is a Compose called on the same encoded JPEGs (float16 NCHW out) with an Engine of
--threads decoding threads on the CPU, so decode + warp + pointwise are timed as a user runs
them. The pipelines run in rounds, the order reversed every other round, and each one's best
and median round are reported (the 2-core machines these numbers come from are shared: compare
rows of one run, not runs). "cost" is a pipeline's time per image over the plain crop's
(RandomResizedCrop + flip): the issue's target is at most 1.5 for a rotation.

--reference runs the samples the general warp would take through the plain-torch reference
(batched) instead, as before warp.c existed; the script also runs on a checkout without it.
"""

from __future__ import annotations

import statistics
import time

import torch
from _common import arguments, read_jpegs

import pixelpipe as pp
from pixelpipe import presets

NORM = pp.Normalize(presets.IMAGENET_MEAN, presets.IMAGENET_STD)


def pipelines() -> dict[str, list[pp.ops.Op]]:
    crop = [pp.RandomResizedCrop(224), pp.RandomFlip(0.5)]
    return {
        "crop (RRC + flip)": crop + [NORM],
        "crop + rotate 10": crop + [pp.RandomRotate(10), NORM],
        "crop + rotate 10, reflect": crop + [pp.RandomRotate(10, border="reflect"), NORM],
        "crop + perspective 0.2": crop + [pp.RandomPerspective(0.2), NORM],
        "crop + translate 0.3": crop + [pp.RandomAffine(0, translate=(0.3, 0.3)), NORM],
        "bicubic crop + translate 0.3": [pp.RandomResizedCrop(224, interpolation="bicubic"), pp.RandomFlip(0.5),
                                         pp.RandomAffine(0, translate=(0.3, 0.3)), NORM],
        "crop + elastic 50, 5": crop + [pp.ElasticTransform(50.0, 5.0), NORM],
        "crop + elastic, p=0.5": crop + [pp.ElasticTransform(50.0, 5.0, p=0.5), NORM],
        "preset fastai_like": presets.fastai_like(224).ops,
        "preset heavy": presets.heavy(224).ops,
        "preset light": presets.light(224).ops,
        "preset deit": presets.deit(224).ops,
    }


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--n", type=int, default=64, help="images (the first n of --data)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reference", action="store_true", help="the general warp's samples through the reference")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from pixelpipe.kernels.cpu import warp

    if args.reference and hasattr(warp, "general_library"):
        vars(warp)["general_library"] = lambda: None  # as where warp.c was not built
    general = getattr(warp, "general_library", lambda: None)() is not None
    blobs = read_jpegs(args.data, args.n)
    engine = pp.Engine("cpu", num_threads=args.threads)
    todo = {name: pp.Compose(ops, dtype=torch.float16) for name, ops in pipelines().items()}
    times: dict[str, list[float]] = {name: [] for name in todo}
    for t in todo.values():  # warm-up: threads, libraries, buffers
        t(blobs[: args.threads * 2], engine=engine)
    for r in range(args.rounds):
        order = list(todo) if r % 2 == 0 else list(reversed(todo))
        for name in order:
            t0 = time.perf_counter()
            todo[name](blobs, epoch=r, engine=engine)
            times[name].append((time.perf_counter() - t0) / len(blobs))
    engine.close()
    base = min(times[next(iter(todo))])
    mode = "general warp (warp.c) where it applies" if general else "reference warp (no warp.c)"
    print(f"{len(blobs)} images, {args.threads} threads, {args.rounds} rounds, float16 NCHW; {mode}")
    print(f"{'pipeline':28s} {'best img/s':>10s} {'median':>8s} {'ms/img':>7s} {'cost':>5s}")
    for name, ts in times.items():
        best = min(ts)
        print(f"{name:28s} {1 / best:10.1f} {1 / statistics.median(ts):8.1f} {best * 1e3:7.2f} {best / base:5.2f}")


if __name__ == "__main__":
    main()
