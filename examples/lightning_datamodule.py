"""PyTorch Lightning: a LightningDataModule around pixelpipe pipelines.

    python examples/lightning_datamodule.py --data /data/imagenet/train --val-data /data/imagenet/val
    python examples/lightning_datamodule.py --devices 2 --accelerator cpu    # DDP, 2 CPU processes

The pipelines are built in `setup`, which Lightning calls in every process after it has set up
torch.distributed: each process's pipeline makes its batches on that process's device and takes
its shard from torch.distributed. Lightning gets them through plain DataLoaders
(``DataLoader(as_dataset(pipe), batch_size=None, num_workers=0)``): the pipeline batches,
prefetches and moves to the device itself, so the DataLoader only hands batches over. The
validation pipeline runs the evaluation form of the training ops (`pixelpipe.eval.eval_form`).
The data module's `state_dict` holds the training pipeline's position, saved in Lightning's
checkpoints and restored by ``trainer.fit(..., ckpt_path=...)``.
"""

from __future__ import annotations

import argparse
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

import pixelpipe as pp
from pixelpipe.eval import eval_form
from pixelpipe.tools.bench.pipelines import pipeline_ops
from pixelpipe.torch import as_dataset


class PixelpipeDataModule(L.LightningDataModule):
    """Training (and optionally validation) batches from pixelpipe.

    Args:
        train_data: anything `pixelpipe.readers.open_reader` reads (a folder, a file list, tar
            shards, a list of (image, label) samples).
        val_data: the same for validation, or None.
        batch_size: per process.
        image_size: output side.
        pipeline: "rn50" or "rich" (see pixelpipe.tools.bench.pipelines).
        seed: shuffling and augmentation seed (the same on every process).
        num_threads: decoding threads per process (default: all cores).
    """

    def __init__(self, train_data: Any, val_data: Any = None, batch_size: int = 64, image_size: int = 224,
                 pipeline: str = "rn50", seed: int = 0, num_threads: int | None = None) -> None:
        super().__init__()
        self.train_data, self.val_data = train_data, val_data
        self.batch_size, self.image_size, self.pipeline, self.seed = batch_size, image_size, pipeline, seed
        self.num_threads = num_threads
        self.train_pipe: pp.Pipeline | None = None
        self.val_pipe: pp.Pipeline | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_pipe is not None:
            return
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        train = pp.Compose(pipeline_ops(self.pipeline, self.image_size))
        self.train_pipe = pp.Pipeline(self.train_data, train, self.batch_size, device=str(device), seed=self.seed,
                                      num_threads=self.num_threads)
        if self.val_data is not None:
            self.val_pipe = pp.Pipeline(self.val_data, eval_form(train), self.batch_size, device=str(device),
                                        seed=self.seed, shuffle=False, num_threads=self.num_threads)

    def train_dataloader(self) -> DataLoader:
        return _loader(self.train_pipe)

    def val_dataloader(self) -> DataLoader | list:
        return [] if self.val_pipe is None else _loader(self.val_pipe)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.train_pipe is None else {"train": self.train_pipe.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "train" in state and self.train_pipe is not None:
            self.train_pipe.load_state_dict(state["train"])

    def teardown(self, stage: str | None = None) -> None:
        for pipe in (self.train_pipe, self.val_pipe):
            if pipe is not None:
                pipe.close()


def _loader(pipe: pp.Pipeline | None) -> DataLoader:
    if pipe is None:
        raise RuntimeError("the data module is not set up yet")
    return DataLoader(as_dataset(pipe, keys=("image", "label", "valid")), batch_size=None, num_workers=0)


class Classifier(L.LightningModule):
    """A small CNN; padded rows (valid False) weigh 0 in the loss."""

    def __init__(self, classes: int = 10, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        layers: list[nn.Module] = []
        c = 3
        for out in (32, 64, 128):
            layers += [nn.Conv2d(c, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
            c = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))

    def _loss(self, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, valid = batch
        logits = self(x)
        w = valid.to(logits.dtype)
        loss = (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum().clamp_min(1)
        acc = ((logits.argmax(1) == y).to(w.dtype) * w).sum() / w.sum().clamp_min(1)
        return loss, acc

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        loss, acc = self._loss(batch)
        self.log_dict({"train_loss": loss, "train_acc": acc}, prog_bar=True, batch_size=len(batch[0]))
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> None:
        loss, acc = self._loss(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc}, prog_bar=True, sync_dist=True,
                      batch_size=len(batch[0]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="training data (default: 256 synthetic images)")
    p.add_argument("--val-data")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--devices", default="auto")
    args = p.parse_args(argv)
    data = args.data
    if data is None:
        from pixelpipe.tools.datasets import synthetic

        data = synthetic(256)
    dm = PixelpipeDataModule(data, args.val_data, batch_size=args.batch_size, image_size=args.image_size)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator=args.accelerator,
                        devices=int(args.devices) if args.devices.isdigit() else args.devices)
    trainer.fit(Classifier(args.classes), datamodule=dm)


if __name__ == "__main__":
    main()
