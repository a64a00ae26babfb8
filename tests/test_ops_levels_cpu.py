"""The CPU forms of the grey-level operations (ops.levels_cpu) against their twins, the torch
forms every other device runs (levels.posterize_reference and its siblings), called on the same
CPU float32 tensors: equal bit for bit, on resampled images (values between grey levels), on
whole levels, on values a float rounding puts next to a threshold, on histograms of every
shape equalize distinguishes, and outside [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.ops import levels, levels_cpu
from pixelpipe.ops.timm_augment import solarize_add_reference


def images(n: int = 6, seed: int = 0) -> torch.Tensor:
    """float32 [n, 3, 24, 20]: random values, whole grey levels, near-halves between levels,
    a constant channel and values a little outside [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 24, 20, generator=g)
    x[1] = torch.randint(0, 256, (3, 24, 20), generator=g).float() / 255  # uint8 images, not resampled
    x[2] = (torch.randint(0, 255, (3, 24, 20), generator=g).float() + 0.5) / 255  # halves: round to even
    x[3, 1] = 0.4  # a constant channel
    x[4] = x[4] * 1.2 - 0.1  # outside [0, 1]: clamped to levels 0 and 255
    x[5, :, :12] = 77 / 255  # two levels and noise
    return x


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b), f"{int((a != b).sum())} values differ, largest by {float((a - b).abs().max())}"


@pytest.mark.parametrize("seed", [0, 1])
def test_posterize_is_its_twin_for_every_bit_count(seed):
    x = images(seed=seed)
    for bits in range(9):
        b = np.full(len(x), bits)
        same(levels_cpu.posterize_cpu(x, b), levels.posterize_reference(x, b))
    mixed = np.arange(len(x)) % 9
    same(levels_cpu.posterize_cpu(x, mixed), levels.posterize_reference(x, mixed))


def test_posterize_scale_is_the_float32_of_the_level_times_one_255th():
    """floor(l / q) * fl32(q / 255) == fl32(l & mask) * fl32(1 / 255) needs fl32(q / 255) to be
    q * fl32(1 / 255) for every power of two q the op uses."""
    one = np.float32(1.0 / 255.0)
    for k in range(9):
        q = 2.0 ** k
        assert np.float32(q / 255.0) == np.float32(q) * one


@pytest.mark.parametrize("seed", [0, 1])
def test_solarize_is_its_twin(seed):
    x = images(seed=seed)
    n = len(x)
    thresholds = [np.full(n, t) for t in (0.0, 0.5, 128 / 255, 1.0, 1.01)]
    thresholds.append(np.linspace(0.1, 0.9, n))
    for t in thresholds:
        at = t * 255.0 - 1e-3
        for on in (np.ones(n, bool), np.arange(n) % 2 == 0, np.zeros(n, bool)):
            same(levels_cpu.solarize_cpu(x, at, on), levels.solarize_reference(x, at, on))


def test_solarize_at_the_threshold_exactly():
    """Values whose x * 255 equals the threshold, or is one float step on either side of it."""
    at = np.float32(100.25)
    near = np.array([np.nextafter(at, -np.inf), at, np.nextafter(at, np.inf)], dtype=np.float32) / np.float32(255)
    x = torch.from_numpy(np.tile(near, 8)).view(1, 3, 2, 4)
    on = np.ones(1, bool)
    out = levels_cpu.solarize_cpu(x, np.array([float(at)]), on)
    same(out, levels.solarize_reference(x, np.array([float(at)]), on))
    flipped = (x * 255 >= torch.tensor(at)).view(-1)
    assert not bool(flipped.all()) and bool(flipped.any())


def test_at_least_zero_is_a_step_with_signed_zeros():
    d = torch.tensor([-1e30, -1.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, 1e30])
    assert levels_cpu.at_least_zero_(d.clone()).tolist() == [0, 0, 0, 1, 1, 1, 1, 1]


def _histogram_images() -> torch.Tensor:
    """Channels of the histograms equalize treats apart: all levels, three levels, a narrow band
    at the top, a constant (step 0: kept), mostly black with a few white, two halves."""
    rng = np.random.default_rng(3)
    chans = [rng.integers(0, 256, (12, 20)), rng.integers(0, 3, (12, 20)), rng.integers(250, 256, (12, 20)),
             np.full((12, 20), 77), rng.choice([0, 255], (12, 20), p=[0.97, 0.03]),
             np.where(np.arange(20) < 10, 10, 200)[None, :].repeat(12, 0)]
    x = torch.from_numpy(np.stack(chans).astype(np.float32) / 255).view(2, 3, 12, 20)
    return torch.cat([x, torch.rand(2, 3, 12, 20, generator=torch.Generator().manual_seed(5))])


@pytest.mark.parametrize("make", [images, _histogram_images], ids=["varied", "histograms"])
def test_equalize_is_its_twin(make):
    x = make()
    same(levels_cpu.equalize_cpu(x), levels.equalize_reference(x))


def test_equalize_tables_keep_a_constant_channel():
    hist = np.zeros((1, 256), dtype=np.int64)
    hist[0, 77] = 480
    assert np.array_equal(levels_cpu.equalize_tables(hist)[0], np.arange(256, dtype=np.float32) * np.float32(1 / 255))


@pytest.mark.parametrize("seed", [0, 1])
def test_solarize_add_is_its_twin(seed):
    x = images(seed=seed)
    for add in (np.zeros(len(x)), np.full(len(x), 110.0), np.array([0, 1, 50, 109, 110, 128], dtype=np.float64)):
        same(levels_cpu.solarize_add_cpu(x, add), solarize_add_reference(x, add))


def test_the_ops_take_the_cpu_forms_on_cpu_float32_only(monkeypatch):
    """levels.posterize and its siblings: the CPU form for float32 CPU tensors, the twin for any
    other dtype (and device), the same numbers where both apply."""
    calls: list[str] = []
    real = levels_cpu.posterize_cpu
    monkeypatch.setattr(levels, "posterize_cpu", lambda x, b: calls.append("cpu") or real(x, b))
    x = images()
    b = np.full(len(x), 3)
    same(levels.posterize(x, b), levels.posterize_reference(x, b))
    assert calls == ["cpu"]
    assert levels.posterize(x.double(), b).dtype == torch.float64 and calls == ["cpu"]
    assert levels_cpu.fast(x) and not levels_cpu.fast(x.double())
