"""Pipeline on CUDA with and without the decode thread.

    python benchmarks/gpu_decode_thread.py [--data DIR] [--epochs 4]

Prints images/s of a Pipeline (batch 256, 8 threads, prefetch 2) for the rn50 and rich pipelines
over the JPEGs of DIR, one warm-up epoch then --epochs timed ones, for each configuration in one
process. Needs CUDA, Triton and nvImageCodec.
"""

from __future__ import annotations

import torch
from _common import arguments, epochs_rate, read_jpegs

import pixelpipe as pp
from pixelpipe.readers import Memory
from pixelpipe.tools.bench.pipelines import pipeline_ops


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    blobs = read_jpegs(args.data)
    for decode_thread in (True, False):
        for pipeline in ("rn50", "rich"):
            with pp.Pipeline(Memory(list(blobs)), pp.Compose(pipeline_ops(pipeline), dtype=torch.float16), 256,
                             device="cuda", num_threads=8, prefetch=2, decode_thread=decode_thread) as pipe:
                rate = epochs_rate(pipe, args.epochs)
            print(f"decode_thread={decode_thread} {pipeline}: {rate:,.0f} images/s", flush=True)


if __name__ == "__main__":
    main()
