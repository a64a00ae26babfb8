"""The Pipeline on CUDA with the GPU decoder: the bad-input policies apply to files that only
fail when decoded (their headers are fine), and GPU-decoded batches equal the CPU path's within
the decoders' tolerance. Needs CUDA and nvImageCodec; skips otherwise."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch
from PIL import Image

from pixelpipe import CenterCrop, Compose, GpuDecoding, Pipeline, Resize, SampleError
from pixelpipe.decode.gpu import gpu_decoder_available
from pixelpipe.readers import Memory

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")', allow_module_level=True)


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(60, 200, 2))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x * y) % 256], -1) + rng.normal(0, 10, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _samples() -> list[tuple[bytes, int]]:
    good = [(_jpeg(i), i) for i in range(10)]
    truncated = _jpeg(99)
    good[4] = (truncated[: len(truncated) // 3], 4)  # header intact; the scan stops short
    return good


def _ops() -> Compose:
    return Compose([Resize(40), CenterCrop(32)], dtype=torch.float32)


@pytest.mark.parametrize("decode_thread", [False, True])
def test_skip_applies_to_files_failing_in_the_decoder(decode_thread: bool) -> None:
    with Pipeline(Memory(_samples()), _ops(), 4, device="cuda", shuffle=False, on_error="skip",
                  decode_thread=decode_thread) as pipe:
        batches = list(pipe)
    seen = torch.cat([b["index"].cpu() for b in batches]).tolist()
    assert 4 not in [i for b in batches for i, v in zip(b["index"].tolist(), b["valid"].tolist()) if v]
    assert sorted(set(seen) - {4}) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert all(b["image"].shape[0] == 4 for b in batches)
    assert [e[0] for e in pipe.errors] == [4]


@pytest.mark.parametrize("decode_thread", [False, True])
def test_raise_names_the_sample_failing_in_the_decoder(decode_thread: bool) -> None:
    with Pipeline(Memory(_samples()), _ops(), 4, device="cuda", shuffle=False, decode_thread=decode_thread) as pipe:
        with pytest.raises(SampleError, match="4"):
            list(pipe)


@pytest.mark.parametrize("fancy, levels", [(True, 1.5), (False, 3.0)])
def test_gpu_batches_match_the_cpu_path(fancy: bool, levels: float) -> None:
    """Same samples, same augmentation; pixels within the GPU decoder's difference from
    libjpeg (mean < 1.5 levels with fancy upsampling, as tests/test_decode_gpu.py states it;
    < 3 with the default replicated chroma). Outputs are floats in [0, 1]: levels / 255."""
    data = [(_jpeg(i), i) for i in range(8)]
    outs = []
    for device in ("cpu", "cuda"):
        ops = Compose(_ops().ops, dtype=torch.float32)
        with Pipeline(Memory(data), ops, 4, device=device, seed=3, gpu=GpuDecoding(fancy_upsampling=fancy)) as pipe:
            outs.append(torch.cat([b["image"].cpu() for b in pipe]))
    assert outs[0].shape == outs[1].shape
    assert float((outs[0] - outs[1]).abs().mean()) * 255 < levels


def test_the_decode_thread_gives_the_same_batches() -> None:
    """Decoding on a third thread and stream changes only when the work runs, not the bits."""
    data = [(_jpeg(i), i) for i in range(12)]
    outs = []
    for decode_thread in (False, True):
        with Pipeline(Memory(data), _ops(), 4, device="cuda", seed=5, decode_thread=decode_thread) as pipe:
            outs.append([torch.cat([b["image"].cpu() for b in pipe]) for _ in range(2)])
    assert all(torch.equal(a, b) for a, b in zip(outs[0], outs[1]))


@pytest.mark.parametrize("lanes", [2, 3])
def test_decoder_lanes_give_the_same_batches(lanes: int) -> None:
    """Consecutive batches decoded on alternate decoder lanes, on as many threads: the same
    bits as one lane, the same bad samples skipped, every delivered sample counted as decoded
    on the GPU. (Not the same counts: a batch that fails is made again, and so are the batches
    planned after it, whose decodes count as many times as they ran; how many had been decoded
    depends on timing, with one lane as with several.)"""
    outs, errors, counts, valid, delivered = [], [], [], [], []
    for n in (1, lanes):
        ops = Compose(_ops().ops, dtype=torch.float32)
        with Pipeline(Memory(_samples() * 3), ops, 4, device="cuda", seed=5, on_error="skip",
                      gpu=GpuDecoding(lanes=n)) as pipe:
            epochs = [list(pipe) for _ in range(2)]
            outs.append([torch.cat([b["image"].cpu() for b in bs]) for bs in epochs])
            valid.append(sum(int(b["valid"].sum()) for bs in epochs for b in bs))
            delivered.append((sum(b["image"].shape[0] for bs in epochs for b in bs), pipe.stats.as_dict()))
            errors.append([e[0] for e in pipe.errors])
            counts.append(pipe.engine.decode_stats.as_dict())
    assert all(torch.equal(a, b) for a, b in zip(outs[0], outs[1]))
    assert errors[0] == errors[1] and set(errors[0]) == {4, 14, 24}
    assert valid[0] == valid[1] == 2 * 27
    for c in counts:
        assert c["gpu"] >= valid[0] and c["cpu"] == 0, c
    for total, stats in delivered:  # the pipeline's own counts: exactly what it delivered
        assert stats["gpu"] == total and stats["cpu"] == stats["cpu_fallback"] == 0, stats


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(_jpeg(seed))).save(buf, "PNG")
    return buf.getvalue()


def _cmyk_jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(_jpeg(seed))).convert("CMYK").save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.mark.parametrize("decode_thread", [False, True])
def test_fallbacks_are_counted_with_their_reasons(decode_thread: bool) -> None:
    """PNGs and CMYK JPEGs in GPU batches go to the CPU decoder: pipe.stats counts them, per
    reason and by sample index, and the JPEGs nvImageCodec took."""
    samples = [(_jpeg(i), i) for i in range(12)]
    samples[2] = (_png(2), 2)
    samples[7] = (_png(7), 7)
    samples[9] = (_cmyk_jpeg(9), 9)
    with Pipeline(Memory(samples), _ops(), 4, device="cuda", shuffle=False, decode_thread=decode_thread) as pipe:
        for _ in range(2):
            list(pipe)
        stats = pipe.stats
    assert (stats.gpu, stats.cpu_fallback, stats.cpu, stats.cached) == (18, 6, 0, 0)
    reasons = {r.split(":")[0]: n for r, n in stats.fallback_reasons.items()}
    assert reasons == {"png": 4, "4-component (CMYK/YCCK) JPEG": 2}, stats.fallback_reasons
    assert [i for i, _ in stats.fallback_examples] == [2, 7, 9, 2, 7, 9]


def test_lanes_fall_back_to_one_with_the_python_binding(monkeypatch) -> None:
    """Without nvImageCodec's C API the decoder has one lane whatever Compose asks for: a
    Pipeline asking for two still gives every batch, with the same bits."""
    from pixelpipe.decode import nvimgcodec_c

    data = [(_jpeg(i), i) for i in range(12)]
    outs = []
    for lanes in (1, 2):
        monkeypatch.setattr(nvimgcodec_c, "load", lambda: None)
        ops = Compose(_ops().ops, dtype=torch.float32)
        with Pipeline(Memory(data), ops, 4, device="cuda", seed=5, gpu=GpuDecoding(lanes=lanes)) as pipe:
            outs.append(torch.cat([b["image"].cpu() for b in pipe]))
            decoder = pipe.engine.gpu_decoder(pipe.device)
            assert decoder.api == "python" and decoder.lanes == 1
    assert torch.equal(outs[0], outs[1])


def test_gpu_memory_stays_flat_across_epochs_and_close_returns_it() -> None:
    """Over five epochs (same batches every epoch: shuffle off) the device's used memory
    (nvImageCodec's own buffers included) grows by at most 64 MiB, plus, with pixelpipe's
    allocators for nvImageCodec, the per-thread buffers its CUDA decoder makes on a thread's
    first image (one device buffer of DEVICE_PADDING per executor thread and the caller, in the
    pool's 32 MiB chunks: a plateau, which this test's 6 CUDA-decoded images per epoch reach
    only over several epochs, where a real epoch reaches it in its first batches). Torch's
    high-water mark (which holds the decoder's output buffers too) after epoch 5 exceeds the
    one after epoch 1 by at most one batch's buffers: the batches in flight are bounded
    (prefetch depth, one decoding, one finishing), but which of them coexist on the allocator
    at its peak depends on thread timing (measured on an H100, in bytes: [735744, 904704,
    977408, 977408, 977408] and [811520, 811520, 811520, 811520, 877568]: plateaus, not
    growth; a 1% bound fails such runs). After close() torch holds what it held before, give
    or take 64 KiB of per-device constants made once."""
    from pixelpipe.decode.nvimgcodec_alloc import DEVICE_PADDING

    data = [(_jpeg(i), i) for i in range(24)]
    batch = 8
    biggest = sorted((Image.open(io.BytesIO(b)).size for b, _ in data), key=lambda s: -s[0] * s[1])[:batch]
    one_batch = sum(w * h * 3 for w, h in biggest) + batch * 3 * 32 * 32 * 4  # decoded regions + output
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    pipe = Pipeline(Memory(data), _ops(), batch, device="cuda", seed=0, shuffle=False)
    peaks, used = [], []
    for _ in range(5):
        assert sum(len(b["image"]) for b in pipe) == len(data)  # keeps no batch alive
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        free, total = torch.cuda.mem_get_info()
        used.append(total - free)
    decoder = pipe.engine.gpu_decoder(pipe.device)
    chunk = 32 << 20
    per_thread = -(-(decoder.num_cpu_threads + 1) * DEVICE_PADDING // chunk) * chunk if decoder.allocators_used else 0
    assert peaks[-1] <= peaks[0] + one_batch, (peaks, one_batch)
    assert used[-1] - used[0] <= (64 << 20) + per_thread, (used, per_thread)
    pipe.close()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before + (64 << 10), (torch.cuda.memory_allocated(), before)


def test_the_gpu_cache_is_filled_by_nvimagecodec() -> None:
    """cache="gpu": the first epoch decodes the missing samples whole with nvImageCodec (the
    PNG through its CPU fallback), so the cache holds exactly what GpuDecoder.decode_regions
    gives; pipe.stats says so, and the second epoch only reads the cache."""
    from pixelpipe.decode.gpu import GpuDecoder

    samples = [(_jpeg(i), i) for i in range(6)]
    samples[3] = (_png(3), 3)
    ops = Compose(_ops().ops, dtype=torch.float32)
    with Pipeline(Memory(samples), ops, 4, device="cuda", shuffle=False, cache="gpu",
                  gpu=GpuDecoding(hw_fraction=None)) as pipe:  # one JPEG decoder: the same pixels
        list(pipe)
        first = pipe.stats.as_dict()
        list(pipe)
        cache = pipe._cache.cache
        stored = [cache.batch([i])[0].clone() for i in range(6)]
        assert pipe.stats.cached == first["cached"] + 8
    assert (first["gpu"], first["cpu_fallback"], first["cpu"], first["cached"]) == (5, 1, 0, 2), first
    dec = GpuDecoder(torch.device("cuda"), hw_fraction=None)
    try:
        want, fallback, _ = dec.decode_regions([blob for blob, _ in samples])
    finally:
        dec.close()
    assert fallback == [3]
    for i in range(6):
        assert torch.equal(stored[i], want[i]), i


def test_a_decoder_following_its_consumer_uses_the_second_decoder_while_ahead() -> None:
    """GpuDecoding(ahead_fraction=None): a consumer slower than the Pipeline gets batches
    planned on the second decoder (the hardware decoder takes every JPEG it can), a consumer
    that waits for every batch gets the first decoder's; the batches are the same samples,
    the same crops, within the two decoders' difference (a few grey levels at most)."""
    samples = [(_jpeg(i), i) for i in range(48)]
    off = Pipeline(Memory(samples), _ops(), 4, device="cuda", shuffle=False)
    want = [b["image"].cpu() for b in off]
    pipe = Pipeline(Memory(samples), _ops(), 4, device="cuda", shuffle=False, gpu=GpuDecoding(ahead_fraction=None))
    got = []
    for b in pipe:
        got.append(b["image"].cpu())
        time.sleep(0.05)  # a consumer much slower than the Pipeline
    first, second = pipe.engine.lanes.counts
    assert second > first > 0  # the first batches found nothing waiting; then it ran ahead
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and (g - w).abs().mean() < 1.5 / 255 and (g - w).abs().max() < 40 / 255
    off.close()
    pipe.close()
