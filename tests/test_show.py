"""show(): the grid of originals beside augmented versions, its size, tiles and captions."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import pixelpipe
from pixelpipe import SampleError, presets
from pixelpipe.tools.datasets import synthetic
from pixelpipe.tools.show import BACKGROUND, CAPTION, GAP, HEADER, show, show_dataset

TILE = 48
SIZE = 24


def encode(arr: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt)
    return buf.getvalue()


def solid(h: int, w: int, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, dtype=np.uint8), (h, w, 3)).copy()


def tile_at(grid: Image.Image, row: int, col: int, titles: bool = True) -> np.ndarray:
    """The pixels of tile (row, col), found from the layout constants."""
    top = HEADER if titles else GAP
    x, y = GAP + col * (TILE + GAP), top + row * (TILE + CAPTION + GAP)
    return np.asarray(grid)[y : y + TILE, x : x + TILE].astype(np.int16)


def caption_strip(grid: Image.Image, row: int, titles: bool = True) -> np.ndarray:
    top = HEADER if titles else GAP
    y = top + row * (TILE + CAPTION + GAP) + TILE
    return np.asarray(grid)[y : y + CAPTION]


@pytest.fixture(scope="module")
def data() -> list[tuple[bytes, int]]:
    return synthetic(3, seed=1)


def test_grid_size_and_tiles_differ(data: list[tuple[bytes, int]]) -> None:
    columns = 3
    grid = show(data, presets.imagenet_train(SIZE), columns=columns, tile=TILE)
    assert grid.mode == "RGB"
    assert grid.size == (GAP + (columns + 1) * (TILE + GAP), HEADER + 3 * (TILE + CAPTION + GAP))
    for row in range(3):
        tiles = [tile_at(grid, row, c) for c in range(columns + 1)]
        for a in range(columns + 1):
            for b in range(a + 1, columns + 1):
                assert np.abs(tiles[a] - tiles[b]).mean() > 2, f"row {row}: tiles {a} and {b} are alike"
    # rows show different images
    assert np.abs(tile_at(grid, 0, 0) - tile_at(grid, 1, 0)).mean() > 2


def test_same_call_same_grid_and_seed_changes_it(data: list[tuple[bytes, int]]) -> None:
    t = presets.light(SIZE)
    a = np.asarray(show(data, t, columns=2, tile=TILE))
    assert np.array_equal(a, np.asarray(show(data, t, columns=2, tile=TILE)))
    assert not np.array_equal(a, np.asarray(show(data, t, columns=2, tile=TILE, seed=5)))


def test_columns_are_the_epochs_of_a_run() -> None:
    images = [torch.from_numpy(np.array(Image.open(io.BytesIO(b)).convert("RGB").resize((60, 40))))
              for b, _ in synthetic(2)]
    t = presets.imagenet_train(TILE, dtype=torch.uint8)  # tile-sized output: pasted as it is
    grid = show(images, t, indices=[10, 11], columns=2, tile=TILE)
    for epoch in range(2):
        want = t(images, seed=0, epoch=epoch, indices=[10, 11])
        for row in range(2):
            got = tile_at(grid, row, epoch + 1)
            assert np.array_equal(got, want[row].permute(1, 2, 0).numpy().astype(np.int16))


def test_original_tile_and_normalisation_undone() -> None:
    red = encode(solid(30, 60, (200, 30, 40)))  # wide: letterboxed in its tile
    grid = show([red], presets.imagenet_val(SIZE), columns=1, tile=TILE)
    original, augmented = tile_at(grid, 0, 0), tile_at(grid, 0, 1)
    assert np.abs(original[TILE // 2, TILE // 2] - (200, 30, 40)).max() <= 2
    assert np.abs(original[0, TILE // 2] - (200, 30, 40)).max() > 50  # the letterbox band
    # the preset's output is normalised floats; the tile shows the colours again
    assert np.abs(augmented - (200, 30, 40)).max() <= 2
    half = show([red], presets.imagenet_val(SIZE, dtype=torch.bfloat16, layout="NHWC"), columns=1, tile=TILE)
    assert np.abs(tile_at(half, 0, 1) - (200, 30, 40)).max() <= 3


def test_grey_and_uint8_outputs() -> None:
    grey = encode(np.full((40, 40), 90, dtype=np.uint8))
    t = pixelpipe.Compose([pixelpipe.Resize((SIZE, SIZE))], dtype=torch.uint8, channels=1)
    tile = tile_at(show([grey], t, columns=1, tile=TILE), 0, 1)
    assert np.abs(tile - 90).max() <= 1


def test_captions_from_labels_classes_and_captions(data: list[tuple[bytes, int]]) -> None:
    t = presets.imagenet_val(SIZE)
    plain = show([b for b, _ in data], t, columns=1, tile=TILE)
    assert (caption_strip(plain, 0) == BACKGROUND).all()  # no labels, no caption
    labelled = show(data, t, columns=1, tile=TILE, classes=[f"class-{k}" for k in range(10)])
    assert (caption_strip(labelled, 0) != BACKGROUND).any()
    named = show([b for b, _ in data], t, columns=1, tile=TILE, captions=["a", "bb", "ccc"])
    ink = [(caption_strip(named, r) != BACKGROUND).any(axis=2).sum() for r in range(3)]
    assert 0 < ink[0] < ink[1] < ink[2]  # longer captions, more ink
    with pytest.raises(ValueError, match="captions"):
        show(data, t, captions=["x"])


def test_preset_names_and_op_lists(data: list[tuple[bytes, int]]) -> None:
    by_name = show(data[:1], "imagenet_val", columns=1, tile=TILE)
    assert by_name.size == (GAP + 2 * (TILE + GAP), HEADER + TILE + CAPTION + GAP)
    ops = show(data[:1], [pixelpipe.Resize((SIZE, SIZE))], columns=1, tile=TILE)
    assert ops.size == by_name.size
    with pytest.raises(ValueError, match="unknown preset"):
        show(data, "imagenet")


def test_originals_only_and_transformed_batches(data: list[tuple[bytes, int]]) -> None:
    sheet = show(data, columns=1, tile=TILE)  # no transforms: 2 originals per row
    assert sheet.size == (GAP + 2 * (TILE + GAP), GAP + 2 * (TILE + CAPTION + GAP))
    t = presets.imagenet_val(SIZE)
    batch = t([b for b, _ in data])
    from_tensor = show(batch, columns=2, tile=TILE)
    assert from_tensor.size == (GAP + 3 * (TILE + GAP), GAP + 1 * (TILE + CAPTION + GAP))
    # a Pipeline-style dict: the same tiles, labels as captions; normalisation undone
    from_dict = show({"image": batch, "label": torch.tensor([3, 1, 4])}, columns=2, tile=TILE)
    assert np.array_equal(tile_at(from_dict, 0, 1, titles=False), tile_at(from_tensor, 0, 1, titles=False))
    raw = presets.imagenet_val(SIZE, dtype=torch.uint8)([b for b, _ in data])
    unnormalised = show(raw, columns=2, tile=TILE)
    assert np.abs(tile_at(unnormalised, 0, 0, titles=False) - tile_at(from_tensor, 0, 0, titles=False)).max() <= 2
    with pytest.raises(ValueError, match="already transformed"):
        show(batch, t)


def test_outputs_of_different_sizes_and_mixed_inputs() -> None:
    ramp = np.repeat(np.repeat(np.linspace(0, 250, 30).astype(np.uint8)[None, :, None], 20, 0), 3, 2)
    tall = encode(solid(40, 24, (0, 0, 200)))  # encoded, beside an array: not one batch
    grid = show([ramp, tall], [pixelpipe.RandomFlip(1.0)], columns=1, tile=TILE)
    flipped = tile_at(grid, 0, 1)[TILE // 2]  # middle row of the flipped ramp
    assert flipped[2, 0] > 200 and flipped[-3, 0] < 50  # bright on the left now
    assert np.abs(tile_at(grid, 1, 1)[TILE // 2, TILE // 2] - (0, 0, 200)).max() <= 2


def test_errors_name_the_sample() -> None:
    good = encode(solid(20, 20, (10, 20, 30)))
    with pytest.raises(SampleError, match="sample 1"):
        show([good, b"\x89PNG\r\n\x1a\n broken"], presets.imagenet_val(SIZE))
    with pytest.raises(TypeError, match="list of images"):
        show(good)
    with pytest.raises(ValueError, match="indices"):
        show([good], "imagenet_val", indices=[1, 2])


def test_show_dataset_reads_a_folder(tmp_path: Path) -> None:
    for k, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(3):
            (tmp_path / name / f"{i}.png").write_bytes(encode(solid(30 + i, 40, (60 * k, 100, 20 * i))))
    (tmp_path / "dog" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)  # unreadable
    grid, skipped = show_dataset(str(tmp_path), presets.light(SIZE), n=7, columns=1, tile=TILE)
    assert [s for s, _ in skipped] == [str(tmp_path / "dog" / "3.png")]
    assert grid.size == (GAP + 2 * (TILE + GAP), HEADER + 6 * (TILE + CAPTION + GAP))
    synthetic_grid, none = show_dataset(None, "imagenet_val", n=2, columns=1, tile=TILE)
    assert none == [] and synthetic_grid.size[1] == HEADER + 2 * (TILE + CAPTION + GAP)


def test_exported_as_pixelpipe_show() -> None:
    import pixelpipe.tools.show

    assert "show" in pixelpipe.__all__
    assert pixelpipe.show is show  # the function, not a module
