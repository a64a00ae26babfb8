"""The CPU target: pixelpipe's standard training pipeline against a plain Pillow + numpy loop
with the same number of threads, side by side in one process, printed as a table.

    python benchmarks/cpu_pipeline.py [--data DIR] [--threads 2] [--batch 64] [--passes 2]

Same as `pixelpipe bench --device cpu --data DIR --threads 2 --peers pillow`.
"""

from __future__ import annotations

from pathlib import Path

from _common import arguments

from pixelpipe.bench.runner import run_bench


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--pipeline", default="rn50", choices=("rn50", "rich", "val"))
    args = ap.parse_args()
    if not Path(args.data).is_dir():
        raise SystemExit(f"{args.data} is not a folder: pass --data (the ImageNet sample lives in ../shared/data)")
    run_bench(args.data, args.pipeline, "cpu", args.batch, args.threads, ["pillow"], args.passes, 0, False, False)


if __name__ == "__main__":
    main()
