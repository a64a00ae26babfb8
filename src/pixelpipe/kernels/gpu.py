"""GPU kernels (Triton). Imported only when a CUDA tensor is processed."""

from __future__ import annotations

import torch

from .spec import WarpSpec


def gpu_available() -> bool:
    """True when Triton can be imported and CUDA is usable."""
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return False  # the Triton warp kernel lands with the GPU issue


def warp_gpu(data: torch.Tensor, table: torch.Tensor, spec: WarpSpec) -> torch.Tensor:
    raise NotImplementedError("the Triton warp kernel is not built yet")
