"""show_clips: one row per clip, its frames evenly spaced, captions from the batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe.tools.show import GAP


def clips(n=2, t=6, h=20, w=24):
    x = torch.zeros(n, t, 3, h, w, dtype=torch.uint8)
    for i in range(n):
        for k in range(t):
            x[i, k, i % 3] = 20 * k + 10  # clip i in channel i, brighter frame by frame
    return x


def test_rows_are_clips_and_columns_are_frames():
    x = clips()
    grid = np.asarray(pp.show_clips(x, frames=3, tile=24))
    # frames 0, 2 (2.5 rounded) and 5 of each clip, tiles of 24 px (the 20 x 24 frame fills its width)
    for row in range(2):
        for col, k in enumerate([0, 2, 5]):
            y0 = GAP + row * (24 + 16 + GAP) + 12
            x0 = GAP + col * (24 + GAP) + 12
            expect = [0, 0, 0]
            expect[row % 3] = 20 * k + 10
            assert grid[y0, x0].tolist() == expect, (row, col)


def test_layouts_agree_and_float_batches_are_unnormalised():
    x = clips()
    a = np.asarray(pp.show_clips(x, tile=24))
    b = np.asarray(pp.show_clips(x.permute(0, 2, 1, 3, 4), layout="NCTHW", tile=24))
    c = np.asarray(pp.show_clips(x.permute(0, 1, 3, 4, 2), layout="NTHWC", tile=24))
    assert np.array_equal(a, b) and np.array_equal(a, c)
    mean, std = torch.tensor([0.45] * 3).view(1, 1, 3, 1, 1), torch.tensor([0.225] * 3).view(1, 1, 3, 1, 1)
    normed = (x.float() / 255 - mean) / std
    d = np.asarray(pp.show_clips(normed, tile=24, mean=[0.45] * 3, std=[0.225] * 3))
    assert np.abs(d.astype(int) - a.astype(int)).max() <= 1


def test_a_video_pipeline_batch_is_captioned(tmp_path):
    pytest.importorskip("av")
    from pixelpipe.readers import VideoFolder
    from pixelpipe.tools.videos import synthetic_videos

    synthetic_videos(tmp_path / "v", 2, classes=2, frames=12)
    pipe = pp.VideoPipeline(VideoFolder(tmp_path / "v"), pp.Compose([pp.RandomResizedCrop(32)], dtype=torch.uint8),
                            batch_size=2, clips=pp.ClipSampler(4, stride=2), num_threads=1)
    batch = next(iter(pipe))
    pipe.close()
    out = tmp_path / "clips.png"
    grid = pp.show_clips(batch, out, frames=4, tile=32)
    assert out.is_file() and grid.size == (GAP + 4 * (32 + GAP), GAP + 2 * (32 + 16 + GAP))


def test_bad_arguments():
    with pytest.raises(ValueError, match="5-D|expected clips"):
        pp.show_clips(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match="layout"):
        pp.show_clips(clips(), layout="NHWC")
    with pytest.raises(ValueError, match="frames"):
        pp.show_clips(clips(), frames=0)
