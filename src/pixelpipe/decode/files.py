"""`pixelpipe.decode(images, device=...)`: whole images into one ImageBatch, on the CPU's threads
(decode.cpu) or on a GPU (decode.on_device)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..data.batch import ImageBatch
from .cpu import decode_cpu

__all__ = ["decode"]


def decode(
    images: Sequence[bytes | bytearray | memoryview],
    device: str | torch.device = "cpu",
    rgb: bool = False,
    num_threads: int | None = None,
    exif: bool = True,
    fancy_upsampling: bool = False,
) -> ImageBatch:
    """Decode whole images into one ImageBatch, on a pool of threads or on a GPU.

    Args:
        images: encoded JPEG, PNG, WebP or BMP files.
        device: "cpu" (Pillow, libjpeg-turbo), or "cuda" / "cuda:N": JPEGs decoded by
            nvImageCodec (the pixelpipe[gpu] extra) straight into device memory, the other
            formats on the CPU and uploaded; without nvImageCodec, everything on the CPU and
            uploaded, after a one-line notice. The GPU decoder is kept for the next call
            (making one takes about a second); `pixelpipe.decode.release_gpu_decoders()`
            closes it and gives its GPU memory back.
        rgb: convert grey images to 3 channels; False keeps them at 1 channel.
        num_threads: decoding threads (Pillow releases the GIL while decoding); default
            the cores this process may run on (data.threads.default_threads). On CUDA:
            nvImageCodec's threads (default 8).
        exif: apply each JPEG's EXIF orientation.
        fancy_upsampling: on CUDA, libjpeg's chroma filter so that pixels match the CPU
            decoder's; the default replicates chroma (about 1.7x faster, 0.14 grey levels
            off on average; see pixelpipe.decode.gpu). No effect on the CPU.

    Raises:
        DecodeError: "sample i: ..." for the first sample (lowest index) that fails.

    Example:
        >>> batch = decode([open(p, "rb").read() for p in paths])  # doctest: +SKIP
        >>> batch[0].shape  # doctest: +SKIP
        torch.Size([375, 500, 3])
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}") from e
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
    if dev.type == "cuda":
        from .on_device import decode_on_device

        return decode_on_device(images, dev, rgb, num_threads, exif, fancy_upsampling)
    return decode_cpu(images, rgb, num_threads, exif)
