"""`pixelpipe inspect`: look over a dataset before training on it.

`survey(data)` reads every sample of a folder, a file list or tar shards, parses each header
(`pixelpipe.decode.read_header`, a few microseconds per file) and gathers what a training job
wants to know up front: how many samples and classes, which formats, a histogram of sizes,
how many grayscale, CMYK or alpha images, and every file that cannot be read, with the reason.
JPEGs whose data stops before the end-of-image marker are caught by the header scan too;
`decode=True` also decodes every image in full, which catches corrupt data in any format.

The command exits with status 1 when it finds unreadable files, so it can guard a job::

    pixelpipe inspect --data /data/train --decode --quiet && python train.py

A folder of images with no class subfolders (such as a folder of samples) is read as one
unlabelled set of files, here and in `pixelpipe show`.
"""

from __future__ import annotations

import os
import warnings
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.threads import default_threads
from ..decode import DecodeError, ImageInfo, decode_region, read_header
from ..decode.headers import parse_jpeg
from ..readers import ReaderError, TarShards, Unreadable, open_reader
from .progress import Progress

__all__ = ["Survey", "open_data", "survey"]

# Shorter-side histogram bins (pixels): [0, 64), [64, 128), ... [4096, inf).
SIZE_BINS = (0, 64, 128, 256, 512, 1024, 2048, 4096)
BAR = 40  # characters of the longest histogram bar
SHOWN = 20  # ignored files listed by name in the text report


def open_data(data: Any) -> Any:
    """A reader for `data`: what `pixelpipe.readers.open_reader` returns (a folder without
    class subfolders is a flat Folder, its images unlabelled), except that tar shards whose
    headers cannot be counted are opened without counting, so that a damaged shard is
    reported as a problem rather than refusing the whole dataset.

    Raises:
        ReaderError: the path does not exist, or holds nothing readable as a dataset.
    """
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        try:
            with warnings.catch_warnings():  # what a reader warns of is in the report
                warnings.simplefilter("ignore")
                return open_reader(path)
        except ReaderError:
            if not path.lower().endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")):
                raise
            return TarShards(path, count=False)  # still raises when no shard exists
    return open_reader(data)


# --------------------------------------------------------------------------------- results
@dataclass
class Survey:
    """What `survey` found. `problems` holds (source, reason) for every unreadable sample;
    `warnings` (source, what) for what the reader found wrong besides (a damaged tar shard, a
    key that comes back after other members); `ignored` (path, reason) for every file a
    Folder does not take as a sample (other extensions, images beside the class folders,
    special files, symlinks not followed)."""

    data: str
    reader: str
    decoded: bool
    samples: int = 0
    classes: list[str] | None = None
    class_counts: dict[str, int] = field(default_factory=dict)
    labels_per_sample: int | None = None  # K for multi-label datasets
    unlabelled: int = 0
    formats: Counter = field(default_factory=Counter)
    progressive: int = 0
    colour: Counter = field(default_factory=Counter)  # colour, grayscale, cmyk, alpha
    high_bit_depth: int = 0
    exif_rotated: int = 0
    heights: array = field(default_factory=lambda: array("l"))
    widths: array = field(default_factory=lambda: array("l"))
    smallest: tuple[int, int, str] | None = None  # (height, width, source)
    largest: tuple[int, int, str] | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.warnings

    @property
    def ignored_files(self) -> int:
        return len(self.ignored)

    def size_histogram(self) -> list[tuple[str, int]]:
        """(bin label, count) of the shorter side, from the first to the last non-empty bin."""
        if not self.heights:
            return []
        short = np.minimum(np.asarray(self.heights), np.asarray(self.widths))
        edges = np.array(SIZE_BINS[1:])
        counts = np.bincount(np.searchsorted(edges, short, side="right"), minlength=len(SIZE_BINS))
        nonzero = np.flatnonzero(counts)
        rows = []
        for k in range(int(nonzero[0]), int(nonzero[-1]) + 1):
            lo = SIZE_BINS[k]
            label = f"{lo:>5} - {SIZE_BINS[k + 1] - 1:<5}" if k + 1 < len(SIZE_BINS) else f"{lo:>5} +    "
            rows.append((label, int(counts[k])))
        return rows

    def to_dict(self) -> dict[str, Any]:
        """The findings as plain JSON-ready values."""
        h, w = np.asarray(self.heights), np.asarray(self.widths)
        sizes = {}
        if len(h):
            sizes = {"height": {"min": int(h.min()), "median": float(np.median(h)), "max": int(h.max())},
                     "width": {"min": int(w.min()), "median": float(np.median(w)), "max": int(w.max())},
                     "shorter_side_histogram": dict(self.size_histogram())}
        return {
            "data": self.data, "reader": self.reader, "decoded": self.decoded, "samples": self.samples,
            "classes": None if self.classes is None and not self.class_counts else len(self.class_counts),
            "class_counts": self.class_counts, "labels_per_sample": self.labels_per_sample,
            "formats": dict(self.formats), "progressive": self.progressive, "colour": dict(self.colour),
            "high_bit_depth": self.high_bit_depth, "exif_rotated": self.exif_rotated, "sizes": sizes,
            "ignored_files": self.ignored_files,
            "ignored": [{"path": p, "reason": r} for p, r in self.ignored],
            "warnings": [{"source": s, "what": w} for s, w in self.warnings],
            "problems": [{"source": s, "reason": r} for s, r in self.problems],
        }

    def report(self) -> str:
        """A plain-text report, one finding per line."""
        out = [f"pixelpipe inspect: {self.data} ({self.reader})"]
        add = lambda key, text: out.append(f"  {key:<13}{text}")
        add("samples", f"{self.samples:,}")
        add("classes", self._classes_line())
        if self.ignored:
            why = Counter(reason.split(" (")[0].split(":")[0] for _, reason in self.ignored)
            add("ignored", f"{self.ignored_files:,} files, not samples: "
                           + "; ".join(f"{n:,} {reason}" for reason, n in why.most_common()))
            for path, reason in self.ignored[:SHOWN]:
                out.append(f"    {path}: {reason}")
            if len(self.ignored) > SHOWN:
                out.append(f"    ... and {len(self.ignored) - SHOWN:,} more (--json lists them all)")
        fmt = ", ".join(f"{name} {n:,}" for name, n in self.formats.most_common())
        if self.progressive:
            fmt += f" ({self.progressive:,} progressive or interlaced)"
        add("formats", fmt or "none readable")
        add("colour", ", ".join(f"{name} {self.colour.get(name, 0):,}"
                                for name in ("colour", "grayscale", "cmyk", "alpha")))
        if self.high_bit_depth:
            add("16-bit", f"{self.high_bit_depth:,} (decoded to 8 bits)")
        if self.exif_rotated:
            add("exif rotated", f"{self.exif_rotated:,} (sizes below are as displayed)")
        if self.heights:
            h, w = np.asarray(self.heights), np.asarray(self.widths)
            add("sizes", f"width {w.min()}..{w.max()} (median {np.median(w):g}), "
                         f"height {h.min()}..{h.max()} (median {np.median(h):g})")
            if self.smallest is not None and self.largest is not None:
                add("smallest", f"{self.smallest[1]}x{self.smallest[0]}  {self.smallest[2]}")
                add("largest", f"{self.largest[1]}x{self.largest[0]}  {self.largest[2]}")
            out.append("  shorter side (pixels)")
            hist = self.size_histogram()
            top = max(n for _, n in hist)
            for label, n in hist:
                bar = "#" * (max(1, round(BAR * n / top)) if n else 0)
                out.append(f"    {label} {n:>10,}  {bar}")
        how = "decoded in full" if self.decoded else "headers checked"
        for source, what in self.warnings:
            add("warning", f"{source}: {what}")
        add("unreadable", f"{len(self.problems):,} ({how})")
        for source, reason in self.problems:
            out.append(f"    {source}: {reason}")
        if self.problems or self.warnings:
            warned = f", {len(self.warnings):,} warning(s)" if self.warnings else ""
            out.append(f"problems: {len(self.problems):,} unreadable file(s){warned}")
        else:
            hint = "" if self.decoded else "; add --decode to decode every image in full"
            out.append(f"ok: every sample is readable ({how}{hint})")
        return "\n".join(out)

    def _classes_line(self) -> str:
        if self.labels_per_sample is not None:
            return f"multi-label, {self.labels_per_sample} labels per sample"
        if not self.class_counts:
            return "none (the samples have no labels)"
        counts = sorted(self.class_counts.values())
        text = (f"{len(counts):,} (samples per class: min {counts[0]:,}, median "
                f"{np.median(counts):g}, max {counts[-1]:,})")
        empty = [name for name, n in self.class_counts.items() if n == 0]
        if empty:
            shown = ", ".join(empty[:5]) + (", ..." if len(empty) > 5 else "")
            text += f"; {len(empty)} empty: {shown}"
        if self.unlabelled:
            text += f"; {self.unlabelled:,} samples without a label"
        return text

    # ----------------------------------------------------------------------------- gathering
    def _add(self, rec: _Record) -> None:
        if rec.problem is not None:
            self.problems.append((rec.source, rec.problem))
        if rec.shard_error:
            return
        self.samples += 1
        info = rec.info
        if info is None:
            return
        self.formats[info.format] += 1
        self.progressive += info.progressive
        if info.grey:
            self.colour["grayscale"] += 1
        elif info.channels == 4:
            self.colour["cmyk" if info.format == "jpeg" else "alpha"] += 1
        else:
            self.colour["colour"] += 1
        self.high_bit_depth += info.bits > 8
        self.exif_rotated += info.orientation != 1
        h, w = info.oriented_size
        self.heights.append(h)
        self.widths.append(w)
        if self.smallest is None or h * w < self.smallest[0] * self.smallest[1]:
            self.smallest = (h, w, rec.source)
        if self.largest is None or h * w > self.largest[0] * self.largest[1]:
            self.largest = (h, w, rec.source)


@dataclass
class _Record:
    source: str
    label: Any
    info: ImageInfo | None
    problem: str | None
    shard_error: bool = False  # a problem with a whole shard, not one sample
    labelled: bool = True  # whether `label` is the sample's (not so for one a stream could not make)


def check_sample(data: Any, decode: bool = False, max_pixels: int = 100_000_000) -> tuple[ImageInfo | None, str | None]:
    """(header, problem) for one sample: problem is None when it is readable.

    Encoded bytes get their header parsed; a JPEG must hold an end-of-image marker after its
    first scan (the decoder fails without one); images above max_pixels are refused as a
    Pipeline refuses them. decode=True also decodes the whole image. Decoded arrays pass.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        shape = tuple(getattr(data, "shape", ()))
        if len(shape) in (2, 3):
            return ImageInfo("array", int(shape[0]), int(shape[1]), int(shape[2]) if len(shape) == 3 else 1,
                             8, False), None
        return None, f"not an image: {type(data).__name__}"
    try:
        info = read_header(data)
    except DecodeError as e:
        return None, str(e)
    if info.height * info.width > max_pixels:
        return info, (f"{info.width}x{info.height} has {info.width * info.height:,} pixels, more "
                      f"than max_pixels={max_pixels:,}")
    try:
        if decode:
            decode_region(data, rgb=False, max_pixels=max_pixels)
        elif info.format == "jpeg":
            raw = data if isinstance(data, bytes) else bytes(data)
            _, layout = parse_jpeg(raw, to_scan=True)
            if raw.rfind(b"\xff\xd9", layout.sos_end) < 0:
                return info, "truncated JPEG: the data ends before the end-of-image marker"
    except DecodeError as e:
        return info, str(e)
    return info, None


# --------------------------------------------------------------------------------- scanning
def survey(data: Any, decode: bool = False, num_threads: int | None = None,
           max_pixels: int = 100_000_000, quiet: bool = True) -> Survey:
    """Scan a dataset and return a `Survey` (``.report()`` for text, ``.to_dict()`` for JSON).

    Args:
        data: a folder (class subfolders, or images directly inside), a file list, tar shards
            (a path or pattern), or anything `pixelpipe.readers.open_reader` accepts.
        decode: decode every image in full (slower; catches corrupt data the header scan
            cannot see).
        num_threads: reading and decoding threads (default: all cores).
        max_pixels: images above this are problems, as they would be in a Pipeline.
        quiet: no progress bar (it is drawn only on a terminal anyway).

    Raises:
        ReaderError: the dataset cannot be opened (missing path, no images).

    Example:
        >>> s = survey("/data/train", decode=True)  # doctest: +SKIP
        >>> print(s.report()); s.ok                  # doctest: +SKIP
    """
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
    reader = open_data(data)
    name = data if isinstance(data, str) else os.fspath(data) if isinstance(data, os.PathLike) else repr(reader)
    result = Survey(name, type(reader).__name__, decode)
    threads = num_threads or default_threads()

    def check(source: str, label: Any, payload: Any) -> _Record:
        info, problem = check_sample(payload, decode, max_pixels)
        return _Record(source, label, info, problem)

    if reader.indexable:
        total: int | None = len(reader)
        tasks = _indexable_tasks(reader, check)
    else:
        counts = getattr(reader, "counts", None)
        total = sum(counts) if counts is not None else None
        tasks = _stream_tasks(reader, check)
    labels: list[Any] = []
    with Progress(total, "inspect", quiet=quiet) as bar:
        for rec in _run(tasks, threads):
            result._add(rec)
            if not rec.shard_error:
                if rec.labelled:
                    labels.append(rec.label)
                bar.update(1)
    _count_classes(result, reader, labels)
    result.ignored = list(getattr(reader, "ignored", []))
    result.warnings = list(getattr(reader, "problems", []))
    return result


Task = Callable[[], _Record]


def _indexable_tasks(reader: Any, check: Callable[[str, Any, Any], _Record]) -> Iterator[Task]:
    def task(i: int) -> _Record:
        try:
            s = reader.read(i)
        except Exception as e:  # whatever a reader raises is the sample's problem
            return _Record(reader.sources(i), None, None, f"cannot read: {e}")
        return check(s.source, s.label, s.data)

    for i in range(len(reader)):
        yield lambda i=i: task(i)


def _stream_tasks(reader: Any, check: Callable[[str, Any, Any], _Record]) -> Iterator[Task]:
    """Samples are read here, in order (a stream cannot be split); checks go to the pool. A
    shard that breaks off is one problem, and the scan goes on with the next shard."""
    for shard_id, shard in enumerate(reader.shards):
        it = reader.iter_shard(shard_id)
        while True:
            try:
                s = next(it)
            except StopIteration:
                break
            except Exception as e:  # a shard that breaks off: one problem, on with the next
                rec = _Record(shard, None, None, f"{type(e).__name__}: {e}", shard_error=True)
                yield lambda rec=rec: rec
                break
            if isinstance(s, Unreadable):  # a sample the reader could not make
                rec = _Record(s.source, None, None, s.reason, labelled=False)
                yield lambda rec=rec: rec
                continue
            yield lambda s=s: check(s.source, s.label, s.data)


def _run(tasks: Iterator[Task], threads: int) -> Iterator[_Record]:
    """Run tasks on a pool with a bounded number in flight; results come back in order."""
    if threads == 1:
        for t in tasks:
            yield t()
        return
    window = threads * 8
    with ThreadPoolExecutor(threads, thread_name_prefix="pixelpipe-inspect") as pool:
        pending: deque[Future[_Record]] = deque()
        try:
            for t in tasks:
                pending.append(pool.submit(t))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def _count_classes(result: Survey, reader: Any, seen_labels: list[Any]) -> None:
    """Samples per class: from the reader's label table when it has one (every sample, read
    or not), else from the labels of the samples read."""
    table = reader.labels if reader.indexable else None
    if table is not None and table.dim() == 2:
        result.labels_per_sample = int(table.shape[1])
        return
    if table is not None:
        values = table.tolist()
    else:
        if any(isinstance(lab, tuple) for lab in seen_labels):
            result.labels_per_sample = max(len(lab) for lab in seen_labels if isinstance(lab, tuple))
            return
        values = [lab for lab in seen_labels if lab is not None]
        if values:
            result.unlabelled = len(seen_labels) - len(values)
    seen = Counter(values)
    classes = getattr(reader, "classes", None)
    if classes is not None:
        result.classes = list(classes)
        result.class_counts = {name: seen.get(k, 0) for k, name in enumerate(classes)}
    else:
        result.class_counts = {str(k): n for k, n in sorted(seen.items())}
