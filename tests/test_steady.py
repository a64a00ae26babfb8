"""Steady batch-buffer sizes (decode/steady.py): the sizing rule, the CPU samples' upload buffer,
and on a GPU the decoder's buffers and a Pipeline's peak memory over epochs (those skip without
CUDA and nvImageCodec)."""

from __future__ import annotations

import io
from concurrent.futures import Future

import numpy as np
import pytest
import torch
from PIL import Image

from pixelpipe.decode.gpu_fallback import CpuUpload
from pixelpipe.decode.steady import HighWater

MIB = 1 << 20


def test_needs_near_the_mark_get_one_size_with_headroom():
    hw = HighWater(headroom=1.25, align=2 * MIB)
    first = hw.size(100 * MIB)
    assert first == 126 * MIB  # 125 MiB rounded up to 2 MiB
    for need in (63 * MIB, 64 * MIB, 99 * MIB, 100 * MIB, 120 * MIB, 126 * MIB):
        assert hw.size(need) == first, need


def test_a_larger_need_raises_the_mark_and_it_never_falls():
    hw = HighWater(headroom=1.25, align=2 * MIB)
    hw.size(100 * MIB)
    grown = hw.size(127 * MIB)
    assert grown >= 127 * MIB * 1.25 and grown % (2 * MIB) == 0
    assert hw.size(100 * MIB) == grown  # still at least half the mark: the same size
    assert hw.mark == grown


def test_needs_under_half_the_mark_get_their_exact_size():
    hw = HighWater()
    hw.size(64 * MIB)
    assert hw.size(1000) == 1000
    assert hw.size(0) == 0
    assert hw.size(hw.mark // 2 - 1) == hw.mark // 2 - 1


def test_every_size_holds_its_need():
    hw = HighWater(headroom=1.0, align=1)
    rng = np.random.default_rng(0)
    for need in rng.integers(0, 10**9, 200).tolist():
        assert hw.size(need) >= need


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="headroom"):
        HighWater(headroom=0.9)
    with pytest.raises(ValueError, match="align"):
        HighWater(align=0)
    with pytest.raises(ValueError, match="need"):
        HighWater().size(-1)


def test_pool_usage_is_none_without_a_pool():
    from pixelpipe.decode.nvimgcodec_alloc import pool_usage

    assert pool_usage(12345) is None


def test_cpu_upload_in_a_steady_buffer_holds_the_same_samples():
    """The CPU samples copied into a buffer sized by HighWater (larger than they need): the same
    places and bytes as in an exact buffer."""
    rng = np.random.default_rng(3)
    arrays = {i: rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for i, (h, w) in enumerate([(5, 7), (9, 4), (3, 3)])}
    made = []
    for steady in (None, HighWater(headroom=1.5, align=64)):
        futures = {i: Future() for i in arrays}
        upload = CpuUpload(futures, torch.device("cpu"), None, steady)
        for i, a in arrays.items():
            futures[i].set_result(a)
        assert upload.wait(1)
        made.append(upload)
    exact, steady_up = made
    need = sum(a.size for a in arrays.values())
    assert exact.data.numel() == need and steady_up.data.numel() > need
    assert steady_up.places == exact.places
    assert torch.equal(steady_up.data[:need], exact.data)


# ----------------------------------------------------------------------------------- GPU
def _gpu() -> None:
    from pixelpipe.decode.gpu import gpu_decoder_available

    if not gpu_decoder_available():
        pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")')


def _jpegs(n: int, seed: int, lo: int = 64, hi: int = 320) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(lo, hi, 2))
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([x * 255 // w, y * 255 // h, (x ^ y) % 256], -1) + rng.normal(0, 8, (h, w, 3))
        buf = io.BytesIO()
        Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def test_gpu_decoder_steady_buffers_keep_one_size_and_the_same_pixels():
    """Batches of different total sizes (within the headroom) decode into nvImageCodec output
    buffers of one size with steady_buffers, and into exact ones without; the images are the
    same bits."""
    _gpu()
    from pixelpipe.decode.gpu import GpuDecoder

    cuda = torch.device("cuda")
    steady = GpuDecoder(cuda, hw_fraction=0.0, roi_decode=False, steady_buffers=True)
    exact = GpuDecoder(cuda, hw_fraction=0.0, roi_decode=False)
    pool = _jpegs(48, seed=1)
    rng = np.random.default_rng(2)
    sizes: dict[str, set[int]] = {"steady": set(), "exact": set()}
    stream = torch.cuda.current_stream()
    try:
        for _ in range(4):
            blobs = [pool[i] for i in rng.choice(len(pool), 32, replace=False)]
            got = {}
            for name, dec in (("steady", steady), ("exact", exact)):
                views, fell, _ = dec.decode_views(blobs)
                assert fell == []
                buffers = {id(o.buffer): o.buffer.numel() for o in views._owners if hasattr(o, "buffer")}
                assert len(buffers) == 1  # one output buffer per batch
                sizes[name] |= set(buffers.values())
                got[name] = views.contiguous()
                views.retire(stream)
            torch.cuda.synchronize()
            need = int((got["exact"].table[:, 1] * got["exact"].table[:, 2] * 3).sum())
            assert need in sizes["exact"]
            assert torch.equal(got["steady"].table, got["exact"].table)
            assert torch.equal(got["steady"].data, got["exact"].data)
    finally:
        steady.close()
        exact.close()
    assert len(sizes["exact"]) == 4, "the batches were meant to need different sizes"
    assert len(sizes["steady"]) == 1, f"the steady buffers changed size: {sorted(sizes['steady'])}"
    assert min(sizes["steady"]) >= max(sizes["exact"])
    if steady.allocators_used:  # nvImageCodec's own buffers came from pixelpipe's pool
        from pixelpipe.decode.nvimgcodec_alloc import pool_usage

        usage = pool_usage(torch.cuda.current_device())
        assert usage is not None and usage[1] > 0


def test_pipeline_buffers_keep_one_size_over_epochs_and_change_no_pixel(monkeypatch):
    """A Pipeline's decode buffers take one size from its first batch on, over 4 epochs of
    random crops (so torch's allocator hands back the same blocks and its peak stays put: issue
    4, measured in benchmarks/gpu_memory_epochs.py); the batches are the same bits as with
    exact buffers."""
    _gpu()
    import pixelpipe as pp
    from pixelpipe.decode import steady as steady_mod
    from pixelpipe.readers import Memory

    blobs = _jpegs(128, seed=4, lo=200, hi=300)
    real = steady_mod.HighWater.size
    handed: list[tuple[int, int]] = []

    def logged(self, need: int) -> int:
        got = real(self, need)
        handed.append((need, got))
        return got

    def run(size) -> list[torch.Tensor]:
        monkeypatch.setattr(steady_mod.HighWater, "size", size)
        ops = pp.Compose([pp.RandomResizedCrop(64), pp.RandomFlip(),
                          pp.Normalize(mean=[0.5] * 3, std=[0.25] * 3)], dtype=torch.float16)
        out = []
        with pp.Pipeline(Memory(blobs), ops, 32, device="cuda", num_threads=4, prefetch=2, seed=0) as pipe:
            for _ in range(4):  # each iter() is the next epoch
                out += [b["image"].cpu() for b in pipe]
        return out

    steady_out = run(logged)
    exact_out = run(lambda self, need: need)
    first = handed[:16]  # 4 epochs of 4 batches, planned in order (then maybe some of the next)
    assert len(first) == 16 and len({need for need, _ in first}) > 8  # the batches' needs differ
    assert len({got for _, got in first}) == 1, first
    assert len(steady_out) == len(exact_out) == 16
    assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(steady_out, exact_out))
