"""`pixelpipe.decode(images, device="cuda")`: whole images decoded on the GPU.

JPEGs go to nvImageCodec (`GpuDecoder`, one per device and setting, kept for later calls: making
one costs a second, and it holds GPU memory, up to 32 MiB per decoding thread, until
`release_gpu_decoders()` closes it); other formats and files nvImageCodec declines go to the CPU decoder and
are uploaded. Grey JPEGs come out of nvImageCodec with three equal channels: unless `rgb` is
asked for they are cut back to one, as the CPU decoder keeps them. Without nvImageCodec (the
pixelpipe[gpu] extra), the CPU decoder does everything and the batch is moved to the device,
after a one-line notice.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import torch

from ..data.batch import ImageBatch
from ..data.devices import check_device
from .headers import read_header

__all__ = ["decode_on_device", "cpu_decoding_notice", "one_channel_if_grey", "release_gpu_decoders"]

_DECODERS: dict[tuple[int, int, bool], object] = {}
_LOCK = threading.Lock()  # the decoders kept; held while one decodes, so none closes under a call
_NOTICE = threading.Event()


def cpu_decoding_notice() -> None:
    """Say once per process, on stderr, that decoding stays on the CPU and why: how to get the
    GPU decoder when nvImageCodec is not installed, what failed when it is."""
    from . import gpu_available

    if not _NOTICE.is_set():
        _NOTICE.set()
        why = gpu_available.gpu_decoder_missing() or "no GPU decoder"
        hint = '; for GPU decoding: pip install "pixelpipe[gpu]"' if why.endswith("not installed") else ""
        print(f"pixelpipe: decoding on the CPU ({why}){hint}", file=sys.stderr)


def decode_on_device(images: Sequence[bytes | bytearray | memoryview], device: torch.device, rgb: bool,
                     num_threads: int | None, exif: bool, fancy_upsampling: bool) -> ImageBatch:
    """The body of decode(..., device="cuda[:N]") (see pixelpipe.decode)."""
    from .cpu import decode_cpu
    from .gpu import GpuDecoder, gpu_decoder_available

    check_device(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if not gpu_decoder_available():
        cpu_decoding_notice()
        return decode_cpu(images, rgb=rgb, num_threads=num_threads, exif=exif).to(device)
    blobs = [bytes(b) for b in images]
    if not blobs:
        return ImageBatch.from_list([], device=device)
    threads = num_threads or 8
    key = (device.index, threads, bool(fancy_upsampling))
    with _LOCK:  # one decode at a time (a GpuDecoder's lane decodes one batch at a time anyway)
        decoder = _DECODERS.get(key)
        if decoder is None:
            decoder = _DECODERS[key] = GpuDecoder(device, hw_fraction=0.75, num_cpu_threads=threads,
                                                  fancy_upsampling=fancy_upsampling)  # Compose's split
        assert isinstance(decoder, GpuDecoder)
        batch, _, _ = decoder.decode_regions(blobs, exif=exif)
    if rgb:
        return batch
    images = one_channel_if_grey(blobs, batch.tolist())
    if all(img.shape[2] == 3 for img in images):
        return batch
    return ImageBatch.from_list(images, device=device)


def release_gpu_decoders() -> int:
    """Close the GPU decoders that `pixelpipe.decode(..., device="cuda")` keeps between calls
    and give their GPU memory back (what a pipeline's decoder uses is its own, untouched).
    Waits for a decode in progress. Returns how many were closed; the next such call makes a
    new one."""
    with _LOCK:
        decoders = list(_DECODERS.values())
        _DECODERS.clear()
        for decoder in decoders:
            decoder.close()  # type: ignore[attr-defined]
    return len(decoders)


def one_channel_if_grey(blobs: Sequence[bytes], images: list[torch.Tensor]) -> list[torch.Tensor]:
    """The GPU decoder's RGB images of `blobs` (three equal channels for grey files), those of
    grey files cut to one channel, as decode_region(rgb=False) gives them. The blobs decoded
    already, so their headers parse."""
    return [img[..., :1] if read_header(b).grey else img for b, img in zip(blobs, images)]
