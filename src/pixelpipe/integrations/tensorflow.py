"""TensorFlow: a Pipeline as a `tf.data.Dataset`, or as an iterator of TF tensors.

`dataset(pipe)` wraps the pipeline with `tf.data.Dataset.from_generator`: each element is one
batch, a dict with the pipeline's keys, each tensor handed over through DLPack (no copy on the
CPU). Iterating the dataset again starts the pipeline's next epoch, and its cardinality is
`len(pipe)`, so `len(ds)` and Keras' `steps_per_epoch` work. Do not `.batch()` it (the
elements already are batches) and keep `.prefetch()` small: the pipeline prefetches itself.

tf.data runs its elements through the host; a pipeline on the GPU is better consumed with
`iterate(pipe)`, which yields the TF tensors directly (on the GPU, after waiting for the
pipeline's stream, as TF cannot join torch's streams).

Example:
    >>> from pixelpipe.integrations.tensorflow import dataset    # doctest: +SKIP
    >>> ds = dataset(pipe).map(lambda b: (tf.transpose(b["image"], (0, 2, 3, 1)), b["label"]))
    >>> model.fit(ds, epochs=5)                                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..loader.pipeline import Pipeline

__all__ = ["dataset", "iterate", "to_tf"]

KEYS = ("image", "label", "index", "valid")


def dataset(pipe: Pipeline, keys: Sequence[str] | None = None) -> Any:
    """A tf.data.Dataset whose elements are the pipeline's batches (dicts of tf.Tensor).

    Args:
        pipe: the Pipeline.
        keys: the batch entries to include (default: all of them).

    Raises:
        ImportError: TensorFlow is not installed (``pip install tensorflow``).
    """
    tf = _tf()
    names = _keys(keys)
    image_dtype = tf.dtypes.as_dtype(str(pipe.transforms.dtype).replace("torch.", ""))
    specs = {
        "image": tf.TensorSpec(shape=(None, None, None, None), dtype=image_dtype),
        "label": tf.TensorSpec(shape=None, dtype=tf.int64),  # [B] or [B, K]
        "index": tf.TensorSpec(shape=(None,), dtype=tf.int64),
        "valid": tf.TensorSpec(shape=(None,), dtype=tf.bool),
    }

    def batches() -> Iterator[dict[str, Any]]:
        yield from iterate(pipe, names)

    ds = tf.data.Dataset.from_generator(batches, output_signature={k: specs[k] for k in names})
    try:
        n = len(pipe)
    except TypeError:  # a stream of unknown length
        return ds
    return ds.apply(tf.data.experimental.assert_cardinality(n))


def iterate(pipe: Pipeline, keys: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """One epoch of `pipe` as dicts of tf.Tensor on the pipeline's device (see `to_tf`)."""
    _tf()
    names = _keys(keys)
    for batch in pipe:
        yield {k: to_tf(batch[k]) for k in names}


def to_tf(tensor: torch.Tensor) -> Any:
    """A torch tensor as a tf.Tensor on the same device, sharing its memory (DLPack). A CUDA
    tensor's stream is synchronised first: TF's streams cannot wait on torch's events."""
    tf = _tf()
    from torch.utils.dlpack import to_dlpack

    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()
    return tf.experimental.dlpack.from_dlpack(to_dlpack(tensor.contiguous()))


def _keys(keys: Sequence[str] | None) -> tuple[str, ...]:
    names = KEYS if keys is None else ((keys,) if isinstance(keys, str) else tuple(keys))
    bad = [k for k in names if k not in KEYS]
    if bad or not names:
        raise ValueError(f"keys must be names among {KEYS}, got {keys!r}")
    return names


def _tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError("pixelpipe.integrations.tensorflow needs TensorFlow: pip install tensorflow") from e
    return tf
