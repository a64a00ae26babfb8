"""The CPU target: pixelpipe's standard training pipeline against a plain Pillow + numpy loop
with the same number of threads, side by side in one process, printed as a table.

    python benchmarks/cpu_pipeline.py [--data DIR] [--threads 2] [--batch 64] [--passes 2] [--rounds 3]

Same as `pixelpipe bench --device cpu --data DIR --threads 2 --peers pillow --rounds 3`: in
rounds: both contenders once per round, the order reversed every other round, each one's median
round reported, and the ratio of every round. One round of two passes times ~1 s of pixelpipe:
its ratio to Pillow moved by 25% between runs on the shared 2-core machine (1.78 to 2.29 in 8
runs of the same code); the median of alternating rounds moves less.
"""

from __future__ import annotations

from pathlib import Path

from _common import arguments

from pixelpipe.tools.bench.runner import run_bench


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)")
    ap.add_argument("--pipeline", default="rn50", choices=("rn50", "rich", "val"))
    args = ap.parse_args()
    if not Path(args.data).is_dir():
        raise SystemExit(f"{args.data} is not a folder: pass --data (the ImageNet sample lives in ../shared/data)")
    run_bench(args.data, args.pipeline, "cpu", args.batch, args.threads, ["pillow"], args.passes, 0, False, False,
              rounds=args.rounds)


if __name__ == "__main__":
    main()
