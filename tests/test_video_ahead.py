"""VideoPipeline across epochs: the next epoch's first videos decode while this epoch ends, and
each file is probed once while it is unchanged (decode.video_index); neither changes a batch."""

from __future__ import annotations

import os
import time
from collections import Counter

import numpy as np
import pytest
import torch
from video_corpus import audio_only, encode_video, indices

import pixelpipe as pp
import pixelpipe.decode.video_index as video_index
from pixelpipe.decode.video import VideoInfo, probe
from pixelpipe.decode.video_index import VideoIndex
from pixelpipe.loader.video import VideoPipeline
from pixelpipe.readers import VideoFolder
from pixelpipe.tools.videos import synthetic_videos


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("ahead")
    synthetic_videos(root, 9, classes=3, frames=24, gop=6)
    return root


def pipe_of(reader, **kw) -> VideoPipeline:
    kw.setdefault("clips", pp.ClipSampler(5, stride=2))
    kw.setdefault("num_threads", 2)
    t = pp.Compose([pp.RandomResizedCrop(24), pp.RandomFlip()], dtype=torch.uint8)
    return VideoPipeline(reader, t, kw.pop("batch_size", 4), seed=5, **kw)


def same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


def epochs_cold(reader, n: int, **kw) -> list[list[dict]]:
    """n epochs, each from a pipeline that has decoded nothing ahead (resumed at the epoch's
    start from a state saved before it, so nothing is carried over)."""
    out, state = [], None
    for _ in range(n):
        p = pipe_of(reader, **kw)
        if state is not None:
            p.load_state_dict(state)
        out.append(list(p))
        state = p.state_dict()
        p.close()
    return out


def test_the_next_epoch_is_submitted_before_it_starts(folder, monkeypatch):
    loads: list[tuple[int, int]] = []
    real = VideoPipeline._load

    def counted(self, i, epoch):
        loads.append((i, epoch))
        return real(self, i, epoch)

    monkeypatch.setattr(VideoPipeline, "_load", counted)
    p = pipe_of(VideoFolder(folder))
    first = list(p)  # epoch 0 to its end: the generator finished
    assert len(first) == 3
    deadline = time.monotonic() + 10  # submitted during epoch 0; a decoding thread starts them
    while not Counter(e for _, e in loads)[1] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Counter(e for _, e in loads)[1] > 0  # epoch 1's first videos, before iter() asked for them
    list(p)  # epoch 1 takes them: no video of it is loaded twice
    assert sum(1 for _, e in loads if e == 1) == len(p._order(1))  # each slot of epoch 1 loaded once
    p.close()


def test_batches_are_those_of_epochs_started_cold(folder):
    reader = VideoFolder(folder)
    p = pipe_of(reader)
    warm = [list(p) for _ in range(3)]
    p.close()
    for a, b in zip(warm, epochs_cold(reader, 3)):
        same(a, b)


def test_an_epoch_left_early_carries_nothing_over(folder):
    reader = VideoFolder(folder)
    p = pipe_of(reader, batch_size=2)
    it = iter(p)
    next(it)  # leave epoch 0 after one batch
    second = list(p)  # epoch 1, from its beginning
    p.close()
    same(second, epochs_cold(reader, 2, batch_size=2)[1])


def test_state_loaded_after_an_epoch_drops_what_was_ahead(folder):
    reader = VideoFolder(folder)
    p = pipe_of(reader)
    list(p)
    state = p.state_dict()
    list(p)  # epoch 1
    p.load_state_dict(state)  # back to the end of epoch 0: epoch 1 again
    again = list(p)
    p.close()
    same(again, epochs_cold(reader, 2)[1])


def test_failures_of_videos_decoded_ahead_count_in_their_epoch(tmp_path):
    root = tmp_path / "mixed"
    (root / "a").mkdir(parents=True)
    for k in range(5):
        encode_video(root / "a" / f"ok{k}.mp4", 20, gop=5)
    (root / "a" / "empty.mp4").write_bytes(b"")
    audio_only(root / "a" / "sound.mp4")
    p = pipe_of(VideoFolder(root), batch_size=2, on_error="skip")
    for _ in range(3):
        valid = [i for b in p for i in b["index"][b["valid"]].tolist()]
        assert sorted(valid) == [1, 2, 3, 4, 5]  # empty.mp4 sorts first
        assert sorted(src.rsplit("/", 1)[-1] for _, src, _ in p.epoch_errors) == ["empty.mp4", "sound.mp4"]
    assert len(p.errors) == 2
    p.close()


# ----------------------------------------------------------------------------- the probe index
def test_each_file_is_probed_once_while_unchanged(folder, monkeypatch):
    calls: Counter[str] = Counter()

    def counted(source):
        calls[os.fspath(source)] += 1
        return probe(source)

    monkeypatch.setattr(video_index, "probe", counted)
    reader = VideoFolder(folder)
    p = pipe_of(reader)
    for _ in range(3):
        list(p)
    p.close()
    assert len(calls) == 9 and set(calls.values()) == {1}


def test_index_gives_what_probe_gives(folder):
    index = VideoIndex()
    path = os.path.join(folder, "class_0", sorted(os.listdir(os.path.join(folder, "class_0")))[0])
    want = probe(path)
    for _ in range(2):  # probed, then from the index
        got = index.probe(path)
        for field in VideoInfo.__dataclass_fields__:
            a, b = getattr(got, field), getattr(want, field)
            assert (np.array_equal(a, b) and a.dtype == b.dtype) if isinstance(a, np.ndarray) else a == b, field
    assert index.probed == 1 and len(index) == 1


def test_a_rewritten_file_is_probed_again(tmp_path):
    path = encode_video(tmp_path / "v.mp4", 12, gop=4)
    index = VideoIndex()
    assert index.probe(path).frames == 12
    os.remove(path)
    encode_video(tmp_path / "v.mp4", 20, gop=4)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a new time even on a coarse clock
    assert index.probe(path).frames == 20 and index.probed == 2


def test_uneven_timestamps_are_kept_whole_within_max_bytes(monkeypatch):
    pts = np.array([0, 1000, 2100, 3000, 4000], dtype=np.int64)
    info = VideoInfo(5, 30.0, 0.2, 64, 48, "h264", pts, (pts - pts[0]) * 1e-5, np.array([0, 3]), 1e-5)
    monkeypatch.setattr(video_index, "probe", lambda source: info)
    monkeypatch.setattr(video_index, "_stamp", lambda path: (1, 2))
    kept = VideoIndex(max_bytes=1 << 20)
    assert kept.probe("/x/a.mp4") is info and kept.probe("/x/a.mp4") is info and kept.probed == 1
    none = VideoIndex(max_bytes=0)  # no room for arrays: probed every time
    none.probe("/x/a.mp4"), none.probe("/x/a.mp4")
    assert none.probed == 2 and len(none) == 0


def test_bytes_are_probed_every_time(folder, monkeypatch):
    path = os.path.join(folder, "class_1", sorted(os.listdir(os.path.join(folder, "class_1")))[0])
    data = open(path, "rb").read()
    calls = []
    monkeypatch.setattr(video_index, "probe", lambda source: calls.append(1) or probe(source))
    index = VideoIndex()
    assert index.probe(data).frames == probe(path).frames
    index.probe(data)
    assert len(calls) == 2 and len(index) == 0


def test_frames_stay_the_ones_asked_for(folder):
    p = pipe_of(VideoFolder(folder), batch_size=3)
    p.transforms = pp.Compose([pp.CenterCrop((48, 64))], dtype=torch.uint8)
    for _ in range(2):
        for b in p:
            for row in range(len(b["index"])):
                assert indices(b["video"][row].permute(0, 2, 3, 1).numpy()) == b["frames"][row].tolist()
    p.close()
