"""GPU memory of a VideoPipeline over epochs: does it grow, and does close() give it back?

    python benchmarks/video_memory_epochs.py [--videos DIR] [--n 32] [--height 720] [--epochs 5]
        [--batch 8] [--threads 16] [--cpu-decode]

The video bench's work (tools/bench/video.py): 16-frame clips at stride 2, RandomResizedCrop(224),
flip, normalise, float16 NCTHW, one clip per video per epoch, over --videos or n generated H.264
videos `height` lines high (kept in the temporary folder, as `pixelpipe bench --pipeline video`
keeps them). Each epoch's row: torch's peak allocated and reserved bytes and the device's used
memory (cudaMemGetInfo: PyNvVideoCodec's decoders allocate outside torch), all since the
pipeline started; then the same after close() and torch.cuda.empty_cache(). NVDEC decoding
unless --cpu-decode. The memory rows of the image pipelines are gpu_memory_epochs.py's. Needs
CUDA (and PyNvVideoCodec for NVDEC; PyAV for the generated videos and the CPU probe).
"""

from __future__ import annotations

import argparse

import torch
from gpu_memory_epochs import MIB, settle, used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", default=None, help="a folder, list file or tar shards of videos (default: generated)")
    ap.add_argument("--n", type=int, default=32, help="generated videos")
    ap.add_argument("--height", type=int, default=720, help="generated videos' lines (16:9)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--cpu-decode", action="store_true", help="decode on the CPU (PyAV) instead of NVDEC")
    args = ap.parse_args()
    if args.epochs < 1:
        raise SystemExit("--epochs must be >= 1")
    from pixelpipe.compose import Compose
    from pixelpipe.data.clips import ClipSampler
    from pixelpipe.loader.video import VideoPipeline
    from pixelpipe.tools.bench.pipelines import CLIP_FRAMES, CLIP_STRIDE, video_ops
    from pixelpipe.tools.bench.video import video_data

    reader, _, what = video_data(args.videos, args.n, args.height)
    print(f"{what}; batch {args.batch}, {args.threads} threads, {torch.cuda.get_device_name()}; MiB")
    print(f"{'epoch':>7s}{'torch peak':>12s}{'reserved':>10s}{'device used':>13s}")
    settle()
    torch.cuda.reset_peak_memory_stats()
    before = used()
    pipe = VideoPipeline(reader, Compose(video_ops(224), dtype=torch.float16), args.batch,
                         ClipSampler(CLIP_FRAMES, CLIP_STRIDE), layout="NCTHW", device="cuda",
                         gpu_decode=not args.cpu_decode, num_threads=args.threads, on_error="skip")
    peaks, devices = [], []
    for epoch in range(1, args.epochs + 1):
        for batch in pipe:
            del batch  # the last batch is not kept past the epoch
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        devices.append(used() - before)
        print(f"{epoch:7d}{peaks[-1] / MIB:12.1f}{torch.cuda.memory_reserved() / MIB:10.1f}{devices[-1] / MIB:13.1f}")
    stats = pipe.decode_stats.state()
    pipe.close()
    del pipe
    settle()
    print(f"{'closed':>7s}{torch.cuda.memory_allocated() / MIB:12.1f}{torch.cuda.memory_reserved() / MIB:10.1f}"
          f"{(used() - before) / MIB:13.1f}")
    print(f"  torch peak, epoch {args.epochs} / epoch 1: {peaks[-1] / peaks[0]:.4f}; "
          f"device used: {devices[-1] / max(devices[0], 1):.4f}; files decoded {stats['decoded']}, "
          f"fallbacks {stats['fallbacks']}")


if __name__ == "__main__":
    main()
