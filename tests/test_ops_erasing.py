"""Erasing pixel ops: each checked against its definition written out here per sample (a Python
loop over samples, independent of the op's vectorised code) with the op's own uniforms, and
against the statistics its arguments promise."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import check_op, run, varied_images

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

SIZE = [pp.Resize((16, 16))]


def draws_of(n: int, seed: int = 0, epoch: int = 0, pos: int = 1) -> Draws:
    idx = np.arange(n)
    return Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))


def params_of(op: pp.Op, n: int, shape=(16, 16), **kw):
    return op.sample(draws_of(n, **kw), np.tile(np.array(shape, dtype=np.float64), (n, 1)))


def erased(out: torch.Tensor, base: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """bool [N, H, W]: pixels where the op wrote `value` over a different value."""
    return ((out == value) & (base != value)).all(1)


# ============================================================================ RandomErasing
def torchvision_rectangle(h: int, w: int, u: np.ndarray, tries: int, scale, ratio, p: bool):
    """torchvision's RandomErasing.get_params for one image, written out, with the op's
    uniforms u (draws 1..2 tries + 2) in place of torch.rand: (top, left, height, width)."""
    if not p:
        return 0, 0, 0, 0
    area = h * w
    for k in range(tries):
        erase_area = area * (scale[0] + (scale[1] - scale[0]) * u[k])
        log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
        aspect = math.exp(log_lo + (log_hi - log_lo) * u[tries + k])
        eh = int(round(math.sqrt(erase_area * aspect)))
        ew = int(round(math.sqrt(erase_area / aspect)))
        if not (eh < h and ew < w):
            continue
        top = int(u[2 * tries] * (h - eh + 1))
        left = int(u[2 * tries + 1] * (w - ew + 1))
        return top, left, eh, ew
    return 0, 0, 0, 0


class TestRandomErasing:
    def test_contract(self):
        check_op(pp.RandomErasing(), head=SIZE, p_zero=pp.RandomErasing(0.0))

    @pytest.mark.parametrize("scale, ratio", [((0.02, 0.33), (0.3, 3.3)), ((0.3, 0.9), (0.5, 2.0))])
    def test_is_torchvisions_rectangle(self, scale, ratio):
        n = 24
        imgs = varied_images(n)
        op = pp.RandomErasing(0.8, scale=scale, ratio=ratio, value=(0.25, 0.5, 0.75))
        base = run(SIZE, imgs, seed=7)
        out = run([*SIZE, op], imgs, seed=7)
        d = draws_of(n, seed=7)
        u = d.uniforms_np(range(1, 23)).astype(np.float64)
        on = d.bernoulli_np(0, 0.8)
        expect = base.clone()
        empty = 0
        for k in range(n):
            top, left, eh, ew = torchvision_rectangle(16, 16, u[k], 10, scale, ratio, on[k])
            expect[k, :, top:top + eh, left:left + ew] = torch.tensor([0.25, 0.5, 0.75]).view(3, 1, 1)
            empty += eh * ew == 0
        assert torch.equal(out, expect)
        assert empty < n / 2

    def test_area_and_ratio_statistics(self):
        op = pp.RandomErasing(1.0, scale=(0.1, 0.2), ratio=(0.5, 2.0))
        p = params_of(op, 4000, shape=(200, 300))
        frac = p["height"] * p["width"] / (200 * 300)
        assert frac.min() > 0.09 and frac.max() < 0.21 and abs(frac.mean() - 0.15) < 0.005
        aspect = p["height"] / p["width"]
        assert aspect.min() > 0.45 and aspect.max() < 2.2 and abs(np.log(aspect).mean()) < 0.03
        assert (p["top"] + p["height"] <= 200).all() and (p["left"] + p["width"] <= 300).all()

    @pytest.mark.parametrize("prob", [1.0, 0.5])
    def test_random_value_is_the_samples_normal_field(self, prob):
        """The noise of the batch's field, also where only some rows erase (the op makes the
        noise of those rows alone); the other rows are left as they are."""
        imgs = varied_images(8)
        op = pp.RandomErasing(prob, scale=(0.3, 0.3), ratio=(1, 1), value="random")
        out = run([*SIZE, op], imgs, dtype=torch.float32, seed=1)
        base = run(SIZE, imgs, dtype=torch.float32, seed=1)
        p = params_of(op, 8, seed=1)
        z = draws_of(8, seed=1).normal_field(op.draws, (3, 16, 16))
        erased = p["height"] * p["width"] > 0
        assert erased.all() if prob == 1.0 else 0 < erased.sum() < 8
        for k in range(8):
            t, left, eh, ew = (int(p[key][k]) for key in ("top", "left", "height", "width"))
            if not erased[k]:
                assert torch.equal(out[k], base[k])
                continue
            torch.testing.assert_close(out[k, :, t:t + eh, left:left + ew], z[k, :, t:t + eh, left:left + ew])

    @pytest.mark.parametrize("value", ["random", 0.5])
    def test_apply_owned_is_apply_written_into_x(self, value):
        """apply_owned (the CPU engine's pieces, which it may overwrite) gives apply()'s numbers
        and, with noise, writes them into x itself; apply() leaves its input as it was."""
        op = pp.RandomErasing(0.7, value=value)
        x = torch.rand(9, 3, 20, 24, generator=torch.Generator().manual_seed(2))
        draws = draws_of(9, seed=5)
        p = op.sample(draws, np.tile([20.0, 24.0], (9, 1)))
        given = x.clone()
        plain = op.apply(given, p, draws)
        assert torch.equal(given, x)
        owned = op.apply_owned(given, p, draws)
        assert torch.equal(owned, plain) and not torch.equal(plain, x)
        assert (owned.data_ptr() == given.data_ptr()) == (value == "random")

    def test_grey_output_takes_one_value(self):
        imgs = varied_images(4)
        out = pp.Compose([*SIZE, pp.RandomErasing(1.0, value=0.5)], channels=1)(imgs)
        assert out.shape[1] == 1 and bool((out == 0.5).any())
        with pytest.raises(ValueError, match="channel"):
            pp.Compose([*SIZE, pp.RandomErasing(1.0, value=(0.1, 0.2, 0.3))], channels=1)(imgs)

    @pytest.mark.parametrize("kwargs, name", [({"p": 2}, "p"), ({"scale": (0.5, 0.1)}, "scale"),
                                              ({"ratio": (0, 1)}, "ratio"), ({"value": "noise"}, "value"),
                                              ({"value": (1, 2)}, "value"), ({"value": math.nan}, "value"),
                                              ({"tries": 0}, "tries")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.RandomErasing(**kwargs)


# ============================================================================ Cutout
class TestCutout:
    def test_contract(self):
        check_op(pp.Cutout(6, p=0.7), head=SIZE, p_zero=pp.Cutout(6, p=0.0))

    @pytest.mark.parametrize("size, holes", [(6, 1), ((4, 9), 3), (0.5, 2)])
    def test_squares_at_the_drawn_centres(self, size, holes):
        n = 10
        imgs = varied_images(n)
        op = pp.Cutout(size, num_holes=holes, value=1.0, p=0.8)
        base = run(SIZE, imgs, seed=3)
        out = run([*SIZE, op], imgs, seed=3)
        d = draws_of(n, seed=3)
        u = d.uniforms_np(range(1, 1 + 2 * holes)).astype(np.float64)
        on = d.bernoulli_np(0, 0.8)
        sh, sw = (size, size) if isinstance(size, int) else (8, 8) if isinstance(size, float) else size
        expect = base.clone()
        for k in range(n):
            for j in range(holes if on[k] else 0):
                cy, cx = int(u[k, 2 * j] * 16), int(u[k, 2 * j + 1] * 16)
                y0, x0 = cy - sh // 2, cx - sw // 2
                expect[k, :, max(y0, 0):max(y0 + sh, 0), max(x0, 0):max(x0 + sw, 0)] = 1.0
        assert torch.equal(out, expect)

    @pytest.mark.parametrize("kwargs, name", [({"size": 0}, "size"), ({"size": 1.5}, "size"),
                                              ({"size": 4, "num_holes": 0}, "num_holes"),
                                              ({"size": 4, "value": "x"}, "value")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.Cutout(**kwargs)


# ============================================================================ GridMask
class TestGridMask:
    def test_contract(self):
        check_op(pp.GridMask((4, 8), rotate=30), head=SIZE, p_zero=pp.GridMask((4, 8), p=0.0))

    @pytest.mark.parametrize("invert", [False, True])
    def test_is_the_papers_grid(self, invert):
        """Without rotation: pixel (i, j) is erased when (i - dy) mod d >= l and (j - dx) mod d
        >= l, l = round(ratio d) (the squares; invert: the lines)."""
        n = 12
        imgs = varied_images(n)
        op = pp.GridMask((3, 7), ratio=0.6, invert=invert, value=0.0, p=0.8)
        base = run(SIZE, imgs, seed=5)
        out = run([*SIZE, op], imgs, seed=5)
        p = params_of(op, n, seed=5)
        expect = base.clone()
        i = np.arange(16)
        for k in range(n):
            d, dy, dx = int(p["d"][k]), int(p["dy"][k]), int(p["dx"][k])
            assert 3 <= d <= 7 and 0 <= dy < d and 0 <= dx < d
            l = min(max(int(d * 0.6 + 0.5), 1), d - 1)
            square = (((i - dy) % d)[:, None] >= l) & (((i - dx) % d)[None, :] >= l)
            mask = ~square if invert else square
            if p["on"][k]:
                expect[k][:, torch.from_numpy(mask)] = 0.0
        assert torch.equal(out, expect)

    def test_erased_share_and_rotation(self):
        imgs = [np.full((96, 96, 3), 200, np.uint8)] * 64
        flat = run([pp.GridMask((20, 20), ratio=0.5, p=1.0)], imgs)
        share = float((flat == 0).all(1).float().mean())
        assert abs(share - 0.25) < 0.02  # (1 - ratio) ** 2
        turned = run([pp.GridMask((20, 20), ratio=0.5, rotate=90, p=1.0)], imgs)
        share = float((turned == 0).all(1).float().mean())
        assert abs(share - 0.25) < 0.03
        rows = (turned[:, 0] == 0).float().mean(2)  # a turned grid's squares are not axis aligned
        assert not torch.equal(rows, (flat[:, 0] == 0).float().mean(2))

    @pytest.mark.parametrize("kwargs, name", [({"d": (1, 4)}, "d"), ({"d": (4.5, 8)}, "d"), ({"ratio": 1.0}, "ratio"),
                                              ({"rotate": -5}, "rotate"), ({"p": 1.2}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.GridMask(**kwargs)


# ============================================================================ on the GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", [pp.RandomErasing(1.0, value="random"), pp.Cutout(5, num_holes=2),
                                pp.GridMask((3, 7), rotate=45, p=1.0)], ids=lambda op: type(op).__name__)
def test_erasing_agrees_on_the_gpu(op):
    x = run(SIZE, varied_images(8))
    params = params_of(op, 8)
    cpu = op.apply(x, params, draws_of(8))
    gpu = op.apply(x.cuda(), params, draws_of(8)).cpu()
    torch.testing.assert_close(gpu, cpu, atol=2e-5, rtol=0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_random_noise_in_the_rectangles_alone_equals_the_whole_field(device):
    """RandomErasing(value="random") computes noise for its rectangles' pixels only: the same
    numbers as the whole per-sample field (pixelwise.fill, Draws.normal_field), bit for bit, on
    the CPU and on a GPU (where noise_on_device makes them)."""
    from pixelpipe.ops.erasing import fill, noise_in_rectangles
    from pixelpipe.ops.pixelwise import inside

    op = pp.RandomErasing(p=0.6, value="random")
    n, c, h, w = 12, 3, 23, 31
    x = torch.rand(n, c, h, w).to(device)
    draws = Draws(7, 2, np.arange(100, 100 + n), 3)
    params = op.sample(draws, np.tile([h, w], (n, 1)).astype(np.float64))
    rows = np.flatnonzero((params["height"] > 0) & (params["width"] > 0))
    assert 0 < len(rows) < n
    where = inside(params["top"], params["left"], params["top"] + params["height"],
                   params["left"] + params["width"], (h, w), x.device)
    whole = fill(x, where, "random", draws, op.draws, rows)
    alone = noise_in_rectangles(x, rows, params["top"], params["left"], params["height"], params["width"],
                                draws, op.draws)
    assert torch.equal(alone, whole) and not torch.equal(alone, x)
    assert torch.equal(op.apply(x, params, draws), whole)
    # a channels-last input comes back contiguous with the same values
    cl = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(noise_in_rectangles(cl, rows, params["top"], params["left"], params["height"],
                                           params["width"], draws, op.draws), whole)


@pytest.mark.parametrize("shape", [(12, 3, 23, 31), (30, 1, 9, 17), (6, 3, 64, 48)])
def test_noise_made_on_the_device_is_the_cpu_paths(shape):
    """noise_on_device (the form a GPU runs: positions found and hashed on the device from one
    column of numbers per rectangle), run here on CPU tensors, writes the CPU path's bits into
    the rectangles and nothing elsewhere, for rows with per-sample epochs, grey and RGB, and
    rectangles of one pixel's width or height."""
    from pixelpipe.ops.erasing import noise_in_rectangles, noise_on_device

    n, c, h, w = shape
    x = torch.rand(n, c, h, w, generator=torch.Generator().manual_seed(n))
    idx, epoch = np.arange(50, 50 + n) * 3, np.arange(n) % 4
    draws = Draws(9, epoch, idx, 5, prefix(9, epoch, idx))
    op = pp.RandomErasing(p=0.7, scale=(0.001, 0.4), value="random")
    p = op.sample(draws, np.tile([h, w], (n, 1)).astype(np.float64))
    p["height"][0], p["width"][0], p["top"][0], p["left"][0] = 1, w, h - 1, 0  # a whole last row
    p["height"][1], p["width"][1], p["top"][1], p["left"][1] = h, 1, 0, w // 2  # a whole column
    p["height"][2] = 0  # none
    rows = np.flatnonzero((p["height"] > 0) & (p["width"] > 0))
    assert 2 < len(rows) < n
    want = noise_in_rectangles(x, rows, p["top"], p["left"], p["height"], p["width"], draws, op.draws)
    got = noise_on_device(x.clone(), rows, p["top"], p["left"], p["height"], p["width"], draws, op.draws)
    assert torch.equal(got, want) and not torch.equal(got, x)


@pytest.mark.parametrize("epoch", [0, np.array([0, 1, 2, 0, 5])])
def test_normal_noise_on_the_cpu_is_normal_field_at(epoch):
    """Draws.normal_field_at_np (numpy uint32 hashes in place, torch's log and cos) against its twin
    Draws.normal_field_at: the same bits, at elements anywhere in a field (the counter's top
    bits included) and for rows in any order, repeated or not."""
    idx = np.array([3, 70, 12, 5, 1 << 33])
    draws = Draws(7, epoch, idx, 4, prefix(7, epoch, idx))
    rng = np.random.default_rng(0)
    samples = rng.integers(0, 5, 5000)
    elements = np.concatenate([rng.integers(0, 3 * 224 * 224, 4995), [0, 1, (1 << 31) - 1, 12345, 12345]])
    for draw in (0, 23, 1000003):
        want = draws.normal_field_at(draw, samples, elements)
        got = draws.normal_field_at_np(draw, samples, elements)
        assert got.dtype == torch.float32 and torch.equal(got, want)
