"""The `pixelpipe` command.

Exit codes: 0 success, 1 the command found a problem (e.g. unreadable files for `inspect`),
2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

BENCH_EXAMPLES = """examples:
  pixelpipe bench                                   # standard pipeline, synthetic data, best device
  pixelpipe bench --device cpu --data ../shared/data/imagenet-sample --threads 2 --peers pillow
  pixelpipe bench --data DIR --pipeline rich --peers dali,torchvision,kornia --batch 256
"""


def _bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure images/s of a pipeline, beside its peers",
                       description="Run a standard pipeline with pixelpipe and its peers, print images/s.",
                       epilog=BENCH_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="folder of images (default: built-in synthetic JPEGs)")
    p.add_argument("--pipeline", default="rn50", choices=("rn50", "rich", "val"))
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--batch", type=int, help="batch size (default 64 on cpu, 256 on cuda)")
    p.add_argument("--threads", type=int, help="CPU threads for every contender (default: all cores)")
    p.add_argument("--peers", default=None,
                   help="comma-separated peers: pillow (cpu); dali, torchvision, kornia (cuda)")
    p.add_argument("--passes", type=int, default=2, help="timed passes over the data after one warm-up")
    p.add_argument("-n", type=int, default=256, help="synthetic images when --data is not given")
    p.add_argument("--augment-only", action="store_true", help="(cuda) time the transforms on decoded batches")
    p.add_argument("--cache", action="store_true", help="(cuda) also time epochs from the GPU cache")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pixelpipe", description="Fast image loading and augmentation.")
    sub = parser.add_subparsers(dest="command", required=True)
    _bench(sub)
    args = parser.parse_args(argv)
    if args.command == "bench":
        from .bench.runner import run_bench

        if args.passes < 1 or (args.batch is not None and args.batch < 1) or args.n < 1:
            parser.error("--passes, --batch and -n must be >= 1")
        peers = args.peers.split(",") if args.peers else (["pillow"] if args.device == "cpu" else [])
        run_bench(args.data, args.pipeline, args.device, args.batch, args.threads, [p for p in peers if p],
                  args.passes, args.n, args.json, args.quiet, augment_only=args.augment_only, cache=args.cache)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
