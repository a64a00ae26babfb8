"""Counter-based randomness: every number is a pure function of its coordinates.

A draw is identified by (seed, epoch, sample index, op position, draw number). We hash those
five integers with a 32-bit integer mixer written in int64 tensor arithmetic that never
overflows, so the CPU and every GPU produce the same bits. Nothing depends on batch size, worker
count, device or on how many draws happened before: a sample processed alone, in a batch of 256,
or after a resume gets the same augmentation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import native
from .field_units import field_units, rectangle_units
from .transfer import to_device

__all__ = ["Draws", "epochs", "frame_prefix", "hash32", "normal_keyed", "op_blocks", "op_blocks_by_prefix",
           "op_blocks_numpy", "prefix", "prefix_numpy", "uniform"]

_MASK32 = 0xFFFFFFFF
_M1 = 0x7FEB352D  # odd multipliers of a well-mixing 32-bit finalizer (avalanche-tested constants)
_M2 = 0x846CA68B
_GOLDEN = 0x9E3779B9
SEED_STATE = 0x5EED1234  # the hash state before the first key


def _mul32(x: Any, c: int) -> Any:
    """(x * c) mod 2**32 for x in [0, 2**32), without int64 overflow: split c in 16-bit halves."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _MASK32


def _mix(x: Any) -> Any:
    """The 32-bit finalizer on a Python int or an int64 tensor: the same integer operations, so
    the same bits (numpy arrays use _mix_u32)."""
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


def _mix_u32(x: np.ndarray, spare: np.ndarray | None = None) -> np.ndarray:
    """_mix on a uint32 numpy array, in place: numpy's uint32 arithmetic wraps modulo 2**32,
    which is exactly the masked products of the int64 form (both give the same bits). spare:
    a uint32 array of x's shape the shifts go into (made here when not given)."""
    if spare is None:
        spare = np.empty_like(x)
    for shift, multiplier in ((16, _M1), (15, _M2)):
        np.right_shift(x, shift, out=spare)
        x ^= spare
        x *= multiplier
    np.right_shift(x, 16, out=spare)
    x ^= spare
    return x


def fold_numpy(h: Any, keys: tuple[int | torch.Tensor | np.ndarray, ...]) -> Any:
    """Fold keys into the state h (a Python int, or a uint32 numpy array once an array key
    came in); h itself is left as it was. Array keys: int64 tensors (on the CPU) or numpy
    integer arrays."""
    for k in keys:
        if isinstance(k, (torch.Tensor, np.ndarray)) and k.ndim == 0:  # a number: numpy's scalars warn on wrapping
            k = int(k)
        if isinstance(k, (torch.Tensor, np.ndarray)):  # two's complement bits: the same words as int64's
            k = (k.to(torch.int64).numpy() if isinstance(k, torch.Tensor) else k.astype(np.int64, copy=False))
            k = k.view(np.uint64)
            for word in ((k & _MASK32).astype(np.uint32), (k >> 32).astype(np.uint32)):
                h = _mix_u32((h + _GOLDEN if isinstance(h, np.ndarray) else np.uint32((h + _GOLDEN) & _MASK32)) ^ word)
        else:
            k = int(k)
            for word in (k & _MASK32, (k >> 32) & _MASK32):
                if isinstance(h, int):
                    h = _mix(((h + _GOLDEN) & _MASK32) ^ word)
                else:
                    h = _mix_u32((h + _GOLDEN) ^ np.uint32(word))
    return h


def _finish_numpy(h: Any) -> torch.Tensor:
    h = _mix(h) if isinstance(h, int) else _mix_u32(h.copy())
    return torch.from_numpy(np.asarray(h).astype(np.int64))


def _hash32_numpy(keys: tuple[int | torch.Tensor, ...]) -> torch.Tensor:
    return _finish_numpy(fold_numpy(SEED_STATE, keys))


def _hash32_torch(keys: tuple[int | torch.Tensor, ...]) -> torch.Tensor:
    tensors = [k for k in keys if isinstance(k, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    h = torch.full((), SEED_STATE, dtype=torch.int64, device=device)
    for k in keys:
        k = torch.as_tensor(k, dtype=torch.int64, device=device)
        for word in (k & _MASK32, (k >> 32) & _MASK32):
            h = _mix((h + _GOLDEN) & _MASK32 ^ word)
    return _mix(h)


def _unit(h: torch.Tensor) -> torch.Tensor:
    """float32 in [0, 1) from a hash's top 24 bits: exact on every device."""
    return (h >> 8).to(torch.float32) * (1.0 / (1 << 24))


def _unit_numpy(h: np.ndarray) -> np.ndarray:
    """_unit on a numpy array of hashes (the same float32 numbers: 24 bits convert exactly)."""
    return (h >> 8).astype(np.float32) * np.float32(1.0 / (1 << 24))


def uniform(seed: int, epoch: int, indices: torch.Tensor, op: int, draw: int) -> torch.Tensor:
    """float32 [N] in [0, 1): 24 random bits per sample, exact on every device."""
    return _unit(hash32(seed, epoch, indices, op, draw))


def prefix(seed: int, epoch: Any, indices: Any) -> np.ndarray:
    """The hash state (uint32 [N]) after (seed, epoch, indices) for `Draws(prefix=...)`: folded
    once per batch instead of once per op. Computed on the host whatever the indices' device
    (the same bits as on it). indices: int64 [N] (a tensor on any device, or numpy); epoch: an
    int, or int64 [N] per-sample epochs (see `epochs`). In one call of the C planner where it is
    built, else `prefix_numpy`: the same bits."""
    lib = native.library()
    if lib is None:
        return prefix_numpy(seed, epoch, indices)
    idx = as_indices(indices)
    per = epochs(epoch)
    scalar = isinstance(per, int)
    if not scalar and np.shape(per) != idx.shape:  # numpy broadcasts them: let it say how
        return prefix_numpy(seed, epoch, indices)
    h = fold_numpy(SEED_STATE, (int(seed), per) if scalar else (int(seed),))  # a Python int
    per_arr = None if scalar else np.ascontiguousarray(per)
    out = np.empty(idx.shape, dtype=np.uint32)
    lib.pp_prefix(h, None if per_arr is None else native.address(per_arr), native.address(idx), len(idx),
                  native.address(out))
    return out


def prefix_numpy(seed: int, epoch: Any, indices: Any) -> np.ndarray:
    """prefix in numpy (the reference)."""
    return fold_numpy(SEED_STATE, (int(seed), epochs(epoch), as_indices(indices)))


def frame_prefix(prefix: np.ndarray, frames: Any) -> np.ndarray:
    """The hash state (uint32 [N]) of a per-frame op's draws: a batch's `prefix` with each row's
    frame number (int64 [N], its place in its clip) folded in, so that draws are keyed by
    (seed, epoch, clip, frame) instead of (seed, epoch, clip). Ops draw from it as from any
    prefix; the fold is elementwise, so a frame's draws do not depend on its batch."""
    return fold_numpy(np.asarray(prefix, dtype=np.uint32).reshape(-1), (as_indices(frames),))


def as_indices(indices: Any) -> np.ndarray:
    """int64 [N] C-contiguous numpy sample indices from a tensor (any device) or array-like."""
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().to(torch.int64).cpu().numpy()
    return np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)


def epochs(epoch: Any) -> int | np.ndarray:
    """An epoch as the hash folds it: an int, or an int64 array [N] giving each sample its own
    epoch, so that batches of consecutive epochs are planned in one evaluation (a Pipeline's
    cached epochs of few batches). The fold is elementwise, so sample i gets exactly the bits
    an int epoch[i] gives it."""
    if isinstance(epoch, (np.ndarray, torch.Tensor)) and epoch.ndim:
        arr = epoch.detach().cpu().numpy() if isinstance(epoch, torch.Tensor) else epoch
        if arr.dtype.kind not in "iu":
            raise ValueError(f"per-sample epochs must be integers, got {arr.dtype}")
        return arr.astype(np.int64, copy=False).reshape(-1)
    return int(epoch)


def op_blocks(prefix: np.ndarray, ops: Sequence[int], draws: Sequence[int]) -> list[np.ndarray]:
    """Per op k, uint32 [N, draws[k]]: hash32(seed, epoch, index, ops[k], d) for d < draws[k],
    from the batch's prefix (uint32 [N]), for all ops of a stage in one evaluation. In one call
    of the C planner where it is built (native/planner.c), else `op_blocks_numpy`: the same
    bits."""
    ops, draws = list(ops), [int(d) for d in draws]
    lib = native.library()
    if lib is None or not ops:
        return op_blocks_numpy(prefix, ops, draws)
    pre = np.ascontiguousarray(np.asarray(prefix).reshape(-1), dtype=np.uint32)
    op_arr, draw_arr = np.array(ops, dtype=np.int64), np.array(draws, dtype=np.int64)
    out = np.empty((len(pre), sum(draws)), dtype=np.uint32)
    lib.pp_op_blocks(native.address(pre), len(pre), native.address(op_arr), native.address(draw_arr), len(ops),
                     native.address(out))
    ends = np.cumsum([0, *draws]).tolist()
    return [out[:, a:b] for a, b in zip(ends[:-1], ends[1:])]


def op_blocks_by_prefix(prefixes: Sequence[np.ndarray], ops: Sequence[int], draws: Sequence[int]) -> list[np.ndarray]:
    """op_blocks for ops whose prefixes may differ (prefixes[k]: op k's, the same array object
    for ops that share one, as Stage.prefixes gives them): one evaluation per distinct prefix,
    op k's block at position k."""
    out: list[np.ndarray] = [np.empty(0)] * len(ops)
    for pre in {id(p): p for p in prefixes}.values():
        ks = [k for k, p in enumerate(prefixes) if p is pre]
        for k, block in zip(ks, op_blocks(pre, [ops[k] for k in ks], [draws[k] for k in ks])):
            out[k] = block
    return out


def op_blocks_numpy(prefix: np.ndarray, ops: Sequence[int], draws: Sequence[int]) -> list[np.ndarray]:
    """op_blocks in numpy (the reference): the same bits as folding each op and each draw
    separately (the fold is elementwise, so it broadcasts), at the cost of hashing one op. The
    (op, draw) pairs sit side by side as columns, so each op hashes only the draws it uses (a
    flip's one, not a crop's 22)."""
    ops, draws = list(ops), [int(d) for d in draws]
    if not ops:
        return []
    state = fold_numpy(prefix.reshape(-1, 1), (np.array(ops, dtype=np.int64).reshape(1, -1),))  # [N, K]
    column_op = np.repeat(np.arange(len(ops)), draws)
    column_draw = np.concatenate([np.arange(d, dtype=np.int64) for d in draws])
    hashes = _mix_u32(fold_numpy(state[:, column_op], (column_draw.reshape(1, -1),)))  # [N, sum(draws)]
    return np.split(hashes, np.cumsum(draws)[:-1], axis=1)


_BLOCK = 8  # single draws hashed together (see Draws._hash_np)


class Draws:
    """The per-sample random source an op gets: draw k gives a fresh [N] tensor.

    Args:
        seed, epoch: the run's seed and the epoch number (or int64 [N], each sample's epoch,
            when batches of consecutive epochs are planned together: see `epochs`).
        indices: int64 [N] global sample indices (which sample of the dataset each row is).
        op: the op's position in its Compose; two ops never share draws.

    The same (seed, epoch, index, op, draw) always yields the same number. Every method has a
    numpy twin (`uniform_np`, ...) giving the same numbers as numpy arrays, which the built-in
    ops use: the planner runs on the host once per batch, where torch's per-call overhead on
    [N] tensors costs more than the arithmetic.
    """

    def __init__(self, seed: int, epoch: Any, indices: Any, op: int, prefix: Any = None,
                 block: np.ndarray | None = None) -> None:
        self.seed, self.epoch, self.op = int(seed), epochs(epoch), int(op)
        self._indices = indices  # int64 [N]: a tensor (any device) or numpy; see `indices`
        # the hash state after (seed, epoch, indices), which every op of a batch shares
        # (`prefix(seed, epoch, indices)`); None: folded here on the first draw
        self._prefix = prefix
        self._state: np.ndarray | None = None  # the prefix with this op folded in
        # draw // _BLOCK -> uint32 hashes [N, _BLOCK]; `block` ([N, D], `op_blocks` of a stage)
        # holds draws 0..D-1 already
        self._blocks: dict[int, np.ndarray] = {}
        self._given = block

    @property
    def indices(self) -> torch.Tensor:
        """int64 [N] global sample indices, as a tensor (on the device they came on)."""
        if not isinstance(self._indices, torch.Tensor):
            self._indices = torch.as_tensor(np.asarray(self._indices, dtype=np.int64))
        return self._indices

    def _hash_np(self, draw: int | np.ndarray) -> np.ndarray:
        """hash32(seed, epoch, index, op, draw) per sample as uint32 numpy: [N] for an int draw,
        [N, D] for a [D] array of draws. Single draws are hashed _BLOCK at a time and kept (an
        op draws a handful of numbers, and a hash of [N, 8] costs little more than one of [N]:
        the per-call overhead dominates); a stage hands each op its first draws (`block`)."""
        given = self._given
        if given is not None:
            if isinstance(draw, np.ndarray):
                if draw.size and 0 <= draw.min() and draw.max() < given.shape[1]:
                    return given[:, draw]
            elif 0 <= draw < given.shape[1]:
                return given[:, draw]
        if isinstance(draw, np.ndarray):
            if (lib := native.library()) is not None:  # one C call
                pre = self.prefix_np()
                draws = np.ascontiguousarray(draw.reshape(-1), dtype=np.int64)
                out = np.empty((len(pre), len(draws)), dtype=np.uint32)
                lib.pp_draw_hashes(native.address(pre), len(pre), self.op, native.address(draws), len(draws),
                                   native.address(out))
                return out
            return _mix_u32(fold_numpy(self._op_state().reshape(-1, 1), (draw.reshape(1, -1),)))
        if draw >= 0:
            block = self._blocks.get(draw // _BLOCK)
            if block is None:
                first = draw - draw % _BLOCK
                block = self._hash_np(np.arange(first, first + _BLOCK))
                self._blocks[draw // _BLOCK] = block
            return block[:, draw % _BLOCK]
        return _mix_u32(fold_numpy(self._op_state(), (draw,)))

    def _op_state(self) -> np.ndarray:
        """uint32 [N]: the prefix with this op folded in (numpy's path), folded once per op."""
        if self._state is None:
            self._state = fold_numpy(self.prefix_np(), (self.op,))
        return self._state

    def __len__(self) -> int:
        return int(self._indices.shape[0])

    def prefix_np(self) -> np.ndarray:
        """uint32 [N], C-contiguous: the hash state after (seed, epoch, index), shared by every op
        of the batch (`prefix`); the C planner folds the op and the draws into it itself."""
        if self._prefix is None:
            self._prefix = prefix(self.seed, self.epoch, self._indices)
        return np.ascontiguousarray(self._prefix, dtype=np.uint32)

    def uniform_np(self, draw: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        """uniform() as a float32 numpy array."""
        return np.float32(low) + np.float32(high - low) * _unit_numpy(self._hash_np(draw))

    def uniforms_np(self, draws: int | range | list[int], low: float = 0.0, high: float = 1.0) -> np.ndarray:
        """uniforms() as a float32 numpy array [N, D]."""
        d = np.arange(draws) if isinstance(draws, int) else np.asarray(list(draws), dtype=np.int64)
        return np.float32(low) + np.float32(high - low) * _unit_numpy(self._hash_np(d))

    def bernoulli_np(self, draw: int, p: float) -> np.ndarray:
        """bernoulli() as a bool numpy array."""
        return _unit_numpy(self._hash_np(draw)) < np.float32(p)

    def choice_np(self, draw: int, count: int | np.ndarray) -> np.ndarray:
        """int64 [N] uniform in 0..count-1 (count a number or one per sample):
        floor(uniform * count), as torchvision's randint picks an op or a bin."""
        return np.minimum(np.floor(self.uniform_np(draw) * count), np.asarray(count) - 1).astype(np.int64)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        """A numpy result as a tensor on the indices' device."""
        t = torch.from_numpy(x)
        return t if self.indices.device.type == "cpu" else t.to(self.indices.device)

    def uniform(self, draw: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """float32 [N] uniform in [low, high)."""
        return self._tensor(self.uniform_np(draw, low, high))

    def uniforms(self, draws: int | range | list[int], low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """float32 [N, D] uniform in [low, high): draws `draws` (a count D means 0..D-1) in one
        hash evaluation; column k equals uniform(draws[k])."""
        return self._tensor(self.uniforms_np(draws, low, high))

    def bernoulli(self, draw: int, p: float) -> torch.Tensor:
        """bool [N], True with probability p."""
        return self._tensor(self.bernoulli_np(draw, p))

    def integers(self, draw: int, low: int, high: int) -> torch.Tensor:
        """int64 [N] uniform in [low, high)."""
        return self._tensor(low + self._hash_np(draw).astype(np.int64) % max(1, high - low))

    def normal(self, draw: int) -> torch.Tensor:
        """float32 [N] standard normal (Box-Muller on draws `draw` and `draw + 1000003`)."""
        u1 = self.uniform(draw).to(torch.float64).clamp_min(1.0 / (1 << 24))
        u2 = self.uniform(draw + 1000003).to(torch.float64)
        return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2 * torch.pi * u2)).to(torch.float32)

    # ------------------------------------------------------------------------- per pixel
    def field(self, draw: int, shape: Sequence[int], device: Any = None) -> torch.Tensor:
        """float32 [N, *shape] uniform in [0, 1): one number per element of every sample (noise,
        per-pixel masks), computed on `device`. Element e of sample n (row-major within
        `shape`) is a hash of draw `draw` of sample n and of e, so a sample gets the same field
        in any batch and on any device (`field_np` is the numpy twin)."""
        device = torch.device("cpu") if device is None else torch.device(device)
        state = to_device(self._hash_np(draw).view(np.int32), device)  # uint32 bits
        size = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        key = _mix_i32(torch.arange(size, dtype=torch.int32, device=device) + _GOLDEN_I32)
        h = _mix_i32(state.view(-1, 1) ^ key.view(1, -1))
        return (((h >> 8) & 0xFFFFFF).to(torch.float32) * (1.0 / (1 << 24))).view(len(self), *shape)

    def field_np(self, draw: int, shape: Sequence[int]) -> np.ndarray:
        """field() as a float32 numpy array, in uint32 arithmetic (the reference)."""
        size = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        key = _mix_u32(np.arange(size, dtype=np.uint32) + np.uint32(_GOLDEN))
        h = _mix_u32(self._hash_np(draw).reshape(-1, 1) ^ key.reshape(1, -1))
        return _unit_numpy(h).reshape(len(self), *shape)

    def hashes_np(self, draw: int) -> np.ndarray:
        """uint32 [N]: hash32(seed, epoch, index, op, draw) per sample, the state each per-pixel
        field of draw `draw` mixes its element counter into (`normal_keyed` takes it on a
        device)."""
        return self._hash_np(draw)

    def field_at(self, draw: int, samples: np.ndarray, elements: np.ndarray, device: Any = None) -> torch.Tensor:
        """float32 [K]: field(draw, shape)[samples[k]].flatten()[elements[k]] for each k, computed
        for those elements alone (a rectangle of noise costs its own area, not the image's).
        samples: int64 [K] rows of this batch; elements: int64 [K] row-major positions in the
        sample's field (below 2**31)."""
        device = torch.device("cpu") if device is None else torch.device(device)
        state = self._hash_np(draw).view(np.int32)[np.asarray(samples, dtype=np.int64)]
        e = np.asarray(elements, dtype=np.int64).astype(np.int32)  # the field's element counter wraps as int32
        state_t, e_t = to_device(np.ascontiguousarray(state), device), to_device(np.ascontiguousarray(e), device)
        h = _mix_i32(state_t ^ _mix_i32(e_t + _GOLDEN_I32))
        return ((h >> 8) & 0xFFFFFF).to(torch.float32) * (1.0 / (1 << 24))

    def field_elements_np(self, draw: int, elements: np.ndarray) -> np.ndarray:
        """float32 [N, E]: field_at(draw, n, elements[e]) for every sample n and element e, in
        numpy uint32 arithmetic (the same bits): numbers at element positions an op chooses
        (a grid addressed by fixed strides, whatever its size in this batch). elements: int64
        [E], below 2**31."""
        key = _mix_u32(np.asarray(elements, dtype=np.int64).astype(np.uint32) + np.uint32(_GOLDEN))
        return _unit_numpy(_mix_u32(self._hash_np(draw).reshape(-1, 1) ^ key.reshape(1, -1)))

    def normal_field_at(self, draw: int, samples: np.ndarray, elements: np.ndarray, device: Any = None) -> torch.Tensor:
        """normal_field(draw, shape) at the given (sample, element) pairs only (see field_at)."""
        u1 = self.field_at(draw, samples, elements, device).clamp_min_(1.0 / (1 << 24))
        u2 = self.field_at(draw + 1000003, samples, elements, device)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2 * math.pi) * u2)

    def normal_field_at_np(self, draw: int, samples: np.ndarray, elements: np.ndarray) -> torch.Tensor:
        """normal_field_at on the host (a float32 CPU tensor), bit for bit: the hashes in numpy
        uint32 in place (five operations a mix where the int32 torch form takes nine, each a new
        tensor), the element's key mixed once for the two uniform fields rather than once for
        each, then Box-Muller with torch's logarithm and cosine in place, in the twin's order.
        Why: normal_field_at cost about 50 ns a value on one CPU thread, a third of the DeiT
        preset's pixel-op time (RandomErasing's noise); about 15 here, and about 3 where the
        uniforms come from native/noise.c (data.field_units, the same bits)."""
        rows = np.asarray(samples, dtype=np.int64)
        made = field_units(self._hash_np(draw), self._hash_np(draw + 1000003), rows, elements)  # in C
        if made is None:
            key = np.asarray(elements, dtype=np.int64).astype(np.uint32)  # the element counter wraps at 32 bits
            spare = np.empty_like(key)
            key += np.uint32(_GOLDEN)
            _mix_u32(key, spare)
            units = []
            for d in (draw, draw + 1000003):
                h = self._hash_np(d)[rows]  # the sample's state, a new array
                h ^= key
                _mix_u32(h, spare)
                h >>= 8
                units.append(h.astype(np.float32) * np.float32(1.0 / (1 << 24)))
            made = (units[0], units[1])
        return _box_muller(*made)

    def normal_rectangles_np(self, draw: int, rects: np.ndarray, shape: tuple[int, int, int]) -> torch.Tensor | None:
        """normal_field_at_np at every value of each rectangle of rects (int64 [R, 5]: sample,
        top, left, height, width, inside fields of `shape` (C, H, W)), rectangle after rectangle,
        channel by channel, row by row: the same bits, from five numbers a rectangle
        (data.field_units.rectangle_units) instead of an element and a sample per value. None
        without the C library."""
        made = rectangle_units(self._hash_np(draw), self._hash_np(draw + 1000003), rects, shape)
        return None if made is None else _box_muller(*made)

    def normal_field(self, draw: int, shape: Sequence[int], device: Any = None) -> torch.Tensor:
        """float32 [N, *shape] standard normal per element (Box-Muller on the fields of draws
        `draw` and `draw + 1000003`); the same on every device up to float32 rounding of the
        logarithm and cosine."""
        u1 = self.field(draw, shape, device).clamp_min_(1.0 / (1 << 24))
        u2 = self.field(draw + 1000003, shape, device)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2 * math.pi) * u2)


def _box_muller(u1: np.ndarray, u2: np.ndarray) -> torch.Tensor:
    """The standard normals of uniform fields u1, u2 (float32, overwritten) as normal_field_at
    makes them: torch's logarithm and cosine, in place, in its order."""
    a, b = torch.from_numpy(u1), torch.from_numpy(u2)
    return a.clamp_min_(1.0 / (1 << 24)).log_().mul_(-2.0).sqrt_().mul_(b.mul_(2 * math.pi).cos_())


def normal_keyed(state: torch.Tensor, state_other: torch.Tensor, elements: torch.Tensor) -> torch.Tensor:
    """float32 [K]: `Draws.normal_field_at` computed from tensors already on the device: state
    and state_other int32 [K] (broadcastable), each element's sample's `hashes_np(draw)` and
    `hashes_np(draw + 1000003)` as int32 bits; elements int32 or int64 [K], the positions in
    the sample's field (wrapping at 32 bits as there). The same operations in the same order as
    normal_field_at, so the same bits on a device, with the element's key mixed once for both
    uniform fields: an op that builds its element positions on the device (a rectangle's pixels
    from a few numbers per rectangle) needs no host array per pixel."""
    key = _mix_i32(elements.to(torch.int32) + _GOLDEN_I32)
    u1, u2 = (((_mix_i32(s ^ key) >> 8) & 0xFFFFFF).to(torch.float32) * (1.0 / (1 << 24))
              for s in (state, state_other))
    u1 = u1.clamp_min_(1.0 / (1 << 24))
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2 * math.pi) * u2)


_M1_I32 = _M1  # the multipliers as int32 values with the same bits
_M2_I32 = _M2 - (1 << 32)
_GOLDEN_I32 = _GOLDEN - (1 << 32)


def _mix_i32(x: torch.Tensor) -> torch.Tensor:
    """_mix_u32 on an int32 tensor holding uint32 bits: int32 products wrap modulo 2**32 on
    every device torch runs on (the same bits as uint32's), and the right shifts are masked to
    be logical. Per element it costs 9 integer operations on 4 bytes, against about 40 on 8
    for the int64 form (`_mix`): the cost that matters for a per-pixel field."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _M1_I32
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * _M2_I32
    return x ^ ((x >> 16) & 0xFFFF)
