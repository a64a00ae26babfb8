"""`pixelpipe bench --pipeline video` on the CPU: the generated videos, pixelpipe's row and the
PyAV loop's through cli.main, the JSON fields, the clips counted when a video fails, peers that
cannot run (a row saying why, never a crash), and the PyAV loop's frames (each frame's drawn
index read back). Tiny videos (86x48, two or three of them) and one round keep it to seconds;
the CUDA rows (NVDEC, DALI) run on a GPU machine only."""

from __future__ import annotations

import json
import random
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from pixelpipe.tools import cli
from pixelpipe.tools.bench import video as bench_video
from pixelpipe.tools.bench.gpu_peers import run_contender

av = pytest.importorskip("av")

from pixelpipe.tools.videos import encode_video, frame_index  # noqa: E402

CPU = torch.device("cpu")
TINY = ["bench", "--pipeline", "video", "--device", "cpu", "-n", "2", "--size", "48", "--batch", "2",
        "--threads", "1", "--passes", "1", "--quiet"]


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the bench keeps its generated videos in."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def bench_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert cli.main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_pixelpipe_alone_end_to_end_with_the_json_fields(tmp_root: Path, capsys: pytest.CaptureFixture[str]):
    out = bench_json(TINY + ["--peers", "none"], capsys)
    assert [r["name"] for r in out["results"]] == ["pixelpipe"]
    row = out["results"][0]
    assert row["clips"] == 2  # one timed pass over the two videos, a clip each
    assert (row["frames"], row["decoded_frames"]) == (2 * 16, 2 * 31)  # 16 frames, first to last: 31
    assert row["clips_per_s"] > 0
    assert row["frames_per_s"] == pytest.approx(16 * row["clips_per_s"])
    assert row["decoded_frames_per_s"] == pytest.approx(31 * row["clips_per_s"])
    assert row["nvdec_busy"] is None and row["jpeg_busy"] is None  # no GPU, no NVML figures
    # two passes of 2 videos, and up to 2 more decoded ahead for the next pass (loader.video)
    decoded = re.search(r"files decoded, warm-up and the videos decoded ahead for the next pass included: (\d+) on cpu",
                        row["note"])
    assert decoded is not None and 4 <= int(decoded.group(1)) <= 6, row["note"]
    assert "images" not in row and "images_per_s" not in row
    assert len(out["rounds"]) == 1 and out["rounds"][0][0]["clips"] == 2
    assert "2 generated H.264 videos 86x48" in out["header"] and "made now" in out["header"]
    assert "clips of 16 frames at stride 2" in out["header"] and "av" in out["versions"]
    made = sorted(tmp_root.glob("pixelpipe-bench-videos-*/*/*.mp4"))
    assert len(made) == 2 and not list(tmp_root.glob("*.part-*"))
    again = bench_json(TINY + ["--peers", "none"], capsys)  # the same set, kept from the first run
    assert "made now" not in again["header"] and sorted(tmp_root.glob("pixelpipe-bench-videos-*/*/*.mp4")) == made


def test_the_table_beside_the_pyav_loop(tmp_root: Path, capsys: pytest.CaptureFixture[str]):
    assert cli.main(TINY + ["--rounds", "2"]) == 0  # pyav is the CPU's default peer
    out = capsys.readouterr().out
    assert "clips/s" in out and "frames/s" in out and "images/s" not in out
    names = [line.split("  ")[0] for line in out.splitlines()]
    assert "pixelpipe" in names and "pyav loop (cpu)" in names
    assert "pixelpipe is " in out and "x pyav loop (cpu)" in out
    assert "per round, pixelpipe clips/s: " in out and "per round, pixelpipe / pyav loop (cpu): " in out
    assert "GPU use" not in out


def test_a_failed_video_is_left_out_and_not_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = tmp_path / "videos" / "a"
    folder.mkdir(parents=True)
    for i in range(2):
        encode_video(folder / f"v{i}.mp4", 40, height=48, width=64, shift=i)
    (folder / "empty.mp4").write_bytes(b"")
    out = bench_json(TINY[:5] + ["--data", str(tmp_path / "videos"), "--peers", "none", "--batch", "2",
                                 "--threads", "1", "--passes", "2", "--quiet"], capsys)
    row = out["results"][0]
    assert row["clips"] == 2 * 2  # two passes of the two readable videos; the padding is not counted
    assert "1 video(s) failed and were left out" in row["note"] and "empty.mp4" in row["note"]
    assert "3 videos in " in out["header"] and "h264 64x48, 40 frames" in out["header"]


def test_peers_that_cannot_run_are_rows_saying_why(tmp_root: Path, capsys: pytest.CaptureFixture[str]):
    out = bench_json(TINY + ["--peers", "dali,torchcodec"], capsys)
    rows = {r["name"]: r for r in out["results"]}
    assert rows["pixelpipe"]["clips"] == 2
    assert rows["dali"]["clips"] == 0 and rows["dali"]["clips_per_s"] == 0
    assert rows["dali"]["note"].startswith("not run: DALI's video reader decodes on a CUDA device")
    tc = rows["torchcodec + torchvision"]
    assert tc["clips"] == 0 and tc["note"].startswith("not run: the torchcodec peer decodes on a CUDA device")


def test_a_missing_torchcodec_is_a_row(monkeypatch: pytest.MonkeyPatch):
    from pixelpipe.tools.bench.peer_torchcodec_video import torchcodec_video

    for name in ("torchcodec", "torchcodec.decoders"):
        monkeypatch.setitem(sys.modules, name, None)
    r = run_contender("torchcodec", lambda: torchcodec_video(["a.mp4"], 16, 2, 224, 2, 1, torch.device("cuda"),
                                                             (0.5,) * 3, (0.5,) * 3), 1, 2, True, "", CPU, nvdec=True)
    assert r.rate == 0 and r.note.startswith("not installed") and "pip install torchcodec" in r.note


@pytest.mark.parametrize("frames, clip, stride", [(100, 16, 2), (31, 16, 2), (20, 16, 2), (1, 4, 3)])
def test_torchcodec_clips_are_the_frames_asked_for(frames: int, clip: int, stride: int):
    from pixelpipe.tools.bench.batches import clip_indices

    for seed in range(20):
        idx = clip_indices(frames, clip, stride, random.Random(seed))
        assert len(idx) == clip and all(0 <= i < frames for i in idx)
        steps = np.diff(idx)
        if frames >= stride * (clip - 1) + 1:  # the whole clip fits: exact strides
            assert (steps == stride).all()
        else:  # a short video: from 0, its last frame repeated
            assert idx[0] == 0 and (steps >= 0).all() and idx[-1] == frames - 1


def test_a_missing_dali_is_a_row(monkeypatch: pytest.MonkeyPatch):
    from pixelpipe.tools.bench.peer_dali_video import dali_video

    for name in ("nvidia.dali", "nvidia.dali.plugin", "nvidia.dali.plugin.pytorch"):  # imported or not
        monkeypatch.setitem(sys.modules, name, None)
    r = run_contender("dali", lambda: dali_video(["a.mp4"], 16, 2, 224, 2, 1, CPU, (0.5,) * 3, (0.5,) * 3),
                      1, 2, True, "", CPU, nvdec=True)
    assert r.rate == 0 and r.note.startswith("not installed") and "pip install nvidia-dali" in r.note


def test_bad_arguments_exit_before_any_work(tmp_root: Path):
    with pytest.raises(SystemExit, match="unknown video peer"):
        cli.main(TINY + ["--peers", "kornia"])
    for extra in (["--boxes", "3"], ["--cache"], ["-n", "0"]):
        with pytest.raises(SystemExit) as e:
            cli.main(TINY + extra)
        assert e.value.code == 2
    with pytest.raises(SystemExit, match="must be >= 36"):
        cli.main(TINY[:7] + ["--size", "20", "--quiet"])
    with pytest.raises(SystemExit, match="holds no videos"):
        cli.main(TINY + ["--data", str(tmp_root)])
    assert not list(tmp_root.glob("pixelpipe-bench-videos-*"))


# ----------------------------------------------------------------------------- the PyAV loop
def test_the_pyav_loop_decodes_the_frames_asked_for(tmp_path: Path):
    from pixelpipe.tools.bench.pyav_loop import augment_clip, decode_clip

    path = encode_video(tmp_path / "v.mp4", 50, gop=12, height=48, width=64)
    for seed in range(4):
        start = random.Random(seed).randint(0, 50 - 15)  # the loop's first draw
        frames = decode_clip(str(path), 8, 2, random.Random(seed))
        assert [frame_index(np.asarray(f)) for f in frames] == list(range(start, start + 16, 2))
    short = decode_clip(str(encode_video(tmp_path / "s.mp4", 5, height=48, width=64)), 4, 2, random.Random(0))
    assert [frame_index(np.asarray(f)) for f in short] == [0, 2, 4, 4]  # the last frame repeated
    clip = augment_clip(frames, 32, np.full(3, 0.5, np.float32), np.full(3, 0.25, np.float32), random.Random(0))
    assert clip.shape == (3, 8, 32, 32) and clip.dtype == np.float16


def test_the_generated_width_is_even_at_16_9(tmp_path: Path):
    folder, made = bench_video.generated_videos(1, 40, frames=4, gop=2, root=str(tmp_path))
    assert made and folder.endswith("pixelpipe-bench-videos-1-72x40-4f-gop2")
    assert bench_video.generated_videos(1, 40, frames=4, gop=2, root=str(tmp_path)) == (folder, False)
