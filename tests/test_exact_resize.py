"""Compose(exact_resize=...): JPEGs shrunk 2x or more are decoded at a reduced DCT scale by
default, at full size with exact_resize=True; both against Pillow's decode-then-resize, with the
tolerances docs/ops.md states."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from helpers import need_sample
from PIL import Image

import pixelpipe as pp

SIZES = [(64, 64), (112, 150)]
EXACT_MAE = 0.5  # grey levels, per image (measured: at most 0.19)
DEFAULT_MAE = 4.5  # per image (measured: 0.16-3.74 on these photos)
DEFAULT_MEAN_MAE = 1.5  # over the images (measured: 1.07-1.15)


def _photos() -> list[bytes]:
    root = need_sample()
    files = sorted(root.glob("*.JPEG"))[:40:4]
    if len(files) < 10:
        pytest.skip(f"the ImageNet sample {root} has fewer than 40 JPEGs")
    return [f.read_bytes() for f in files]


def _errors(blobs: list[bytes], size: tuple[int, int], exact: bool) -> list[float]:
    t = pp.Compose([pp.Resize(size)], dtype=torch.uint8, layout="NHWC", exact_resize=exact)
    out = t(blobs).numpy().astype(np.float64)
    errors = []
    for blob, got in zip(blobs, out):
        pil = Image.open(io.BytesIO(blob)).convert("RGB").resize((size[1], size[0]), Image.Resampling.BILINEAR)
        errors.append(float(np.abs(got - np.asarray(pil, dtype=np.float64)).mean()))
    return errors


@pytest.mark.parametrize("size", SIZES)
def test_exact_resize_matches_pillow_and_the_default_is_within_its_stated_deviation(size):
    blobs = _photos()
    exact = _errors(blobs, size, True)
    default = _errors(blobs, size, False)
    assert max(exact) <= EXACT_MAE, exact
    assert max(default) <= DEFAULT_MAE and np.mean(default) <= DEFAULT_MEAN_MAE, default
    # the default decoded most photos at a reduced scale: further from Pillow on those (a photo
    # whose decoder cannot scale, or need not, gives the same pixels both ways)
    assert all(d >= e for d, e in zip(default, exact)), (default, exact)
    assert sum(d > e + 0.1 for d, e in zip(default, exact)) >= len(blobs) - 2, (default, exact)


def test_exact_resize_is_kept_by_like_and_eval_and_shown_in_repr():
    t = pp.Compose([pp.RandomResizedCrop(32)], exact_resize=True)
    assert t.exact_resize and t.like([pp.Resize(8)]).exact_resize and t.eval().exact_resize
    assert "exact_resize=True" in repr(t)
    assert not pp.Compose([pp.Resize(8)]).exact_resize and "exact_resize" not in repr(pp.Compose([pp.Resize(8)]))
    with pytest.raises(ValueError, match="exact_resize must be True or False"):
        pp.Compose([pp.Resize(8)], exact_resize=1)


def test_exact_resize_changes_nothing_for_decoded_images():
    images = [torch.from_numpy(np.random.default_rng(k).integers(0, 256, (90, 70, 3), dtype=np.uint8)) for k in range(3)]
    a = pp.Compose([pp.Resize((20, 30))], exact_resize=True)(images)
    b = pp.Compose([pp.Resize((20, 30))])(images)
    assert torch.equal(a, b)
