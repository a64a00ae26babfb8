"""Whether this process can decode on the GPU, and why not: nvImageCodec installed and loading,
and a CUDA device torch can use. Checked once per process."""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["gpu_decoder_available", "gpu_decoder_missing", "nvimgcodec_module"]

_INSTALL_HINT = 'GPU decoding needs nvImageCodec: pip install "pixelpipe[gpu]"'


def nvimgcodec_module() -> Any:
    """The nvidia.nvimgcodec module, imported on first use."""
    try:
        from nvidia import nvimgcodec
    except (ImportError, OSError) as e:  # OSError: the package is there, a library is not
        raise ImportError(f"{_INSTALL_HINT} ({type(e).__name__}: {e})") from e
    return nvimgcodec


def gpu_decoder_available() -> bool:
    """Whether nvImageCodec imports and torch sees a CUDA device. Never raises."""
    return gpu_decoder_missing() is None


@functools.cache
def gpu_decoder_missing() -> str | None:
    """Why there is no GPU decoder here (None: there is one), for the CPU-decoding notice:
    nvImageCodec not installed, installed but failing to load (a wheel for another CUDA, a
    driver too old), or no CUDA device. Never raises."""
    try:
        nvimgcodec_module()
    except ImportError as e:
        cause = e.__cause__  # what the import itself raised
        if isinstance(cause, ModuleNotFoundError) and (cause.name or "").startswith("nvidia"):
            return "nvImageCodec is not installed"
        return f"nvImageCodec does not load ({type(cause).__name__}: {cause})"
    try:
        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
    except RuntimeError as e:
        return f"torch's CUDA does not start ({e})"
    return None
