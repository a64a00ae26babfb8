"""The `pixelpipe` command: `bench`, `show` and `inspect`.

    pixelpipe bench                     images/s of a standard pipeline, beside its peers
                                        (clips/s of videos with --pipeline video)
    pixelpipe show --data DIR -o x.png  a PNG of images beside augmented versions of them
    pixelpipe show --volumes DIR -o x.png   the same for 3-D volumes: three middle slices each
    pixelpipe show --data VIDEOS -o x.png   clips of videos, one row of frames per clip
    pixelpipe inspect --data DIR        samples, classes, formats, sizes and unreadable files
                                        (of videos: codecs, sizes, fps, frames, durations)

Exit codes: 0 success, 1 the command found a problem (unreadable files for `inspect`; samples
left out of the grid for `show`), 2 bad arguments (including a --data path that cannot be
opened). Long commands draw a progress bar on stderr when it is a terminal; --quiet turns it
off.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..presets import PRESETS
from .bench.pipelines import BENCH_PIPELINES

VOLUME_TRANSFORM_NAMES = ("affine", "elastic", "flip", "intensity")  # tools.show_volume_dataset's, imported late

BENCH_EXAMPLES = """examples:
  pixelpipe bench                                   # standard pipeline, synthetic data, best device
  pixelpipe bench --device cpu --data ../shared/data/imagenet-sample --threads 2 --peers pillow
  pixelpipe bench --device cpu --pipeline fastai_like   # a preset, beside Pillow doing the same ops
  pixelpipe bench --data DIR --pipeline rich --peers dali,torchvision,kornia --batch 256
  pixelpipe bench --data DIR --peers dali --rounds 7 --seconds 2   # medians of 7 alternating rounds
  pixelpipe bench --data DIR --pipeline ssd --peers dali,torchvision   # detection: boxes from a generated COCO file
  pixelpipe bench --data DIR --pipeline maskrcnn --peers dali   # boxes and instance masks, LetterBox 1024
  pixelpipe bench --device cpu --data DIR --pipeline rn50 --boxes 20 --peers none   # what 20 boxes an image cost
  pixelpipe bench --pipeline volume --device cuda --rounds 7    # 8 CT volumes beside MONAI (and TorchIO on cpu)
  pixelpipe bench --pipeline video --device cuda --peers dali,torchcodec --rounds 5 --seconds 3   # 32 generated 720p H.264 videos
  pixelpipe bench --pipeline video --data VIDEOS --device cpu --peers pyav   # 16-frame clips beside a PyAV loop
"""

SHOW_EXAMPLES = """examples:
  pixelpipe show --transforms fastai_like -o grid.png      # built-in synthetic images
  pixelpipe show --data /data/train --transforms heavy -n 16 -o grid.png
  pixelpipe show --data "train-{0000..0009}.tar" --transforms imagenet_train --columns 6 -o g.png
  pixelpipe show --volumes -o vols.png                    # built-in synthetic CT-like volumes
  pixelpipe show --volumes /data/Task09_Spleen -n 4 --columns 3 -o vols.png   # imagesTr/ + labelsTr/
  pixelpipe show --volumes dataset.json --transforms elastic --size 64 -o vols.png
  pixelpipe show --data /data/kinetics/val --clips 2 --frames-per-clip 8 -o clips.png   # videos
  pixelpipe show --clips 2 -o clips.png                   # built-in synthetic videos

Each row is one sample: the original, then --columns augmented versions (column k is what
epoch k of a run with --seed gives it), with its class name below. Samples are spread evenly
over the dataset (the first n of tar shards). Unreadable samples are left out and listed;
the exit code is then 1.

With --volumes each version is three tiles, the middle slices across axes 0, 1 and 2, with
the label map overlaid (one colour per label value). --volumes takes a folder with imagesTr/
(and labelsTr/), a folder of volume files, a MONAI datalist (.json), a file list (.txt/.csv:
"image label" per line), tar shards or one volume file (.nii, .nii.gz, .npy, .npz); alone it
uses generated volumes. Volume transforms: affine (default: random affine, flips, random crop,
windowing), elastic, flip, intensity; the crop is --size voxels a side (default the largest
cube up to 96 that every volume shown holds) and the window the volumes' 0.5-99.5 percentiles.

When --data holds videos (told by their extensions), or with --clips, --frames-per-clip or
--stride, each row is one clip: --frames-per-clip frames --stride apart, augmented as a
VideoPipeline augments them (every frame of a clip with the clip's draws), captioned with the
label, video and frame numbers; --clips clips per video, their starts spread over it, of -n
videos (default 4) spread over the dataset; --size defaults to 112. Without --data: synthetic
videos.
"""

INSPECT_EXAMPLES = """examples:
  pixelpipe inspect --data /data/train                  # header scan: fast
  pixelpipe inspect --data /data/train.txt --decode     # decode every image in full
  pixelpipe inspect --data "shards/train-*.tar" --json > report.json
  pixelpipe inspect --data /data/train --decode --quiet && python train.py   # guard a job
  pixelpipe inspect --data /data/kinetics/val            # videos: codec, size, fps, frames, duration

Reports the number of samples and classes, formats, a histogram of the shorter side,
grayscale/CMYK/alpha counts and every unreadable file with the reason. Exit code 1 when a
file cannot be read (or holds more than --max-pixels pixels), 0 when all are readable.

Videos (a folder, file list or tar shards of .mp4, .mkv, .webm, .avi, .mov, .m4v files) are
told by their extensions: each video's codec, size, frame rate, frames and duration, a summary,
and the unreadable ones with the kind of problem (missing, zero-length, audio-only,
unsupported codec, truncated, corrupt). --decode then decodes every frame.
"""

MAIN_EXAMPLES = """examples:
  pixelpipe bench --device cpu --peers pillow
  pixelpipe show --data /data/train --transforms fastai_like -n 16 -o grid.png
  pixelpipe inspect --data /data/train --decode

exit codes: 0 ok, 1 problems found, 2 bad arguments. `pixelpipe COMMAND --help` for more.
"""


def _bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure images/s of a pipeline, beside its peers",
                       description="Run a standard pipeline with pixelpipe and its peers, print images/s.",
                       epilog=BENCH_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="folder of images (default: built-in synthetic JPEGs); with --pipeline video a "
                                  "folder, list file or tar shards of videos (default: generated H.264 videos)")
    p.add_argument("--pipeline", default="rn50", choices=(*BENCH_PIPELINES, "volume", "video"),
                   help="rn50, rich, val, randaugment, ssd (detection: zoom-out, IoU crop, flip, 300x300, jitter, with "
                        "boxes), maskrcnn (LetterBox 1024, flip, with boxes and instance masks), or a preset's name (default rn50); on the CPU the Pillow loop runs the same ops. volume: 3-D volumes (affine, flip, crop, windowing, "
                        "normalise) beside MONAI and TorchIO (--peers monai,torchio). video: clips of 16 frames at "
                        "stride 2, random resized crop 224, flip, normalise, float16 NCTHW, beside DALI's "
                        "fn.readers.video (cuda, --peers dali), torchcodec + torchvision v2 (cuda, --peers torchcodec) or a PyAV loop (cpu, --peers pyav), with NVDEC's use")
    p.add_argument("--size", type=int, default=None,
                   help="(volume) volumes of size x 1.2 size x size voxels (default 160); (video) the generated "
                        "videos' height, 16:9 (default 720)")
    p.add_argument("--crop", type=int, default=96, help="(volume) the crop's side")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default)")
    p.add_argument("--batch", type=int, help="batch size (default 64 on cpu, 256 on cuda)")
    p.add_argument("--threads", type=int, help="CPU threads for every contender but the torchvision CPU DataLoader, which gets one worker per core (default: the cores this process may use, at most 8 on a GPU)")
    p.add_argument("--peers", default=None,
                   help="comma-separated peers: pillow (cpu; the default there), torchvision (cpu: its DataLoader; cuda); dali, kornia "
                        "(cuda); none for no peer")
    p.add_argument("--passes", type=int, default=2, help="timed passes over the data after one warm-up")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every contender once per round, the order reversed every other round, "
                        "and report each one's median round and every round's ratios, with 3 or more "
                        "their median and range against each peer (default 1; rounds on a shared GPU "
                        "machine spread 20%% and more: use 7 or more to compare)")
    p.add_argument("--seconds", type=float, default=0.0,
                   help="keep timing passes until each contender ran at least this long per round "
                        "(default 0: --passes only); fast contenders then run many passes, slow ones few")
    p.add_argument("-n", type=int, default=None,
                   help="synthetic images when --data is not given (default 256); with --pipeline video, "
                        "generated videos (default 32)")
    p.add_argument("--boxes", type=int, default=None, metavar="N",
                   help="N random boxes with labels per image, moved with the images by pixelpipe (seeded; "
                        "with --data, written to a generated COCO file); the ssd and maskrcnn pipelines' default is 7. "
                        "Other pipelines' peers run without boxes: compare with and without --boxes")
    p.add_argument("--augment-only", action="store_true", help="(cuda) time the transforms on decoded batches")
    p.add_argument("--cache", action="store_true", help="(cuda) also time epochs from the GPU cache")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _show(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("show", help="draw images beside augmented versions of them (PNG)",
                       description="Write a PNG grid: each sample's original beside several "
                                   "augmented versions of it, class names as captions.",
                       epilog=SHOW_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="folder, file list (.txt/.csv) or tar shards (default: "
                                  "built-in synthetic JPEGs)")
    p.add_argument("--volumes", nargs="?", const="", metavar="PATH",
                   help="show 3-D volumes: a folder (imagesTr/ + labelsTr/, or volume files), a datalist "
                        ".json, a file list, tar shards or a volume file; no PATH: built-in synthetic volumes")
    p.add_argument("--transforms", default=None,
                   help=f"preset from pixelpipe.presets: {', '.join(PRESETS)} (default imagenet_train); "
                        f"with --volumes one of {', '.join(VOLUME_TRANSFORM_NAMES)} (default affine)")
    p.add_argument("-n", type=int, default=None, help="samples, one row each (default 16; 4 volumes)")
    p.add_argument("-o", "--output", default="grid.png", help="PNG file to write (default grid.png)")
    p.add_argument("--columns", type=int, default=None,
                   help="augmented versions per sample (default 4; 3 for volumes)")
    p.add_argument("--size", type=int, default=None,
                   help="the preset's output side (default 224); with --volumes the crop's side (default: "
                        "the largest cube up to 96 that every volume shown holds)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--tile", type=int, default=None,
                   help="tile side in the grid, pixels (default 160; 96 per slice for volumes and per frame "
                        "for videos)")
    p.add_argument("--clips", type=int, default=None,
                   help="(videos) clips per video, one row each (default 2); without --data: synthetic videos")
    p.add_argument("--frames-per-clip", type=int, default=None,
                   help="(videos) frames in a clip, all drawn side by side (default 8)")
    p.add_argument("--stride", type=int, default=None,
                   help="(videos) frames between a clip's consecutive frames (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _inspect(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("inspect", help="check a dataset: counts, formats, sizes, unreadable files",
                       description="Scan a dataset of images or videos (folder, file list or tar shards) "
                                   "and report what a training job should know, unreadable files included.",
                       epilog=INSPECT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="folder, file list (.txt/.csv) or tar shards "
                                                 "(a path or a pattern)")
    p.add_argument("--decode", action="store_true",
                   help="decode every image (every frame of every video) in full (slower; catches corrupt data)")
    p.add_argument("--threads", type=int, help="reading/decoding threads (default: the cores this process may use)")
    p.add_argument("--max-pixels", type=int, default=100_000_000,
                   help="images with more pixels are problems, as in a Pipeline (default 1e8)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pixelpipe", description="Fast image loading and augmentation.",
                                     epilog=MAIN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _bench(sub)
    show_parser = _show(sub)
    inspect_parser = _inspect(sub)
    args = parser.parse_args(argv)
    if args.command == "bench":
        from .bench.runner import run_bench

        if args.passes < 1 or (args.batch is not None and args.batch < 1) or (args.n is not None and args.n < 1) or args.rounds < 1:
            parser.error("--passes, --rounds, --batch and -n must be >= 1")
        if not args.seconds >= 0:
            parser.error("--seconds must be >= 0")
        peers = None if args.peers is None else [p for p in args.peers.split(",") if p and p.strip() != "none"]
        if args.pipeline == "volume":
            from .bench.volumes import run_volume_bench

            size = 160 if args.size is None else args.size
            if args.boxes is not None:
                parser.error("--boxes does not apply to --pipeline volume")
            if not 1 <= args.crop <= size:
                parser.error(f"--crop must be in [1, --size], got {args.crop} with --size {size}")
            try:
                run_volume_bench(args.device, args.batch or 8, args.rounds, size, args.crop, peers, args.json)
            except ValueError as e:
                parser.error(str(e))
            return 0
        if args.pipeline == "video":
            from .bench.video import HEIGHT, VIDEOS, run_video_bench

            taken = [f for f, on in (("--boxes", args.boxes is not None), ("--augment-only", args.augment_only),
                                     ("--cache", args.cache)) if on]
            if taken:
                parser.error(f"{', '.join(taken)}: not with --pipeline video")
            run_video_bench(args.data, args.device, args.batch, args.threads, peers, args.passes, args.json,
                            args.quiet, rounds=args.rounds, seconds=args.seconds, n=VIDEOS if args.n is None else args.n,
                            height=HEIGHT if args.size is None else args.size)
            return 0
        run_bench(args.data, args.pipeline, args.device, args.batch, args.threads, peers,
                  args.passes, 256 if args.n is None else args.n, args.json, args.quiet, augment_only=args.augment_only, cache=args.cache,
                  rounds=args.rounds, seconds=args.seconds, boxes=args.boxes)
        return 0
    if args.command == "show":
        return _run_show(args, show_parser)
    if args.command == "inspect":
        return _run_inspect(args, inspect_parser)
    return 2


def _run_show(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    volumes = args.volumes is not None
    if volumes and args.data is not None:
        p.error("give --data (images) or --volumes (3-D volumes), not both")
    clip_options = [f"--{name.replace('_', '-')}" for name in ("clips", "frames_per_clip", "stride")
                    if getattr(args, name) is not None]
    if volumes and clip_options:
        p.error(f"{', '.join(clip_options)}: for videos, not with --volumes")
    if not volumes and (clip_options or args.data is not None):
        from ..readers import ReaderError
        from .video_data import open_videos

        try:
            videos = open_videos(args.data) if args.data is not None else None
        except ReaderError as e:
            p.error(f"--data {args.data}: {e}")
        if videos is not None or (args.data is None and clip_options):
            return _run_show_videos(args, p, videos)
        if clip_options:
            p.error(f"{', '.join(clip_options)}: --data {args.data} holds images, not videos")
    presets = VOLUME_TRANSFORM_NAMES if volumes else tuple(PRESETS)
    if args.transforms is None:
        args.transforms = presets[0] if volumes else "imagenet_train"
    if args.transforms not in presets:
        p.error(f"--transforms must be one of {', '.join(presets)}{' with --volumes' if volumes else ''}, "
                f"got {args.transforms!r}")
    defaults = {"n": 4, "columns": 3, "tile": 96} if volumes else {"n": 16, "columns": 4, "tile": 160, "size": 224}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("n", "columns", "size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"{'-n' if name == 'n' else '--' + name} must be >= 1, got {value}")
    if args.tile < 16:
        p.error(f"--tile must be >= 16 pixels, got {args.tile}")
    if not args.output.lower().endswith(".png"):
        p.error(f"-o/--output must name a .png file, got {args.output!r}")
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        p.error(f"-o/--output: folder {folder!r} does not exist")
    if volumes:
        return _run_show_volumes(args, p)

    from ..readers import ReaderError
    from .show import show_dataset

    transforms = PRESETS[args.transforms](size=args.size)
    try:
        grid, skipped = show_dataset(args.data, transforms, n=args.n, columns=args.columns,
                                     seed=args.seed, tile=args.tile, quiet=args.quiet)
    except ReaderError as e:
        p.error(f"--data {args.data}: {e}")
    except ValueError as e:  # none of the samples picked could be decoded
        print(f"pixelpipe show: {e}", file=sys.stderr)
        return 1
    return _write_grid(args, grid, skipped, "sample(s)", "")


def _run_show_volumes(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    from ..readers import ReaderError
    from .show_volume_dataset import show_volume_dataset

    data = args.volumes or None
    try:
        grid, skipped = show_volume_dataset(data, args.transforms, n=args.n, columns=args.columns, seed=args.seed,
                                            tile=args.tile, size=args.size)
    except ReaderError as e:
        p.error(f"--volumes {data}: {e}")
    except ImportError as e:  # NIfTI without nibabel
        p.error(str(e))
    except ValueError as e:  # none of the volumes picked could be read
        print(f"pixelpipe show: {e}", file=sys.stderr)
        return 1
    return _write_grid(args, grid, skipped, "volume(s)", "" if data else ", synthetic volumes")


def _run_show_videos(args: argparse.Namespace, p: argparse.ArgumentParser, videos: Any) -> int:
    if args.columns is not None:
        p.error("--columns is for images: with videos each row is one clip (--clips per video, "
                "--frames-per-clip frames each)")
    if args.transforms is None:
        args.transforms = "imagenet_train"
    if args.transforms not in PRESETS:
        p.error(f"--transforms must be one of {', '.join(PRESETS)}, got {args.transforms!r}")
    defaults = {"n": 4, "clips": 2, "frames_per_clip": 8, "stride": 2, "tile": 96, "size": 112}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("n", "clips", "frames_per_clip", "stride", "size"):
        if getattr(args, name) < 1:
            p.error(f"{'-n' if name == 'n' else '--' + name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.tile < 16:
        p.error(f"--tile must be >= 16 pixels, got {args.tile}")
    if not args.output.lower().endswith(".png"):
        p.error(f"-o/--output must name a .png file, got {args.output!r}")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        p.error(f"-o/--output: folder {os.path.dirname(os.path.abspath(args.output))!r} does not exist")

    from .show_video_dataset import show_video_dataset

    try:
        grid, skipped = show_video_dataset(videos, PRESETS[args.transforms](size=args.size), n=args.n,
                                           clips=args.clips, frames_per_clip=args.frames_per_clip,
                                           stride=args.stride, seed=args.seed, tile=args.tile)
    except ImportError as e:  # videos without PyAV
        p.error(str(e))
    except ValueError as e:  # none of the videos picked could be read
        print(f"pixelpipe show: {e}", file=sys.stderr)
        return 1
    from .show import CAPTION, GAP

    grid.save(args.output, optimize=True)
    rows = (grid.size[1] - GAP) // (args.tile + CAPTION + GAP)
    print(f"wrote {args.output}: {grid.size[0]}x{grid.size[1]} pixels, {rows} clip(s) of {args.frames_per_clip} "
          f"frames ({args.transforms}){'' if videos is not None else ', synthetic videos'}")
    for source, reason in skipped:
        print(f"left out {source}: {reason}", file=sys.stderr)
    return 1 if skipped else 0


def _write_grid(args: argparse.Namespace, grid: Any, skipped: list[tuple[str, str]], what: str, note: str) -> int:
    """Save a `show` grid, say what it holds, list what was left out (exit status 1 then)."""
    from .show import CAPTION, GAP, HEADER

    grid.save(args.output, optimize=True)
    rows = (grid.size[1] - HEADER) // (args.tile + CAPTION + GAP)
    print(f"wrote {args.output}: {grid.size[0]}x{grid.size[1]} pixels, {rows} {what}, each beside "
          f"{args.columns} augmented version(s) ({args.transforms}){note}")
    for source, reason in skipped:
        print(f"left out {source}: {reason}", file=sys.stderr)
    return 1 if skipped else 0


def _run_inspect(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if args.max_pixels < 1:
        p.error(f"--max-pixels must be >= 1, got {args.max_pixels}")

    from ..readers import ReaderError
    from .survey import survey
    from .survey_videos import survey_videos
    from .video_data import open_videos

    found: Any
    try:
        videos = open_videos(args.data)
        if videos is not None:
            found = survey_videos(videos, decode=args.decode, num_threads=args.threads, quiet=args.quiet,
                                  name=args.data)
        else:
            found = survey(args.data, decode=args.decode, num_threads=args.threads,
                           max_pixels=args.max_pixels, quiet=args.quiet)
    except ReaderError as e:
        p.error(f"--data {args.data}: {e}")
    except ImportError as e:  # videos without PyAV
        p.error(str(e))
    print(json.dumps(found.to_dict(), indent=2) if args.json else found.report())
    return 0 if found.ok else 1


if __name__ == "__main__":
    sys.exit(main())
