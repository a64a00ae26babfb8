"""Adapters from a Pipeline to other training frameworks.

A Pipeline already is a training loader (`for batch in pipe`, `len(pipe)`, epochs that start
by themselves, `state_dict`). These adapters only change the shape of what it hands over:

* `as_dataset(pipe)` (here and as `pixelpipe.torch.as_dataset`): a torch IterableDataset of
  whole batches, for code that insists on a `torch.utils.data.DataLoader`.
* `pixelpipe.integrations.fastai.dataloaders(train, valid)`: fastai DataLoaders.
* `pixelpipe.integrations.jax.iterate(pipe)`: dicts of jax arrays, through DLPack.
* `pixelpipe.integrations.tensorflow.dataset(pipe)`: a tf.data.Dataset, through DLPack.

Each framework is imported inside the function that needs it, never by `import pixelpipe`.
"""

from .torch_data import PipelineDataset, as_dataset

__all__ = ["PipelineDataset", "as_dataset"]
