"""`pixelpipe inspect` on videos: every video of a VideoFolder, VideoFileList or VideoTar
probed (codec, size, frame rate, frames, duration), the unreadable ones named with the reason
(tools.video_checks), and a summary over the dataset.

`survey_videos(data)` is to videos what `survey(data)` is to images: the same threads, the
same progress bar, the same exit status in the command (1 when a video cannot be read).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.threads import default_threads
from ..readers import ReaderError
from .progress import Progress
from .survey import SHOWN, _count_classes, _run
from .video_checks import KINDS, check_video, describe
from .video_data import open_videos

__all__ = ["VideoSurvey", "survey_videos"]


@dataclass
class VideoSurvey:
    """What `survey_videos` found: `videos` (one dict per readable video: source, codec, width,
    height, fps, frames, duration), `problems` ((source, reason) per unreadable video, the
    reason "<kind>: <detail>" with kind one of video_checks.KINDS), class counts, and the
    files the reader left out (`ignored`)."""

    data: str
    reader: str
    decoded: bool
    samples: int = 0
    videos: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    classes: list[str] | None = None
    class_counts: dict[str, int] = field(default_factory=dict)
    labels_per_sample: int | None = None
    unlabelled: int = 0

    @property
    def ok(self) -> bool:
        """Every video is readable."""
        return not self.problems

    def kinds(self) -> dict[str, int]:
        """Unreadable videos per kind of problem, in KINDS order."""
        found = Counter(reason.split(":", 1)[0] for _, reason in self.problems)
        return {k: found[k] for k in (*KINDS, *sorted(set(found) - set(KINDS))) if found[k]}

    def summary(self) -> dict[str, Any]:
        """Counts and ranges over the readable videos (JSON-ready)."""
        rows = self.videos
        out: dict[str, Any] = {
            "codecs": dict(Counter(r["codec"] for r in rows).most_common()),
            "resolutions": dict(Counter(f"{r['width']}x{r['height']}" for r in rows).most_common()),
            "fps": {f"{k:g}": n for k, n in Counter(r["fps"] for r in rows).most_common()},
        }
        for key in ("frames", "duration"):
            v = np.asarray([r[key] for r in rows], dtype=np.float64)
            out[key] = ({"min": _num(v.min()), "median": _num(np.median(v)), "max": _num(v.max())}
                        if len(v) else {})
        out["duration"]["total"] = round(float(sum(r["duration"] for r in rows)), 3)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The findings as plain JSON-ready values."""
        return {
            "data": self.data, "reader": self.reader, "decoded": self.decoded, "videos": self.samples,
            "readable": len(self.videos), "unreadable": len(self.problems),
            "classes": None if self.classes is None and not self.class_counts else len(self.class_counts),
            "class_counts": self.class_counts, **self.summary(), "unreadable_kinds": self.kinds(),
            "per_video": self.videos,
            "problems": [{"source": s, "kind": r.split(":", 1)[0], "reason": r} for s, r in self.problems],
            "ignored": [{"path": p, "reason": r} for p, r in self.ignored],
        }

    def report(self) -> str:
        """A plain-text report: the summary, then one line per video and per problem."""
        out = [f"pixelpipe inspect: {self.data} ({self.reader})"]
        add = lambda key, text: out.append(f"  {key:<13}{text}")
        add("videos", f"{self.samples:,} ({len(self.videos):,} readable)")
        add("classes", self._classes_line())
        if self.ignored:
            add("ignored", f"{len(self.ignored):,} files, not videos")
        s = self.summary()
        if self.videos:
            add("codecs", ", ".join(f"{k} {n:,}" for k, n in s["codecs"].items()))
            add("resolutions", _top(s["resolutions"]))
            add("fps", _top(s["fps"]))
            f, d = s["frames"], s["duration"]
            add("frames", f"{f['min']:g}..{f['max']:g} (median {f['median']:g})")
            add("duration", f"{d['min']:.2f}..{d['max']:.2f} s (median {d['median']:.2f} s, total "
                            f"{_clock(d['total'])})")
            out.append(f"    {'codec':<8}{'size':>11}{'fps':>8}{'frames':>8}{'seconds':>9}  video")
            for r in self.videos[:SHOWN]:
                size = f"{r['width']}x{r['height']}"
                out.append(f"    {r['codec']:<8}{size:>11}{r['fps']:>8.2f}{r['frames']:>8,}{r['duration']:>9.2f}  "
                           f"{r['source']}")
            if len(self.videos) > SHOWN:
                out.append(f"    ... and {len(self.videos) - SHOWN:,} more (--json lists them all)")
        how = "decoded in full" if self.decoded else "packets read"
        kinds = ", ".join(f"{n:,} {k}" for k, n in self.kinds().items())
        add("unreadable", f"{len(self.problems):,}{f' ({kinds})' if kinds else ''} ({how})")
        for source, reason in self.problems:
            out.append(f"    {source}: {reason}")
        if self.problems:
            out.append(f"problems: {len(self.problems):,} unreadable video(s)")
        else:
            hint = "" if self.decoded else "; add --decode to decode every frame"
            out.append(f"ok: every video is readable ({how}{hint})")
        return "\n".join(out)

    def _classes_line(self) -> str:
        if self.labels_per_sample is not None:
            return f"multi-label, {self.labels_per_sample} labels per video"
        if not self.class_counts:
            return "none (the videos have no labels)"
        counts = sorted(self.class_counts.values())
        return (f"{len(counts):,} (videos per class: min {counts[0]:,}, median {np.median(counts):g}, "
                f"max {counts[-1]:,})")


def _num(x: Any) -> float | int:
    x = float(x)
    return int(x) if x.is_integer() else round(x, 3)


def _top(counts: dict[str, int], k: int = 5) -> str:
    items = list(counts.items())
    text = ", ".join(f"{name} {n:,}" for name, n in items[:k])
    return text + (f", ... ({len(items) - k} more)" if len(items) > k else "")


def _clock(seconds: float) -> str:
    m, s = divmod(seconds, 60)
    h, m = divmod(int(m), 60)
    return f"{h}:{m:02d}:{s:06.3f}"


def survey_videos(data: Any, decode: bool = False, num_threads: int | None = None, quiet: bool = True,
                  name: str | None = None) -> VideoSurvey:
    """Probe every video of a dataset and return a `VideoSurvey` (``.report()``, ``.to_dict()``).

    Args:
        data: a folder of videos (class subfolders, or videos directly inside), a list file of
            videos, uncompressed tar shards of videos, or a video reader.
        decode: also decode every frame (slower; catches corrupt data a packet scan misses).
        num_threads: videos probed at once (default: all cores).
        quiet: no progress bar (it is drawn only on a terminal anyway).
        name: what the report calls the dataset (default: `data` when it is a path).

    Raises:
        ReaderError: `data` holds no videos, or its reader refuses it.

    Example:
        >>> s = survey_videos("/data/kinetics/val")   # doctest: +SKIP
        >>> s.ok, s.kinds()                           # doctest: +SKIP
        (False, {'truncated': 2})
    """
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    reader = open_videos(data)
    if reader is None:
        raise ReaderError(f"{data!r} holds no videos")
    if name is None:
        name = os.fspath(data) if isinstance(data, (str, os.PathLike)) else repr(reader)
    result = VideoSurvey(name, type(reader).__name__, decode, samples=len(reader))
    from_files = getattr(reader, "reads_files", True)

    def check(i: int) -> tuple[str, Any, str | None]:
        source = reader.sources(i)
        try:
            target = source if from_files else reader.read(i).data
        except OSError as e:  # a shard that ends inside the member
            return source, None, f"truncated: {e}"
        info, problem = check_video(target, decode)
        return source, info, problem

    with Progress(len(reader), "inspect", quiet=quiet) as bar:
        for source, info, problem in _run((lambda i=i: check(i) for i in range(len(reader))),
                                          num_threads or default_threads()):
            if problem is not None:
                result.problems.append((source, problem))
            else:
                result.videos.append({"source": source, **describe(info)})
            bar.update(1)
    _count_classes(result, reader, [])  # type: ignore[arg-type]
    result.ignored = list(getattr(reader, "ignored", []))
    return result
