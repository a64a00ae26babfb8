"""`pixelpipe bench --pipeline video`: clips/s of pixelpipe's VideoPipeline beside DALI's
fn.readers.video (CUDA) or a PyAV + Pillow loop (CPU), and on CUDA how busy the GPU's video
decoders (NVDEC) were.

The work (pipelines.py): clips of CLIP_FRAMES (16) frames CLIP_STRIDE (2) apart, one clip per
video per epoch at a random start; random resized crop to `crop` (224), flip, normalise, float16
NCTHW. The data: --data (a folder, list file or uncompressed tar shards of videos, as `pixelpipe
inspect` takes them), or `n` generated H.264 videos (tools/videos.synthetic_videos: a moving
pattern, a key frame every GOP frames) `height` lines high at 16:9, kept in the temporary
folder for the next run with the same settings.

Peers: `pyav` (CPU), `dali` and `torchcodec` (CUDA). The contenders and their timing are the image bench's: gpu_peers.run_contender builds and
times each (a peer that is missing or fails is a row with rate 0 and the reason), in_rounds
alternates them over rounds, report prints the table, the per-round ratios or JSON. Results
count clips; frames/s is clips/s x CLIP_FRAMES; the frames decoded are each clip's first to
last frame (stride x (frames - 1) + 1: 31), the least any decoder decodes for a clip (seeking
adds the frames from the key frame before its start). On CUDA the table adds, per contender,
how busy NVDEC was (NVML, engine_use.py), the decoded frames/s and what they would be with
NVDEC busy all the time: how far each is from the decoders' capacity.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ...data.threads import default_threads
from .gpu_peers import bench_header, package_versions, peer_names, run_contender
from .pipelines import CLIP_FRAMES, CLIP_STRIDE, VIDEO_MEAN, VIDEO_STD, video_ops
from .timing import Result, in_rounds, report

RunPass = Callable[[int], Iterator[int]]

VIDEO_PEERS = ("pyav", "dali", "torchcodec")  # pyav: the CPU loop (pyav_loop.py); dali: fn.readers.video on
# CUDA; torchcodec: its NVDEC decoder + torchvision v2 on CUDA (peer_torchcodec_video.py)
DEFAULT_PEERS = {"cpu": ["pyav"], "cuda": ["dali"]}
VIDEOS, HEIGHT, FRAMES, GOP = 32, 720, 96, 30  # the generated set: videos, lines, frames (+0..10), key frame interval
MIN_HEIGHT = 36  # a generated frame is at least 64x36: the frame index drawn into it needs 64x24
LOOKED_AT = 8  # --data: the files probed to describe the set in the header
VIDEO_PACKAGES = {"av": "av", "pynvvideocodec": "PyNvVideoCodec", "torchcodec": "torchcodec"}  # header name -> distribution


# ----------------------------------------------------------------------------- the data
def video_width(height: int) -> int:
    """The width of a generated video `height` lines high: 16:9, rounded to an even number
    (H.264's 4:2:0 chroma halves both sides)."""
    return 2 * round(height * 8 / 9)


def generated_videos(n: int, height: int, frames: int = FRAMES, gop: int = GOP,
                     root: str | None = None) -> tuple[str, bool]:
    """The folder of `n` generated H.264 videos `height` lines high at 16:9 (width even), and
    whether they were made now (False: an earlier run's, same settings). Written into a
    temporary folder first and renamed, so a folder found is complete."""
    from ..videos import synthetic_videos

    width = video_width(height)
    root = root if root is not None else tempfile.gettempdir()
    folder = os.path.join(root, f"pixelpipe-bench-videos-{n}-{width}x{height}-{frames}f-gop{gop}")
    if os.path.isdir(folder):
        return folder, False
    part = tempfile.mkdtemp(prefix=os.path.basename(folder) + ".part-", dir=root)
    try:
        synthetic_videos(part, n, classes=4, frames=frames, gop=gop, height=height, width=width)
        os.rename(part, folder)
    except OSError:
        if not os.path.isdir(folder):  # not another run finishing the same set first
            raise
    finally:
        if os.path.isdir(part):
            shutil.rmtree(part, ignore_errors=True)
    return folder, True


def video_data(data: str | None, n: int, height: int) -> tuple[Any, list[str] | None, str]:
    """(the video reader, its files or None for tar shards, how to say it in the header)."""
    from ...decode.video import probe
    from ...readers import ReaderError
    from ..video_data import open_videos

    generated, made = data is None, False
    if data is None:
        data, made = generated_videos(n, height)
    try:
        reader = open_videos(data)
    except ReaderError as e:
        raise SystemExit(f"pixelpipe bench: --data {data}: {e}") from None
    if reader is None:
        raise SystemExit(f"pixelpipe bench: --data {data} holds no videos (.mp4, .mkv, .webm, .avi, .mov, .m4v)")
    files = ([str(reader.sources(i)) for i in range(len(reader))]
             if getattr(reader, "reads_files", False) else None)
    if generated:
        return reader, files, (f"{len(reader)} generated H.264 videos {video_width(height)}x{height}, "
                               f"{FRAMES}-{FRAMES + 10} frames, a key frame every {GOP} "
                               f"({data}{', made now' if made else ''})")
    first = ""
    for path in (files or [])[:LOOKED_AT]:  # the first readable one of the first few
        try:
            info = probe(path)
        except Exception:  # the file's own problem: the pipeline's row counts it
            continue
        first = f"; {os.path.basename(path)}: {info.codec} {info.width}x{info.height}, {info.frames} frames"
        break
    return reader, files, f"{len(reader)} videos in {data}{first}"


# ----------------------------------------------------------------------------- contenders
def pixelpipe_video(reader: Any, clip: int, stride: int, crop: int, batch: int, threads: int,
                    device: torch.device, gpu_decode: bool | None = None) -> RunPass:
    """The user's path: a VideoPipeline over `reader` (one pass = one epoch, shuffled, a clip
    per video, the last batch padded), decoding on NVDEC on CUDA unless gpu_decode=False.
    The valid clips of each batch are counted on the host: every failed video (left out,
    on_error="skip") is in the pipeline's epoch_errors by the time its batch is handed out."""
    from ...compose import Compose
    from ...data.clips import ClipSampler
    from ...loader.video import VideoPipeline

    t = Compose(video_ops(crop), dtype=torch.float16)
    pipe = VideoPipeline(reader, t, batch, ClipSampler(clip, stride), layout="NCTHW", device=str(device),
                         gpu_decode=gpu_decode if device.type == "cuda" else None, num_threads=threads,
                         on_error="skip")
    n = len(reader)

    def run(epoch: int) -> Iterator[int]:
        valid = 0
        for _ in pipe:
            k = max(0, min(batch, n - len(pipe.epoch_errors) - valid))
            valid += k
            yield k

    def notes() -> list[str]:
        state = pipe.decode_stats.state()
        out = ["files decoded, warm-up and the videos decoded ahead for the next pass included: " + ", ".join(f"{v} on {k}" for k, v in sorted(state["decoded"].items()))]
        out += [f"fell back to the CPU {v}x: {k}" for k, v in state["fallbacks"].items()]
        if pipe.errors:
            _, source, reason = pipe.errors[0]
            out.append(f"{len(pipe.errors)} video(s) failed and were left out, the first {source}: {reason}")
        return out

    run.close = pipe.close  # type: ignore[attr-defined]
    run.notes = notes  # type: ignore[attr-defined]
    run.pipe = pipe  # type: ignore[attr-defined]
    return run


def pyav_video(files: Sequence[str] | None, clip: int, stride: int, crop: int, batch: int,
               threads: int) -> RunPass:
    """The PyAV + Pillow loop (pyav_loop.py), one pass = one epoch, a clip per video."""
    from ...decode.video import import_av
    from .pyav_loop import pyav_batches

    import_av()  # a missing PyAV is a row saying so
    if not files:
        raise ValueError("the PyAV loop reads video files (not tar shards)")

    def run(epoch: int) -> Iterator[int]:
        for out in pyav_batches(files, batch, threads, clip, stride, crop, VIDEO_MEAN, VIDEO_STD, epoch):
            yield out.shape[0]

    return run


def parse_video_peers(peers: Sequence[str] | None, device: torch.device) -> list[str]:
    """The peers asked for (None: the device's default), in VIDEO_PEERS order; "all" is every
    one; an unknown name exits naming the choices."""
    if peers is None:
        return list(DEFAULT_PEERS[device.type if device.type == "cuda" else "cpu"])
    return peer_names(peers, VIDEO_PEERS, "video", "(or all, none)")


Row = tuple[str, Callable[[], RunPass] | None, str]  # (row name, factory, note); no factory: not run, the note says why


def contenders(reader: Any, files: list[str] | None, dev: torch.device, peers: Sequence[str], clip: int,
               stride: int, crop: int, batch: int, threads: int) -> list[Row]:
    """pixelpipe first, then each peer; a peer asked for on a device it does not run on is a
    row without a factory, its note saying why."""
    cuda = dev.type == "cuda"
    rows: list[Row] = [("pixelpipe", lambda: pixelpipe_video(reader, clip, stride, crop, batch, threads, dev),
                        f"VideoPipeline(device={dev}{', NVDEC' if cuda else ''}), {threads} threads")]
    for peer in peers:
        if peer == "pyav":
            rows.append(("pyav loop (cpu)", lambda: pyav_video(files, clip, stride, crop, batch, threads),
                         f"PyAV decoding + Pillow, {threads} threads") if not cuda else
                        ("pyav loop (cpu)", None, "not run: the PyAV loop runs on the CPU (--device cpu)"))
        elif peer == "dali":
            from .peer_dali_video import dali_video

            rows.append(("dali", lambda: dali_video(files or [], clip, stride, crop, batch, threads, dev, VIDEO_MEAN,
                                                    VIDEO_STD), f"fn.readers.video (NVDEC), {threads} threads")
                        if cuda else ("dali", None, "not run: DALI's video reader decodes on a CUDA device (--device cuda)"))
        elif peer == "torchcodec":
            from .peer_torchcodec_video import torchcodec_video

            rows.append(("torchcodec + torchvision", lambda: torchcodec_video(files, clip, stride, crop, batch, threads,
                                                                              dev, VIDEO_MEAN, VIDEO_STD),
                         f"torchcodec VideoDecoder(device=cuda) per video + torchvision v2, {threads} threads")
                        if cuda else ("torchcodec + torchvision", None,
                                      "not run: the torchcodec peer decodes on a CUDA device (--device cuda)"))
    return rows


# ----------------------------------------------------------------------------- the run
def run_video_bench(data: str | None, device: str, batch: int | None, threads: int | None,
                    peers: Sequence[str] | None, passes: int, as_json: bool, quiet: bool, rounds: int = 1,
                    seconds: float = 0.0, n: int = VIDEOS, height: int = HEIGHT, clip: int = CLIP_FRAMES,
                    stride: int = CLIP_STRIDE, crop: int = 224) -> list[Result]:
    """Time the video pipeline (module docstring) with pixelpipe and the peers; print the table
    (or JSON) and return the median results.

    Args:
        data: videos (a folder, list file or tar shards); None: `n` generated videos `height`
            lines high. device: "cpu", "cuda", "cuda:N" or "auto" (CUDA where torch sees it).
        batch: clips per batch (default 8). threads: decoding threads (default: the cores).
        peers: names from VIDEO_PEERS, "all", or None for the device's default (pyav on the
            CPU, dali on CUDA); [] for pixelpipe alone.
        passes, rounds, seconds: as the image bench (timing.time_runs, timing.in_rounds).
        clip, stride, crop: frames per clip, frames between them, the output side.
    """
    if rounds < 1 or passes < 1:
        raise SystemExit(f"pixelpipe bench: --rounds and --passes must be >= 1, got {rounds} and {passes}")
    if data is None and height < MIN_HEIGHT:
        raise SystemExit(f"pixelpipe bench: --size (the generated videos' height) must be >= {MIN_HEIGHT}, got {height}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"pixelpipe bench: --device {device}: torch sees no CUDA device "
                             f"(torch {torch.__version__}); use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    names = parse_video_peers(peers, dev)  # exit on a bad name before any work
    batch = batch or 8
    threads = threads or default_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)  # the frames' work runs on the engine's threads; OpenMP on top oversubscribes
    if "torchcodec" in names and dev.type == "cuda":
        _load_torchcodec_first()
    reader, files, what = video_data(data, n, height)
    span = stride * (clip - 1) + 1
    rows = contenders(reader, files, dev, names, clip, stride, crop, batch, threads)

    def job(row: Row) -> Result:
        name, make, note = row
        if make is None:
            return Result(name, 0, 0.0, note)
        result = run_contender(name, make, passes, len(reader), quiet, note, dev, seconds, nvdec=True)
        result.frames, result.decoded_frames = result.images * clip, result.images * span
        return result

    results, per_round = in_rounds([lambda row=row: job(row) for row in rows], rounds)
    versions = package_versions() | _video_versions()
    header = bench_header("video", str(dev), batch, threads, passes, what, False, versions)
    header += (f"\nclips of {clip} frames at stride {stride} (a span of {span}), one per video per epoch; "
               f"RandomResizedCrop({crop}), flip, normalise, float16 NCTHW; rates count clips")
    if rounds > 1 or seconds:
        header += f"\nrounds={rounds}, at least {seconds:g} s per contender and round"
    report(results, per_round, header, as_json, {"versions": versions}, unit="clips")
    return results


def _load_torchcodec_first() -> None:
    """torchcodec's FFmpeg libraries loaded before PyNvVideoCodec's (pixelpipe's NVDEC path):
    loaded after them, its decoders found no video stream in any file ("The best video stream is
    unknown"; torchcodec 0.17, PyNvVideoCodec 2.2.4). A missing torchcodec is its row's to say."""
    try:
        import torchcodec.decoders  # noqa: F401
    except Exception:  # ImportError, or its libraries missing: the row says so
        pass


def _video_versions() -> dict[str, str]:
    found = {}
    for short, dist in VIDEO_PACKAGES.items():
        try:
            found[short] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found
