"""Lambda: a user's batched tensor function, as a pixel op."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from ..data.random import Draws
from .kinds import Params, PixelOp

__all__ = ["Lambda"]


class Lambda(PixelOp):
    """Apply `fn` to the whole batch tensor at this point of the list.

    `fn(x)` or `fn(x, draws)` gets the batch as float32 [N, C, H, W] (C = the Compose's output
    channels) with values in [0, 1] (normalised when the Lambda stands after Normalize) and
    returns a tensor of that kind; the output's dtype and layout are applied after it. With a
    second parameter it also gets the batch's `Draws` (pixelpipe.data.random), so its
    randomness is reproducible like every op's: ``draws.uniform(k)`` is one number per sample,
    ``draws.field(k, shape, device)`` one per pixel, both the same for a sample in any batch.

    A Lambda may change the size; geometric and colour ops after it resample its result (the
    plan splits there). Boxes, keypoints and masks are left as they are: a Lambda that moves
    pixels cannot take targets with it (use a geometric op or `Warp`).

    per_sample: True when fn computes each sample from that sample alone (as the example does):
    on the CPU the Engine may then run it on pieces of the batch on its threads (engine.pixels),
    with the same result. False (the default) gives fn the whole batch, on one thread, for
    functions that look across samples (a batch mean, a shuffle).

    Example: ``Lambda(lambda x, draws: x + 0.02 * draws.normal_field(0, x.shape[1:], x.device),
    per_sample=True)``.
    """

    deterministic = True  # kept as it is in an evaluation Compose: pixelpipe cannot tell

    def __init__(self, fn: Callable[..., torch.Tensor], name: str | None = None, per_sample: bool = False) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(per_sample, bool):
            raise ValueError(f"per_sample must be True or False, got {per_sample!r}")
        self.per_sample = per_sample
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "fn")
        self._with_draws = _takes_two(fn)

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        out = self.fn(x, draws) if self._with_draws else self.fn(x)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"Lambda {self.name} returned {type(out).__name__}, expected a tensor")
        return out

    def __repr__(self) -> str:
        return f"Lambda({self.name})"


def _takes_two(fn: Callable[..., torch.Tensor]) -> bool:
    """Whether fn can be called with two positional arguments (x, draws)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: called with x alone
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2
