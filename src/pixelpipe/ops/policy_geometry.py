"""The geometric part of a policy (torchvision's AutoAugment, RandAugment, TrivialAugmentWide,
timm's RandAugment: shears, translations, rotations) sampled in one pass over every (sample,
step) at once, rather than a sampling per (step, operation) pair: the same matrices
(tests/test_policy_geometry.py holds the two forms together).

Why: the pair form (structure._Structure._geometry) builds a Draws, samples, and makes the
matrices of each (step, operation) pair the batch uses, ten of them for RandAugment(2, 9) over
256 samples: 0.8-1.2 ms of host time a batch on a 2-core CPU, where the whole rest of the
RandomResizedCrop + flip stage samples in 0.17 ms; on a GPU an augment-only call is bound by
this host time. Here every used operation's leading draws are hashed in one evaluation and
gathered per entry (policy_program.entry_blocks); the operations that compute alike (a policy
has a copy of each for every step, and AutoAugment the same operation at several entries)
sample and make their matrices once over all their entries, whatever their step; and each
step's matrices are put together as the pair form puts them (a step no sample takes is
skipped, as there).

It serves operations that have a `rowwise_key()`: their sample() reads only their leading
draws, row by row (so a row's numbers are the same among any other rows, and are the same
whichever of two operations with equal keys samples them: the key holds all that sample()
and transform() read besides the draws), and their transform() keeps the image's size (so
every entry's size is its sample's input size, at every step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.random import Draws
from .augment_space import GEOMETRIC, GeometricPrimitive, _Linspace, _linspace, _OfSide
from .geometry import _about_centre, _rotation
from .policy_program import block_draws, entry_blocks

__all__ = ["GeometryProgram", "Primitives"]


class GeometryProgram:
    """The matrices of a policy part whose operations all have a `rowwise_key()` (`of` gives
    None for any other part)."""

    def __init__(self, ops: Sequence[Any]) -> None:
        self.ops = list(ops)
        keys = [op.rowwise_key() for op in self.ops]
        distinct = list(dict.fromkeys(keys))
        self.group = np.array([distinct.index(key) for key in keys], dtype=np.int64)  # each op's group
        self.first = [keys.index(key) for key in distinct]  # an op of each group
        # torchvision's shears, translations and rotations: all their entries in one pass
        self.primitives = Primitives.of(self.ops)

    @classmethod
    def of(cls, ops: Sequence[Any]) -> GeometryProgram | None:
        return cls(ops) if ops and all(callable(getattr(op, "rowwise_key", None)) for op in ops) else None

    def __call__(self, streams: Sequence[int], steps: np.ndarray, draws: Draws,
                 sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(matrix float64 [N, 3, 3], output sizes [N, 2]) as _Structure._geometry gives them.
        streams: each operation's draw stream; steps: [N, S] operation indices, -1 none;
        sizes: float64 [N, 2] (h, w) of the images."""
        n = len(sizes)
        cur = np.asarray(sizes, dtype=np.float64)
        matrix = np.tile(np.eye(3), (n, 1, 1))
        if not (steps >= 0).any():
            return matrix, cur
        rows, cols, k, block = entry_blocks(self.ops, streams, steps, draws)
        at = cur[rows]
        made = np.empty((len(rows), 3, 3))
        group = self.group[k]
        others = np.ones(len(rows), dtype=bool)
        if self.primitives is not None:
            mine = self.primitives.covers[k]
            made[mine] = self.primitives(k[mine], block_draws(draws, block[mine]), at[mine])
            others = ~mine
        for g in np.flatnonzero(np.bincount(group[others], minlength=len(self.first))).tolist():
            pick = np.flatnonzero(others & (group == g))
            op = self.ops[self.first[g]]  # any of the group: they compute alike
            made[pick] = op.transform(op.sample(block_draws(draws, block[pick]), at[pick]), at[pick])[0]
        for j in range(steps.shape[1]):
            sel = cols == j
            if not sel.any():  # a step no sample takes: skipped, as the pair form skips it
                continue
            step = np.tile(np.eye(3), (n, 1, 1))
            step[rows[sel]] = made[sel]
            matrix = step @ matrix
        return matrix, cur.copy()


_SHEAR_X, _SHEAR_Y, _TRANSLATE_X, _TRANSLATE_Y, _ROTATE = range(5)


class Primitives:
    """The matrices of a part's GeometricPrimitive operations (torchvision's shears,
    translations and rotations) for all their entries at once: what each operation's
    sample() and transform() give its entries, with the same float64 operations in the same
    order (a bin, the table's magnitude at it, the sign, the matrix), grouped by operation
    only where they differ: a drawn bin's span, a rotation's centre. Why: sampled group by
    group (each operation's sample() and transform() on its entries), RandAugment(2, 9)'s five
    operations made about a hundred numpy calls a batch; in one pass the geometry of a batch
    of 256, steps and draws included, took 0.41 ms instead of 0.49 (RandAugment(2, 9)), 0.36
    instead of 0.48 (AutoAugment) and 0.30 instead of 0.42 (TrivialAugmentWide) on a 2-core
    CPU (minimum of 30 alternating rounds of 20 batches)."""

    def __init__(self, ops: Sequence[Any], covers: np.ndarray) -> None:
        self.covers = covers  # per op: whether it is one of these
        width = max([op.bins for op, c in zip(ops, covers) if c] + [1])
        self.kind = np.zeros(len(ops), dtype=np.int64)
        self.fixed = np.full(len(ops), -1, dtype=np.int64)  # the bin, or -1: drawn
        self.span = np.ones(len(ops), dtype=np.int64)
        self.signed = np.zeros(len(ops), dtype=bool)
        self.side = np.full(len(ops), -1, dtype=np.int64)  # _OfSide's axis, or -1: the same for every size
        self.share = np.zeros(len(ops))
        self.bins = np.zeros((len(ops), width))  # _Linspace's magnitudes; _OfSide's linspace(0, 1)
        for j, op in enumerate(ops):
            if not covers[j]:
                continue
            self.kind[j] = GEOMETRIC.index(op.name)
            self.fixed[j] = -1 if op.bin is None else op.bin
            self.span[j], self.signed[j] = op.span, op.space.signed
            table = op.space.table
            if isinstance(table, _OfSide):
                self.side[j], self.share[j] = table.axis, table.share
                self.bins[j, : op.bins] = _linspace(0.0, 1.0, op.bins)
            else:
                self.bins[j, : op.bins] = table(op.bins, np.zeros((1, 2)))[0]

    @classmethod
    def of(cls, ops: Sequence[Any]) -> Primitives | None:
        covers = np.array([type(op) is GeometricPrimitive and isinstance(op.space.table, (_Linspace, _OfSide))
                           for op in ops], dtype=bool)
        return cls(ops, covers) if covers.any() else None

    def __call__(self, k: np.ndarray, draws: Draws, sizes: np.ndarray) -> np.ndarray:
        """float64 [E, 3, 3]: entry e's matrix (operation k[e], draws row e: draw 0 the bin,
        draw 1 the sign), for an image of sizes[e] (h, w)."""
        e = len(k)
        bins = self.fixed[k]
        drawn = bins < 0
        spans = self.span[k]
        for span in np.unique(spans[drawn]).tolist():  # a Python int, as sample() calls choice_np
            pick = drawn & (spans == span)
            bins[pick] = draws.choice_np(0, span)[pick]
        magnitude = self.bins[k, bins]
        side = self.side[k]
        on_side = side >= 0
        if on_side.any():  # linspace(0, 1)[bin] * (share * side), as _OfSide's table
            magnitude[on_side] = magnitude[on_side] * (self.share[k[on_side]] * sizes[on_side, side[on_side]])
        magnitude = np.where(self.signed[k] & (draws.uniform_np(1) <= 0.5), -magnitude, magnitude)
        kind = self.kind[k]
        m = np.zeros((e, 3, 3))
        m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
        sheared, shifted = -magnitude, np.trunc(magnitude)
        for code, row, col, value in ((_SHEAR_X, 0, 1, sheared), (_SHEAR_Y, 1, 0, sheared),
                                      (_TRANSLATE_X, 0, 2, shifted), (_TRANSLATE_Y, 1, 2, shifted)):
            pick = kind == code
            m[pick, row, col] = value[pick]
        turn = kind == _ROTATE
        if turn.any():
            m[turn] = _about_centre(_rotation(magnitude[turn]), sizes[turn])
        return m
