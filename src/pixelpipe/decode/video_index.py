"""The probes of a video loader's files, kept between epochs (`VideoIndex`).

Why: `decode.video.probe` opens a file with FFmpeg (which decodes a frame or two to learn the
stream's format) and reads every packet: 13-14 ms for a 1280x720 H.264 file of 100 frames on
one core, and 63 ms per video on a 16-core GPU host where 16 loader threads probe and decode
at once (`VideoPipeline` on NVDEC: the probe was 37% of a video's time on its thread, the
hardware decoding 60%). What it finds does not change while the file does not, so a loader
probes each file once and looks it up in the epochs after, as DALI's video reader indexes its
files once when it is built.

An entry is checked against the file's size and modification time (one `os.stat`) before it
is used: a file rewritten in place is probed again. Only files are kept (videos given as bytes
are probed every time). Kept compactly: a video whose timestamps step evenly (constant frame
rate, nearly every file) keeps its first timestamp and step rather than its per-frame arrays,
a few dozen bytes and its key frames; the arrays of the others count against `max_bytes`, past
which they are probed each time rather than kept.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .video import Source, VideoInfo, probe

__all__ = ["VideoIndex"]


@dataclass(frozen=True)
class _Even:
    """A probe whose pts are first + step * k, k = 0..frames-1 (its times computed again as
    probe computes them)."""

    info: VideoInfo  # with empty pts and times
    first: int
    step: int


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _compact(info: VideoInfo) -> _Even | VideoInfo:
    pts = info.pts
    if len(pts) < 2:
        return info
    step = int(pts[1] - pts[0])
    if step <= 0 or not np.array_equal(np.diff(pts), np.full(len(pts) - 1, step, dtype=pts.dtype)):
        return info
    empty = np.empty(0, dtype=np.int64)
    return _Even(VideoInfo(info.frames, info.fps, info.duration, info.width, info.height, info.codec, empty,
                           np.empty(0, dtype=np.float64), info.keyframes, info.time_base), int(pts[0]), step)


def _expand(kept: _Even | VideoInfo) -> VideoInfo:
    if isinstance(kept, VideoInfo):
        return kept
    i = kept.info
    pts = kept.first + kept.step * np.arange(i.frames, dtype=np.int64)
    times = (pts - pts[0]).astype(np.float64) * i.time_base  # probe's formula: the same numbers
    return VideoInfo(i.frames, i.fps, i.duration, i.width, i.height, i.codec, pts, times, i.keyframes, i.time_base)


class VideoIndex:
    """probe() of video files, each file probed once while its size and modification time stay
    the same (module docstring). Thread-safe.

    Args:
        max_bytes: the most bytes of per-frame arrays kept for videos whose timestamps do not
            step evenly (default 256 MiB); evenly stepping videos cost no such bytes.
    """

    def __init__(self, max_bytes: int = 256 * 2**20) -> None:
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[tuple[int, int], Any]] = {}
        self._bytes = 0
        self.probed = 0  # files probed (looked-up entries not counted)

    def probe(self, source: Source) -> VideoInfo:
        """What decode.video.probe(source) returns, from the index when the file is unchanged
        since it was probed. Raises what probe raises."""
        if not isinstance(source, (str, os.PathLike)):
            return probe(source)
        path = os.fspath(source)
        try:
            stamp = _stamp(path)
        except OSError:
            return probe(path)  # probe names the problem
        with self._lock:
            kept = self._kept.get(path)
        if kept is not None and kept[0] == stamp:
            return _expand(kept[1])
        info = probe(path)
        compact = _compact(info)
        size = 0 if isinstance(compact, _Even) else info.pts.nbytes + info.times.nbytes + info.keyframes.nbytes
        with self._lock:
            self.probed += 1
            old = self._kept.pop(path, None)
            if old is not None and not isinstance(old[1], _Even):
                self._bytes -= old[1].pts.nbytes + old[1].times.nbytes + old[1].keyframes.nbytes
            if self._bytes + size <= self.max_bytes:
                self._kept[path] = (stamp, compact)
                self._bytes += size
        return info

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0
