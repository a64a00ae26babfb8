"""GpuDecoder(hw_fraction="auto") on a GPU: each batch split between a hardware-first and a
CUDA-only nvImageCodec decoder, the share moved after every batch, the pixels within the GPU
decoder's tolerance of a fixed share's (the hardware and CUDA decoders are not bit-identical).
Needs CUDA and nvImageCodec; skips otherwise. The split itself is tested in test_hw_split.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from pixelpipe import CenterCrop, Compose, GpuDecoding, Pipeline, Resize
from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available
from pixelpipe.readers import Memory

if not gpu_decoder_available():
    pytest.skip('needs a CUDA device and nvImageCodec (pip install "pixelpipe[gpu]")', allow_module_level=True)


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(64, 400, 2))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x * y) % 256], -1) + rng.normal(0, 10, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_auto_splits_every_batch_over_two_decoders_and_moves_the_share() -> None:
    dec = GpuDecoder(torch.device("cuda"), hw_fraction="auto", fancy_upsampling=True)  # Pillow's chroma
    try:
        if dec.api != "c":
            pytest.skip("nvImageCodec's C API is not usable here: auto means a fixed 0.75")
        assert dec.lanes == 2 and dec.split is not None and "auto" in repr(dec)
        blobs = [_jpeg(i) for i in range(16)]
        planned = dec.plan(blobs, lane=0)  # a lane is ignored: the batch is split
        assert sorted(lane for lane, _, _ in planned.opened) == [0, 1]
        hw = next(part for lane, part, _ in planned.opened if lane == 0)
        cuda = next(part for lane, part, _ in planned.opened if lane == 1)
        assert min(h * w for h, w in (j.decoded_size for j in hw)) >= max(h * w for h, w in
                                                                         (j.decoded_size for j in cuda))
        views, fallback, _ = dec.decode_views(blobs, planned=planned)
        assert fallback == [] and dec.split.batches == 1 and dec.split.share != 0.75
        torch.cuda.synchronize()
        for _ in range(3):
            batch, fallback, _ = dec.decode_regions(blobs)
            assert fallback == []
        assert dec.split.batches == 4 and dec.split.low <= dec.split.share <= dec.split.high
        for i, b in enumerate(blobs):  # both lanes' samples match Pillow (PILLOW_MEAN of gpu_decode_fixtures)
            ref = np.asarray(Image.open(io.BytesIO(b)).convert("RGB")).astype(np.int16)
            got = batch[i].cpu().numpy().astype(np.int16)
            assert got.shape == ref.shape and np.abs(got - ref).mean() < 1.5, (i, np.abs(got - ref).mean())
    finally:
        dec.close()


def test_a_pipeline_with_auto_gives_a_fixed_shares_batches_within_tolerance() -> None:
    """Same samples and augmentation: float outputs within 3 grey levels on average (the
    replicated-chroma decoders' tolerance), every sample decoded on the GPU."""
    data = [(_jpeg(i), i) for i in range(24)]
    outs = []
    for share in (0.75, "auto"):
        ops = Compose([Resize(48), CenterCrop(40)], dtype=torch.float32)
        with Pipeline(Memory(data), ops, 8, device="cuda", seed=3, gpu=GpuDecoding(hw_fraction=share)) as pipe:
            outs.append(torch.cat([b["image"].cpu() for _ in range(2) for b in pipe]))
            assert pipe.stats.gpu == 48 and pipe.stats.cpu_fallback == 0
            decoder = pipe.engine.gpu_decoder(pipe.device)
            assert (decoder.split is not None) == (share == "auto" and decoder.api == "c")
    assert outs[0].shape == outs[1].shape
    assert float((outs[0] - outs[1]).abs().mean()) * 255 < 3.0


def test_auto_with_the_python_binding_is_a_fixed_share(monkeypatch) -> None:
    from pixelpipe.decode import nvimgcodec_c

    monkeypatch.setattr(nvimgcodec_c, "load", lambda: None)
    dec = GpuDecoder(torch.device("cuda"), hw_fraction="auto")
    try:
        assert dec.api == "python" and dec.lanes == 1 and dec.split is None
        batch, fallback, _ = dec.decode_regions([_jpeg(1), _jpeg(2)])
        assert fallback == [] and len(batch) == 2
    finally:
        dec.close()
