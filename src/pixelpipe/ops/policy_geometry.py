"""The geometric part of torchvision's policies (AutoAugment, RandAugment, TrivialAugmentWide:
shears, translations, rotations) sampled in one pass over every (sample, step) at once, rather
than a sampling per (step, operation) pair: the same matrices (tests/test_policy_geometry.py
holds the two forms together).

Why: the pair form (structure._Structure._geometry) builds a Draws, samples, and makes the
matrices of each (step, operation) pair the batch uses, ten of them for RandAugment(2, 9) over
256 samples: 0.8-1.2 ms of host time a batch on a 2-core CPU, where the whole rest of the
RandomResizedCrop + flip stage samples in 0.17 ms; on a GPU an augment-only call is bound by
this host time. Here every used operation's two leading draws are hashed in one evaluation
and gathered per entry (policy_program.entry_draws), bins, magnitudes and signs are computed
for all entries together, the matrices once per operation over its entries, and each step's
matrices are put together as the pair form puts them (a step no sample takes is skipped, as
there). The primitives keep the image's size, so every entry's size is its sample's input size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.random import Draws
from .augment_space import GeometricPrimitive, _Linspace, _linspace, _OfSide
from .policy_program import entry_draws

__all__ = ["GeometryProgram"]


class GeometryProgram:
    """The matrices of a policy part whose operations are all GeometricPrimitive with the
    tables torchvision's spaces give them (`of` gives None for any other part)."""

    def __init__(self, ops: Sequence[GeometricPrimitive]) -> None:
        self.ops = list(ops)
        self.fixed = np.array([-1 if op.bin is None else op.bin for op in ops], dtype=np.int64)
        self.spans = np.array([op.span for op in ops], dtype=np.int64)
        self.signed = np.array([op.space.signed for op in ops], dtype=bool)

    @classmethod
    def of(cls, ops: Sequence[Any]) -> GeometryProgram | None:
        ok = bool(ops) and all(type(op) is GeometricPrimitive and type(op.space.table) in (_Linspace, _OfSide)
                               for op in ops)
        return cls(ops) if ok else None

    def _magnitudes(self, k: np.ndarray, bins: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Each entry's magnitude before its sign: its operation's table at its bin for its
        sample's size (entries of operation u: k == u), as GeometricPrimitive.sample reads it."""
        out = np.zeros(len(k), dtype=np.float64)
        for u in np.flatnonzero(np.bincount(k, minlength=len(self.ops))).tolist():
            pick = k == u
            op, table = self.ops[u], self.ops[u].space.table
            if type(table) is _Linspace:
                out[pick] = _linspace(table.lo, table.hi, op.bins)[bins[pick]]
            else:  # _OfSide: linspace(0, 1) times share * side, per sample
                out[pick] = _linspace(0.0, 1.0, op.bins)[bins[pick]] * (table.share * sizes[pick, table.axis])
        return out

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
        rows, cols, k, entry = entry_draws(self.ops, streams, steps, draws)
        bins = self.fixed[k]
        drawn = bins < 0
        for span in np.unique(self.spans[k][drawn]).tolist():  # a Python int, as sample() calls choice_np
            pick = drawn & (self.spans[k] == span)
            bins[pick] = entry.choice_np(0, span)[pick]
        at = cur[rows]
        magnitude = self._magnitudes(k, bins, at)
        magnitude = np.where(self.signed[k] & (entry.uniform_np(1) <= 0.5), -magnitude, magnitude)
        made = np.empty((len(rows), 3, 3))
        for u in np.flatnonzero(np.bincount(k, minlength=len(self.ops))).tolist():
            pick = k == u
            op = self.ops[u]
            made[pick] = op.transform({"magnitude": magnitude[pick]}, at[pick])[0]
        for j in range(steps.shape[1]):
            sel = cols == j
            if not sel.any():  # a step no sample takes: skipped, as the pair form skips it
                continue
            step = np.tile(np.eye(3), (n, 1, 1))
            step[rows[sel]] = made[sel]
            matrix = step @ matrix
        return matrix, cur.copy()
