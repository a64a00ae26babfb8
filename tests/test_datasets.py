"""The synthetic JPEG dataset: deterministic, varied, decodable, and not trivially flat."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from pixelpipe.decode import decode, read_header
from pixelpipe.tools.datasets import synthetic

N = 40


@pytest.fixture(scope="module")
def images() -> list[tuple[bytes, int]]:
    return synthetic(N, seed=0)


def test_deterministic(images: list[tuple[bytes, int]]) -> None:
    assert synthetic(6, seed=0) == images[:6]  # same bytes, and image i does not depend on n
    assert synthetic(3, seed=0, quality=90) == synthetic(3)


def test_seeds_differ_and_do_not_overlap(images: list[tuple[bytes, int]]) -> None:
    other = synthetic(3, seed=1)
    blobs = {b for b, _ in images}
    assert not any(b in blobs for b, _ in other)  # seed 1 is not seed 0 shifted by one


def test_labels(images: list[tuple[bytes, int]]) -> None:
    labels = [label for _, label in images]
    assert all(type(label) is int and 0 <= label < 10 for label in labels)
    assert len(set(labels)) >= 6


def test_sizes_aspects_and_grey(images: list[tuple[bytes, int]]) -> None:
    infos = [read_header(b) for b, _ in images]
    assert all(info.format == "jpeg" and not info.progressive for info in infos)
    heights = np.array([i.height for i in infos])
    widths = np.array([i.width for i in infos])
    assert heights.min() >= 160 and widths.min() >= 160
    assert heights.max() <= 1000 and widths.max() <= 1000
    aspect = widths / heights
    assert aspect.min() >= 1 / 3 - 0.01 and aspect.max() <= 3 + 0.01
    assert (aspect > 1.5).sum() >= 3 and (aspect < 1 / 1.5).sum() >= 3  # both orientations
    assert max(heights.max(), widths.max()) > 600  # the range is used, not just its middle
    grey = sum(i.channels == 1 for i in infos)
    assert 1 <= grey <= N // 4  # about 10%
    assert all(i.channels in (1, 3) for i in infos)


def test_decodes_and_has_detail(images: list[tuple[bytes, int]]) -> None:
    """Neighbouring pixels differ about as much as in photos: the mean |horizontal difference|
    of the ImageNet sample's photos ranges from about 2 to 40 levels, 8 on average."""
    blobs = [b for b, _ in images[:12]]
    batch = decode(blobs, rgb=False)
    detail = []
    for i, b in enumerate(blobs):
        info = read_header(b)
        img = batch[i].numpy().astype(np.float32)
        assert img.shape == (info.height, info.width, info.channels)
        assert img.std() > 12  # gradients, shapes: not flat
        dx, dy = np.abs(np.diff(img, axis=1)).mean(), np.abs(np.diff(img, axis=0)).mean()
        assert dx > 1.0 and dy > 1.0
        detail.append(dx)
    assert np.mean(detail) > 3.0


def test_colour_images_have_colour(images: list[tuple[bytes, int]]) -> None:
    for b, _ in images[:12]:
        im = Image.open(io.BytesIO(b))
        if im.mode == "RGB":
            arr = np.asarray(im, dtype=np.float32)
            assert np.abs(arr[:, :, 0] - arr[:, :, 2]).mean() > 5


def test_quality_changes_size() -> None:
    low = synthetic(3, quality=40)
    high = synthetic(3, quality=95)
    assert all(len(a) < len(b) for (a, _), (b, _) in zip(low, high))
    assert [label for _, label in low] == [label for _, label in high]


@pytest.mark.parametrize("kwargs", [{"n": -1}, {"n": 2, "seed": -1}, {"n": 2, "quality": 0},
                                    {"n": 2, "quality": 101}])
def test_bad_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        synthetic(**kwargs)
    assert synthetic(0) == []
