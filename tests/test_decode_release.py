"""pixelpipe.decode.release_gpu_decoders: the GPU decoders that decode(device="cuda") keeps
between calls are closed and their memory given back; the next call makes a new one with the
same pixels. The GPU part skips without CUDA and nvImageCodec."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import pixelpipe as pp
from pixelpipe.decode import on_device


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (48 + seed, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_release_without_gpu_decoders_closes_nothing(monkeypatch):
    monkeypatch.setattr(on_device, "_DECODERS", {})
    assert pp.decode.release_gpu_decoders() == 0
    assert "release_gpu_decoders" in pp.decode.__all__


def test_release_closes_what_decode_on_cuda_kept_and_the_next_call_decodes_the_same():
    from pixelpipe.decode.gpu import gpu_decoder_available

    if not gpu_decoder_available():
        pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")')
    from pixelpipe.decode.nvimgcodec_alloc import pool_usage

    pp.decode.release_gpu_decoders()  # what earlier tests left
    blobs = [_jpeg(i) for i in range(6)]
    first = pp.decode(blobs, device="cuda")
    kept = list(on_device._DECODERS.values())
    again = pp.decode(blobs, device="cuda")
    assert list(on_device._DECODERS.values()) == kept and len(kept) == 1  # reused, not remade
    assert torch.equal(first.data, again.data)
    device = torch.cuda.current_device()
    held = pool_usage(device)
    assert pp.decode.release_gpu_decoders() == 1
    assert on_device._DECODERS == {} and kept[0]._decoder is None  # closed
    if held is not None:
        assert pool_usage(device)[0] <= held[0]
    with pytest.raises(RuntimeError, match="closed"):
        kept[0].decode_regions(blobs)
    after = pp.decode(blobs, device="cuda")
    assert len(on_device._DECODERS) == 1 and list(on_device._DECODERS.values())[0] is not kept[0]
    assert torch.equal(after.data, first.data)
    pp.decode.release_gpu_decoders()
