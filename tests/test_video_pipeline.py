"""VideoPipeline: the frames of each batch are those its metadata names, every video once per
epoch, shards disjoint, exact resume, bad files under each policy, readers and layouts."""

from __future__ import annotations

import pytest
import torch
from video_corpus import audio_only, encode_video, indices

import pixelpipe as pp
from pixelpipe.decode.video import VideoError
from pixelpipe.readers import VideoFileList, VideoFolder
from pixelpipe.tools.videos import synthetic_videos


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    synthetic_videos(root, 9, classes=3, frames=24, gop=6)
    return root


def plain(size: int | None = None) -> pp.Compose:
    """uint8 frames as decoded (or centre-cropped), so the drawn index stays readable."""
    return pp.Compose([pp.CenterCrop((48, 64))] if size is None else [pp.RandomResizedCrop(size)], dtype=torch.uint8)


def pipe_of(reader, **kw) -> pp.VideoPipeline:
    kw.setdefault("clips", pp.ClipSampler(5, stride=2, clips_per_video=2))
    kw.setdefault("num_threads", 2)
    return pp.VideoPipeline(reader, kw.pop("transforms", plain()), kw.pop("batch_size", 4), **kw)


def test_batches_hold_the_frames_they_name(folder):
    reader = VideoFolder(folder)
    pipe = pipe_of(reader)
    seen = []
    for b in pipe:
        n = len(b["index"])
        assert b["video"].shape == (n, 5, 3, 48, 64) and b["video"].dtype == torch.uint8
        assert b["frames"].shape == (n, 5) and b["timestamps"].dtype == torch.float64
        for row in range(n):
            hwc = b["video"][row].permute(0, 2, 3, 1).numpy()
            assert indices(hwc) == b["frames"][row].tolist()
            assert b["start"][row] == b["frames"][row, 0]
        torch.testing.assert_close(b["timestamps"], b["frames"].double() / 30, atol=1e-4, rtol=0)
        assert torch.equal(b["label"], reader.labels[b["index"]])
        assert b["clip"].tolist() == [0, 1] * (n // 2)
        seen += b["index"][b["valid"]].tolist()
    assert len(pipe) == 3
    assert sorted(set(seen)) == list(range(9)) and len(seen) == 18  # each video once, 2 clips each
    assert pipe.errors == [] and pipe.decode_stats.state()["decoded"]["cpu"] >= 9


def test_epochs_shuffle_and_repeat_with_the_seed(folder):
    order = lambda p: [b["index"].tolist() for b in p]
    a, b = pipe_of(VideoFolder(folder), seed=1), pipe_of(VideoFolder(folder), seed=1)
    first = order(a)
    assert first == order(b)
    assert first != order(a)  # the next epoch: another order and other clip starts


def test_shards_are_disjoint(folder):
    reader = VideoFolder(folder)
    got = []
    for rank in range(2):
        p = pipe_of(reader, shard=(rank, 2), batch_size=2)
        assert len(p) == 3
        got.append({i for b in p for i in b["index"][b["valid"]].tolist()})
    assert not got[0] & got[1] and got[0] | got[1] == set(range(9))


def test_resume_is_exact(folder):
    reader = VideoFolder(folder)
    kw = dict(transforms=plain(24), batch_size=2, seed=3)
    whole = pipe_of(reader, **kw)
    list(whole)
    expected = list(whole)  # epoch 1
    part = pipe_of(reader, **kw)
    list(part)
    it = iter(part)
    next(it), next(it)
    state = part.state_dict()
    again = pipe_of(reader, **kw)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(expected) - 2
    for x, y in zip(rest, expected[2:]):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k
    with pytest.raises(ValueError, match="seed"):
        pipe_of(reader, transforms=plain(24), batch_size=2, seed=4).load_state_dict(state)


@pytest.fixture()
def damaged(tmp_path, folder):
    root = tmp_path / "damaged"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    for k in range(3):
        encode_video(root / "a" / f"ok{k}.mp4", 20, gop=5)
    (root / "b" / "empty.mp4").write_bytes(b"")
    (root / "b" / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x17" * 500)
    audio_only(root / "b" / "sound.mp4")
    encode_video(root / "b" / "short.mp4", 4, gop=2)
    return root


def test_skip_lists_every_bad_file(damaged):
    pipe = pipe_of(VideoFolder(damaged), on_error="skip", batch_size=2,
                   clips=pp.ClipSampler(5, stride=2, pad_last=False))
    valid = [i for b in pipe for i in b["index"][b["valid"]].tolist()]
    reasons = {src.rsplit("/", 1)[-1]: why for _, src, why in pipe.errors}
    assert sorted(reasons) == ["corrupt.mp4", "empty.mp4", "short.mp4", "sound.mp4"]
    assert "empty" in reasons["empty.mp4"] and "no video stream" in reasons["sound.mp4"]
    assert "4 frames, a clip spans 9 frames" in reasons["short.mp4"]
    assert sorted(set(valid)) == [0, 1, 2] and len(pipe.epoch_errors) == 4
    assert all(len(b["index"]) == 2 for b in pipe)  # batches stay full


def test_raise_names_the_file(damaged):
    pipe = pipe_of(VideoFolder(damaged), on_error="raise", shuffle=False, batch_size=2)
    with pytest.raises(VideoError, match=r"video 3 \(.*corrupt.mp4\)"):
        list(pipe)


def test_file_list_reader_and_layout(tmp_path, folder):
    paths = sorted(p.relative_to(folder) for p in folder.rglob("*.mp4"))[:4]
    (folder / "list.txt").write_text("".join(f"{p} {k * 10}\n" for k, p in enumerate(paths)))
    reader = VideoFileList(folder / "list.txt")
    pipe = pipe_of(reader, transforms=[pp.RandomResizedCrop(16)], layout="NCTHW", batch_size=4, shuffle=False,
                   clips=pp.ClipSampler(3, clips_per_video=1, start="uniform"))
    b = next(iter(pipe))
    assert b["video"].shape == (4, 3, 3, 16, 16) and b["video"].dtype == torch.float32
    assert b["label"].tolist() == [0, 10, 20, 30]


def test_memory_reader_of_bytes(folder):
    files = sorted(folder.rglob("*.mp4"))[:3]
    reader = pp.readers.Memory([(f.read_bytes(), 1) for f in files])
    b = next(iter(pipe_of(reader, batch_size=3, shuffle=False)))
    assert b["index"].tolist() == [0, 0, 1, 1, 2, 2] and (b["label"] == 1).all()


def test_arguments(folder):
    reader = VideoFolder(folder)
    with pytest.raises(ValueError, match="on_error"):
        pipe_of(reader, on_error="replace")
    with pytest.raises(ValueError, match="'NCHW'"):
        pipe_of(reader, transforms=pp.Compose([pp.Resize(8)], layout="NHWC"))
    with pytest.raises(ValueError, match="gpu_decode=True needs device='cuda'"):
        pipe_of(reader, gpu_decode=True)
    with pytest.raises(TypeError, match="indexable"):
        pipe_of(pp.readers.Iterable(iter([])))
    assert "VideoPipeline" in repr(pipe_of(reader))
