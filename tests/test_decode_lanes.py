"""How GpuDecoder splits a batch between its decoder lanes (`split_by_pixels`), and the lane
arguments of GpuDecoder and Compose. Pure host code: runs without a GPU. That two lanes
decode exactly what one decodes is tested in test_decode_gpu_views.py (needs CUDA)."""

from __future__ import annotations

import numpy as np
import pytest

from pixelpipe import Compose, GpuDecoding, RandomResizedCrop
from pixelpipe.decode.gpu_plan import split_by_pixels
from pixelpipe.decode.gpu_views import Job


def job(i: int, h: int, w: int) -> Job:
    return Job(i, (h, w), (h, w), (0, 0, h, w), 1, True)


def test_parts_are_consecutive_and_cover_every_job() -> None:
    rng = np.random.default_rng(3)
    for lanes in (1, 2, 3, 4):
        for n in (0, 1, 2, 3, 7, 256):
            jobs = [job(i, int(rng.integers(1, 500)), int(rng.integers(1, 500))) for i in range(n)]
            parts = split_by_pixels(jobs, lanes)
            assert [j for _, part in parts for j in part] == jobs
            assert all(part for _, part in parts), "an empty part was kept"
            lane_ids = [lane for lane, _ in parts]
            assert lane_ids == sorted(set(lane_ids)) and all(0 <= k < lanes for k in lane_ids)
            assert len(parts) <= max(1, lanes)


def test_parts_hold_about_equal_pixels() -> None:
    rng = np.random.default_rng(5)
    sizes = [(int(rng.integers(100, 500)), int(rng.integers(100, 500))) for _ in range(256)]
    jobs = [job(i, h, w) for i, (h, w) in enumerate(sizes)]
    largest = max(h * w for h, w in sizes)
    for lanes in (2, 3, 4):
        parts = split_by_pixels(jobs, lanes)
        assert len(parts) == lanes
        pixels = [sum(j.out_size[0] * j.out_size[1] for j in part) for _, part in parts]
        share = sum(pixels) / lanes
        # a cut falls at the first job past each share's boundary: each part is off its share
        # by less than one job's pixels
        assert all(abs(p - share) <= largest for p in pixels), (pixels, share)


def test_one_huge_job_does_not_leave_empty_lanes_in_the_plan() -> None:
    jobs = [job(0, 4000, 4000), job(1, 10, 10), job(2, 10, 10)]
    parts = split_by_pixels(jobs, 2)
    assert [[j.index for j in part] for _, part in parts] == [[0], [1, 2]]
    parts = split_by_pixels(jobs, 4)
    assert [j for _, part in parts for j in part] == jobs and all(part for _, part in parts)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_gpu_decoding_checks_the_lane_count(bad) -> None:
    with pytest.raises(ValueError, match="lanes"):
        GpuDecoding(lanes=bad)


def test_pipeline_keeps_the_lane_count(tmp_path) -> None:
    from PIL import Image

    from pixelpipe import Pipeline

    (tmp_path / "cat").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "cat" / "a.jpg")
    pipe = Pipeline(str(tmp_path), Compose([RandomResizedCrop(8)]), batch_size=1, gpu=GpuDecoding(lanes=3))
    assert pipe.engine.gpu.lanes == 3 and pipe.engine.gpu.hw_batch == 256  # the user's settings as given


def test_a_pipeline_sizes_the_hardware_batch_to_its_batches(tmp_path) -> None:
    """Without GpuDecoding, a Pipeline's decoder prepares the hardware decoder for its batch
    size (as DALI does for its max_batch_size), everything else at GpuDecoding's defaults."""
    from PIL import Image

    from pixelpipe import Pipeline

    (tmp_path / "cat").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "cat" / "a.jpg")
    pipe = Pipeline(str(tmp_path), Compose([RandomResizedCrop(8)]), batch_size=48)
    assert pipe.engine.gpu == GpuDecoding(hw_batch=48)
    assert pipe.engine.gpu.options == "nvjpeg_hw_decoder:preallocate_batch_size=48"


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "256"])
def test_gpu_decoding_checks_the_hardware_batch(bad) -> None:
    with pytest.raises(ValueError, match="hw_batch"):
        GpuDecoding(hw_batch=bad)


def test_the_hardware_batch_and_the_shares_reach_the_decoder(monkeypatch) -> None:
    """GpuDecoding(hw_batch=N) makes the Engine's decoder with nvImageCodec's
    preallocate_batch_size option; None adds no option. GpuDecoding(ahead_fraction=F) asks
    for two lanes of their own shares, [hw_fraction, F] (tests/test_follow_consumer.py)."""
    from dataclasses import replace

    import torch

    import pixelpipe.decode.gpu as gpu_module
    from pixelpipe import Engine

    made = []

    class Stand:
        def __init__(self, device, **kwargs) -> None:
            made.append(kwargs)

    monkeypatch.setattr(gpu_module, "GpuDecoder", Stand)
    monkeypatch.setattr(gpu_module, "gpu_decoder_available", lambda: True)
    for setting, want, shares in [
            (GpuDecoding(), "nvjpeg_hw_decoder:preallocate_batch_size=256", None),
            (GpuDecoding(hw_batch=64), "nvjpeg_hw_decoder:preallocate_batch_size=64", None),
            (GpuDecoding(hw_batch=None), "", None),
            (GpuDecoding(ahead_fraction=None), "nvjpeg_hw_decoder:preallocate_batch_size=256", [0.75, None]),
            (GpuDecoding(hw_fraction=0.6, ahead_fraction=0.9), "nvjpeg_hw_decoder:preallocate_batch_size=256",
             [0.6, 0.9])]:
        engine = Engine(num_threads=1, gpu=replace(setting, keep_host_memory=False))
        engine.gpu_decoder(torch.device("cuda"))
        assert made[-1]["options"] == want
        assert made[-1]["lane_fractions"] == shares and made[-1]["lanes"] == 1
        engine._decoder = None
