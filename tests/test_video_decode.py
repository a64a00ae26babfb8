"""The CPU video decoder: probing, exact frames for any clip (seeks into the middle of a GOP,
GOPs shorter and longer than the clip, B-frames, several codecs), bad inputs named."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from video_corpus import FFV1_TOLERANCE, audio_only, encode_video, indices, truncated

from pixelpipe.decode.video import VideoError, decode_clips, decode_sampled, probe
from pixelpipe.decode.video import _passes as passes
from pixelpipe.tools.videos import index_frame


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("videos")
    out = {}
    for gop, bframes in ((4, 0), (30, 0), (10, 2)):
        out[gop, bframes] = encode_video(root / f"g{gop}b{bframes}.mp4", 45, gop=gop, bframes=bframes)
    return out


def test_probe(videos):
    info = probe(videos[10, 2])
    assert (info.frames, info.width, info.height, info.codec) == (45, 64, 48, "h264")
    assert info.fps == pytest.approx(30.0)
    assert info.duration == pytest.approx(45 / 30, rel=1e-3)
    assert info.keyframes.tolist() == [0, 10, 20, 30, 40]
    assert np.allclose(np.diff(info.times), 1 / 30, atol=1e-4)
    assert info.keyframe_before(19) == 10 and info.keyframe_before(20) == 20


CLIPS = [list(range(13, 29, 2)), [0, 1, 2], [44, 44, 43], list(range(5, 40, 5)), [31, 7, 22], [3]]


@pytest.mark.parametrize("key", [(4, 0), (30, 0), (10, 2)], ids=["gop4", "gop30", "gop10-bframes"])
def test_frames_are_the_ones_asked_for(videos, key):
    # clips start mid-GOP, span GOPs shorter (4) and longer (30) than themselves, repeat frames
    out = decode_clips(videos[key], CLIPS)
    for clip, got in zip(CLIPS, out):
        assert got.dtype == np.uint8 and got.shape == (len(clip), 48, 64, 3)
        assert indices(got) == clip


def test_each_clip_alone_equals_all_together(videos):
    path = videos[10, 2]
    together = decode_clips(path, CLIPS)
    for clip, got in zip(CLIPS, together):
        np.testing.assert_array_equal(decode_clips(path, [clip])[0], got)


def test_bytes_and_path_agree(videos):
    path = videos[4, 0]
    with open(path, "rb") as f:
        data = f.read()
    a, b = decode_clips(path, CLIPS[:2]), decode_clips(data, CLIPS[:2])
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("codec", ["hevc", "vp9", "av1", "mpeg4", "ffv1"])
def test_codecs(tmp_path, codec):
    ext = {"vp9": "webm", "mpeg4": "avi", "ffv1": "mkv"}.get(codec, "mp4")
    path = encode_video(tmp_path / f"v.{ext}", 30, codec=codec, gop=8)
    info = probe(path)
    assert info.frames == 30 and info.codec == codec
    clip = [21, 9, 10, 11, 29]
    got = decode_clips(path, [clip], info)[0]
    assert indices(got) == clip
    if codec == "ffv1":  # lossless up to the colour conversion's rounding
        drawn = np.stack([index_frame(k) for k in clip]).astype(int)
        assert np.abs(got.astype(int) - drawn).max() <= FFV1_TOLERANCE


def test_overlapping_clips_share_a_pass(videos):
    info = probe(videos[10, 2])
    clips = [np.arange(0, 8), np.arange(4, 12), np.arange(30, 34), np.arange(11, 13), np.arange(41, 44)]
    # 0-7 and 4-11 overlap, 11-12 continues them; 30-33 sits in another GOP; 41-43 in the last
    assert sorted(map(sorted, passes(clips, info))) == [[0, 1, 3], [2], [4]]
    info4 = probe(videos[30, 0])  # one GOP for frames 0-29: seeking would land on frame 0 again
    assert len(passes([np.arange(0, 3), np.arange(20, 23)], info4)) == 1


def test_decode_sampled_picks_from_the_probe(videos):
    info, clips = decode_sampled(videos[4, 0], lambda info: [[info.frames - 1, 0]])
    assert info.frames == 45 and indices(clips[0]) == [44, 0]


def test_bad_inputs_are_named(tmp_path, videos):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(VideoError, match="empty"):
        probe(empty)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video" * 100)
    with pytest.raises(VideoError, match="garbage.mp4: not a readable video"):
        probe(garbage)
    with pytest.raises(VideoError, match="no video stream"):
        probe(audio_only(tmp_path / "audio.m4a"))
    with pytest.raises(FileNotFoundError):
        probe(tmp_path / "missing.mp4")
    with pytest.raises(VideoError, match="frame 45, outside the video's 45 frames"):
        decode_clips(videos[4, 0], [[0, 45]])
    with pytest.raises(VideoError, match="data is empty"):
        probe(b"")


def test_truncated_file_gives_its_first_frames_or_an_error(tmp_path):
    src = encode_video(tmp_path / "full.mkv", 40, codec="ffv1", gop=5)
    cut = truncated(src, tmp_path / "cut.mkv", 0.5)
    try:
        info = probe(cut)
    except VideoError:
        return  # refusing the file is fine; what is not fine is returning wrong frames
    assert 0 < info.frames < 40
    last = info.frames - 1
    got = decode_clips(cut, [[0, last]], info)[0]
    assert indices(got) == [0, last]


def test_missing_av_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(ImportError, match=r"pixelpipe\[video\]"):
        probe(b"1234")
