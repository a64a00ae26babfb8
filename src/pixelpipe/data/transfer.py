"""Host-to-device copies that do not stall the stream, and that run no torch CPU op.

A tensor made from host data in pageable memory (`torch.tensor(..., device="cuda")`, or
`.to("cuda")` of an ordinary CPU tensor) synchronises with the stream before copying; done per
batch it serialises the pipeline's threads. Small constants are therefore made once per device,
and per-batch tables go through pinned memory.

The copy into pinned memory is numpy's, not torch's: torch's CPU copy (and every other CPU op
big enough) runs on an OpenMP team as large as the machine, and on the caller's thread (the
user's, for a direct Compose call) waking that team costs more than the copy. On a 16-core H100
host, one `torch.exp` over a batch's 2,560 draws took about 1 ms that way. The pinned block comes from torch's caching host allocator,
which keeps it from reuse until the asynchronous copy out of it has finished. Several arrays a
call needs on the device go up together (`Upload`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

_CONSTANTS: dict[tuple[Any, ...], torch.Tensor] = {}


def device_constant(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """A small float32 tensor on `device`, made once and reused."""
    key = (tuple(values), str(device))
    if key not in _CONSTANTS:
        _CONSTANTS[key] = torch.tensor(values, dtype=torch.float32, device=device)
    return _CONSTANTS[key]


def to_device(t: torch.Tensor | np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An asynchronous copy of host data (a CPU tensor or a numpy array) to `device`: on CUDA
    through pinned memory filled by numpy; a tensor already on the device stays (cast to
    `dtype` if given)."""
    if isinstance(t, torch.Tensor) and t.device.type != "cpu":
        return t.to(device) if dtype is None else t.to(device, dtype)
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bfloat16 or t.requires_grad:  # no numpy twin: torch's copy
            t = t if dtype is None else t.to(dtype)
            return t.to(device) if device.type != "cuda" else t.contiguous().pin_memory().to(device, non_blocking=True)
        t = t.numpy()
    arr = t if dtype is None else t.astype(torch.empty(0, dtype=dtype).numpy().dtype, copy=False)
    if device.type != "cuda":
        return torch.from_numpy(np.ascontiguousarray(arr)).to(device)
    return _through_pinned(arr.shape, arr.dtype, lambda host: np.copyto(host, arr, casting="no"), device)


def _through_pinned(shape: tuple[int, ...], dtype: np.dtype, fill: Callable[[np.ndarray], Any],
                    device: torch.device) -> torch.Tensor:
    """A pinned host array of `shape` and numpy `dtype`, written by fill(array) (numpy's copy:
    the only one on the host), copied asynchronously to the CUDA `device`."""
    pinned = torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype=dtype)).dtype, pin_memory=True)
    fill(pinned.numpy())
    return pinned.to(device, non_blocking=True)


def joined_to_device(parts: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """torch.cat of the parts flattened (host tensors of one dtype) on `device`: on CUDA joined by
    numpy straight into pinned memory, then one asynchronous copy (a join on the host and then
    to_device copied a batch's label images twice: 12 MB per 64 masks of 375x500)."""
    flat = [p.reshape(-1) for p in parts]
    if (device.type != "cuda" or any(p.dtype != flat[0].dtype or p.dtype == torch.bfloat16 or p.requires_grad
                                     for p in flat)):
        return to_device(torch.cat(flat), device)
    arrays = [p.numpy() for p in flat]
    return _through_pinned((sum(a.size for a in arrays),), arrays[0].dtype,
                           lambda host: np.concatenate(arrays, out=host, casting="no"), device)


class Upload:
    """Host arrays of one call sent to a device in one copy: `add` each (with the dtype it is
    wanted in on the device), then `send` gives their tensors there, in the order added. Each
    array is cast on the host to that dtype (one numpy lacks, bfloat16, goes as float64 and is
    cast on the device) and starts at a multiple of 8 bytes of one uint8 buffer, viewed back as
    its dtype: a call's row numbers and per-row numbers cost one copy, not one each. On CUDA the
    buffer is pinned memory the arrays are written into (one host copy each). Each tensor has
    its array's shape."""

    _NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
              torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
              torch.uint8: np.uint8, torch.bool: np.bool_}

    _TORCH = {np.dtype(v): k for k, v in _NUMPY.items()}

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, torch.dtype]] = []

    def add(self, values: np.ndarray, dtype: torch.dtype) -> int:
        self._parts.append((np.ascontiguousarray(values, dtype=self._NUMPY.get(dtype, np.float64)), dtype))
        return len(self._parts) - 1

    def send(self, device: torch.device) -> list[torch.Tensor]:
        if not self._parts:
            return []
        starts = np.cumsum([0] + [-(-a.nbytes // 8) * 8 for a, _ in self._parts])
        if starts[-1] == 0:  # nothing to copy (an empty buffer's view cannot change its dtype)
            return [torch.empty(a.shape, dtype=dtype, device=device) for a, dtype in self._parts]

        def fill(buf: np.ndarray) -> None:
            for (a, _), at in zip(self._parts, starts):
                buf[at:at + a.nbytes] = a.reshape(-1).view(np.uint8)

        if device.type == "cuda":
            sent = _through_pinned((int(starts[-1]),), np.dtype(np.uint8), fill, device)
        else:
            buf = np.zeros(int(starts[-1]), dtype=np.uint8)
            fill(buf)
            sent = torch.from_numpy(buf).to(device)
        # the parts' bytes in one split, then each viewed as its host dtype and shape (a view only
        # where it changes something): per part a slice, a dtype and a shape view cost more host
        # time than the copy on an H200 host
        out = []
        for (a, dtype), piece in zip(self._parts, sent.split_with_sizes(np.diff(starts).tolist())):
            t = piece if piece.numel() == a.nbytes else piece[:a.nbytes]
            host = self._TORCH[a.dtype]
            if host != torch.uint8:
                t = t.view(host)
            if a.ndim != 1:
                t = t.view(a.shape)
            out.append(t if host == dtype else t.to(dtype))
        return out
