"""PyTorch conveniences: ``pixelpipe.torch.as_dataset(pipe)`` gives a Pipeline to code that
wants a `torch.utils.data` dataset (see `pixelpipe.integrations.torch_data`)."""

from .integrations.torch_data import PipelineDataset, as_dataset

__all__ = ["PipelineDataset", "as_dataset"]
