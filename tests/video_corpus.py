"""Small videos made at test time for the video tests (nothing stored in the repository).

Frames carry their index (pixelpipe.tools.videos.index_frame), so a test reads back which
frame a decoder returned. Lossy codecs (h264, hevc, vp9, av1, mpeg4) keep the index blocks
exact; ffv1 in yuv444p is lossless up to the RGB <-> YUV rounding (at most 2 levels off).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from pixelpipe.tools.videos import encode_video, frame_index  # noqa: E402

FFV1_TOLERANCE = 2  # |decoded - drawn| for ffv1 yuv444p: RGB -> YUV -> RGB rounding


def indices(clip: np.ndarray) -> list[int]:
    """The drawn index of every frame of a decoded clip [T, H, W, 3]."""
    return [frame_index(f) for f in np.asarray(clip)]


def audio_only(path: Path) -> str:
    """An .m4a file with one AAC audio stream and no video."""
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), dtype=np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for _ in range(4):
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return str(path)


def truncated(src: str, dst: Path, keep: float = 0.5) -> str:
    """A copy of src cut to `keep` of its bytes."""
    data = Path(src).read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return os.fspath(dst)


def unknown_codec(dst: Path) -> str:
    """A Matroska file whose video track names a codec no decoder knows (V_QQQQ for V_FFV1)."""
    src = encode_video(dst.with_name(dst.stem + "-ffv1.mkv"), 4, codec="ffv1")
    data = Path(src).read_bytes()
    at = data.index(b"V_FFV1")
    dst.write_bytes(data[:at] + b"V_QQQQ" + data[at + 6:])
    os.remove(src)
    return os.fspath(dst)


__all__ = ["FFV1_TOLERANCE", "audio_only", "encode_video", "indices", "truncated", "unknown_codec"]
