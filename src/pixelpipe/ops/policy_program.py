"""PolicySteps.program for torchvision's policies (AutoAugment, RandAugment, TrivialAugmentWide)
in one pass over every (sample, step) at once, rather than a sampling per (step, operation)
pair: the same numbers (tests/test_policy_program.py holds the two forms together).

Why: the pair form builds a Draws, tiles the sizes, samples and computes the operands for each
of the 20-30 pairs of a batch, numpy calls of a few microseconds each: 0.68-0.99 ms per
RandAugment(2, 9) batch of 256 and 1.29 ms for AutoAugment on a 2-core CPU, a fifth of a GPU
call's host time once the policy kernels run its operations (benchmarks/gpu_augment_host.py
--cprofile). Here every used operation's two leading draws are hashed in one evaluation
(random.op_blocks, as the pair form does), gathered for the entries that took it, and the bins,
magnitudes, signs and operands computed for all entries together, grouped only by what the
operations differ in (their span of bins, their operation); the per-operation constants and
each image size's magnitude tables are made once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..data.random import Draws, op_blocks
from .augment_space import PixelPrimitive, operands

__all__ = ["PrimitiveProgram", "block_draws", "by_operation", "entry_blocks", "entry_draws", "program_of"]


def entry_draws(ops: Sequence[Any], streams: Sequence[int], steps: np.ndarray,
                draws: Draws) -> tuple[np.ndarray, np.ndarray, np.ndarray, Draws]:
    """Every (sample, step) of `steps` ([N, S] operation indices, -1 none) that took an
    operation: (rows, steps, operations, draws), the draws a Draws whose leading block holds
    each entry's operation's leading draws for its sample (the used operations' hashed in one
    evaluation), so its draw d is what the operation's own Draws gives that sample."""
    rows, cols, k, block = entry_blocks(ops, streams, steps, draws)
    return rows, cols, k, block_draws(draws, block)


def entry_blocks(ops: Sequence[Any], streams: Sequence[int], steps: np.ndarray,
                 draws: Draws) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """entry_draws with the entries' leading draws as the uint32 array [E, D] itself."""
    rows, cols = np.nonzero(steps >= 0)
    k = steps[rows, cols]
    used = np.flatnonzero(np.bincount(k, minlength=len(ops)))
    at_used = np.full(len(ops), -1, dtype=np.int64)
    at_used[used] = np.arange(len(used))
    blocks = np.stack(op_blocks(draws.prefix_np(), [streams[u] for u in used], [ops[u].draws for u in used]))
    return rows, cols, k, np.ascontiguousarray(blocks[at_used[k], rows])


def block_draws(draws: Draws, block: np.ndarray) -> Draws:
    """A Draws of len(block) rows whose leading draws are `block` (uint32 [K, D], hashed
    already): draw d < D of row i is block[i, d]; only those draws may be taken from it."""
    return Draws(draws.seed, 0, np.zeros(len(block), dtype=np.int64), 0, block=block)


def program_of(ops: Sequence[Any], streams: Sequence[int], steps: np.ndarray, draws: Draws,
               entry_values: Callable[[np.ndarray, Draws], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(which, values) as PolicySteps.program gives them, from entry_values(k, entry): the
    number of every (sample, step) that took an operation (entry_draws' order: k its
    operation, entry its draws), float64."""
    values = np.zeros(steps.T.shape, dtype=np.float64)
    if (steps >= 0).any():
        rows, cols, k, entry = entry_draws(ops, streams, steps, draws)
        values[cols, rows] = entry_values(k, entry)
    return steps.T.copy(), values


def by_operation(which: np.ndarray, count: int, operands_of: Callable[[int, np.ndarray], dict[str, np.ndarray]]
                 ) -> np.ndarray:
    """float64 [len(which)]: each entry's operand, computed per operation (which: each entry's
    operation in 0..count-1; operands_of(j, pick) the operands of operation j's entries `pick`,
    augment_space.operands' form: one number, or none for 0)."""
    out = np.zeros(len(which), dtype=np.float64)
    for j in np.flatnonzero(np.bincount(which, minlength=count)).tolist():
        pick = which == j
        for v in operands_of(j, pick).values():
            out[pick] = v
    return out


class PrimitiveProgram:
    """The program of a policy part whose operations are all PixelPrimitive (`of` gives None
    for any other part)."""

    def __init__(self, ops: Sequence[PixelPrimitive]) -> None:
        self.ops = list(ops)
        self.fixed = np.array([-1 if op.bin is None else op.bin for op in ops], dtype=np.int64)
        self.spans = np.array([op.span for op in ops], dtype=np.int64)
        self.signed = np.array([op.space.signed for op in ops], dtype=bool)
        self.names = sorted({op.name for op in ops})
        self.name_of = np.array([self.names.index(op.name) for op in ops], dtype=np.int64)
        self._tables: dict[tuple[float, float], np.ndarray] = {}

    @classmethod
    def of(cls, ops: Sequence[Any]) -> PrimitiveProgram | None:
        return cls(ops) if ops and all(type(op) is PixelPrimitive for op in ops) else None

    def table(self, size: tuple[float, float]) -> np.ndarray:
        """float64 [K, bins]: each operation's magnitude per bin for images of `size` (zeros
        for operations without a magnitude), made once per size."""
        t = self._tables.get(size)
        if t is None:
            rows = [op.bin_magnitudes(np.array(size)) for op in self.ops]
            t = np.zeros((len(rows), max([len(r) for r in rows if r is not None] + [1])))
            for k, r in enumerate(rows):
                if r is not None:
                    t[k, : len(r)] = r
            if len(self._tables) > 64:  # sizes of a run: a few; keep the cache bounded regardless
                self._tables.clear()
            self._tables[size] = t
        return t

    def __call__(self, streams: Sequence[int], steps: np.ndarray, draws: Draws,
                 size: Any) -> tuple[np.ndarray, np.ndarray]:
        """(which, values) as PolicySteps.program gives them. streams: each operation's draw
        stream (the op number its Draws use); steps: [N, S] operation indices, -1 none; size:
        the images' (h, w)."""
        def entry_values(k: np.ndarray, entry: Draws) -> np.ndarray:
            bins = self.fixed[k]
            spans = self.spans[k]
            drawn = bins < 0
            for span in np.unique(spans[drawn]).tolist():  # a Python int, as sample() calls choice_np
                pick = drawn & (spans == span)
                bins[pick] = entry.choice_np(0, span)[pick]
            magnitude = self.table((float(size[0]), float(size[1])))[k, bins]
            magnitude = np.where(self.signed[k] & (entry.uniform_np(1) <= 0.5), -magnitude, magnitude)
            return by_operation(self.name_of[k], len(self.names),
                                lambda j, pick: operands(self.names[j], magnitude[pick]))

        return program_of(self.ops, streams, steps, draws, entry_values)
