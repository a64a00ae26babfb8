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
from .policy_program import block_draws, entry_blocks

__all__ = ["GeometryProgram"]


class GeometryProgram:
    """The matrices of a policy part whose operations all have a `rowwise_key()` (`of` gives
    None for any other part)."""

    def __init__(self, ops: Sequence[Any]) -> None:
        self.ops = list(ops)
        keys = [op.rowwise_key() for op in self.ops]
        distinct = list(dict.fromkeys(keys))
        self.group = np.array([distinct.index(key) for key in keys], dtype=np.int64)  # each op's group
        self.first = [keys.index(key) for key in distinct]  # an op of each group

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
        for g in np.flatnonzero(np.bincount(group, minlength=len(self.first))).tolist():
            pick = np.flatnonzero(group == g)
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
