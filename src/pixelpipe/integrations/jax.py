"""JAX: a Pipeline's batches as jax arrays, handed over through DLPack without a copy.

``for batch in iterate(pipe)`` gives dicts with the pipeline's keys ("image", "label",
"index", "valid") holding jax arrays on the device where pixelpipe made them: a CPU pipeline
gives arrays on JAX's CPU device, a pipeline on cuda:N arrays on that GPU (JAX must see it).
The image shares its memory with the torch tensor (pixelpipe allocates a fresh tensor for
every batch and never writes to it again, and the DLPack capsule keeps it alive). On CUDA the
DLPack stream handshake makes JAX's stream wait for the pipeline's work.

Exceptions to "no copy": JAX without ``jax_enable_x64`` has no int64, so the int64 "label"
and "index" arrive as int32 copies (a few bytes per sample); set
``jax.config.update("jax_enable_x64", True)`` to keep them 64-bit and shared.

Example:
    >>> from pixelpipe.integrations.jax import iterate           # doctest: +SKIP
    >>> for batch in iterate(pipe):                               # doctest: +SKIP
    ...     params, opt_state = train_step(params, opt_state, batch["image"], batch["label"])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..loader.pipeline import Pipeline

__all__ = ["iterate", "to_jax"]


def iterate(pipe: Pipeline, keys: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """One epoch of `pipe` (each call starts the pipeline's next epoch) as dicts of jax arrays.

    Args:
        pipe: the Pipeline.
        keys: the batch entries to convert (default: all of them).

    Raises:
        ImportError: JAX is not installed (``pip install jax``).
    """
    _jax()
    for batch in pipe:
        names = batch.keys() if keys is None else keys
        yield {k: to_jax(batch[k]) for k in names}


def to_jax(tensor: torch.Tensor) -> Any:
    """A torch tensor as a jax array on the same device, sharing its memory where JAX can
    (every dtype pixelpipe produces except int64 without x64 mode)."""
    jax = _jax()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return jax.dlpack.from_dlpack(tensor)


def _jax() -> Any:
    try:
        import jax
        import jax.dlpack
    except ImportError as e:
        raise ImportError("pixelpipe.integrations.jax needs JAX: pip install jax "
                          "(jax[cuda12] for GPUs)") from e
    return jax
