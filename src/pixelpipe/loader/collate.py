"""Small helpers of the Pipeline: collating a batch (labels, indices, validity), and finding
this process's shard (rank, world size)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .arguments import whole

__all__ = ["as_batch", "collate", "labels_tensor", "placed", "shard_of"]


def collate(images: torch.Tensor, index: np.ndarray, valid: np.ndarray, labels: torch.Tensor,
            device: torch.device) -> dict[str, Any]:
    """A Pipeline batch from its index (int64 [B]) and valid (bool [B]) arrays and its labels
    (int64 [B] or [B, K], -1 where a sample has none)."""
    return as_batch(images, *placed([labels.numpy(), index, valid], device))


def as_batch(images: torch.Tensor, label: torch.Tensor, index: torch.Tensor, valid: torch.Tensor) -> dict[str, Any]:
    """The dict a Pipeline yields, from tensors already where they belong."""
    return {"image": images, "label": label, "index": index, "valid": valid}


def placed(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Small host arrays as tensors on `device`, each in memory of its own alignment class.

    On the CPU each is copied into memory from torch's allocator (64-byte aligned, which
    zero-copy exports such as DLPack to JAX need; numpy's buffers may be 16- or 32-byte
    aligned, and JAX then copies). On CUDA all of them go in one copy through pinned memory
    (one pinned block and one transfer per batch instead of one per array; a copy from
    pageable memory may first wait for the stream, where this batch's kernels were just
    launched) and come out as views of one device buffer at 64-byte aligned offsets."""
    if device.type != "cuda":
        return [torch.from_numpy(np.ascontiguousarray(a)).clone().to(device) for a in arrays]
    from ..data.transfer import to_device

    offsets, total = [], 0
    for a in arrays:
        offsets.append(total)
        total += -(-a.nbytes // 64) * 64
    staging = np.zeros(max(total, 1), dtype=np.uint8)
    for a, o in zip(arrays, offsets):
        staging[o : o + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    buf = to_device(staging, device)
    return [buf[o : o + a.nbytes].view(_TORCH[a.dtype]).view(a.shape) for a, o in zip(arrays, offsets)]


_TORCH = {np.dtype(np.int64): torch.int64, np.dtype(np.bool_): torch.bool, np.dtype(np.float32): torch.float32,
          np.dtype(np.float64): torch.float64, np.dtype(np.int32): torch.int32}


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
    try:
        rank, world = shard
    except (TypeError, ValueError):
        raise ValueError(f"shard must be a pair (rank, world_size), got {shard!r}") from None
    rank, world = whole("shard's rank", rank), whole("shard's world_size", world)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard must be (rank, world_size) with 0 <= rank < world_size, got {shard}")
    return rank, world
