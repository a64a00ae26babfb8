"""GpuDecoder's native helpers on a GPU, each against its twin: pixelpipe's allocators for
nvImageCodec (decode/nvimgcodec_alloc.py, the default) against nvImageCodec's own, and a batch
decoded in one native call (native/decode.c) against the same calls made one by one from
Python. The same pixels bit for bit, batch after batch (so the buffers grow on the way). Needs
a CUDA device, nvImageCodec and the ImageNet sample; skipped otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pixelpipe.decode import read_header
from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")', allow_module_level=True)

SAMPLE = next((p for p in (Path("/work/shared/data/imagenet-sample"),
                           Path(__file__).resolve().parents[1] / ".gpu-host" / "data") if p.is_dir()),
              Path("/work/shared/data/imagenet-sample"))
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    paths = sorted(SAMPLE.glob("*.JPEG"))[:96] if SAMPLE.is_dir() else []
    out = [p.read_bytes() for p in paths]
    out = [b for b in out if read_header(b).channels in (1, 3)]
    if len(out) < 32:
        pytest.skip(f"these tests need the ImageNet sample in {SAMPLE}")
    return out


def batches(jpegs: list[bytes], seed: int) -> Iterator[tuple[list[bytes], list[tuple[int, int, int, int]]]]:
    """Batches of 32 of the sample, each with a random region per image."""
    rng = np.random.default_rng(seed)
    for start in range(0, len(jpegs), 32):  # growing images, so growing buffers
        blobs = jpegs[start:start + 32]
        regions = []
        for b in blobs:
            h, w = read_header(b).oriented_size
            y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
            regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
        yield blobs, regions


def assert_same_decode(a: GpuDecoder, b: GpuDecoder, blobs: list[bytes], regions: Any) -> None:
    got, fell_a, _ = a.decode_regions(blobs, regions)
    want, fell_b, _ = b.decode_regions(blobs, regions)
    torch.cuda.synchronize()
    assert fell_a == fell_b
    assert torch.equal(got.table, want.table) and torch.equal(got.data, want.data)


@pytest.mark.parametrize("hw_fraction", [None, 0.0, 0.75])
def test_own_allocators_decode_what_the_defaults_decode(jpegs: list[bytes], hw_fraction) -> None:
    """hw_fraction 0.0 sends every JPEG through the CUDA decoder, whose per-thread buffers the
    padding concerns; None through the hardware one (where the GPU has it)."""
    ours = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c")
    theirs = GpuDecoder(CUDA, hw_fraction=hw_fraction, api="c", allocators=False)
    assert ours.allocators_used and not theirs.allocators_used
    assert "allocators=True" in repr(ours)
    for blobs, regions in batches(jpegs, 5):
        for regs in (None, regions):
            assert_same_decode(ours, theirs, blobs, regs)
    ours.close()
    theirs.close()


def test_environment_switch_keeps_nvimgcodecs_own() -> None:
    code = ("import torch; from pixelpipe.decode.gpu import GpuDecoder; "
            "d = GpuDecoder(torch.device('cuda'), api='c'); print(d.allocators_used); d.close()")
    env = {"PIXELPIPE_NVIMGCODEC_ALLOCATORS": "0", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_one_native_call_decodes_what_the_calls_one_by_one_decode(jpegs: list[bytes]) -> None:
    fast = GpuDecoder(CUDA, api="c")
    slow = GpuDecoder(CUDA, api="c")
    if fast._c[0]._api.batch is None:
        pytest.skip("native/decode.c was not built here (no C compiler)")
    for lane in slow._c:
        lane.native_batch = False
    for blobs, regions in batches(jpegs, 6):
        assert_same_decode(fast, slow, blobs, regions)
    issued, waited, back = fast._c[0].last_times
    assert issued <= waited <= back and slow._c[0].last_times is None
    fast.close()
    slow.close()
