"""Pipeline on CUDA with and without the decode thread (and with and without buffer reuse).

    python benchmarks/gpu_decode_thread.py [--data DIR] [--epochs 4]

Prints images/s of a Pipeline (batch 256, 8 threads, prefetch 2) for the rn50 and rich pipelines
over the JPEGs of DIR, one warm-up epoch then --epochs timed ones, for each configuration in one
process. Needs CUDA, Triton and nvImageCodec.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import pixelpipe as pp
import pixelpipe.decode.gpu as gpu
from pixelpipe.bench.pipelines import pipeline_ops
from pixelpipe.readers import Memory


def rate(blobs: list[bytes], pipeline: str, decode_thread: bool, epochs: int) -> float:
    with pp.Pipeline(Memory(list(blobs)), pp.Compose(pipeline_ops(pipeline), dtype=torch.float16), 256,
                     device="cuda", num_threads=8, prefetch=2, decode_thread=decode_thread) as pipe:
        for _ in pipe:
            pass
        torch.cuda.synchronize()
        t0, n = time.perf_counter(), 0
        for _ in range(epochs):
            for b in pipe:
                n += int(b["valid"].sum())
        torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/imagenet-sample")
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    blobs = [p.read_bytes() for p in sorted(Path(args.data).glob("*")) if p.suffix.lower() in (".jpeg", ".jpg")]
    take_free = gpu.GpuDecoder._take_free
    for decode_thread, reuse in ((True, True), (False, True), (True, False), (False, False)):
        gpu.GpuDecoder._take_free = take_free if reuse else (lambda self, n: {})  # type: ignore[method-assign]
        for pipeline in ("rn50", "rich"):
            r = rate(blobs, pipeline, decode_thread, args.epochs)
            print(f"decode_thread={decode_thread} reuse={reuse} {pipeline}: {r:,.0f} images/s", flush=True)
    gpu.GpuDecoder._take_free = take_free  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
