"""The CPU pixel stage in pieces over the Engine's threads (engine.pixels): the same bits as one
piece on one thread, for any thread count and piece size."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from helpers import varied_images

import pixelpipe as pp
import pixelpipe.engine.engine as engine_module
import pixelpipe.engine.pixels as pixels
from pixelpipe import presets
from pixelpipe.data.random import Draws

SIZE = 32
NORM = pp.Normalize(presets.IMAGENET_MEAN, presets.IMAGENET_STD)


def _composes() -> dict[str, pp.Compose]:
    crop = [pp.RandomResizedCrop(SIZE), pp.RandomFlip(0.5)]
    return {
        "simclr": presets.simclr(SIZE),
        "simclr_nhwc": presets.simclr(SIZE, dtype=torch.bfloat16, layout="NHWC"),  # Normalize last, into NHWC
        "deit": presets.deit(SIZE),
        "randaugment": pp.Compose(crop + [pp.RandAugment(2, 9), NORM, pp.RandomErasing(0.5, value="random")]),
        "policies": pp.Compose(crop + [pp.AutoAugment("imagenet"), pp.TrivialAugmentWide()], dtype=torch.uint8),
        "levels": pp.Compose(crop + [pp.RandomEqualize(0.5), pp.RandomAutocontrast(0.5), pp.RandomPosterize(4),
                                     pp.RandomSolarize(0.6), pp.RandomSharpness(0.5)], layout="NHWC"),
        "filters": pp.Compose(crop + [pp.MedianBlur((3, 5), p=0.5), pp.MotionBlur(5, p=0.5),
                                      pp.GaussianBlur(7, p=0.5), pp.GaussianNoise(0.05, p=0.5),
                                      pp.Cutout(8, num_holes=2, value="random"), pp.GridMask((8, 16), p=0.5)],
                              dtype=torch.float16),
        "others": pp.Compose(crop + [pp.AugMix(), pp.JpegQuality((40, 90)), pp.RandomHSV(0.1, 0.3, 0.3),
                                     pp.SaltAndPepper(), pp.RandomGamma(p=0.5)]),
    }


COMPOSES = _composes()


@pytest.fixture
def images() -> list[torch.Tensor]:
    return varied_images(21, 40, 72, seed=5)


def _run(t: pp.Compose, images, threads: int, piece: int, monkeypatch, **kwargs) -> torch.Tensor:
    monkeypatch.setattr(pixels, "PIECE", piece)
    with pp.Engine(num_threads=threads) as engine:
        return t(images, engine=engine, seed=11, **kwargs)


@pytest.mark.parametrize("name", sorted(COMPOSES))
def test_pieces_on_threads_give_the_bits_of_one_piece_on_one_thread(name, images, monkeypatch):
    t = COMPOSES[name]
    assert t.stages[-1].pixels  # the pipeline has a pixel stage to split
    whole = _run(t, images, 1, 1000, monkeypatch)
    for threads, piece in [(2, 1), (2, 8), (3, 5), (4, 4), (1, 3)]:
        got = _run(t, images, threads, piece, monkeypatch)
        assert got.dtype == whole.dtype and got.shape == whole.shape and got.stride() == whole.stride()
        assert torch.equal(got, whole), (name, threads, piece)


def test_pieces_take_their_rows_epochs_and_indices(images, monkeypatch):
    t = COMPOSES["randaugment"]
    epoch = np.arange(len(images)) % 3
    idx = np.arange(len(images)) * 7 + 100
    whole = _run(t, images, 1, 1000, monkeypatch, epoch=epoch, indices=idx)
    got = _run(t, images, 2, 4, monkeypatch, epoch=epoch, indices=idx)
    assert torch.equal(got, whole)
    # and the rows differ from another epoch's: the epochs reach the pieces
    other = _run(t, images, 2, 4, monkeypatch, epoch=epoch + 1, indices=idx)
    assert not torch.equal(other, whole)


def test_pixel_ops_run_on_the_engine_threads_with_one_torch_thread(images, monkeypatch):
    seen: list[tuple[str, int, int]] = []
    lock = threading.Lock()

    def record(x: torch.Tensor) -> torch.Tensor:
        with lock:
            seen.append((threading.current_thread().name, torch.get_num_threads(), x.shape[0]))
        return x

    t = pp.Compose([pp.Resize((16, 16)), pp.Lambda(record, per_sample=True)])
    _run(t, images, 2, 4, monkeypatch)
    assert sorted(n for _, _, n in seen) == [1, 4, 4, 4, 4, 4]
    assert all(name.startswith("pixelpipe-decode") for name, _, _ in seen)
    assert all(k == 1 for _, k, _ in seen)


def test_a_lambda_gets_the_whole_batch_unless_it_is_per_sample(images, monkeypatch):
    t = pp.Compose([pp.Resize((16, 16)), pp.Lambda(lambda x: x - x.mean())])  # a batch statistic
    whole = _run(t, images, 1, 1000, monkeypatch)
    assert torch.equal(_run(t, images, 2, 4, monkeypatch), whole)
    sizes: list[int] = []
    t = pp.Compose([pp.Resize((16, 16)), pp.Lambda(lambda x: sizes.append(x.shape[0]) or x)])
    _run(t, images, 2, 4, monkeypatch)
    assert sizes == [len(images)]


def test_the_first_failing_piece_raises(images, monkeypatch):
    def fail(x: torch.Tensor, draws) -> torch.Tensor:
        first = int(draws.indices[0])
        if first >= 8:
            raise RuntimeError(f"piece from {first}")
        return x

    t = pp.Compose([pp.Resize((16, 16)), pp.Lambda(fail, per_sample=True)])
    with pytest.raises(RuntimeError, match="piece from 8$"):
        _run(t, images, 3, 4, monkeypatch)


def test_pieces_that_disagree_on_the_size_are_an_error(images, monkeypatch):
    def grow(x: torch.Tensor, draws) -> torch.Tensor:
        return x if int(draws.indices[0]) == 0 else torch.nn.functional.pad(x, (0, 1))

    t = pp.Compose([pp.Resize((16, 16)), pp.Lambda(grow, per_sample=True)])
    with pytest.raises(ValueError, match="every sample of a batch must come out alike"):
        _run(t, images, 2, 4, monkeypatch)


def test_an_empty_batch_and_one_sample(images, monkeypatch):
    t = COMPOSES["simclr"]
    assert _run(t, [], 2, 4, monkeypatch).shape == (0, 3, SIZE, SIZE)
    one = _run(t, images[:1], 2, 4, monkeypatch)
    assert torch.equal(one, _run(t, images, 1, 1000, monkeypatch)[:1])


@pytest.mark.parametrize("keep", [True, False])
def test_cpu_pixel_ops_keep_host_memory_as_the_engine_says(images, monkeypatch, keep):
    import pixelpipe.engine.process as process

    calls: list[int] = []
    monkeypatch.setattr(process, "keep_host_memory", lambda: calls.append(1) or True)
    with pp.Engine(num_threads=2, gpu=pp.GpuDecoding(keep_host_memory=keep)) as engine:
        pp.Compose([pp.Resize((16, 16))])(images, engine=engine)  # no pixel ops: nothing asked
        assert calls == []
        COMPOSES["simclr"](images, engine=engine)
    assert bool(calls) == keep


@pytest.mark.parametrize("name", sorted(COMPOSES))
def test_owned_pieces_give_the_numbers_of_a_copy(name, images, monkeypatch):
    """The Engine hands its warped batch over to be overwritten (owned=True): Normalize in
    place, the ops' apply_owned (the policies' pixel part, RandomErasing) writing into it. The
    same bits as the ops' apply() on a batch that is left as it was (owned=False)."""
    caught = []
    real = pixels.pixel_pieces

    def catch(stage, x, *args, **kwargs):
        assert kwargs.get("owned") is True
        caught.append((stage, x.clone(), args[:-1], kwargs))
        return real(stage, x, *args, **kwargs)

    monkeypatch.setattr(engine_module, "pixel_pieces", catch)
    monkeypatch.setattr(pixels, "PIECE", 4)
    with pp.Engine(num_threads=2) as engine:
        COMPOSES[name](images, engine=engine, seed=3)
    assert caught
    for stage, x, args, kwargs in caught:
        given = x.clone()
        plain = real(stage, given, *args, map, **{**kwargs, "owned": False})
        assert torch.equal(given, x), "a batch that was not owned was written to"
        owned = real(stage, x.clone(), *args, map, **kwargs)
        assert owned.dtype == plain.dtype and owned.stride() == plain.stride()
        assert torch.equal(owned, plain)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_normalize_on_the_cpu_is_addcmul(layout, dtype):
    """normalize_cpu (one fused add per channel) against torch.addcmul with per-channel
    operands: both round x * scale + bias once where torch's CPU kernels fuse them (as on the
    AVX2 and AVX-512 machines measured: the same bits); 1 float32 rounding apart otherwise."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(5, 3, 17, 23, generator=g) * 1.2 - 0.1
    scale = (1.0 / torch.tensor(presets.IMAGENET_STD)).view(1, 3, 1, 1)
    bias = (-torch.tensor(presets.IMAGENET_MEAN) * scale.view(3)).view(1, 3, 1, 1)
    want = torch.addcmul(bias, x, scale)
    torch.testing.assert_close(pixels.normalize_cpu(x, scale, bias), want, atol=5e-7, rtol=0)
    out = torch.empty((5, 17, 23, 3) if layout == "NHWC" else (5, 3, 17, 23), dtype=dtype)
    view = out.permute(0, 3, 1, 2) if layout == "NHWC" else out
    assert pixels.normalize_cpu(x, scale, bias, view).data_ptr() == out.data_ptr()
    torch.testing.assert_close(view, want.to(dtype), atol=5e-7 if dtype == torch.float32 else 2e-3, rtol=0)
    inplace = x.clone()
    pixels.normalize_cpu(inplace, scale, bias, inplace)
    assert torch.equal(inplace, pixels.normalize_cpu(x, scale, bias))


@pytest.mark.parametrize("name", ["randaugment", "deit", "filters"])
def test_pixel_blocks_are_the_ops_own_draws(name):
    """The leading draws pixel_pieces hashes once per batch (pixel_blocks) are the numbers each
    op's Draws would hash itself, row for row; draws past them are hashed as before."""
    stage = COMPOSES[name].stages[-1]
    idx = np.arange(10) * 3 + 1
    epoch = np.arange(10) % 2
    prefixes = pixels.pixel_prefixes(stage, 5, epoch, idx)
    blocks = pixels.pixel_blocks(stage, prefixes)
    assert len(blocks) == len(stage.pixels)
    for (pos, op), pre, block in zip(stage.pixels, prefixes, blocks):
        assert block.shape == (10, op.draws)
        plain, given = Draws(5, epoch, idx, pos, pre), Draws(5, epoch, idx, pos, pre, block)
        for d in range(op.draws + 2):
            assert np.array_equal(given.uniform_np(d), plain.uniform_np(d)), (type(op).__name__, d)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(COMPOSES))
def test_owned_batch_on_the_gpu_gives_the_numbers_of_a_copy(name, images, monkeypatch):
    """On a GPU the Engine hands its warped batch over too (owned=True: the policies' pixel
    part, RandomErasing and GaussianBlur's kernel write into it): the same bits as run_pixels
    on a batch it may not write to, which it leaves as it was."""
    caught = []
    real = pixels.run_pixels

    def catch(stage, x, *args, **kwargs):
        assert kwargs.get("owned") is True
        caught.append((stage, x.clone(), args, kwargs))
        return real(stage, x, *args, **kwargs)

    monkeypatch.setattr(engine_module, "run_pixels", catch)
    COMPOSES[name](pp.ImageBatch.from_list(images).to("cuda"), seed=3)
    assert caught
    for stage, x, args, kwargs in caught:
        given = x.clone()
        plain = real(stage, given, *args, **{**kwargs, "owned": False})
        assert torch.equal(given, x), "a batch that was not owned was written to"
        assert torch.equal(real(stage, x.clone(), *args, **kwargs), plain)


@pytest.mark.parametrize("dtype, layout", [(torch.float16, "NCHW"), (torch.bfloat16, "NHWC"), (torch.float32, "NHWC"),
                                           (torch.float32, "NCHW")])
@pytest.mark.parametrize("owned", [False, True])
def test_the_last_pass_writes_the_output(dtype, layout, owned):
    """run_pixels without a dest (one batch: a GPU's) makes the output itself where that saves a
    pass (Normalize last into another dtype, an NHWC output) and Normalize casts as it stores
    into it: the numbers of Normalize then the output form (finish_tensor), on the same rows."""
    from pixelpipe.plan.output import finish_tensor

    t = presets.simclr(SIZE, dtype=dtype, layout=layout)
    stage, output = t.stages[-1], t.program.output
    n = 6
    x = torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    idx = np.arange(n)
    prefixes = pixels.pixel_prefixes(stage, 2, 0, idx)
    given = x.clone()
    got = pixels.run_pixels(stage, given, 2, 0, idx, prefixes, output, False, owned=owned)
    y = pixels.run_pixels(stage, x.clone(), 2, 0, idx, prefixes, None, False)  # blurred and normalised
    want = finish_tensor(y, output)
    assert got.dtype == dtype and got.shape == want.shape and got.is_contiguous()
    assert torch.equal(got, want)
    if not owned:
        assert torch.equal(given, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_noise_erasing_after_normalize_stores_into_the_output_with_the_bits_of_a_cast(dtype, images, monkeypatch):
    """RandomErasing's noise after Normalize on the CPU: Normalize writes the float16 / bfloat16
    output and the noise goes into it (engine.pixels._stores_after_cast), the same bits as the
    float32 pipeline's output cast; a constant fill or an NHWC output keeps the float32 chain."""
    ops = [pp.RandomResizedCrop(SIZE), pp.RandomFlip(0.5), pp.RandAugment(2, 9), NORM,
           pp.RandomErasing(0.7, value="random")]
    low, full = pp.Compose(ops, dtype=dtype), pp.Compose(ops)
    stage = low.stages[-1]
    x = torch.zeros(1, 3, SIZE, SIZE)
    assert pixels._stores_after_cast(stage, stage.normalize_at, low.program.output, x)
    assert not pixels._stores_after_cast(stage, stage.normalize_at, pp.Compose(ops, dtype=dtype, layout="NHWC").program.output, x)
    constant = pp.Compose(ops[:-1] + [pp.RandomErasing(0.7, value=0.3)], dtype=dtype)
    assert not pixels._stores_after_cast(constant.stages[-1], constant.stages[-1].normalize_at, constant.program.output, x)
    calls = []
    real = pixels._stores_after_cast
    monkeypatch.setattr(pixels, "_stores_after_cast", lambda *a: calls.append(real(*a)) or calls[-1])
    for threads, piece in [(1, 1000), (2, 3)]:
        got = _run(low, images, threads, piece, monkeypatch)
        want = _run(full, images, threads, piece, monkeypatch).to(dtype)
        assert got.dtype == dtype and torch.equal(got, want), (threads, piece)
    assert True in calls
    erased = _run(pp.Compose(ops[:-1], dtype=dtype), images, 1, 1000, monkeypatch)
    assert not torch.equal(erased, got)  # rectangles of noise were written


def test_noise_after_normalize_reaches_a_strided_destination():
    """The folded chain writes its result into the caller's rows even where they are not
    contiguous (the noise then goes into a copy, which is copied there)."""
    ops = [pp.RandomResizedCrop(SIZE), pp.RandAugment(2, 9), NORM, pp.RandomErasing(1.0, value="random")]
    t = pp.Compose(ops, dtype=torch.float16)
    stage, output = t.stages[-1], t.program.output
    n = 5
    x = torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(7))
    idx = np.arange(n)
    prefixes = pixels.pixel_prefixes(stage, 3, 0, idx)
    assert pixels._stores_after_cast(stage, stage.normalize_at, output, x)
    wide = torch.zeros(n, 3, SIZE, 2 * SIZE, dtype=torch.float16)
    rows = wide[..., ::2]
    got = pixels.run_pixels(stage, x.clone(), 3, 0, idx, prefixes, output, False, dest=lambda y: rows, owned=True)
    want = pixels.run_pixels(stage, x.clone(), 3, 0, idx, prefixes, None, False).to(torch.float16)
    assert got is rows and torch.equal(rows, want)
    assert torch.count_nonzero(wide[..., 1::2]) == 0  # nothing written between the rows
