"""Training throughput beside a Pipeline, two source trees alternating on one machine: whether a
change to the loader moves what the training loop gets, with each tree's spread beside it.

Rates of one training run move by 10% and more between runs on one machine and by more between
machines (docs/benchmarks.md), so a change is judged by the ratio of neighbouring runs of the two
trees, over several rounds, in one call. Each run is a fresh process of
benchmarks/train_throughput.py (`--loaders pixelpipe` and the arguments after `--`) with the
tree's `src` first on PYTHONPATH; its C helpers must be built in place (`python setup.py
build_ext --inplace` in the tree).

Usage (one GPU):
    python benchmarks/train_ab.py --trees OLD_TREE,NEW_TREE [--rounds 3] -- --data DIR
        --models resnet18 --steps 150 --warmup 15 --repeat 60 --alone-steps 20
A tree is a folder holding src/ (e.g. `git archive REV src setup.py pyproject.toml | tar x -C
DIR`); this checkout's own tree is `.`. Prints each run, then per tree the median and range of
its rates and of its waiting share, and the per-round ratios NEW / OLD (median, range).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINE = re.compile(r"train\s+([\d,]+) img/s.*waiting\s+([\d.]+)%.*loader alone\s+([\d,]+|nan)")


def one_run(tree: Path, args: list[str], timeout: float) -> tuple[float, float, float] | None:
    """(training images/s, waiting %, loader alone images/s) of one train_throughput run, or None."""
    cmd = [sys.executable, str(HERE / "train_throughput.py"), "--loaders", "pixelpipe", *args]
    try:
        out = subprocess.run(cmd, env=tree_env(tree), capture_output=True, text=True, timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return None
    m = LINE.search(out)
    if m is None:
        return None
    alone = float("nan") if m.group(3) == "nan" else float(m.group(3).replace(",", ""))
    return float(m.group(1).replace(",", "")), float(m.group(2)), alone


def tree_env(tree: Path) -> dict[str, str]:
    """This process's environment with `tree`'s src, then the benchmarks, first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), str(HERE), env.get("PYTHONPATH", "")])
    return env


def spread(values: list[float]) -> str:
    """median (min-max) of rates, or "no run"."""
    if not values:
        return "no run"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", required=True, help="OLD,NEW: folders holding src/")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each one run of each tree (order alternating)")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds a run may take")
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if len(trees) != 2 or not all((t / "src" / "pixelpipe").is_dir() for t in trees):
        raise SystemExit("--trees takes two folders, each holding src/pixelpipe")
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    runs: list[list[tuple[float, float, float] | None]] = [[], []]
    for r in range(args.rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for k in order:
            got = one_run(trees[k], rest, args.timeout)
            runs[k].append(got)
            text = "failed" if got is None else f"{got[0]:,.0f} images/s, waiting {got[1]:.1f}%, alone {got[2]:,.0f}"
            print(f"round {r + 1} {'old' if k == 0 else 'new'} ({trees[k]}): {text}", flush=True)
    print("\n| tree | training images/s: median (range) | waiting in next(), % | loader alone |")
    print("| --- | ---: | ---: | ---: |")
    for k, name in enumerate(("old", "new")):
        ok = [g for g in runs[k] if g is not None]
        waits = [g[1] for g in ok]
        wait = f"{statistics.median(waits):.1f} ({min(waits):.1f}-{max(waits):.1f})" if waits else ""
        print(f"| {name} `{trees[k]}` | {spread([g[0] for g in ok])} | {wait} | {spread([g[2] for g in ok])} |")
    ratios = [b[0] / a[0] for a, b in zip(runs[0], runs[1]) if a is not None and b is not None]
    if ratios:
        print(f"\nnew / old, per round: {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) "
              f"over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
