"""How long readers take to index a dataset at construction.

Builds, in a temporary folder (outside the timings): a Folder tree of 100,000 tiny files
(1,000 classes x 100, a few in nested subfolders, plus some non-image files), list files of
1,000,000 lines (text with one label, text with three labels, CSV with a header), and one tar
shard of 20,000 samples. Then times each reader's constructor: the first call (page cache warm
from the creation, Python caches cold) and the best of `--repeat` calls.

Targets: Folder over 100,000 files and FileList over 1,000,000 lines under 2 s each.

    python benchmarks/readers_index.py [--files 100000] [--lines 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pixelpipe.readers import FileList, Folder, TarShards


def make_tree(root: Path, n_files: int, n_classes: int = 1000) -> None:
    per_class = max(1, n_files // n_classes)
    for c in range(n_classes):
        folder = root / f"n{c:08d}"
        nested = folder / "extra"
        nested.mkdir(parents=True)
        for k in range(per_class):
            target = nested if k % 10 == 0 else folder
            ext = "JPEG" if k % 2 else "jpg"
            (target / f"img_{c:04d}_{k:05d}.{ext}").write_bytes(b"\xff")
        (folder / "labels.txt").write_bytes(b"not an image")


def make_lists(root: Path, n_lines: int) -> dict[str, Path]:
    names = [f"train/n{i % 1000:08d}/img_{i:08d}.JPEG" for i in range(n_lines)]
    one = root / "one.txt"
    one.write_text("".join(f"{p} {i % 1000}\n" for i, p in enumerate(names)))
    three = root / "three.txt"
    three.write_text("".join(f"{p} {i % 1000} {i % 7} {i % 2}\n" for i, p in enumerate(names)))
    csv = root / "two.csv"
    csv.write_text("path,label,group\n" + "".join(f"{p},{i % 1000},{i % 3}\n"
                                                  for i, p in enumerate(names)))
    return {"text, 1 label": one, "text, 3 labels": three, "csv, 2 labels": csv}


def make_tar(path: Path, n_samples: int) -> None:
    with tarfile.open(path, "w") as tar:
        for k in range(n_samples):
            for ext, data in (("jpg", b"\xff" * 100), ("cls", str(k % 1000).encode())):
                info = tarfile.TarInfo(f"{k:08d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def timed(build: Callable[[], object], repeat: int) -> tuple[float, float, int]:
    times, n = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        reader = build()
        times.append(time.perf_counter() - start)
        n = len(reader)  # type: ignore[arg-type]
    return times[0], min(times), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--tar-samples", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pixelpipe-bench-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        make_tree(root / "tree", args.files)
        lists = make_lists(root, args.lines)
        make_tar(root / "shard.tar", args.tar_samples)
        print(f"setup (not timed): {time.perf_counter() - start:.1f} s, {os.cpu_count()} CPUs\n")

        rows = [("Folder", f"{args.files:,} files", lambda: Folder(root / "tree"))]
        rows += [("FileList", f"{args.lines:,} lines, {what}", lambda p=p: FileList(p))
                 for what, p in lists.items()]
        rows += [("TarShards", f"{args.tar_samples:,} samples, 1 shard",
                  lambda: TarShards(root / "shard.tar"))]

        print(f"{'reader':<10} {'input':<32} {'first s':>8} {'best s':>8} {'us/item':>8}")
        print("-" * 70)
        for name, what, build in rows:
            first, best, n = timed(build, args.repeat)
            print(f"{name:<10} {what:<32} {first:8.3f} {best:8.3f} {best / n * 1e6:8.2f}")


if __name__ == "__main__":
    main()
