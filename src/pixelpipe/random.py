"""Counter-based randomness: every number is a pure function of its coordinates.

A draw is identified by (seed, epoch, sample index, op position, draw number). We hash those
five integers with a 32-bit integer mixer written in int64 tensor arithmetic that never
overflows, so the CPU and every GPU produce the same bits. Nothing depends on batch size, worker
count, device or on how many draws happened before: a sample processed alone, in a batch of 256,
or after a resume gets the same augmentation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["Draws", "hash32", "uniform"]

_MASK32 = 0xFFFFFFFF
_M1 = 0x7FEB352D  # odd multipliers of a well-mixing 32-bit finalizer (avalanche-tested constants)
_M2 = 0x846CA68B
_GOLDEN = 0x9E3779B9


def _mul32(x: Any, c: int) -> Any:
    """(x * c) mod 2**32 for x in [0, 2**32), without int64 overflow: split c in 16-bit halves."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _MASK32


def _mix(x: Any) -> Any:
    """The 32-bit finalizer on a Python int or an int64 tensor: the same integer operations, so
    the same bits (numpy arrays use _mix_u64)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _M1)
    x = x ^ (x >> 15)
    x = _mul32(x, _M2)
    return x ^ (x >> 16)


def hash32(*keys: int | torch.Tensor) -> torch.Tensor:
    """Hash integer keys (Python ints or int64 tensors, broadcast together) to 32-bit values.

    Each key is folded in as its low and high 32-bit words, so keys up to 2**63 are distinct.
    On the CPU the same integer arithmetic runs in Python ints (the leading scalar keys) and
    numpy (the rest): the planner draws a dozen small batches per call, where torch's per-op
    overhead made hashing most of the planning time. `_hash32_torch` is the twin.
    """
    if all(not isinstance(k, torch.Tensor) or k.device.type == "cpu" for k in keys):
        return _hash32_numpy(keys)
    return _hash32_torch(keys)


def _mix_u64(x: np.ndarray) -> np.ndarray:
    """_mix on a uint64 numpy array of 32-bit values, in place: a 32-bit value times a 32-bit
    multiplier fits in 64 bits, so the product is exact before the mask (the int64 form
    splits the multiplier instead; both give the same bits)."""
    x ^= x >> 16
    x *= _M1
    x &= _MASK32
    x ^= x >> 15
    x *= _M2
    x &= _MASK32
    x ^= x >> 16
    return x


def _fold_numpy(h: Any, keys: tuple[int | torch.Tensor, ...]) -> Any:
    """Fold keys into the state h (a Python int, or a uint64 numpy array once a tensor key
    came in); h itself is left as it was."""
    for k in keys:
        if isinstance(k, torch.Tensor):  # two's complement bits: the same words as int64's
            k = k.to(torch.int64).numpy().view(np.uint64)
            for word in (k & _MASK32, (k >> 32) & _MASK32):
                h = _mix_u64(((h + _GOLDEN) & _MASK32) ^ word)
        else:
            k = int(k)
            for word in (k & _MASK32, (k >> 32) & _MASK32):
                x = ((h + _GOLDEN) & _MASK32) ^ word
                h = _mix(x) if isinstance(x, int) else _mix_u64(x)
    return h


def _finish_numpy(h: Any) -> torch.Tensor:
    h = _mix(h) if isinstance(h, int) else _mix_u64(h.copy())
    return torch.from_numpy(np.asarray(h).astype(np.int64))


def _hash32_numpy(keys: tuple[int | torch.Tensor, ...]) -> torch.Tensor:
    return _finish_numpy(_fold_numpy(0x5EED1234, keys))


def _hash32_torch(keys: tuple[int | torch.Tensor, ...]) -> torch.Tensor:
    tensors = [k for k in keys if isinstance(k, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    h = torch.full((), 0x5EED1234, dtype=torch.int64, device=device)
    for k in keys:
        k = torch.as_tensor(k, dtype=torch.int64, device=device)
        for word in (k & _MASK32, (k >> 32) & _MASK32):
            h = _mix((h + _GOLDEN) & _MASK32 ^ word)
    return _mix(h)


def _unit(h: torch.Tensor) -> torch.Tensor:
    """float32 in [0, 1) from a hash's top 24 bits: exact on every device."""
    return (h >> 8).to(torch.float32) * (1.0 / (1 << 24))


def uniform(seed: int, epoch: int, indices: torch.Tensor, op: int, draw: int) -> torch.Tensor:
    """float32 [N] in [0, 1): 24 random bits per sample, exact on every device."""
    return _unit(hash32(seed, epoch, indices, op, draw))


def prefix(seed: int, epoch: int, indices: torch.Tensor) -> Any:
    """The hash state after (seed, epoch, indices) for `Draws(prefix=...)`: folded once per
    batch instead of once per draw. None for indices on a GPU (those hash with torch)."""
    indices = torch.as_tensor(indices, dtype=torch.int64)
    if indices.device.type != "cpu":
        return None
    return _fold_numpy(0x5EED1234, (int(seed), int(epoch), indices))


_BLOCK = 8  # single draws hashed together (see Draws._hash)


class Draws:
    """The per-sample random source an op gets: draw k gives a fresh [N] tensor.

    Args:
        seed, epoch: the run's seed and the epoch number.
        indices: int64 [N] global sample indices (which sample of the dataset each row is).
        op: the op's position in its Compose; two ops never share draws.

    The same (seed, epoch, index, op, draw) always yields the same number.
    """

    def __init__(self, seed: int, epoch: int, indices: torch.Tensor, op: int, prefix: Any = None) -> None:
        self.seed, self.epoch, self.op = int(seed), int(epoch), int(op)
        self.indices = torch.as_tensor(indices, dtype=torch.int64)
        # the hash state after (seed, epoch, indices), which every op of a batch shares
        # (`prefix(seed, epoch, indices)`); None: hash all five keys each time
        self._prefix = prefix
        self._blocks: dict[int, torch.Tensor] = {}  # draw // _BLOCK -> hashes [N, _BLOCK]

    def _hash(self, draw: int | torch.Tensor, column: bool = False) -> torch.Tensor:
        """hash32(seed, epoch, index, op, draw) per sample; column: indices as [N, 1] (to
        broadcast against a [1, D] tensor of draws). With a prefix, single draws are hashed
        _BLOCK at a time and kept (an op draws a handful of numbers, and a hash of [N, 8]
        costs little more than one of [N]: the per-op overhead dominates)."""
        if self._prefix is not None and isinstance(draw, int) and not column and draw >= 0:
            block = self._blocks.get(draw // _BLOCK)
            if block is None:
                first = draw - draw % _BLOCK
                block = self._hash(torch.arange(first, first + _BLOCK).view(1, -1), column=True)
                self._blocks[draw // _BLOCK] = block
            return block[:, draw % _BLOCK]
        if self._prefix is not None:
            state = self._prefix.reshape(-1, 1) if column else self._prefix
            return _finish_numpy(_fold_numpy(state, (self.op, draw)))
        idx = self.indices.view(-1, 1) if column else self.indices
        return hash32(self.seed, self.epoch, idx, self.op, draw)

    def __len__(self) -> int:
        return int(self.indices.numel())

    def uniform(self, draw: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """float32 [N] uniform in [low, high)."""
        return low + (high - low) * _unit(self._hash(draw))

    def uniforms(self, draws: int | range | list[int], low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """float32 [N, D] uniform in [low, high): draws `draws` (a count D means 0..D-1) in one
        hash evaluation; column k equals uniform(draws[k])."""
        d = torch.as_tensor(list(range(draws)) if isinstance(draws, int) else list(draws), dtype=torch.int64)
        return low + (high - low) * _unit(self._hash(d.view(1, -1), column=True))

    def bernoulli(self, draw: int, p: float) -> torch.Tensor:
        """bool [N], True with probability p."""
        return _unit(self._hash(draw)) < p

    def integers(self, draw: int, low: int, high: int) -> torch.Tensor:
        """int64 [N] uniform in [low, high)."""
        return low + self._hash(draw) % max(1, high - low)

    def normal(self, draw: int) -> torch.Tensor:
        """float32 [N] standard normal (Box-Muller on draws `draw` and `draw + 1000003`)."""
        u1 = self.uniform(draw).to(torch.float64).clamp_min(1.0 / (1 << 24))
        u2 = self.uniform(draw + 1000003).to(torch.float64)
        return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2 * torch.pi * u2)).to(torch.float32)
