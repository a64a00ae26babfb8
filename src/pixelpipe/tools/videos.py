"""Synthetic videos for tests, examples and benchmarks, encoded with PyAV, with no download.

Every frame carries its own index, drawn as two rows of black and white blocks (bit b of the
index is block b % 8 of row b // 8, white for 1), and a moving pattern (diagonal stripes shifted by one pixel per
frame). The blocks survive lossy coding and chroma subsampling, so `frame_index` recovers which
frame a decoder returned from the pixels alone; a decoder or sampler that returns another frame
than the one asked for is caught by comparing indices, not pixels.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

from ..decode.video import import_av

__all__ = ["BLOCK", "BITS", "encode_video", "frame_index", "index_frame", "synthetic_videos"]

BLOCK = 8  # side of one bit's block, in pixels
BITS = 12  # bits of the frame index drawn into the frame (indices below 4096)
_ROW = 8  # blocks per row: a 64-pixel wide frame holds the index
_LOW, _HIGH = 16, 235  # the blocks' grey levels (video range, away from clipping)

# encoder settings per codec name: (FFmpeg encoder, container, pixel format, options)
CODECS: dict[str, tuple[str, str, str, dict[str, str]]] = {
    "h264": ("libx264", "mp4", "yuv420p", {"crf": "12", "preset": "ultrafast"}),
    "hevc": ("libx265", "mp4", "yuv420p", {"crf": "12", "preset": "ultrafast", "x265-params": "log-level=none"}),
    "vp9": ("libvpx-vp9", "webm", "yuv420p", {"crf": "10", "b": "0", "deadline": "realtime", "cpu-used": "8"}),
    "av1": ("libsvtav1", "mp4", "yuv420p", {"crf": "20", "preset": "12"}),
    "mpeg4": ("mpeg4", "avi", "yuv420p", {"qscale": "2"}),
    "ffv1": ("ffv1", "mkv", "yuv444p", {}),
}


def index_frame(k: int, height: int = 48, width: int = 64, shift: int = 0) -> np.ndarray:
    """Frame k of a synthetic video: uint8 [height, width, 3]. The top 2 * BLOCK rows hold the
    index's bits as blocks; below them, colour stripes moved k + shift pixels to the right."""
    if width < _ROW * BLOCK or height < 3 * BLOCK:
        raise ValueError(f"a frame needs at least {_ROW * BLOCK}x{3 * BLOCK} pixels to hold its index, "
                         f"got {width}x{height}")
    if not 0 <= k < 1 << BITS:
        raise ValueError(f"frame index {k} outside [0, {1 << BITS})")
    y, x = np.mgrid[0:height, 0:width]
    phase = (x + y - (k + shift)) % 32
    frame = np.stack([(phase * 8).astype(np.uint8), (255 - phase * 6).astype(np.uint8),
                      np.full_like(phase, 96, dtype=np.uint8)], axis=-1)
    frame[:2 * BLOCK] = _LOW
    for b in range(BITS):
        if (k >> b) & 1:
            y0, x0 = (b // _ROW) * BLOCK, (b % _ROW) * BLOCK
            frame[y0:y0 + BLOCK, x0:x0 + BLOCK] = _HIGH
    return frame


def frame_index(frame: np.ndarray) -> int:
    """The index drawn into a decoded frame (HWC, RGB): each block's mean against mid-grey."""
    f = np.asarray(frame)
    mid = (_LOW + _HIGH) / 2
    bits = [f[(b // _ROW) * BLOCK + 1:(b // _ROW + 1) * BLOCK - 1,
              (b % _ROW) * BLOCK + 1:(b % _ROW + 1) * BLOCK - 1].mean() > mid for b in range(BITS)]
    return int(sum(1 << b for b, on in enumerate(bits) if on))


def encode_video(path: str | os.PathLike[str], frames: int, fps: float = 30.0, codec: str = "h264",
                 gop: int = 12, height: int = 48, width: int = 64, bframes: int = 0, shift: int = 0) -> str:
    """Write a synthetic video of `frames` frames (see index_frame) and return its path.

    Args:
        codec: a key of CODECS: "h264", "hevc", "vp9", "av1", "mpeg4" or "ffv1" (lossless).
        gop: frames between key frames.
        bframes: B-frames between references (h264/hevc), so that decode order differs from
            display order.
        shift: offset of the moving pattern (videos that differ by more than their index).
    """
    av = import_av()
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
    encoder, _, pix_fmt, options = CODECS[codec]
    path = os.fspath(path)
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(path, mode="w") as out:
        stream = out.add_stream(encoder, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        opts = dict(options)
        if codec in ("h264", "hevc"):
            opts["bf"] = str(bframes)
            opts["g"] = str(gop)
            opts["keyint_min"] = str(gop)
            opts["sc_threshold"] = "0"
            if codec == "hevc":
                opts["x265-params"] += f":keyint={gop}:min-keyint={gop}:bframes={bframes}:scenecut=0"
        else:
            stream.codec_context.gop_size = gop
        stream.options = opts
        for k in range(frames):
            frame = av.VideoFrame.from_ndarray(index_frame(k, height, width, shift), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def synthetic_videos(folder: str | os.PathLike[str], n: int, classes: int = 2, frames: int = 40,
                     codec: str = "h264", gop: int = 12, height: int = 48, width: int = 64,
                     fps: float = 30.0, seed: int = 0) -> list[str]:
    """n small videos in class folders `folder/class_<c>/video_<i>.<ext>` (video i in class
    i % classes), for a `VideoFolder`; video i has frames + (i * 7 + seed) % 11 frames and its
    stripes shifted by i * 5, so the videos differ. Returns the paths, in index order."""
    ext = CODECS[codec][1]
    paths = []
    for i in range(n):
        sub = os.path.join(os.fspath(folder), f"class_{i % classes}")
        os.makedirs(sub, exist_ok=True)
        length = frames + (i * 7 + seed) % 11
        paths.append(encode_video(os.path.join(sub, f"video_{i:04d}.{ext}"), length, fps, codec, gop,
                                  height, width, shift=i * 5))
    return paths
