"""The GPU decoder's ceiling: nvImageCodec's decode call alone, as the pipeline makes it.

    python benchmarks/gpu_decoder_ceiling.py [--data DIR] [--epochs 8]

Code streams, the output buffer and the images of every batch are made beforehand (a Pipeline
makes them on its planning thread), so only `CDecoder.decode` is timed: rn50's random-crop
regions of the JPEGs of DIR (EXIF-rotated and CMYK files left out), batches of 256, one
warm-up epoch. Prints images/s for several executor thread counts and hardware-decoder
options, the JPEG engines' busy share (NVML) and their busy microseconds per image offered to
the hardware decoder (busy / (rate x share); share 1 where it takes every JPEG it can). No
kernel runs: a pipeline cannot decode faster than this. Needs CUDA and nvImageCodec 0.9 (the
C API pixelpipe mirrors).
"""

from __future__ import annotations

import time

import torch
from _common import arguments, rn50_regions

from pixelpipe.tools.bench.engine_use import open_meter

BATCH = 256
WHOLE = "whole"  # not an nvImageCodec option: decode whole images instead of the regions
SETTINGS = [  # (label, executor threads, hardware share, extra options)
    ("8 threads (pixelpipe's bench setting)", 8, None, ""),
    ("4 threads", 4, None, ""),
    ("16 threads", 16, None, ""),
    ("28 threads", 28, None, ""),
    ("8 threads, hardware share 0.9 (fixed)", 8, 0.9, ""),
    ("8 threads, hardware share 0.75 (fixed; GpuDecoding's default)", 8, 0.75, ""),
    ("8 threads, nvjpeg_hw_decoder:force_batch_single=1", 8, None, "nvjpeg_hw_decoder:force_batch_single=1"),
    ("8 threads, nvjpeg_hw_decoder:force_legacy_batch=1", 8, None, "nvjpeg_hw_decoder:force_legacy_batch=1"),
    ("8 threads, preallocate_buffers=1, preallocate_batch_size=256", 8, None,
     "nvjpeg_hw_decoder:preallocate_buffers=1 nvjpeg_hw_decoder:preallocate_batch_size=256"),
    ("8 threads, hardware share 0.65 (fixed)", 8, 0.65, ""),
    ("8 threads, share 0.75, preallocate_batch_size=256 (as DALI sets it)", 8, 0.75,
     "nvjpeg_hw_decoder:preallocate_batch_size=256"),
    ("8 threads, share 0.9, preallocate_batch_size=256 (DALI's defaults)", 8, 0.9,
     "nvjpeg_hw_decoder:preallocate_batch_size=256"),
    ("8 threads, share 0.75, whole images (no regions)", 8, 0.75, WHOLE),
]


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    from pixelpipe.decode import nvimgcodec_c

    api = nvimgcodec_c.load()
    if api is None or not torch.cuda.is_available():
        raise SystemExit("needs CUDA and nvImageCodec 0.9 (pip install 'pixelpipe[gpu]')")
    blobs, regions = rn50_regions(args.data, args.epochs + 1)
    n = len(blobs)
    print(f"{n} JPEGs, batch {BATCH}, {args.epochs} epochs, {torch.cuda.get_device_name()}")
    meter = open_meter(torch.device("cuda", torch.cuda.current_device()))
    print(f"{'setting':72s} {'images/s':>9s}  NVJPG  us/HW image")
    from pixelpipe.decode import read_header

    full = [read_header(b).oriented_size for b in blobs]
    for label, threads, hw, options in SETTINGS:
        backends = [("HW_GPU_ONLY", hw), ("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]
        whole = options == WHOLE
        dec = nvimgcodec_c.CDecoder(api, torch.cuda.current_device(), threads, backends,
                                    f":fancy_upsampling=0 {'' if whole else options}".strip())
        stream = torch.cuda.Stream()
        work: list[tuple[list[bytes], list, list[tuple[int, int]]]] = []
        for e in range(args.epochs + 1):
            for k in range(0, n, BATCH):
                if whole:
                    work.append((blobs[k : k + BATCH], [None] * len(blobs[k : k + BATCH]), full[k : k + BATCH]))
                    continue
                box = regions[e][k : k + BATCH]
                sizes = [(y1 - y0, x1 - x0) for y0, x0, y1, x1 in box]
                work.append((blobs[k : k + BATCH], box, sizes))
        opened = [dec.open(b, r, z, stream) for b, r, z in work]
        first = len(range(0, n, BATCH))
        for (b, r, z), o in zip(work[:first], opened[:first]):  # warm-up epoch
            dec.decode(b, r, z, stream, o)
        stream.synchronize()
        if meter is not None:
            meter.start()
        t0 = time.perf_counter()
        for (b, r, z), o in zip(work[first:], opened[first:]):
            dec.decode(b, r, z, stream, o)
        stream.synchronize()
        rate = args.epochs * n / (time.perf_counter() - t0)
        usage = meter.stop() if meter is not None else None
        dec.close()
        busy = usage.jpeg if usage is not None else None
        share = 1.0 if hw is None else hw
        per = f"{1e6 * busy / 100 / (rate * share):8.1f}" if busy else "       -"
        print(f"{label:72s} {rate:9,.0f} {busy if busy is not None else float('nan'):6.1f}% {per}", flush=True)


if __name__ == "__main__":
    main()
