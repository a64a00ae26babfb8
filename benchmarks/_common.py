"""What the benchmark scripts share: where the sample data is, their argument parser, reading
the JPEGs of a folder, and the rate of a Pipeline's epochs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-sample"


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the first line of the script's docstring, with --data."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="a folder of images (default: the ImageNet sample)")
    return ap


def read_jpegs(folder: str | Path, limit: int | None = None) -> list[bytes]:
    """The bytes of the folder's .jpg/.jpeg files, in name order (the first `limit`)."""
    files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
    if not files:
        raise SystemExit(f"no JPEGs in {folder}: pass --data")
    return [p.read_bytes() for p in files[:limit]]


def epochs_rate(pipe: Any, epochs: int, on_start: Any = None) -> float:
    """Images/s of a Pipeline's valid samples over `epochs` timed epochs, after one untimed
    epoch (then `on_start()`, if given); the GPU (if any) drained inside the clock."""
    import torch

    cuda = torch.cuda.is_available()
    for _ in pipe:
        pass
    if cuda:
        torch.cuda.synchronize()
    if on_start is not None:
        on_start()
    t0, n = time.perf_counter(), 0
    for _ in range(epochs):
        for b in pipe:
            n += int(b["valid"].sum())
    if cuda:
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def rn50_regions(folder: str | Path, epochs: int) -> tuple[list[bytes], list[list[tuple[int, int, int, int]]]]:
    """What the GPU decoder benchmarks decode: the folder's JPEGs that nvImageCodec takes as
    they are (no EXIF rotation, 1 or 3 channels), and per epoch 0..epochs-1 rn50's random-crop
    region (y0, x0, y1, x1) of each, as a Pipeline would ask the decoder for."""
    import numpy as np

    from pixelpipe import Compose
    from pixelpipe.engine.sources import EncodedSource
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    blobs = read_jpegs(folder)
    infos = EncodedSource(blobs).infos
    blobs = [b for b, info in zip(blobs, infos) if info.orientation == 1 and info.channels in (1, 3)]
    sizes = EncodedSource(blobs).sizes()
    stage = Compose(pipeline_ops("rn50")).stages[0]
    n = len(blobs)
    return blobs, [[tuple(r) for r in stage.sample(0, e, np.arange(n), sizes).regions().tolist()]
                   for e in range(epochs)]


def file_list(data: str | Path, repeat: int) -> tuple[str, int]:
    """A temporary file list ("path 0" lines) of the folder's JPEGs, listed `repeat` times, so
    that an epoch is long enough not to restart every few batches; and its length."""
    import os
    import tempfile

    files = sorted(str(p.resolve()) for p in Path(data).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        raise SystemExit(f"no JPEGs under {data}")
    fd, name = tempfile.mkstemp(suffix=".txt", prefix="file-list-")
    with os.fdopen(fd, "w") as f:
        for _ in range(repeat):
            f.writelines(f"{p} 0\n" for p in files)
    return name, len(files) * repeat


def add_profiled_training(ap: argparse.ArgumentParser) -> None:
    """The options of the scripts that profile a few training steps beside each loader
    (train_profile.py, train_host_time.py): --data, --model, --loaders, --repeat, --warmup,
    --steps, --threads, --prefetch, --dali-threads (train_throughput.py's loaders read them)."""
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--loaders", default="synthetic,pixelpipe,dali")
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--dali-threads", type=int, default=8)


def add_gpu_decoding(ap: argparse.ArgumentParser) -> None:
    """The --hw-fraction, --roi, --lanes and --ahead-fraction options of gpu_decoding."""
    ap.add_argument("--hw-fraction", default=None, help="pixelpipe's GpuDecoding hw_fraction (a number or none)")
    ap.add_argument("--roi", default=None, help="pixelpipe's GpuDecoding roi: true, false or auto")
    ap.add_argument("--lanes", type=int, default=None, help="pixelpipe's GpuDecoding lanes")
    ap.add_argument("--ahead-fraction", default=None,
                    help="pixelpipe's GpuDecoding ahead_fraction (a number, none or off)")


def gpu_decoding(args: argparse.Namespace) -> Any:
    """pixelpipe's GpuDecoding with --hw-fraction / --roi / --lanes / --ahead-fraction where given,
    else its defaults."""
    import pixelpipe as pp

    settings: dict[str, Any] = {}
    if args.hw_fraction is not None:
        settings["hw_fraction"] = None if args.hw_fraction == "none" else float(args.hw_fraction)
    if args.roi is not None:
        settings["roi"] = {"true": True, "false": False}.get(args.roi, args.roi)
    if getattr(args, "lanes", None) is not None:
        settings["lanes"] = args.lanes
    ahead = getattr(args, "ahead_fraction", None)
    if ahead is not None:
        settings["ahead_fraction"] = ahead if ahead == "off" else None if ahead == "none" else float(ahead)
    return pp.GpuDecoding(**settings)
