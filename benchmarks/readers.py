"""The full CPU pipeline over the ImageNet sample read three ways: a folder, a file list and tar
shards. The rates should agree within 10% (the reader is not the bottleneck). Index timings of
big datasets are in benchmarks/readers_index.py.

    python benchmarks/readers.py [--data ../shared/data/imagenet-sample] [--threads 2] [--epochs 2]

The sample is a flat folder of <wnid>_<name>.JPEG files; the script lays it out (in a temporary
folder, outside the timings) as one class folder per wnid (symbolic links), a file list with the
class index, and 4 tar shards.
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from pixelpipe import Compose, Pipeline
from pixelpipe.readers import FileList, Folder, TarShards
from pixelpipe.tools.bench.pipelines import pipeline_ops

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-sample"


def layouts(src: Path, tmp: Path, shards: int = 4) -> dict[str, object]:
    files = sorted(src.glob("*.JPEG"))
    classes = sorted({f.name.split("_")[0] for f in files})
    label = {c: i for i, c in enumerate(classes)}
    for f in files:
        d = tmp / "folder" / f.name.split("_")[0]
        d.mkdir(parents=True, exist_ok=True)
        os.symlink(f, d / f.name)
    with open(tmp / "list.txt", "w") as out:
        for f in files:
            out.write(f"{f} {label[f.name.split('_')[0]]}\n")
    for s in range(shards):
        with tarfile.open(tmp / f"shard-{s}.tar", "w") as tar:
            for k, f in enumerate(files[s::shards]):
                key = f"{s:02d}{k:05d}"
                tar.add(f, arcname=f"{key}.jpg")
                info = tarfile.TarInfo(f"{key}.cls")
                data = str(label[f.name.split("_")[0]]).encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return {"folder": Folder(tmp / "folder"), "file list": FileList(tmp / "list.txt"),
            "tar shards": TarShards(str(tmp / "shard-*.tar"))}


def rate(reader: object, threads: int, epochs: int, batch: int) -> float:
    t = Compose(pipeline_ops("rn50"), dtype=torch.float16)
    with Pipeline(reader, t, batch, num_threads=threads, shuffle_buffer=256) as pipe:
        for _ in pipe:  # warm-up epoch
            pass
        n, t0 = 0, time.perf_counter()
        for _ in range(epochs):
            for b in pipe:
                n += int(b["valid"].sum())
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    src = Path(args.data)
    if not src.is_dir():
        raise SystemExit(f"{src} is not a folder (the ImageNet sample lives in ../shared/data)")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        readers = layouts(src, Path(tmp))
        print(f"full CPU pipeline (rn50, float16, batch {args.batch}, {args.threads} threads), {src}")
        print(f"{'reader':<14}{'images/s':>10}{'vs folder':>11}")
        base = None
        for name, reader in readers.items():
            r = rate(reader, args.threads, args.epochs, args.batch)
            base = base or r
            print(f"{name:<14}{r:>10.1f}{r / base:>11.2f}")


if __name__ == "__main__":
    main()
