"""Lambda: a user's batched tensor function, run between fused stages."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._base import Op

__all__ = ["Lambda"]


class Lambda(Op):
    """Apply `fn` to the whole batch tensor at this point of the list.

    The planner cannot fuse through a Lambda, so it splits the plan there: the ops before it
    run (one warp and one pointwise pass) to a float32 NCHW tensor with values in [0, 1], `fn`
    gets that tensor and returns one of the same kind, and the ops after it resample that
    result. A Lambda after the last geometric/colour op gets the final tensor (the Compose's
    dtype and layout).

    Example: ``Lambda(lambda x: x + 0.01 * torch.randn_like(x))``.
    """

    kind = "tensor"

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], name: str | None = None) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "fn")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fn(x)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"Lambda {self.name} returned {type(out).__name__}, expected a tensor")
        return out

    def __repr__(self) -> str:
        return f"Lambda({self.name})"
