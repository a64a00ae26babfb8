"""A Pipeline alone, two source trees alternating on one machine: whether a change to the loader
moves its images/s beyond the machine's spread.

Each run is a fresh process with the tree's `src` first on PYTHONPATH (its C helpers built in
place: `python setup.py build_ext --inplace` in the tree) that builds one Pipeline as `pixelpipe
bench` builds its contenders (`pixelpipe.tools.bench.gpu_peers`: rn50 or --pipeline, batch 256,
8 threads, float16) over the JPEGs of --data, from files (a file list) or from memory, and times
it for --seconds after a warm-up epoch (`run_contender`, as the bench does). Rounds alternate the
trees' order.

Usage (one GPU):
    python benchmarks/pipeline_ab.py --trees OLD_TREE,NEW_TREE --data DIR [--modes memory,files]
        [--rounds 2] [--seconds 2] [--pipeline rn50]
A tree is a folder holding src/ (e.g. `git archive REV src setup.py pyproject.toml | tar x -C
DIR`); this checkout's own tree is `.`. Prints each run, then per mode and tree the median and
range, and the per-round ratios NEW / OLD.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from train_ab import spread, tree_env  # the same tree's PYTHONPATH and summary as train_ab's

CHILD = """
import sys, torch
from pixelpipe.tools.bench.gpu_peers import run_contender, pixelpipe_files, pixelpipe_full
from pixelpipe.tools.bench.images import image_files, write_file_list
mode, folder, seconds, pipeline = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
files = [str(p) for p in image_files(folder)]
dev = torch.device("cuda")
if mode == "files":
    listed = write_file_list(files)
    make = lambda: pixelpipe_files(listed, len(files), pipeline, 256, 8, dev)
else:
    blobs = [open(f, "rb").read() for f in files]
    make = lambda: pixelpipe_full(blobs, pipeline, 256, 8, dev)
print("RATE", run_contender(mode, make, 1, len(files), True, "", dev, seconds).rate)
"""


def one_run(tree: Path, mode: str, args: argparse.Namespace) -> float | None:
    """Images/s of one Pipeline run of `tree` (None: it failed or timed out; its output is shown)."""
    cmd = [sys.executable, "-c", CHILD, mode, args.data, str(args.seconds), args.pipeline]
    try:
        done = subprocess.run(cmd, env=tree_env(tree), capture_output=True, text=True, timeout=args.seconds * 10 + 120)
    except subprocess.TimeoutExpired:
        return None
    rates = [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("RATE ")]
    if not rates or not rates[-1]:  # a contender that failed is a row of rate 0: say why
        print((done.stdout + done.stderr).strip()[-2000:], file=sys.stderr)
        return None
    return rates[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", required=True, help="OLD,NEW: folders holding src/")
    ap.add_argument("--data", required=True, help="a folder of JPEGs")
    ap.add_argument("--modes", default="memory,files", help="memory, files or both (default)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pipeline", default="rn50")
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    modes = args.modes.split(",")
    if len(trees) != 2 or not all((t / "src").is_dir() for t in trees):
        ap.error("--trees takes two folders, each holding src/")
    if not set(modes) <= {"memory", "files"} or args.rounds < 1:
        ap.error("--modes: memory and/or files; --rounds at least 1")
    rates: dict[tuple[str, int], list[float | None]] = {(m, k): [] for m in modes for k in range(2)}
    for r in range(args.rounds):
        for mode in modes:
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                rate = one_run(trees[k], mode, args)
                rates[mode, k].append(rate)
                print(f"round {r} {mode:6s} {'old' if k == 0 else 'new'} "
                      f"{'failed' if rate is None else f'{rate:,.0f} images/s'}", flush=True)
    for mode in modes:
        old, new = rates[mode, 0], rates[mode, 1]
        ratios = [b / a for a, b in zip(old, new) if a and b]
        print(f"{mode}: old {spread([x for x in old if x])}, new {spread([x for x in new if x])}, new / old per "
              f"round {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else
              f"{mode}: no pair of runs")


if __name__ == "__main__":
    main()
