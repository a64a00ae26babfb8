"""Small helpers of the Pipeline: collating labels into a tensor, and finding this process's
shard (rank, world size)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["labels_tensor", "shard_of"]


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
