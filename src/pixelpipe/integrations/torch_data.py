"""A Pipeline as a `torch.utils.data.IterableDataset` of whole batches.

Some training frameworks only take a `torch.utils.data.DataLoader`. The pipeline already
batches, prefetches on its own threads and puts the batches on its device, so the DataLoader
must do nothing: ``DataLoader(as_dataset(pipe), batch_size=None, num_workers=0)``.
`batch_size=None` turns off the DataLoader's batching and collation (each item already is a
batch) and `num_workers=0` keeps the pipeline in the training process (worker processes would
each get a copy of it, and CUDA and threads do not survive a fork). Do not set
`pin_memory=True`: batches on the GPU are already there, and CPU batches come out of the
pipeline's own buffers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from ..loader.pipeline import Pipeline

__all__ = ["PipelineDataset", "as_dataset"]

KEYS = ("image", "label", "index", "valid")


class PipelineDataset(IterableDataset):
    """An IterableDataset whose items are the pipeline's batches.

    Args:
        pipe: the Pipeline.
        keys: None yields each batch as the pipeline's dict ("image", "label", "index",
            "valid"); a sequence of those names yields a tuple in that order, e.g.
            ``("image", "label")`` for frameworks that unpack ``x, y = batch``.

    `len()` is `len(pipe)`, the batches of one epoch; each `iter()` is the pipeline's next
    epoch. `state_dict`/`load_state_dict` are the pipeline's (its position in the epoch).
    """

    def __init__(self, pipe: Pipeline, keys: Sequence[str] | None = None) -> None:
        if not isinstance(pipe, Pipeline):
            raise TypeError(f"as_dataset needs a pixelpipe Pipeline, got {type(pipe).__name__}")
        if keys is not None:
            if isinstance(keys, str):
                keys = (keys,)
            keys = tuple(keys)
            bad = [k for k in keys if k not in KEYS]
            if bad or not keys:
                raise ValueError(f"keys must be names among {KEYS}, got {keys!r}")
        self.pipe = pipe
        self.keys = keys

    def __len__(self) -> int:
        return len(self.pipe)

    def __iter__(self) -> Iterator[Any]:
        if get_worker_info() is not None:
            raise RuntimeError("a pixelpipe dataset runs in the training process: use "
                               "DataLoader(dataset, batch_size=None, num_workers=0); the pipeline "
                               "has its own decoding threads")
        for batch in self.pipe:
            yield batch if self.keys is None else tuple(batch[k] for k in self.keys)

    def state_dict(self) -> dict[str, Any]:
        return self.pipe.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pipe.load_state_dict(state)


def as_dataset(pipe: Pipeline, keys: Sequence[str] | None = None) -> PipelineDataset:
    """`pipe` as a torch IterableDataset of whole batches (see `PipelineDataset`).

    Example:
        >>> from torch.utils.data import DataLoader
        >>> loader = DataLoader(as_dataset(pipe), batch_size=None, num_workers=0)  # doctest: +SKIP
        >>> len(loader) == len(pipe)                                               # doctest: +SKIP
        True
    """
    return PipelineDataset(pipe, keys)

