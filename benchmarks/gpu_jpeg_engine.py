"""How much of the hardware JPEG engines (NVJPG) a decoded image costs, and how busy a Pipeline keeps them.

    python benchmarks/gpu_jpeg_engine.py [--data DIR] [--seconds 4] [--pipelines rn50,rich] [--epochs 40]

Part 1, the decoder alone: GpuDecoder.decode_views on rn50's random-crop regions of the JPEGs of
DIR, batches of 256, for several hardware shares, each for `--seconds`. Prints images/s, the
NVJPG engines' busy percentage and the kernels' (NVML, bench/engine_use.py), and the engines'
busy microseconds per image they decoded (busy share / (rate x hardware share)). The engines
decode batches back to back only if the calls come back to back, so the decoder alone leaves
them idle part of the time; the cost per image does not depend on that.

Part 2, Pipelines: the same figures for a Pipeline of each of `--pipelines` (defaults: 8
threads, hardware share 0.75) over `--epochs` timed epochs after an untimed one, as
`_common.epochs_rate` times them.

Where the busy share nears 100% in part 2, the engines set the pace, and so they do for any
library decoding with them at the same share (DALI's "mixed" decoder uses the same engines
through the same library). Needs CUDA, nvImageCodec and NVML (the NVIDIA driver's library).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from _common import arguments, epochs_rate, read_jpegs, rn50_regions

from pixelpipe.tools.bench.engine_use import EngineMeter, Usage, open_meter

BATCH = 256
SHARES = (None, 0.9, 0.75, 0.6)  # None: the hardware decoder takes every JPEG it can


def engine_line(label: str, rate: float, usage: Usage | None, share: float | None) -> str:
    """One row; share is the hardware share (None: every JPEG the engines take, 0: none)."""
    share = 1.0 if share is None else share
    per_image = 1e6 * usage.jpeg / 100 / (rate * share) if usage and usage.jpeg and rate and share else float("nan")
    jpeg = f"{usage.jpeg:5.1f}%" if usage and usage.jpeg is not None else "    -"
    kernels = f"{usage.kernels:5.1f}%" if usage and usage.kernels is not None else "    -"
    return f"{label:<34}{rate:>10,.0f}{jpeg:>9}{kernels:>10}{per_image:>12.1f}"


def decoder_alone(data: str, seconds: float, meter: EngineMeter) -> None:
    from pixelpipe.decode.gpu import GpuDecoder

    blobs, regions = rn50_regions(data, 2)
    n = len(blobs) - len(blobs) % BATCH
    if n == 0:
        raise SystemExit(f"need at least {BATCH} JPEGs in {data}")
    stream = torch.cuda.current_stream()

    def one_pass(dec) -> int:
        for rg in regions:
            for a in range(0, n, BATCH):
                views, _, _ = dec.decode_views(blobs[a:a + BATCH], rg[a:a + BATCH])
                views.retire(stream)
        torch.cuda.synchronize()
        return n * len(regions)

    for share in SHARES:
        dec = GpuDecoder("cuda", hw_fraction=share, num_cpu_threads=8)
        try:
            one_pass(dec)  # warm-up
            t0, images = time.perf_counter(), 0
            meter.start()
            while time.perf_counter() - t0 < seconds:
                images += one_pass(dec)
            usage = meter.stop()
            rate = images / (time.perf_counter() - t0)
        finally:
            dec.close()
        print(engine_line(f"decoder alone, share {share}", rate, usage, share))


def pipelines(data: str, names: list[str], epochs: int, meter: EngineMeter) -> None:
    import pixelpipe as pp
    from pixelpipe.readers import Memory
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    blobs = read_jpegs(data)
    for name in names:
        t = pp.Compose(pipeline_ops(name), dtype=torch.float16)
        with pp.Pipeline(Memory(list(blobs)), t, BATCH, device="cuda", num_threads=8) as pipe:
            rate = epochs_rate(pipe, epochs, on_start=meter.start)  # the window: the timed epochs
            usage = meter.stop()
        share = pipe.engine.gpu.hw_fraction
        print(engine_line(f"Pipeline {name}, share {share}", rate, usage, share))


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--pipelines", default="rn50,rich")
    ap.add_argument("--epochs", type=int, default=40, help="timed epochs of each Pipeline (after one untimed)")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    meter = open_meter(torch.device("cuda", torch.cuda.current_device()))
    if meter is None:
        raise SystemExit("NVML cannot be read here (no NVIDIA driver library?)")
    print(f"{torch.cuda.get_device_name()}, {Path(args.data)}, batches of {BATCH}, 8 threads; the decoder alone "
          f"{args.seconds:g} s per share, Pipelines {args.epochs} epochs")
    print(f"{'':<34}{'images/s':>10}{'NVJPG':>9}{'kernels':>10}{'us/image':>12}")
    decoder_alone(args.data, args.seconds, meter)
    pipelines(args.data, [p for p in args.pipelines.split(",") if p], args.epochs, meter)


if __name__ == "__main__":
    main()
