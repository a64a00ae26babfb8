"""Video clips per second: decode + RandomResizedCrop + flip + normalise, pixelpipe (CPU; CUDA
with NVDEC; CUDA with CPU decoding) against DALI's fn.readers.video when it is importable.

Makes its own H.264 test videos (--make N into --videos), so it needs no data:

    PYTHONPATH=src python benchmarks/video_clips.py --make 16 --size 1280x720 --frames 96      # a GPU machine
    PYTHONPATH=src python benchmarks/video_clips.py --make 4 --size 128x96 --frames 40 --clip 8 --rounds 1  # a smoke test

Each round runs one epoch of every configuration in turn (one untimed warm-up epoch first);
the table gives the median rate and the spread (min-max) over rounds. A clip is --clip frames
at --stride; the output is float16 in NCTHW. Rates are of valid clips only. The pixelpipe and
DALI epochs are those of `pixelpipe bench --pipeline video` (pixelpipe.tools.bench.video,
pixelpipe.tools.bench.peer_dali_video), which times the same work at 16 frames, stride 2,
crop 224, with rounds, JSON and NVDEC's use.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from pixelpipe.readers import VideoFolder
from pixelpipe.tools.bench.peer_dali_video import dali_video
from pixelpipe.tools.bench.pipelines import VIDEO_MEAN, VIDEO_STD
from pixelpipe.tools.bench.video import RunPass, pixelpipe_video
from pixelpipe.tools.videos import synthetic_videos


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--videos", default="/tmp/pixelpipe-video-bench", help="a VideoFolder (made by --make)")
    ap.add_argument("--make", type=int, default=0, help="first write this many H.264 videos into --videos")
    ap.add_argument("--size", default="320x240", help="WxH of the videos --make writes")
    ap.add_argument("--frames", type=int, default=96, help="frames per video --make writes")
    ap.add_argument("--gop", type=int, default=30, help="key frame interval of the videos --make writes")
    ap.add_argument("--clip", type=int, default=16, help="frames per clip")
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--crop", type=int, default=112, help="RandomResizedCrop size")
    ap.add_argument("--batch", type=int, default=4, help="videos per batch (one clip each)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated configurations to leave out")
    return ap.parse_args()


def timed_epochs(run: RunPass, device: str) -> Callable[[], tuple[int, float]]:
    """One epoch of a run pass per call: (valid clips, seconds), the device drained inside."""
    epochs = iter(range(1 << 30))

    def epoch() -> tuple[int, float]:
        start = time.perf_counter()
        clips = sum(run(next(epochs)))
        if device != "cpu":
            torch.cuda.synchronize()
        return clips, time.perf_counter() - start

    epoch.pipe = getattr(run, "pipe", None)  # type: ignore[attr-defined]
    return epoch


def pixelpipe_epoch(args: argparse.Namespace, device: str, gpu_decode: bool) -> Callable[[], tuple[int, float]]:
    """One epoch of a VideoPipeline: (valid clips, seconds)."""
    run = pixelpipe_video(VideoFolder(args.videos), args.clip, args.stride, args.crop, args.batch, args.threads,
                          torch.device(device), gpu_decode=gpu_decode)
    return timed_epochs(run, device)


def dali_epoch(args: argparse.Namespace) -> Callable[[], tuple[int, float]]:
    """One epoch of DALI's fn.readers.video on the GPU with the same ops."""
    files = sorted(str(p) for p in Path(args.videos).rglob("*.mp4"))
    run = dali_video(files, args.clip, args.stride, args.crop, args.batch, args.threads, torch.device("cuda"),
                     VIDEO_MEAN, VIDEO_STD)
    return timed_epochs(run, "cuda")


def main() -> None:
    args = arguments()
    if args.make:
        w, h = (int(v) for v in args.size.lower().split("x"))
        t0 = time.perf_counter()
        synthetic_videos(args.videos, args.make, classes=4, frames=args.frames, gop=args.gop, height=h, width=w)
        print(f"made {args.make} H.264 videos {w}x{h}, {args.frames}+ frames, gop {args.gop} in {args.videos} "
              f"({time.perf_counter() - t0:.1f} s)")
    skip = set(filter(None, args.skip.split(",")))
    configs: dict[str, Callable[[], tuple[int, float]]] = {}
    notes = []
    configs["pixelpipe cpu"] = pixelpipe_epoch(args, "cpu", False)
    if torch.cuda.is_available():
        configs["pixelpipe cuda, NVDEC"] = pixelpipe_epoch(args, "cuda", True)
        configs["pixelpipe cuda, CPU decode"] = pixelpipe_epoch(args, "cuda", False)
        try:
            configs["DALI readers.video"] = dali_epoch(args)
        except ImportError:
            notes.append("DALI: not importable (pip install nvidia-dali-cuda120), skipped")
        except Exception as e:  # a DALI release whose arguments differ: say so, run the rest
            notes.append(f"DALI: failed to build ({type(e).__name__}: {e}), skipped")
    else:
        notes.append("CUDA: not available, the CUDA and DALI rows are skipped")
    configs = {k: v for k, v in configs.items() if k not in skip}
    for run in configs.values():
        run()  # warm-up epoch
    rates: dict[str, list[float]] = {k: [] for k in configs}
    clips_per_epoch: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, run in configs.items():
            clips, seconds = run()
            clips_per_epoch[name] = clips
            rates[name].append(clips / seconds)
    print(f"\n{args.clip}-frame clips at stride {args.stride}, crop {args.crop}, float16 NCTHW, batch {args.batch} "
          f"videos, {args.threads} threads, {args.rounds} rounds; device: "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU only'}")
    print(f"{'configuration':<28} {'clips/epoch':>11} {'clips/s':>9} {'frames/s':>10} {'spread clips/s':>18}")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"{name:<28} {clips_per_epoch[name]:>11} {med:>9.1f} {med * args.clip:>10.0f} "
              f"{f'{min(r):.1f}-{max(r):.1f}':>18}")
    for name, run in configs.items():
        pipe = getattr(run, "pipe", None)
        if pipe is not None:
            print(f"{name}: {pipe.decode_stats}")
            if pipe.errors:
                print(f"  {len(pipe.errors)} videos failed, first: {pipe.errors[0]}")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
