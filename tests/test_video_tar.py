"""VideoTar: videos from uncompressed tar shards, labelled by their .cls members, through a
VideoPipeline exactly as the same files from a folder."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
import torch
from video_corpus import indices

import pixelpipe as pp
from pixelpipe.readers import ReaderError, VideoFolder, VideoTar
from pixelpipe.tools.videos import synthetic_videos


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("tarvideos")
    synthetic_videos(root / "folder", 6, classes=2, frames=20, gop=5)
    folder = VideoFolder(root / "folder")
    members = []
    for i in range(len(folder)):
        key = f"{i:04d}"
        members += [(f"{key}.mp4", folder.read(i).data), (f"{key}.cls", str(int(folder.labels[i])).encode())]
    shards = [write_tar(root / "a.tar", members[:6]), write_tar(root / "b.tar", members[6:])]
    return folder, shards


def test_the_shards_read_like_the_folder(corpus):
    folder, shards = corpus
    reader = VideoTar(shards)
    assert len(reader) == len(folder) == 6 and reader.indexable
    assert torch.equal(reader.labels, folder.labels)
    assert reader.read(4).data == folder.read(4).data and reader.sources(4).endswith("b.tar:0004.mp4")
    clips = pp.ClipSampler(4, stride=2, clips_per_video=2)
    t = pp.Compose([pp.CenterCrop((48, 64))], dtype=torch.uint8)
    a = list(pp.VideoPipeline(reader, t, 3, clips=clips, num_threads=2, seed=2))
    b = list(pp.VideoPipeline(folder, t, 3, clips=clips, num_threads=2, seed=2))
    assert len(a) == len(b) == 2
    for x, y in zip(a, b):
        assert torch.equal(x["video"], y["video"]) and torch.equal(x["label"], y["label"])
        assert indices(x["video"][0].permute(0, 2, 3, 1).numpy()) == x["frames"][0].tolist()


def test_unlabeled_shards_and_brace_ranges(tmp_path, corpus):
    folder, _ = corpus
    for k in range(2):
        write_tar(tmp_path / f"s-{k:02d}.tar", [(f"{k}/{j}.mkv", folder.read(j).data) for j in range(2)])
    reader = VideoTar(str(tmp_path / "s-{00..01}.tar"), extensions=["mkv"])
    assert len(reader) == 4 and reader.labels is None and reader.read(0).label is None


def test_bad_shards_fail_at_construction(tmp_path, corpus):
    folder, _ = corpus
    video = folder.read(0).data
    with pytest.raises(ReaderError, match="no video members"):
        VideoTar(write_tar(tmp_path / "empty.tar", [("0.cls", b"1")]))
    with pytest.raises(ReaderError, match="1 of 2 videos have no label"):
        VideoTar(write_tar(tmp_path / "half.tar", [("0.mp4", video), ("0.cls", b"1"), ("1.mp4", video)]))
    with pytest.raises(ReaderError, match="two video members"):
        VideoTar(write_tar(tmp_path / "two.tar", [("0.mp4", video), ("0.webm", video)]))
    with pytest.raises(ReaderError, match="not an integer"):
        VideoTar(write_tar(tmp_path / "cls.tar", [("0.mp4", video), ("0.cls", b"cat")]))
    gz = tmp_path / "c.tar.gz"
    gz.write_bytes(gzip.compress((Path(write_tar(tmp_path / "c.tar", [("0.mp4", video)]))).read_bytes()))
    with pytest.raises(ReaderError, match="compressed tar has no random access"):
        VideoTar(str(gz))
    with pytest.raises(ReaderError, match="no tar shard"):
        VideoTar(str(tmp_path / "missing.tar"))
    with pytest.raises(ReaderError, match="max_bytes"):
        VideoTar(write_tar(tmp_path / "big.tar", [("0.mp4", video)]), max_bytes=10)
