"""Host-to-device copies that do not stall the stream.

A tensor made from host data in pageable memory (`torch.tensor(..., device="cuda")`, or
`.to("cuda")` of an ordinary CPU tensor) synchronises with the stream before copying; done per
batch it serialises the pipeline's threads. Small constants are therefore made once per device,
and per-batch tables go through pinned memory.
"""

from __future__ import annotations

from typing import Any

import torch

_CONSTANTS: dict[tuple[Any, ...], torch.Tensor] = {}


def device_constant(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """A small float32 tensor on `device`, made once and reused."""
    key = (tuple(values), str(device))
    if key not in _CONSTANTS:
        _CONSTANTS[key] = torch.tensor(values, dtype=torch.float32, device=device)
    return _CONSTANTS[key]


def to_device(t: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An asynchronous copy of a CPU tensor to `device` (through pinned memory on CUDA)."""
    t = t if dtype is None else t.to(dtype)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.contiguous().pin_memory().to(device, non_blocking=True)
