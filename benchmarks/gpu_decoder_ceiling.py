"""The GPU decoder's ceiling: nvImageCodec's decode call alone, as the pipeline makes it.

    python benchmarks/gpu_decoder_ceiling.py [--data DIR] [--epochs 8] [--dali] \
        [--shares 0.75 0.9 none] [--splits 0.6 0.7]

Code streams, the output buffer and the images of every batch are made beforehand (a Pipeline
makes them on its planning thread), so only `CDecoder.decode` is timed: rn50's random-crop
regions of the JPEGs of DIR (EXIF-rotated and CMYK files left out), batches of 256, one
warm-up epoch. Prints images/s for several executor thread counts and hardware-decoder
options, the JPEG engines' busy share (NVML) and their busy microseconds per image offered to
the hardware decoder (busy / (rate x share); share 1 where it takes every JPEG it can). No
kernel runs: a pipeline cannot decode faster than this. With --dali, DALI's mixed decoder
(fn.decoders.image_random_crop over the same bytes, nothing after it) is timed the same way in
the same process, at hw_decoder_load 0.9 (its default) and 0.75. Needs CUDA and nvImageCodec
0.9 (the C API pixelpipe mirrors); --dali needs nvidia-dali. With --shares, only the call as a
Pipeline's decoder makes it (8 threads, pixelpipe's allocators, preallocate_batch_size=256) at
each hardware share given (a number, or none: every JPEG the hardware decoder takes). --splits:
also each batch split by the caller between two decoders on two threads (`split_rate`).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import torch
from _common import arguments, rn50_regions

from pixelpipe.tools.bench.engine_use import open_meter

BATCH = 256
class Setting(NamedTuple):
    """One row: the decoder's executor threads, the hardware share (None: every JPEG it takes)
    and nvImageCodec options, and what else differs from the plain call."""

    label: str
    threads: int
    share: float | None
    options: str = ""
    whole: bool = False  # whole images instead of rn50's regions
    own_allocators: bool = False  # pixelpipe's allocators, as a Pipeline's decoder has
    decoders: int = 1  # decoders on as many threads, alternate batches (GpuDecoding(lanes=N))
    split: float = 0.0  # > 0: this share of each batch (its largest regions) on a decoder with the
    # hardware decoder first, the rest on a CUDA-only one, each on its own thread (`split_rate`)


PREALLOCATE = "nvjpeg_hw_decoder:preallocate_batch_size=256"
SETTINGS = [
    Setting("8 threads (pixelpipe's bench setting)", 8, None),
    Setting("4 threads", 4, None),
    Setting("16 threads", 16, None),
    Setting("28 threads", 28, None),
    Setting("8 threads, hardware share 0.9 (fixed)", 8, 0.9),
    Setting("8 threads, hardware share 0.75 (fixed; GpuDecoding's default)", 8, 0.75),
    Setting("8 threads, nvjpeg_hw_decoder:force_batch_single=1", 8, None, "nvjpeg_hw_decoder:force_batch_single=1"),
    Setting("8 threads, nvjpeg_hw_decoder:force_legacy_batch=1", 8, None, "nvjpeg_hw_decoder:force_legacy_batch=1"),
    Setting("8 threads, preallocate_buffers=1, preallocate_batch_size=256", 8, None,
            f"nvjpeg_hw_decoder:preallocate_buffers=1 {PREALLOCATE}"),
    Setting("8 threads, hardware share 0.65 (fixed)", 8, 0.65),
    Setting("8 threads, share 0.75, preallocate_batch_size=256 (as DALI sets it)", 8, 0.75, PREALLOCATE),
    Setting("8 threads, share 0.9, preallocate_batch_size=256 (DALI's defaults)", 8, 0.9, PREALLOCATE),
    Setting("8 threads, share 0.75, whole images (no regions)", 8, 0.75, whole=True),
    Setting("8 threads, share 0.75, pixelpipe's allocators (as a Pipeline's decoder)", 8, 0.75, own_allocators=True),
    Setting("8 threads each, share 0.75, two decoders on two threads, alternate batches", 8, 0.75, decoders=2),
]


Work = tuple[list[bytes], list[Any], list[tuple[int, int]]]  # a decode call's blobs, regions, sizes


def time_lanes(api: Any, setting: Setting, backends: list[list[tuple[str, float | None]]],
               work: list[list[Work]], warm: list[int], meter: Any) -> tuple[list[float], Any]:
    """Decoder j (backends[j], on its own thread and stream) decodes work[j], call after call:
    its first warm[j] calls untimed (its share of a warm-up epoch), then the rest. Returns each lane's seconds
    for the rest and the engines' use meanwhile. Every call's code streams and images are made
    beforehand, as a Pipeline's planning thread makes them."""
    from concurrent.futures import ThreadPoolExecutor

    from pixelpipe.decode import nvimgcodec_alloc, nvimgcodec_c

    device = torch.cuda.current_device()
    decoders = [nvimgcodec_c.CDecoder(api, device, setting.threads, kinds,
                                      f":fancy_upsampling=0 {setting.options}".strip(),
                                      nvimgcodec_alloc.allocators(device) if setting.own_allocators else None)
                for kinds in backends]
    streams = [torch.cuda.Stream() for _ in decoders]
    opened = [[dec.open(*w, stream) for w in calls] for dec, stream, calls in zip(decoders, streams, work)]

    def run(j: int, timed: bool) -> float:
        t0 = time.perf_counter()
        for i in range(warm[j], len(work[j])) if timed else range(warm[j]):
            if work[j][i][0]:
                decoders[j].decode(*work[j][i], streams[j], opened[j][i])
        streams[j].synchronize()
        return time.perf_counter() - t0

    lanes = range(len(decoders))
    with ThreadPoolExecutor(len(decoders)) as pool:
        list(pool.map(run, lanes, [False] * len(decoders)))
        if meter is not None:
            meter.start()
        times = list(pool.map(run, lanes, [True] * len(decoders)))
    usage = meter.stop() if meter is not None else None
    for dec in decoders:
        dec.close()
    return times, usage


def call_rate(api: Any, setting: Setting, blobs: list[bytes], regions: Any,
              full: list[tuple[int, int]], epochs: int, meter: Any) -> tuple[float, Any]:
    """Images/s of the decode call alone for one setting (batches alternating over
    `setting.decoders` decoders), and the engines' use meanwhile."""
    n, lanes = len(blobs), setting.decoders
    calls: list[Work] = []
    for e in range(epochs + 1):
        for k in range(0, n, BATCH):
            if setting.whole:
                calls.append((blobs[k : k + BATCH], [None] * len(blobs[k : k + BATCH]), full[k : k + BATCH]))
                continue
            box = regions[e][k : k + BATCH]
            calls.append((blobs[k : k + BATCH], box, [(y1 - y0, x1 - x0) for y0, x0, y1, x1 in box]))
    backends = [("HW_GPU_ONLY", setting.share), ("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]
    first = len(range(0, n, BATCH))  # the warm-up epoch's calls, dealt out as the rest
    times, usage = time_lanes(api, setting, [backends] * lanes, [calls[j::lanes] for j in range(lanes)],
                              [len(range(j, first, lanes)) for j in range(lanes)], meter)
    return epochs * n / max(times), usage


def split_rate(api: Any, setting: Setting, blobs: list[bytes], regions: Any, epochs: int,
               meter: Any) -> tuple[float, Any, tuple[float, float]]:
    """Images/s when each batch is split by the caller: `setting.split` of its images (the
    largest regions) to a decoder whose first backend is the hardware one (it takes every JPEG
    it can; the CUDA decoder after it takes what it refuses), the rest to a decoder without it,
    each decoder on its own thread and stream, batch after batch. Returns the rate (all images
    over the slower thread's time), the engines' use and both threads' seconds."""
    n = len(blobs)
    parts: list[list[Work]] = [[], []]
    for e in range(epochs + 1):
        for k in range(0, n, BATCH):
            box = list(regions[e][k : k + BATCH])
            order = sorted(range(len(box)), key=lambda i: -(box[i][2] - box[i][0]) * (box[i][3] - box[i][1]))
            cut = round(setting.split * len(box))
            for j, picked in enumerate((order[:cut], order[cut:])):  # the largest regions to the hardware
                parts[j].append(([blobs[k + i] for i in picked], [box[i] for i in picked],
                                 [(box[i][2] - box[i][0], box[i][3] - box[i][1]) for i in picked]))
    backends = [[("HW_GPU_ONLY", None), ("GPU_ONLY", None)], [("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]]
    times, usage = time_lanes(api, setting, backends, parts, [len(range(0, n, BATCH))] * 2, meter)
    return epochs * n / max(times), usage, (times[0], times[1])


def dali_rate(blobs: list[bytes], epochs: int, threads: int, hw_load: float, meter: Any) -> tuple[float, Any]:
    """Images/s of DALI's mixed decoder alone (fn.decoders.image_random_crop, torchvision's
    crop ranges, fed the same bytes from memory in full batches), and the engines' use."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types

    from pixelpipe.tools.bench.peer_dali import Batches

    arrays = [np.frombuffer(b, dtype=np.uint8) for b in blobs]
    batches = Batches(arrays, [(k, BATCH) for k in range(0, len(arrays) - BATCH + 1, BATCH)], repeat=False)
    if not batches.plan:
        raise SystemExit(f"--dali needs at least {BATCH} JPEGs")

    @pipeline_def(batch_size=BATCH, num_threads=threads, device_id=torch.cuda.current_device())
    def decode_only() -> Any:
        encoded = fn.external_source(source=batches, cycle="quiet", batch=True, dtype=types.UINT8, ndim=1)
        return fn.decoders.image_random_crop(encoded, device="mixed", output_type=types.RGB,
                                             hw_decoder_load=hw_load, random_area=(0.08, 1.0),
                                             random_aspect_ratio=(3 / 4, 4 / 3))

    pipe = decode_only()
    pipe.build()
    for _ in batches.plan:  # warm-up epoch
        pipe.run()
    if meter is not None:
        meter.start()
    t0 = time.perf_counter()
    for _ in range(epochs * len(batches.plan)):
        pipe.run()
    torch.cuda.synchronize()
    rate = epochs * len(batches.plan) * BATCH / (time.perf_counter() - t0)
    usage = meter.stop() if meter is not None else None
    del pipe
    return rate, usage


def row(label: str, rate: float, usage: Any, share: float | None) -> str:
    busy = usage.jpeg if usage is not None else None
    share = 1.0 if share is None else share
    per = f"{1e6 * busy / 100 / (rate * share):8.1f}" if busy else "       -"
    return f"{label:72s} {rate:9,.0f} {busy if busy is not None else float('nan'):6.1f}% {per}"


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--dali", action="store_true", help="DALI's mixed decoder alone too, in the same process")
    ap.add_argument("--shares", nargs="+", default=None,
                    help="only the Pipeline's decoder at these hardware shares (numbers or none)")
    ap.add_argument("--splits", nargs="+", default=[],
                    help="also each batch split by the caller: this share (the largest regions) to a "
                         "hardware-first decoder, the rest to a CUDA-only one, on two threads")
    args = ap.parse_args()
    settings = list(SETTINGS) if args.shares is None else [
        Setting(f"8 threads, share {s}, preallocate_batch_size=256, pixelpipe's allocators", 8,
                None if s.lower() == "none" else float(s), PREALLOCATE, own_allocators=True)
        for s in args.shares]
    settings += [Setting(f"split {s}: hardware and CUDA decoders on two threads, 8 executor threads each",
                         8, float(s), PREALLOCATE, own_allocators=True, split=float(s)) for s in args.splits]
    from pixelpipe.decode import nvimgcodec_c, read_header

    api = nvimgcodec_c.load()
    if api is None or not torch.cuda.is_available():
        raise SystemExit("needs CUDA and nvImageCodec 0.9 (pip install 'pixelpipe[gpu]')")
    blobs, regions = rn50_regions(args.data, args.epochs + 1)
    print(f"{len(blobs)} JPEGs, batch {BATCH}, {args.epochs} epochs, {torch.cuda.get_device_name()}")
    meter = open_meter(torch.device("cuda", torch.cuda.current_device()))
    print(f"{'setting':72s} {'images/s':>9s}  NVJPG  us/HW image")
    full = [read_header(b).oriented_size for b in blobs]
    for setting in settings:
        if setting.split:
            rate, usage, (hw_s, cuda_s) = split_rate(api, setting, blobs, regions, args.epochs, meter)
            print(row(setting.label, rate, usage, setting.split), f"  threads {hw_s:.2f} s / {cuda_s:.2f} s",
                  flush=True)
            continue
        rate, usage = call_rate(api, setting, blobs, regions, full, args.epochs, meter)
        print(row(setting.label, rate, usage, setting.share), flush=True)
    for load in (0.9, 0.75) if args.dali else ():
        rate, usage = dali_rate(blobs, args.epochs, 8, load, meter)
        print(row(f"DALI's mixed decoder alone (image_random_crop), 8 threads, hw_decoder_load {load}", rate,
                  usage, load), flush=True)


if __name__ == "__main__":
    main()
