"""Small helpers of the Pipeline: collating a batch (labels, indices, validity), and finding
this process's shard (rank, world size)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["collate", "labels_tensor", "shard_of"]


def collate(images: torch.Tensor, items: list[Any], device: torch.device) -> dict[str, Any]:
    """A Pipeline batch: the images and, from the items' label, index and valid, tensors on
    `device` (built through numpy: torch.tensor on a Python list costs more per batch)."""
    n = len(items)
    index = torch.from_numpy(np.fromiter((it.index for it in items), dtype=np.int64, count=n))
    valid = torch.from_numpy(np.fromiter((it.valid for it in items), dtype=np.bool_, count=n))
    return {
        "image": images,
        "label": _placed(labels_tensor([it.label for it in items]), device),
        "index": _placed(index, device),
        "valid": _placed(valid, device),
    }


def _placed(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """t (a small host tensor) on `device`. On the CPU copied into memory from torch's allocator
    (64-byte aligned, which zero-copy exports such as DLPack to JAX need; numpy's buffers may be
    16- or 32-byte aligned, and JAX then copies). On CUDA through pinned memory: a copy from
    pageable memory may first wait for the stream, where this batch's kernels were just
    launched, and the producer thread would idle until they end (see kernels/_device)."""
    if device.type == "cpu":
        return t.clone()
    from .kernels._device import to_device

    return to_device(t, device)


def labels_tensor(labels: list[Any]) -> torch.Tensor:
    if all(lab is None for lab in labels):
        return torch.full((len(labels),), -1, dtype=torch.int64)
    rows = [(-1 if lab is None else lab) for lab in labels]
    if any(isinstance(r, torch.Tensor) for r in rows):
        return torch.stack([torch.as_tensor(r, dtype=torch.int64) for r in rows])
    return torch.tensor(rows, dtype=torch.int64)


def shard_of(shard: tuple[int, int] | None) -> tuple[int, int]:
    if shard is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    rank, world = (int(v) for v in shard)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard must be (rank, world_size) with 0 <= rank < world_size, got {shard}")
    return rank, world
