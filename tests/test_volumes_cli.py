"""`pixelpipe show --volumes`: the PNG grid of volumes (three middle slices per version, label
maps overlaid) from NIfTI folders, datalists, file lists and generated volumes, through
cli.main as tests/test_cli.py runs the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pixelpipe.tools import cli
from pixelpipe.tools.datasets import synthetic_volumes
from pixelpipe.tools.show import CAPTION, GAP, HEADER
from pixelpipe.tools.show_volume_dataset import VOLUME_TRANSFORMS, volume_grid_size

GREEN = np.array([40, 200, 60])  # the overlay colour of label 2 (show_volumes._COLOURS)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def exit_code(args: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    return int(e.value.code)


@pytest.fixture
def decathlon(tmp_path: Path) -> Path:
    """imagesTr/ and labelsTr/ of three NIfTI volumes (the generated ones)."""
    nib = pytest.importorskip("nibabel")
    root = tmp_path / "Task"
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    for i, (img, lab) in enumerate(synthetic_volumes(3, seed=1)):
        nib.save(nib.Nifti1Image(img, np.diag([1.0, 1.0, 1.5, 1.0])), root / "imagesTr" / f"case{i}.nii.gz")
        nib.save(nib.Nifti1Image(lab, np.eye(4)), root / "labelsTr" / f"case{i}.nii.gz")
    return root


def tiles(grid: np.ndarray, row: int, tile: int) -> list[np.ndarray]:
    """The tiles of one row of the grid, left to right."""
    y = HEADER + row * (tile + CAPTION + GAP)
    count = (grid.shape[1] - GAP) // (tile + GAP)
    return [grid[y : y + tile, GAP + c * (tile + GAP) : GAP + c * (tile + GAP) + tile] for c in range(count)]


def overlaid(t: np.ndarray) -> float:
    """The fraction of a tile's pixels tinted towards label 2's green."""
    g = t.astype(np.int16)
    return float(((g[..., 1] - g[..., 0] > 40) & (g[..., 1] - g[..., 2] > 40)).mean())


def test_show_volumes_from_a_decathlon_folder(decathlon: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out_png = tmp_path / "vols.png"
    code, out, err = run(["show", "--volumes", str(decathlon), "-n", "2", "--columns", "3", "--tile", "48",
                          "--size", "32", "-o", str(out_png)], capsys)
    assert code == 0 and err == "" and f"wrote {out_png}" in out and "2 volume(s)" in out
    with Image.open(out_png) as im:
        assert im.format == "PNG"
        assert im.size == volume_grid_size(2, 3, 48) == (GAP + 12 * (48 + GAP), HEADER + 2 * (48 + CAPTION + GAP))
        grid = np.asarray(im.convert("RGB"))
    for row in range(2):
        ts = tiles(grid, row, 48)
        assert len(ts) == 12
        assert all(overlaid(t) > 0.01 for t in ts[:3])  # the box (label 2) crosses every middle slice
        versions = [np.concatenate(ts[3 * k : 3 * k + 3], 1).astype(np.int16) for k in range(4)]
        assert all(np.abs(versions[0] - v).mean() > 2 for v in versions[1:])  # augmented != original
        assert np.abs(versions[1] - versions[2]).mean() > 2 and np.abs(versions[2] - versions[3]).mean() > 2
        assert sum(overlaid(t) > 0 for t in ts[3:]) >= 3  # the label map follows into the crops


def test_show_volumes_same_seed_same_png_and_lists(decathlon: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    items = [{"image": f"imagesTr/case{i}.nii.gz", "label": f"labelsTr/case{i}.nii.gz"} for i in range(3)]
    (decathlon / "dataset.json").write_text(json.dumps({"training": items}))
    (decathlon / "list.txt").write_text("".join(f"{d['image']} {d['label']}\n" for d in items))
    grids = []
    for source in ("dataset.json", "list.txt", "dataset.json"):
        png = tmp_path / f"{len(grids)}.png"
        code, _, _ = run(["show", "--volumes", str(decathlon / source), "-n", "3", "--columns", "2", "--tile", "32",
                          "--transforms", "flip", "-o", str(png)], capsys)
        assert code == 0
        with Image.open(png) as im:
            grids.append(np.asarray(im.convert("RGB")))
    assert grids[0].shape == (HEADER + 3 * (32 + CAPTION + GAP), GAP + 9 * (32 + GAP), 3)
    assert np.array_equal(grids[0], grids[2])  # the draws are a function of (seed, epoch, index)
    tiles0, tiles1 = tiles(grids[0], 0, 32), tiles(grids[1], 0, 32)
    assert all(np.array_equal(a, b) for a, b in zip(tiles0, tiles1))  # the same volumes, whichever list


@pytest.mark.parametrize("name", list(VOLUME_TRANSFORMS))
def test_show_synthetic_volumes_with_every_transform(name: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "syn.png"
    code, out, _ = run(["show", "--volumes", "--transforms", name, "-n", "2", "--columns", "1", "--tile", "24",
                        "-o", str(png)], capsys)
    assert code == 0 and "synthetic volumes" in out
    with Image.open(png) as im:
        assert im.size == volume_grid_size(2, 1, 24)
    assert cli.VOLUME_TRANSFORM_NAMES == tuple(VOLUME_TRANSFORMS)  # the help lists the real names


def test_show_volumes_unreadable_volume_left_out(decathlon: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (decathlon / "imagesTr" / "case1.nii.gz").write_bytes(b"not a gzip file")
    code, _, err = run(["show", "--volumes", str(decathlon), "-n", "3", "--columns", "1", "--tile", "24",
                        "-o", str(tmp_path / "g.png")], capsys)
    assert code == 1 and f"left out {decathlon / 'imagesTr' / 'case1.nii.gz'}" in err
    with Image.open(tmp_path / "g.png") as im:
        assert im.size == volume_grid_size(2, 1, 24)


def test_show_volumes_bad_arguments_exit_2(decathlon: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    png = str(tmp_path / "x.png")
    assert exit_code(["show", "--volumes", "--transforms", "fastai_like", "-o", png]) == 2
    assert "--transforms must be one of affine" in capsys.readouterr().err
    assert exit_code(["show", "--volumes", str(decathlon), "--data", str(decathlon), "-o", png]) == 2
    assert exit_code(["show", "--volumes", str(tmp_path / "missing"), "-o", png]) == 2
    assert exit_code(["show", "--volumes", "--size", "0", "-o", png]) == 2
    assert exit_code(["show", "--volumes", "--tile", "8", "-o", png]) == 2
    assert exit_code(["show", "--transforms", "affine", "-o", png]) == 2  # a volume transform for images
    assert not (tmp_path / "x.png").exists()
