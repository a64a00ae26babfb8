"""NVDEC decoding (PyNvVideoCodec) against the CPU decoder, and the per-file fallback.

The fallback tests run everywhere; those marked gpu need CUDA and PyNvVideoCodec and skip
cleanly without them. NVDEC and FFmpeg convert YUV to RGB with their own rounding (and
possibly another matrix for untagged files), so frames are compared by the index they carry,
exactly, and by pixels within a mean of 4 levels.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from video_corpus import encode_video, indices

import pixelpipe as pp
from pixelpipe.decode.video import decode_clips
from pixelpipe.decode.video_gpu import NvdecVideoDecoder, VideoDecodeStats, nvdec_missing
from pixelpipe.readers import VideoFolder
from pixelpipe.tools.videos import synthetic_videos

HAVE_NVDEC = torch.cuda.is_available() and importlib.util.find_spec("PyNvVideoCodec") is not None
needs_nvdec = pytest.mark.skipif(not HAVE_NVDEC, reason="needs CUDA and PyNvVideoCodec (pip install PyNvVideoCodec)")
MEAN_TOLERANCE = 4.0  # mean |NVDEC - FFmpeg| in 8-bit levels: two YUV -> RGB conversions


def test_fallback_is_counted_with_its_reason(tmp_path):
    path = encode_video(tmp_path / "v.mp4", 20, gop=5)
    stats = VideoDecodeStats()
    dec = NvdecVideoDecoder("cpu", stats)
    assert dec.missing == nvdec_missing(torch.device("cpu")) == "the device is not CUDA"
    info, clips = dec.decode(path, lambda info: [[3, 4, 19]])
    assert info.frames == 20 and indices(clips[0].numpy()) == [3, 4, 19]
    assert stats.state() == {"decoded": {"cpu": 1}, "fallbacks": {"the device is not CUDA": 1}}


@pytest.fixture(scope="module")
def gpu_videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    return [encode_video(root / f"{c}.{e}", 40, codec=c, gop=g, bframes=b, height=144, width=160)  # NVDEC minimums: 144x144 HEVC
            for c, e, g, b in (("h264", "mp4", 8, 2), ("h264", "mp4", 40, 0), ("hevc", "mp4", 8, 0),
                               ("vp9", "webm", 8, 0), ("av1", "mp4", 8, 0))]


@pytest.mark.gpu
@needs_nvdec
def test_nvdec_frames_match_the_cpu(gpu_videos):
    stats = VideoDecodeStats()
    dec = NvdecVideoDecoder("cuda", stats)
    clips = [list(range(5, 21, 2)), [39, 39, 38], [0, 17, 33]]
    for path in gpu_videos:
        info, got = dec.decode(path, lambda info: clips)
        cpu = decode_clips(path, clips, info)
        for want, g, c in zip(clips, got, cpu):
            assert g.shape == c.shape and g.dtype == torch.uint8
            gpu = g.cpu().numpy()
            assert indices(gpu) == want, path
            assert np.abs(gpu.astype(np.float64) - c).mean() < MEAN_TOLERANCE, path
    print(stats)
    assert stats.decoded["nvdec"] + stats.decoded["cpu"] == len(gpu_videos)
    assert stats.decoded["nvdec"] >= 2, stats  # h264 at least decodes on every NVDEC


@pytest.mark.gpu
@needs_nvdec
def test_bytes_fall_back_to_the_cpu(gpu_videos):
    stats = VideoDecodeStats()
    with open(gpu_videos[0], "rb") as f:
        _, clips = NvdecVideoDecoder("cuda", stats).decode(f.read(), lambda info: [[1, 2]])
    assert indices(clips[0].numpy()) == [1, 2] and "bytes" in next(iter(stats.fallbacks))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pipeline_on_cuda_matches_the_cpu(tmp_path):
    synthetic_videos(tmp_path, 6, frames=24, height=64, width=96)
    t = pp.Compose([pp.RandomResizedCrop(32), pp.RandomFlip()])
    make = lambda device, **kw: pp.VideoPipeline(VideoFolder(tmp_path), t, 3, pp.ClipSampler(8, clips_per_video=2),
                                                 device=device, seed=2, num_threads=2, **kw)
    cuda, cpu = make("cuda"), make("cpu")
    for a, b in zip(cuda, cpu):
        assert a["video"].is_cuda and a["video"].shape == (6, 8, 3, 32, 32)
        assert torch.equal(a["frames"].cpu(), b["frames"])
        # the same crops and flips; pixels differ by the decoders' YUV rounding and float order
        assert (a["video"].cpu() - b["video"]).abs().mean() < MEAN_TOLERANCE / 255
    print(cuda.decode_stats)
    assert sum(cuda.decode_stats.decoded.values()) >= 6
