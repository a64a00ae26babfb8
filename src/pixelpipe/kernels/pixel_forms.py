"""Fast forms of pixel ops on a device, which the engine runs in place of an op's apply().

Ops never import kernels/ (the layers: tests/test_layers.py), so a pixel op cannot launch a
Triton kernel itself. `pixel_form(op, x)` gives the engine (engine.pixels.run_pixels) a
function computing what op.apply computes, for ops that have one on x's device; everywhere
else, and for an op nested in another (a structure's choice), op.apply runs: the twin, which
the tests hold each form to.

- GaussianBlur on CUDA, float32: two Triton launches (kernels.triton.blur) instead of a
  product and a sum per tap and axis.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch

from ..ops.blur import GaussianBlur, gaussian_kernels
from ..ops.kinds import Op, Params

__all__ = ["PixelForm", "gaussian_blur_form", "pixel_form"]

# (x, the op's params, owned) -> the op's result; owned: x may be overwritten
PixelForm = Callable[[torch.Tensor, Params, bool], torch.Tensor]


def pixel_form(op: Op, x: torch.Tensor) -> PixelForm | None:
    """The fast form of pixel op `op` for x (float [N, C, H, W]), or None: run op.apply."""
    if x.device.type != "cuda" or x.dtype != torch.float32:
        return None
    if isinstance(op, GaussianBlur) and type(op).apply is GaussianBlur.apply and _triton():
        return lambda x, params, owned: gaussian_blur_form(op, x, params, owned)
    return None


def gaussian_blur_form(op: GaussianBlur, x: torch.Tensor, params: Params, owned: bool) -> torch.Tensor:
    """GaussianBlur.apply(x, params) by the blur kernel (any device Triton runs on; its
    interpreter runs it on CPU tensors): the rows that blur, each with its sigma's kernels."""
    from .triton.blur import blur_rows

    rows = np.flatnonzero(params["on"])
    sigma = params["sigma"][rows]
    kh, kw = op.kernel_size
    return blur_rows(x, rows, gaussian_kernels(kw, sigma) if kw > 1 else None,
                     gaussian_kernels(kh, sigma) if kh > 1 else None, owned)


@functools.cache
def _triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
