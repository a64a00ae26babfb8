"""Decode statistics: DecodeStats sums batch records; a Pipeline counts the batches it
delivered (pipe.stats), its Compose every batch it decoded. The GPU side (nvImageCodec and
its CPU fallbacks) is in test_pipeline_gpu.py."""

from __future__ import annotations

import io
import time

import numpy as np
import torch
from PIL import Image

from pixelpipe import Compose, Pipeline, Resize
from pixelpipe.engine.stats import EXAMPLES, BatchDecode, DecodeStats
from pixelpipe.readers import Memory


def _png(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (24 + seed, 30, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _ops() -> Compose:
    return Compose([Resize((16, 16))], dtype=torch.float32)


def test_records_add_up() -> None:
    stats = DecodeStats()
    stats.add(BatchDecode(gpu=6, fallbacks=[(3, "png: no GPU decoder"), (9, "png: no GPU decoder")]))
    stats.add(BatchDecode(cpu=4, cached=2, fallbacks=[(12, "12-bit JPEG")]))
    assert (stats.gpu, stats.cpu_fallback, stats.cpu, stats.cached, stats.total) == (6, 3, 4, 2, 15)
    assert stats.fallback_reasons == {"png: no GPU decoder": 2, "12-bit JPEG": 1}
    assert stats.fallback_examples == [(3, "png: no GPU decoder"), (9, "png: no GPU decoder"), (12, "12-bit JPEG")]
    d = stats.as_dict()
    assert d["cpu_fallback"] == 3 and d["fallback_reasons"]["12-bit JPEG"] == 1
    assert "2 x png: no GPU decoder" in repr(stats)
    stats.reset()
    assert stats.total == 0 and not stats.fallback_reasons and not stats.fallback_examples


def test_examples_are_capped() -> None:
    stats = DecodeStats()
    for k in range(3):
        stats.add(BatchDecode(fallbacks=[(k * 100 + i, "webp") for i in range(EXAMPLES - 5)]))
    assert stats.cpu_fallback == 3 * (EXAMPLES - 5) and len(stats.fallback_examples) == EXAMPLES
    assert stats.fallback_examples[-1] == (100 + 4, "webp")  # the first ones, in order


def test_a_pipeline_counts_what_it_delivered() -> None:
    """10 samples in batches of 4: 12 per epoch with the padding, each decoded on the CPU."""
    with Pipeline(Memory([(_png(i), i) for i in range(10)]), _ops(), 4, num_threads=2) as pipe:
        for epoch in range(2):
            n = sum(b["image"].shape[0] for b in pipe)
            assert n == 12
            assert (pipe.stats.cpu, pipe.stats.gpu, pipe.stats.cpu_fallback) == (12 * (epoch + 1), 0, 0)
        assert pipe.engine.decode_stats.cpu >= 24  # and the batches it made ahead into epoch 2


def test_batches_made_ahead_and_dropped_are_not_counted() -> None:
    """The consumer stops after one batch; the pipeline had decoded more ahead of it (its
    Compose counts those), but pipe.stats holds only the delivered one."""
    with Pipeline(Memory([(_png(i), i) for i in range(40)]), _ops(), 4, num_threads=2, prefetch=3) as pipe:
        it = iter(pipe)
        next(it)
        deadline = time.monotonic() + 10
        while pipe.engine.decode_stats.cpu <= 4 and time.monotonic() < deadline:  # it works ahead
            time.sleep(0.01)
        ahead = pipe.engine.decode_stats.cpu
        del it  # the epoch is abandoned
        assert pipe.stats.cpu == 4 and pipe.stats.total == 4
    assert ahead > 4


def test_a_skipped_sample_is_not_counted() -> None:
    """A corrupt file under on_error="skip": the batch is made again without it, and only the
    delivered batches count (9 good samples + 3 of padding)."""
    samples = [(_png(i), i) for i in range(10)]
    bad = samples[5][0]
    samples[5] = (bad[:40] + b"\0" * (len(bad) - 40), 5)  # header intact, pixel data broken
    with Pipeline(Memory(samples), _ops(), 4, num_threads=2, on_error="skip", shuffle=False) as pipe:
        batches = list(pipe)
    assert [e[0] for e in pipe.errors] == [5]
    delivered = sum(b["image"].shape[0] for b in batches)
    assert delivered == 12 and pipe.stats.cpu == delivered


def test_the_cache_counts_hits() -> None:
    """cache="device": the first epoch decodes every sample once (a repeated one in the
    padding is a hit), later epochs only hit."""
    with Pipeline(Memory([(_png(i), i) for i in range(10)]), _ops(), 4, num_threads=2, cache="device") as pipe:
        list(pipe)
        assert pipe.stats.cpu == 10 and pipe.stats.cached == 2
        list(pipe)
        assert pipe.stats.cpu == 10 and pipe.stats.cached == 14


def test_samples_given_decoded_count_as_nothing() -> None:
    arrays = [(np.full((20, 20, 3), i, np.uint8), i) for i in range(8)]
    with Pipeline(Memory(arrays), _ops(), 4, num_threads=2) as pipe:
        list(pipe)
    assert pipe.stats.total == 0
