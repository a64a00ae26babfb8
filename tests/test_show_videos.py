"""`pixelpipe show` on videos: one row per clip, its frames side by side, from a folder of
videos or synthetic ones; unreadable videos left out and listed; clip options checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from video_corpus import audio_only, encode_video

from pixelpipe.tools import cli
from pixelpipe.tools.show import CAPTION, GAP, grid_size
from pixelpipe.tools.show_video_dataset import show_video_dataset


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("show") / "videos"
    for k, name in enumerate(("run", "jump")):
        (root / name).mkdir(parents=True)
        for i in range(2):
            encode_video(root / name / f"{i}.mp4", 30 + 5 * i, height=48, width=64, shift=10 * k + 3 * i)
    return root


def tiles(png: Path, tile: int, rows: int, columns: int) -> np.ndarray:
    with Image.open(png) as im:
        assert im.format == "PNG"
        grid = np.asarray(im.convert("RGB")).astype(np.int16)
    out = np.zeros((rows, columns, tile, tile, 3), dtype=np.int16)
    for r in range(rows):
        for c in range(columns):
            y, x = GAP + r * (tile + CAPTION + GAP), GAP + c * (tile + GAP)
            out[r, c] = grid[y:y + tile, x:x + tile]
    return out


def test_a_folder_of_videos_gives_one_row_per_clip(videos: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "clips.png"
    code = cli.main(["show", "--data", str(videos), "-n", "3", "--clips", "2", "--frames-per-clip", "4",
                     "--stride", "3", "--size", "32", "--tile", "40", "-o", str(png), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and f"wrote {png}" in out and "6 clip(s) of 4 frames" in out
    with Image.open(png) as im:
        assert im.size == grid_size(6, 4, 40, titles=False)
    t = tiles(png, 40, 6, 4)
    assert np.abs(t[0] - t[1]).mean() > 2  # the two clips of a video: other starts, other draws
    assert np.abs(t[0] - t[2]).mean() > 2  # and another video


def test_videos_are_told_by_extension_and_defaults_apply(videos: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "d.png"
    assert cli.main(["show", "--data", str(videos), "--tile", "32", "-o", str(png)]) == 0
    assert "8 clip(s) of 8 frames (imagenet_train)" in capsys.readouterr().out  # 4 videos x 2 clips
    with Image.open(png) as im:
        assert im.size == grid_size(8, 8, 32, titles=False)


def test_synthetic_videos_without_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "s.png"
    assert cli.main(["show", "--clips", "1", "-n", "2", "--frames-per-clip", "3", "--tile", "24",
                     "--size", "24", "-o", str(png)]) == 0
    assert "synthetic videos" in capsys.readouterr().out
    with Image.open(png) as im:
        assert im.size == grid_size(2, 3, 24, titles=False)


def test_unreadable_videos_are_left_out_and_listed(videos: Path, tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    (root / "a").mkdir(parents=True)
    (root / "a" / "0.mp4").write_bytes((videos / "run" / "0.mp4").read_bytes())
    (root / "a" / "1.mp4").write_bytes(b"")
    audio_only(root / "a" / "2.mp4")
    grid, skipped = show_video_dataset(str(root), [], n=3, clips=1, frames_per_clip=2, tile=24)
    assert grid.size == grid_size(1, 2, 24, titles=False)
    assert [Path(s).name for s, _ in skipped] == ["1.mp4", "2.mp4"]
    assert "empty" in skipped[0][1] and "no video stream" in skipped[1][1]
    only = tmp_path / "only"
    only.mkdir()
    (only / "1.mp4").write_bytes(b"")
    with pytest.raises(ValueError, match="none of the 1 videos picked could be read"):
        show_video_dataset(str(only), [], n=1, clips=1, frames_per_clip=2, tile=24)


def test_clip_options_are_checked(videos: Path, tmp_path: Path) -> None:
    png = str(tmp_path / "x.png")
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (8, 8)).save(images / "a.jpg")

    def exit_code(args: list[str]) -> int:
        with pytest.raises(SystemExit) as e:
            cli.main(args)
        return int(e.value.code)

    assert exit_code(["show", "--data", str(images), "--clips", "2", "-o", png]) == 2
    assert exit_code(["show", "--data", str(videos), "--columns", "2", "-o", png]) == 2
    assert exit_code(["show", "--data", str(videos), "--frames-per-clip", "0", "-o", png]) == 2
    assert exit_code(["show", "--volumes", "--clips", "2", "-o", png]) == 2
    assert not (tmp_path / "x.png").exists()
