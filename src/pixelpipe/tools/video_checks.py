"""check_video: is one video readable, and if not, why, in one word a user can act on.

A video is probed (pixelpipe.decode.video.probe: every packet demuxed, none decoded) and,
with decode=True, decoded frame by frame. A problem is one of:

- "missing": the path in a file list names no file;
- "zero-length": the file or member holds no bytes;
- "audio-only": audio streams and no video stream;
- "unsupported codec": a video stream FFmpeg has no decoder for;
- "truncated": the file ends before what its container declares (an MP4 box, a RIFF chunk
  or a Matroska segment running past the end), before the frames its header counts, or the
  shard ends inside the member;
- "corrupt": anything else FFmpeg refuses (not a video, no frames, decoding that fails).

Truncation is told from the container's own sizes because FFmpeg says only "invalid data"
for an MP4 cut before its index, and reads the first frames of a cut Matroska file quietly.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any, BinaryIO

from ..decode.video import VideoError, VideoInfo, import_av, probe

__all__ = ["KINDS", "check_video", "declared_truncation", "describe"]

KINDS = ("missing", "zero-length", "audio-only", "unsupported codec", "truncated", "corrupt")
_MATROSKA = b"\x1a\x45\xdf\xa3"  # the EBML header's element id
_SEGMENT = b"\x18\x53\x80\x67"


def check_video(source: str | bytes, decode: bool = False) -> tuple[VideoInfo | None, str | None]:
    """(probe, problem) for one video, a path or its bytes: problem None when it is readable,
    else "<kind>: <detail>" with kind one of KINDS. decode=True also decodes every frame."""
    try:
        size = os.path.getsize(source) if isinstance(source, str) else len(source)
    except FileNotFoundError:
        return None, "missing: no such file"
    if size == 0:
        return None, "zero-length: the file is empty (0 bytes)"
    cut = declared_truncation(source)
    try:
        info = probe(source)
    except VideoError as e:
        return None, _kind(str(e), cut)
    if cut is not None:
        return info, f"truncated: {cut}"
    short = _fewer_than_header(source, info)
    if short is not None:
        return info, f"truncated: {short}"
    if decode:
        problem = _decode_all(source, info)
        if problem is not None:
            return info, problem
    return info, None


def _kind(message: str, cut: str | None) -> str:
    detail = message.split(": ", 1)[1] if ": " in message else message
    if cut is not None:
        return f"truncated: {cut}"
    if detail.startswith("unsupported codec"):
        return detail
    if detail.startswith("no video stream") and "audio" in detail:
        return f"audio-only: {detail}"
    return f"corrupt: {detail}"


def declared_truncation(source: str | bytes) -> str | None:
    """What the container declares past the end of the data, or None: the top-level boxes of
    an MP4/MOV (ISO base media), the chunks of a RIFF (AVI) file, the segment of a Matroska
    (MKV/WebM) file. Other containers: None."""
    with (open(source, "rb") if isinstance(source, str) else io.BytesIO(source)) as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(0)
        head = f.read(12)
        if head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"):
            return _boxes(f, size)
        if head[:4] == b"RIFF":
            return _riff(f, size)
        if head[:4] == _MATROSKA:
            return _matroska(f, size)
    return None


def _past(what: str, end: int, size: int) -> str:
    return f"the {what} ends at byte {end:,}, past the end of the data ({size:,} bytes)"


def _boxes(f: BinaryIO, size: int) -> str | None:
    at = 0
    while at + 8 <= size:
        f.seek(at)
        length, kind = struct.unpack(">I4s", f.read(8))
        if length == 1:  # a 64-bit size follows
            raw = f.read(8)
            if len(raw) < 8:
                return _past(f"{_name(kind)} box header", at + 16, size)
            length = struct.unpack(">Q", raw)[0]
        elif length == 0:  # the box runs to the end of the file
            return None
        if length < 8:
            return None  # not boxes after all: leave it to FFmpeg
        if at + length > size:
            return _past(f"{_name(kind)} box", at + length, size)
        at += length
    return None if at == size else _past("box header", at + 8, size)


def _riff(f: BinaryIO, size: int) -> str | None:
    at = 0
    while at + 8 <= size:
        f.seek(at)
        kind, length = struct.unpack("<4sI", f.read(8))
        end = at + 8 + length + (length & 1)
        if end > size:
            return _past(f"{_name(kind)} chunk", end, size)
        at = end
    return None


def _matroska(f: BinaryIO, size: int) -> str | None:
    f.seek(4)
    header = _vint(f)
    if header is None:
        return None
    f.seek(4 + header[1] + header[0])
    if f.read(4) != _SEGMENT:
        return None
    segment = _vint(f)
    if segment is None or segment[2]:  # a segment of unknown size: written as a stream
        return None
    end = f.tell() + segment[0]
    return _past("Matroska segment", end, size) if end > size else None


def _vint(f: BinaryIO) -> tuple[int, int, bool] | None:
    """An EBML size: (value, its length in bytes, whether it is the 'unknown size' value)."""
    first = f.read(1)
    if not first or first[0] == 0:
        return None
    n = 8 - first[0].bit_length() + 1
    rest = f.read(n - 1)
    if len(rest) < n - 1:
        return None
    value = first[0] & (0xFF >> n)
    for b in rest:
        value = value << 8 | b
    return value, n, value == (1 << 7 * n) - 1


def _name(kind: bytes) -> str:
    return repr(kind.decode("latin-1"))


def _fewer_than_header(source: str | bytes, info: VideoInfo) -> str | None:
    """The header's frame count against the packets found (containers that store one)."""
    av = import_av()
    with av.open(source if isinstance(source, str) else io.BytesIO(source)) as container:
        declared = int(container.streams.video[0].frames or 0)
    if declared > info.frames:
        return f"the header counts {declared} frames, the data holds {info.frames}"
    return None


def _decode_all(source: str | bytes, info: VideoInfo) -> str | None:
    av = import_av()
    got = 0
    try:
        with av.open(source if isinstance(source, str) else io.BytesIO(source)) as container:
            for _ in container.decode(video=0):
                got += 1
    except (av.FFmpegError, OSError, ValueError) as e:
        return f"corrupt: decoding failed after {got} of {info.frames} frames ({type(e).__name__}: {e})"
    if got < info.frames:
        return f"corrupt: {got} of {info.frames} frames decode"
    return None


def describe(info: VideoInfo) -> dict[str, Any]:
    """One video's findings as JSON-ready values."""
    return {"codec": info.codec, "width": info.width, "height": info.height, "fps": round(info.fps, 3),
            "frames": info.frames, "duration": round(info.duration, 3)}
