"""The `pixelpipe` command: show and inspect through cli.main, exit codes, help, progress."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pixelpipe.tools import cli
from pixelpipe.tools.show import CAPTION, GAP, HEADER


def jpeg(h: int, w: int, seed: int) -> bytes:
    a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    for k, name in enumerate(("ant", "bee")):
        (root / name).mkdir(parents=True)
        for i in range(3):
            (root / name / f"{i}.jpg").write_bytes(jpeg(30 + 5 * i, 40, seed=10 * k + i))
    return root


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def exit_code(args: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    return int(e.value.code)


# ----------------------------------------------------------------------------- inspect
def test_inspect_clean_folder_exits_0(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["inspect", "--data", str(folder)], capsys)
    assert code == 0
    assert "samples      6" in out and "2 (samples per class: min 3, median 3, max 3)" in out
    assert "ok: every sample is readable" in out
    assert err == ""  # stderr is not a terminal here: no progress bar


def test_inspect_corrupt_file_exits_1(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = folder / "bee" / "9.jpg"
    bad.write_bytes(jpeg(30, 30, seed=5)[:200])
    code, out, _ = run(["inspect", "--data", str(folder), "--quiet"], capsys)
    assert code == 1
    assert f"{bad}: truncated JPEG" in out and "problems: 1 unreadable file(s)" in out
    code, out, _ = run(["inspect", "--data", str(folder), "--decode", "--json", "--threads", "1"], capsys)
    found = json.loads(out)
    assert code == 1 and found["decoded"] is True and found["samples"] == 7
    assert [p["source"] for p in found["problems"]] == [str(bad)]


def test_inspect_tar_shards_and_file_lists(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tarfile

    with tarfile.open(tmp_path / "s-0.tar", "w") as tar:
        for i, p in enumerate(sorted(folder.rglob("*.jpg"))):
            tar.add(p, f"{i:03d}.jpg")
            info = tarfile.TarInfo(f"{i:03d}.cls")
            info.size = 1
            tar.addfile(info, io.BytesIO(str(i % 2).encode()))
    code, out, _ = run(["inspect", "--data", str(tmp_path / "s-*.tar")], capsys)
    assert code == 0 and "(TarShards)" in out and "samples      6" in out
    listing = tmp_path / "train.txt"
    listing.write_text("".join(f"{p} {i % 3}\n" for i, p in enumerate(sorted(folder.rglob("*.jpg")))))
    code, out, _ = run(["inspect", "--data", str(listing)], capsys)
    assert code == 0 and "(FileList)" in out and "classes      3" in out


def test_inspect_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["inspect"]) == 2  # --data is required
    assert exit_code(["inspect", "--data", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert exit_code(["inspect", "--data", str(tmp_path), "--threads", "0"]) == 2
    assert exit_code(["inspect", "--data", str(tmp_path), "--max-pixels", "0"]) == 2


# ----------------------------------------------------------------------------- show
def test_show_writes_a_png_of_the_expected_size(folder: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out_png = tmp_path / "grid.png"
    code, out, _ = run(["show", "--data", str(folder), "--transforms", "light", "-n", "4", "-o", str(out_png),
                        "--columns", "3", "--size", "32", "--tile", "40", "--quiet"], capsys)
    assert code == 0 and f"wrote {out_png}" in out
    with Image.open(out_png) as im:
        assert im.format == "PNG"
        assert im.size == (GAP + 4 * (40 + GAP), HEADER + 4 * (40 + CAPTION + GAP))
        grid = np.asarray(im.convert("RGB")).astype(np.int16)
    y0, x = HEADER, GAP
    tiles = [grid[y0 : y0 + 40, x + c * (40 + GAP) : x + c * (40 + GAP) + 40] for c in range(4)]
    assert all(np.abs(tiles[0] - t).mean() > 2 for t in tiles[1:])  # originals differ from augmentations
    assert np.abs(tiles[1] - tiles[2]).mean() > 2  # and epochs differ from each other


def test_show_synthetic_default_and_unreadable_samples(folder: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(["show", "-n", "2", "--columns", "1", "--size", "24", "--tile", "32",
                      "-o", str(tmp_path / "syn.png")], capsys)
    assert code == 0 and (tmp_path / "syn.png").is_file()
    (folder / "ant" / "0.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken")
    code, _, err = run(["show", "--data", str(folder), "-n", "6", "--columns", "1", "--size", "24",
                        "--tile", "32", "--transforms", "imagenet_val", "-o", str(tmp_path / "g.png")], capsys)
    assert code == 1  # the grid is written without the broken sample, which is listed
    assert f"left out {folder / 'ant' / '0.jpg'}" in err
    with Image.open(tmp_path / "g.png") as im:
        assert im.size[1] == HEADER + 5 * (32 + CAPTION + GAP)


def test_show_bad_arguments_exit_2(folder: Path, tmp_path: Path) -> None:
    ok = ["show", "--data", str(folder), "-o", str(tmp_path / "x.png")]
    assert exit_code(ok + ["--transforms", "nope"]) == 2
    assert exit_code(ok + ["--columns", "0"]) == 2
    assert exit_code(ok + ["-n", "0"]) == 2
    assert exit_code(ok + ["--tile", "4"]) == 2
    assert exit_code(["show", "--data", str(folder), "-o", str(tmp_path / "no" / "x.png")]) == 2
    assert exit_code(["show", "--data", str(folder), "-o", str(tmp_path / "x.jpg")]) == 2
    assert exit_code(["show", "--data", str(tmp_path / "missing"), "-o", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------------------- help, progress
@pytest.mark.parametrize("command", ["bench", "show", "inspect"])
def test_help_shows_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"pixelpipe {command}" in out.split("examples:")[1]
    assert exit_code(["--help"]) == 0
    top = capsys.readouterr().out
    assert f"pixelpipe {command} " in top.split("examples:")[1]


def test_exit_codes_are_documented() -> None:
    doc = cli.__doc__ or ""
    assert "0 success" in doc and "1 the command found a problem" in doc and "2 bad arguments" in doc
    assert exit_code([]) == 2  # no command


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_unless_quiet(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert cli.main(["inspect", "--data", str(folder)]) == 0
    drawn = term.getvalue()
    assert "\rinspect [" in drawn and "6/6" in drawn and "img/s" in drawn and "s left" in drawn
    term.seek(0)
    term.truncate()
    assert cli.main(["inspect", "--data", str(folder), "--quiet"]) == 0
    assert cli.main(["show", "--data", str(folder), "-n", "1", "--columns", "1", "--size", "16",
                     "--tile", "16", "--quiet", "-o", str(folder.parent / "q.png")]) == 0
    assert term.getvalue() == ""
    capsys.readouterr()


def test_python_m_pixelpipe_is_the_command() -> None:
    import subprocess

    run = [sys.executable, "-m", "pixelpipe"]
    done = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: pixelpipe ") and all(c in done.stdout for c in ("bench", "show", "inspect"))
    assert subprocess.run(run, capture_output=True, text=True, timeout=120).returncode == 2  # no command
