"""Video decoding on the CPU through PyAV (FFmpeg): probe a file, decode clips of frames.

A video is indexed once by demuxing its packets without decoding them (`probe`): the sorted
presentation timestamps give every frame's index and time, and the key-frame flags give where
decoding may start. A clip (a list of frame indices) is then decoded by seeking to the last key
frame at or before its first frame and decoding forward, keeping the frames asked for. Clips of
one file whose frames overlap, or that share a group of pictures (no key frame between them),
are decoded in one forward pass (`decode_clips`). Frames come out as RGB uint8 [T, H, W, 3].

Why index packets instead of trusting the header: headers' frame counts and rates are missing
or wrong often enough (variable frame rate phones, remuxed files) that a clip asked for by index
would silently get other frames; the demux pass reads the file once but decodes nothing.

PyAV is imported when first needed: `pip install "pixelpipe[video]"` installs it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VideoError", "VideoInfo", "decode_clips", "decode_sampled", "import_av", "probe"]

Source = str | os.PathLike[str] | bytes | bytearray | memoryview


class VideoError(ValueError):
    """A video cannot be read: no video stream (an audio-only file), no frames, a stream that
    breaks off, a codec FFmpeg has no decoder for, or frames asked for outside the video. The
    message names the file and the reason."""


def import_av() -> Any:
    """The PyAV module, or an ImportError naming the extra that installs it."""
    try:
        import av
    except ImportError as e:
        raise ImportError('video decoding on the CPU needs PyAV: pip install "pixelpipe[video]" '
                          f"(or pip install av); the import failed: {e}") from None
    return av


@dataclass(frozen=True)
class VideoInfo:
    """What `probe` found in a video's first video stream.

    Attributes:
        frames: the number of frames (counted from the packets, not the header).
        fps: the average frame rate (the header's, or frames / duration when it has none).
        duration: seconds from the first frame's time to the last frame's end.
        width, height: the coded frame size in pixels.
        codec: the codec's canonical FFmpeg name ("h264", "hevc", "vp9", "av1", "mpeg4", ...),
            not the decoder's ("libdav1d").
        pts: int64 [frames], each frame's presentation timestamp in `time_base` units, sorted.
        times: float64 [frames], each frame's time in seconds from the first frame.
        keyframes: int64, the indices of the key frames (where decoding can start), sorted.
        time_base: seconds per pts unit.
    """

    frames: int
    fps: float
    duration: float
    width: int
    height: int
    codec: str
    pts: np.ndarray
    times: np.ndarray
    keyframes: np.ndarray
    time_base: float

    def keyframe_before(self, frame: int) -> int:
        """The last key frame at or before `frame` (0 when none is: decoding from the start)."""
        k = int(np.searchsorted(self.keyframes, frame, side="right")) - 1
        return int(self.keyframes[k]) if k >= 0 else 0


def _name(source: Source) -> str:
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else f"<{len(source)} bytes>"


def _open(source: Source) -> Any:
    """A PyAV input container on a path or on encoded bytes; VideoError when FFmpeg refuses it."""
    av = import_av()
    target = source if isinstance(source, (str, os.PathLike)) else io.BytesIO(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        target = os.fspath(source)
        if os.path.isfile(target) and os.path.getsize(target) == 0:
            raise VideoError(f"{target}: the file is empty (0 bytes)")
    elif len(source) == 0:
        raise VideoError("<0 bytes>: the data is empty")
    try:
        return av.open(target, mode="r")
    except FileNotFoundError:
        raise
    except (av.FFmpegError, OSError, ValueError) as e:
        raise VideoError(f"{_name(source)}: not a readable video ({type(e).__name__}: {e})") from None


def _video_stream(container: Any, name: str) -> Any:
    if not container.streams.video:
        kinds = ", ".join(sorted({s.type for s in container.streams})) or "none"
        raise VideoError(f"{name}: no video stream (streams: {kinds})")
    stream = container.streams.video[0]
    if stream.codec_context is None:  # FFmpeg knows no decoder for the stream's codec
        raise VideoError(f"{name}: unsupported codec: FFmpeg has no decoder for the video stream")
    return stream


def probe(source: Source) -> VideoInfo:
    """Index a video: frame count, times, key frames, size, codec (see VideoInfo). Reads every
    packet of the video stream once and decodes none.

    Raises:
        VideoError: the file is empty, not a video, holds no video stream or no frames.
        FileNotFoundError: the path does not exist.
    """
    name = _name(source)
    with _open(source) as container:
        return _probe_open(container, name)


def _probe_open(container: Any, name: str) -> VideoInfo:
    av = import_av()
    stream = _video_stream(container, name)
    ctx = stream.codec_context
    pts: list[int] = []
    key: list[bool] = []
    try:
        for packet in container.demux(stream):
            t = packet.pts if packet.pts is not None else packet.dts
            if t is None or packet.size == 0:  # the demuxer's flush packet, or a packet without time
                continue
            pts.append(int(t))
            key.append(bool(packet.is_keyframe))
    except av.FFmpegError as e:
        if not pts:
            raise VideoError(f"{name}: the stream cannot be read ({type(e).__name__}: {e})") from None
        # a truncated file: the frames before the break are the video
    if not pts:
        raise VideoError(f"{name}: the video stream holds no frames")
    order = np.argsort(np.asarray(pts, dtype=np.int64), kind="stable")
    sorted_pts = np.asarray(pts, dtype=np.int64)[order]
    keyframes = np.flatnonzero(np.asarray(key, dtype=bool)[order]).astype(np.int64)
    time_base = float(stream.time_base) if stream.time_base is not None else 1.0
    times = (sorted_pts - sorted_pts[0]).astype(np.float64) * time_base
    n = len(sorted_pts)
    rate = stream.average_rate or stream.guessed_rate
    span = float(times[-1]) if n > 1 else 0.0
    fps = float(rate) if rate else (((n - 1) / span) if span > 0 else 0.0)
    duration = span + (1.0 / fps if fps > 0 else 0.0)
    return VideoInfo(frames=n, fps=fps, duration=duration, width=int(ctx.width), height=int(ctx.height),
                     codec=str(ctx.codec.canonical_name), pts=sorted_pts, times=times, keyframes=keyframes, time_base=time_base)


def _passes(clips: Sequence[np.ndarray], info: VideoInfo) -> list[list[int]]:
    """Group clips (by position) into forward decoding passes: a clip joins the pass before it
    when its first frame is no later than that pass's last frame + 1, or when the key frame a
    seek would land on is no later than that pass's last frame (seeking would only decode
    again what the pass decodes anyway)."""
    order = sorted(range(len(clips)), key=lambda c: (int(clips[c].min()), c))
    passes: list[list[int]] = []
    last = -2
    for c in order:
        first = int(clips[c].min())
        if passes and (first <= last + 1 or info.keyframe_before(first) <= last):
            passes[-1].append(c)
        else:
            passes.append([c])
            last = -2
        last = max(last, int(clips[c].max()))
    return passes


def decode_clips(source: Source, clips: Sequence[Sequence[int]], info: VideoInfo | None = None,
                 threads: int = 0) -> list[np.ndarray]:
    """Decode clips of one video: each clip a list of frame indices (any order, repeats allowed,
    e.g. the last frame repeated to pad a clip). Returns one uint8 [T, H, W, 3] RGB array per
    clip, frame t the frame clips[c][t].

    Args:
        source: a path, or the encoded file's bytes.
        clips: the frame indices of each clip, in [0, info.frames).
        info: the video's `probe` (probed here, in the same opening of the file, when None).
        threads: FFmpeg decoding threads for this file (0: FFmpeg's choice). A loader decoding
            many files at once gives 1: the files are the parallelism.

    Raises:
        VideoError: an index outside the video, or frames the stream did not give (a damaged
            or truncated file), naming the file and the frames.
    """
    return decode_sampled(source, lambda _: clips, info, threads)[1]


def decode_sampled(source: Source, pick: Callable[[VideoInfo], Sequence[Sequence[int]]],
                   info: VideoInfo | None = None, threads: int = 0) -> tuple[VideoInfo, list[np.ndarray]]:
    """Probe a video, choose its clips from what the probe found (`pick(info)`: the frame
    indices of each clip, e.g. a ClipSampler's), and decode them, opening the file once.
    Returns the probe and the clips (as decode_clips)."""
    name = _name(source)
    with _open(source) as container:
        if info is None:
            info = _probe_open(container, name)
        want = [np.asarray(c, dtype=np.int64).reshape(-1) for c in pick(info)]
        for c, idx in enumerate(want):
            if len(idx) == 0:
                raise VideoError(f"{name}: clip {c} asks for no frames")
            if idx.min() < 0 or idx.max() >= info.frames:
                bad = int(idx[(idx < 0) | (idx >= info.frames)][0])
                raise VideoError(f"{name}: clip {c} asks for frame {bad}, outside the video's {info.frames} frames")
        stream = _video_stream(container, name)
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = int(threads)
        pts_index = {int(p): i for i, p in enumerate(info.pts.tolist())}
        frames: dict[int, np.ndarray] = {}
        for group in _passes(want, info):
            needed = np.unique(np.concatenate([want[c] for c in group]))
            _decode_pass(container, stream, info, needed, pts_index, frames, name)
        return info, [np.stack([frames[int(i)] for i in idx.tolist()]) for idx in want]


def _decode_pass(container: Any, stream: Any, info: VideoInfo, needed: np.ndarray, pts_index: dict[int, int],
                 out: dict[int, np.ndarray], name: str) -> None:
    """Decode the frames `needed` (sorted, unique) into out, from the key frame before the first.
    A seek that lands after the first frame (a container whose index points past the key frame
    asked for) is retried from the key frame before that one, down to the start of the stream."""
    av = import_av()
    todo = [int(i) for i in needed.tolist() if int(i) not in out]
    if not todo:
        return
    first, last, wanted = todo[0], todo[-1], set(todo)
    start = info.keyframe_before(first)
    while True:
        container.seek(int(info.pts[start]), stream=stream, backward=True, any_frame=False)
        got: dict[int, np.ndarray] = {}
        earliest: int | None = None
        try:
            for frame in container.decode(stream):
                t = frame.pts if frame.pts is not None else frame.dts
                i = pts_index.get(int(t)) if t is not None else None
                if i is None:
                    continue
                earliest = i if earliest is None else min(earliest, i)
                if i in wanted and i not in got:
                    got[i] = frame.to_ndarray(format="rgb24")
                if i >= last and len(got) == len(todo):
                    break
        except av.FFmpegError as e:
            missing = [i for i in todo if i not in got]
            raise VideoError(f"{name}: decoding broke off before frame {missing[0]} "
                             f"({type(e).__name__}: {e})") from None
        if earliest is not None and earliest > first and start > 0:
            start = info.keyframe_before(start - 1)  # landed too late: one key frame earlier
            continue
        missing = [i for i in todo if i not in got]
        if missing:
            raise VideoError(f"{name}: the stream ended without frames {missing[:5]}"
                             f"{' ...' if len(missing) > 5 else ''} of {info.frames} (a damaged or truncated file)")
        out.update(got)
        return

