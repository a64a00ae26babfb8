"""fastai: a Learner trains on pixelpipe pipelines, with no patches to fastai.

`dataloaders(train_pipe, valid_pipe)` returns a `fastai.data.core.DataLoaders` whose two
loaders wrap the pipelines. What fastai's training loop needs from a loader, and how each need
is met (DALI users patched fastai for the first three):

* batches that unpack as ``xb, yb = b[:1], b[1:]``: each batch is an ``(image, label)`` tuple
  (DALI hands a list of dicts that has to be indexed into);
* a new epoch on every ``iter(loader)`` with no reset call: the pipeline starts its next epoch
  by itself;
* an exact ``len()``: `ParamScheduler` (``fit_one_cycle``) advances its position by
  ``1 / (len(dl) * n_epoch)`` per batch and fails once it passes 1.0, which a loader yielding
  more batches than its len() makes happen on the last batch; ``len(pipe)`` is exact, padding
  included;
* ``bs``, ``n`` (samples per epoch), ``device`` and ``to(device)``; ``dataset`` (fastai reads
  ``dls.train_ds``); ``new(...)`` (``get_preds`` and ``validate`` call it).

The validation loader drops the rows the pipeline marks invalid (the repeated samples that pad
the last batch), so every validation sample is counted once in the loss and the metrics. The
training loader keeps them, as DistributedSampler's padding is kept: batches keep one shape.

Example:
    >>> from fastai.learner import Learner                               # doctest: +SKIP
    >>> from pixelpipe.integrations.fastai import dataloaders            # doctest: +SKIP
    >>> dls = dataloaders(train_pipe, valid_pipe)                        # doctest: +SKIP
    >>> Learner(dls, model, loss_func=nn.CrossEntropyLoss()).fit_one_cycle(5, 1e-3)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..loader.pipeline import Pipeline

__all__ = ["PipelineLoader", "dataloaders"]


class PipelineLoader:
    """A fastai-style loader over one Pipeline: yields ``(image, label)`` tuples.

    Args:
        pipe: the Pipeline (its length must be known: an indexable reader, or tar shards
            counted at construction).
        drop_invalid: drop the padding rows (``batch["valid"]`` False). Checking costs one
            device-to-host sync per batch.
    """

    n_inp = 1

    def __init__(self, pipe: Pipeline, drop_invalid: bool = False) -> None:
        if not isinstance(pipe, Pipeline):
            raise TypeError(f"expected a pixelpipe Pipeline, got {type(pipe).__name__}")
        try:
            len(pipe)
        except TypeError as e:
            raise TypeError(f"fastai needs len() of every loader: {e}") from None
        self.pipe = pipe
        self.drop_invalid = bool(drop_invalid)
        self.device = pipe.device

    @property
    def bs(self) -> int:
        return self.pipe.batch_size

    @property
    def n(self) -> int:
        """Real samples this loader yields per epoch on this rank, padding not counted (for
        tar shards, the dataset's samples divided by the ranks)."""
        pipe = self.pipe
        if pipe.drop_last:
            return len(pipe) * pipe.batch_size
        if pipe.reader.indexable:
            return len(range(pipe.rank, len(pipe.reader), pipe.world))
        return -(-len(pipe.reader) // pipe.world)

    @property
    def dataset(self) -> Any:
        return self.pipe.reader

    def __len__(self) -> int:
        return len(self.pipe)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        move = self.device != self.pipe.device
        for batch in self.pipe:
            x, y = batch["image"], batch["label"]
            if self.drop_invalid:
                valid = batch["valid"]
                if not bool(valid.all()):
                    x, y = x[valid], y[valid]
            if move:
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            yield x, y

    def to(self, device: str | torch.device | None) -> PipelineLoader:
        """Where batches are handed over (fastai's DataLoaders calls this). The pipeline's own
        device (the default) costs nothing; any other means a copy of every batch."""
        if device is None:
            self.device = self.pipe.device
            return self
        device = torch.device(device)
        if device.type == self.pipe.device.type and device.index is None:
            device = self.pipe.device  # "cuda" means the pipeline's GPU
        self.device = device
        return self

    def new(self, **kwargs: Any) -> PipelineLoader:
        """fastai asks for a copy with other settings (shuffle=False, drop_last=False) before
        predicting; the pipeline's order and padding are fixed at construction, so this is the
        loader itself: build the validation pipeline with shuffle=False."""
        return self

    def state_dict(self) -> dict[str, Any]:
        return self.pipe.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pipe.load_state_dict(state)

    def __repr__(self) -> str:
        return f"PipelineLoader(batches={len(self)}, bs={self.bs}, device={self.device})"


def dataloaders(train_pipe: Pipeline, valid_pipe: Pipeline, path: str = ".") -> Any:
    """A `fastai.data.core.DataLoaders` over a training and a validation pipeline.

    Both pipelines must make their batches on the same device; the DataLoaders' `device` is
    that device, so the Learner moves the model there and no batch is copied.

    Args:
        train_pipe: the training pipeline (random ops, shuffle).
        valid_pipe: the validation pipeline (typically `pixelpipe.eval.eval_form` of the
            training Compose, shuffle=False).
        path: fastai's `path` (where `learn.save` writes).

    Raises:
        ImportError: fastai is not installed (``pip install fastai``).
    """
    try:
        from fastai.data.core import DataLoaders
    except ImportError as e:
        raise ImportError("pixelpipe.integrations.fastai needs fastai: pip install fastai") from e
    if train_pipe.device != valid_pipe.device:
        raise ValueError(f"the pipelines make batches on different devices: train on {train_pipe.device}, "
                         f"valid on {valid_pipe.device}")
    loaders = (PipelineLoader(train_pipe), PipelineLoader(valid_pipe, drop_invalid=True))
    return DataLoaders(*loaders, path=path, device=train_pipe.device)
