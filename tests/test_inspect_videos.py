"""`pixelpipe inspect` on videos: per-video codec, size, fps, frames and duration, a summary, and
every unreadable video with the kind of its problem, from folders, file lists and tar shards."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from video_corpus import audio_only, encode_video, truncated, unknown_codec

from pixelpipe.decode.video import VideoError, probe
from pixelpipe.tools import cli
from pixelpipe.tools.survey_videos import survey_videos
from pixelpipe.tools.video_checks import check_video, declared_truncation
from pixelpipe.tools.video_data import open_videos


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Two classes of readable videos (two codecs, two sizes, two rates) and one video of
    every kind of problem."""
    root = tmp_path_factory.mktemp("inspect") / "videos"
    (root / "cats").mkdir(parents=True)
    (root / "dogs").mkdir()
    encode_video(root / "cats" / "a.mp4", 20, fps=30)
    encode_video(root / "cats" / "b.mp4", 30, fps=30)
    encode_video(root / "dogs" / "c.webm", 25, fps=25, codec="vp9", width=80, height=64)
    truncated(str(root / "cats" / "b.mp4"), root / "cats" / "cut.mp4")
    audio_only(root / "dogs" / "voice.mp4")
    (root / "dogs" / "empty.mkv").write_bytes(b"")
    (root / "dogs" / "junk.avi").write_bytes(b"not a video at all " * 50)
    unknown_codec(root / "dogs" / "odd.mkv")
    (root / "dogs" / "notes.txt").write_text("not a sample")
    return root


def by_name(problems: list[tuple[str, str]]) -> dict[str, str]:
    return {Path(source.split(":")[-1]).name: reason.split(":", 1)[0] for source, reason in problems}


def test_folder_lists_each_video_and_each_problem(corpus: Path) -> None:
    s = survey_videos(corpus, num_threads=2)
    assert s.reader == "VideoFolder" and s.samples == 8 and not s.ok
    rows = {Path(r["source"]).name: r for r in s.videos}
    assert set(rows) == {"a.mp4", "b.mp4", "c.webm"}
    assert rows["a.mp4"] == {"source": str(corpus / "cats" / "a.mp4"), "codec": "h264", "width": 64, "height": 48,
                             "fps": 30.0, "frames": 20, "duration": pytest.approx(20 / 30, abs=1e-3)}
    assert (rows["c.webm"]["codec"], rows["c.webm"]["width"], rows["c.webm"]["fps"]) == ("vp9", 80, 25.0)
    assert by_name(s.problems) == {"cut.mp4": "truncated", "voice.mp4": "audio-only", "empty.mkv": "zero-length",
                                   "junk.avi": "corrupt", "odd.mkv": "unsupported codec"}
    assert s.kinds() == {"zero-length": 1, "audio-only": 1, "unsupported codec": 1, "truncated": 1, "corrupt": 1}
    assert s.class_counts == {"cats": 3, "dogs": 5}
    assert [p for p, _ in s.ignored] == [str(corpus / "dogs" / "notes.txt")]


def test_summary_counts_and_ranges(corpus: Path) -> None:
    summary = survey_videos(corpus, num_threads=1).summary()
    assert summary["codecs"] == {"h264": 2, "vp9": 1}
    assert summary["resolutions"] == {"64x48": 2, "80x64": 1}
    assert summary["fps"] == {"30": 2, "25": 1}
    assert summary["frames"] == {"min": 20, "median": 25, "max": 30}
    assert summary["duration"]["total"] == pytest.approx(20 / 30 + 1 + 1, abs=3e-3)


def test_command_text_json_and_exit_codes(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", "--data", str(corpus), "--quiet"]) == 1
    text = capsys.readouterr().out
    assert "(VideoFolder)" in text and "codecs       h264 2, vp9 1" in text
    assert "unreadable   5 (1 zero-length, 1 audio-only, 1 unsupported codec, 1 truncated, 1 corrupt)" in text
    assert f"{corpus / 'cats' / 'cut.mp4'}: truncated: the 'mdat' box ends at byte" in text
    assert cli.main(["inspect", "--data", str(corpus), "--json", "--quiet"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert (found["videos"], found["readable"], found["unreadable"]) == (8, 3, 5)
    assert {p["kind"] for p in found["problems"]} == {"zero-length", "audio-only", "unsupported codec", "truncated",
                                                      "corrupt"}
    clean = tmp_path / "clean"
    clean.mkdir()
    encode_video(clean / "x.mkv", 12, codec="ffv1")
    assert cli.main(["inspect", "--data", str(clean), "--decode", "--quiet"]) == 0
    assert "ok: every video is readable (decoded in full)" in capsys.readouterr().out


def test_file_lists_and_missing_files(corpus: Path, tmp_path: Path) -> None:
    listed = tmp_path / "train.txt"
    listed.write_text(f"{corpus / 'cats' / 'a.mp4'} 0\n{corpus / 'dogs' / 'c.webm'} 1\nnowhere.mp4 1\n")
    s = survey_videos(str(listed))
    assert s.reader == "VideoFileList" and len(s.videos) == 2
    assert by_name(s.problems) == {"nowhere.mp4": "missing"}
    assert s.class_counts == {"0": 1, "1": 2}


def test_tar_shards_read_members_and_a_cut_shard(corpus: Path, tmp_path: Path) -> None:
    members = [("a.mp4", (corpus / "cats" / "a.mp4").read_bytes()), ("a.cls", b"0"),
               ("v.mp4", (corpus / "dogs" / "voice.mp4").read_bytes()), ("v.cls", b"1")]
    shard = tmp_path / "s-0.tar"
    with tarfile.open(shard, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    s = survey_videos(str(shard))
    assert s.reader == "VideoTar" and [r["frames"] for r in s.videos] == [20]
    assert s.videos[0]["source"] == f"{shard}:a.mp4"
    assert by_name(s.problems) == {"v.mp4": "audio-only"}


def test_images_are_not_taken_for_videos(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "b.jpg").write_bytes(b"x")
    (tmp_path / "c.mp4").write_bytes(b"x")
    assert open_videos(tmp_path) is None
    assert open_videos(tmp_path / "missing.txt") is None
    (tmp_path / "d.mkv").write_bytes(b"x")
    assert type(open_videos(tmp_path)).__name__ == "VideoFolder"


@pytest.mark.parametrize("codec", ["h264", "vp9", "mpeg4"])
def test_truncation_is_told_from_the_container_for_paths_and_bytes(codec: str, tmp_path: Path) -> None:
    ext = {"h264": "mp4", "vp9": "webm", "mpeg4": "avi"}[codec]
    whole = encode_video(tmp_path / f"v.{ext}", 30, codec=codec)
    assert declared_truncation(whole) is None
    assert check_video(whole)[1] is None
    for keep in (0.3, 0.9):
        cut = truncated(whole, tmp_path / f"cut{keep}.{ext}", keep)
        data = Path(cut).read_bytes()
        assert "past the end of the data" in declared_truncation(cut)
        assert declared_truncation(data) == declared_truncation(cut)
        assert check_video(cut)[1].startswith("truncated: ")
        assert check_video(data)[1] == check_video(cut)[1]


def test_unknown_codec_is_a_video_error(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="unsupported codec"):
        probe(unknown_codec(tmp_path / "odd.mkv"))
