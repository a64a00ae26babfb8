"""Choices among ops, per sample: OneOf, RandomChoice, SomeOf, RandomOrder.

A structure op holds ops of one kind and is an op of that kind itself, so the planner fuses it
like any other: a per-sample choice among geometric ops is a per-sample matrix (the chosen
matrices multiplied in the chosen order), a per-sample choice among colour ops a per-sample
colour map, and pixel ops run on the samples that chose them (one call per op and step, on
those rows, never one per sample).

Each sample's choice is a list of steps (which op at each step, or none), drawn from the
structure's own draws. Each inner op draws from its own stream (derived from the structure's
position and the op's place in it), so an op gives a sample the same parameters whichever
other ops the sample chose, in any batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..data.random import Draws, op_blocks
from ..data.transfer import Upload, to_device
from .checks import check_prob
from .kinds import ColorOp, GeometryOp, Op, Params, PixelOp

__all__ = ["OneOf", "RandomChoice", "RandomOrder", "SomeOf"]

_KINDS: dict[str, type[Op]] = {"geometry": GeometryOp, "color": ColorOp, "pixel": PixelOp}


def inner_op(op: int, k: int) -> int:
    """The op number the k-th inner op of the structure at position `op` draws with: negative,
    so never a position of a Compose (nested structures map back to large positive numbers,
    beyond any list's length)."""
    return -(1 + op * 4096 + k)


def inner_draws(draws: Draws, k: int, rows: np.ndarray | None = None) -> Draws:
    """The k-th inner op's draws, for all samples or the given rows."""
    idx = draws.indices.detach().cpu().numpy()
    pre = draws.prefix_np()
    epoch = draws.epoch
    if rows is not None:
        idx, pre = idx[rows], pre[rows]
        epoch = epoch[rows] if isinstance(epoch, np.ndarray) else epoch
    return Draws(draws.seed, epoch, idx, inner_op(draws.op, k), pre)


def _identity(n: int) -> np.ndarray:
    m = np.zeros((n, 3, 4))
    m[:, 0, 0] = m[:, 1, 1] = m[:, 2, 2] = 1.0
    return m


def _weights(weights: Sequence[float] | None, count: int) -> np.ndarray:
    if weights is None:
        return np.full(count, 1.0 / count)
    w = np.asarray(list(weights), dtype=np.float64)
    if w.shape != (count,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {count} finite numbers >= 0 (one per op), not all 0, got {list(weights)}")
    return w / w.sum()


class _Structure(Op):
    """A per-sample program of steps over inner ops of one kind (see the module docstring)."""

    _kinded: dict[tuple[type, str], type] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if getattr(cls, "kind", "op") != "op":  # already of a kind (copying, unpickling)
            return super().__new__(cls)
        ops = args[0] if args else kwargs.get("ops")
        kind = _kind_of(cls.__name__, ops)
        sub = _Structure._kinded.get((cls, kind))
        if sub is None:
            name = f"{kind}_ops"  # not the kind's own name: "color" is a method
            sub = type(cls.__name__, (cls, _KINDS[kind]), {"__module__": cls.__module__,
                                                          "__qualname__": f"{cls.__name__}.{name}"})
            _Structure._kinded[(cls, kind)] = sub
            setattr(cls, name, sub)  # found again by pickle through its __qualname__
        return super().__new__(sub)

    def _setup(self, ops: Sequence[Op]) -> None:
        self.ops = list(ops)
        framed = [type(op).__name__ for op in self.ops if op.per_frame]
        if framed:  # inner ops draw from the structure's draws: theirs would not be followed
            raise ValueError(f"{type(self).__name__}: per_frame=True on an op inside it ({', '.join(framed)}); "
                             f"give per_frame=True to the {type(self).__name__} itself (its ops draw from its draws)")
        bent = [type(op).__name__ for op in self.ops if getattr(op, "deformation", False)]
        if bent:  # a choice among ops is a choice among matrices, and a field is not one
            raise ValueError(f"{type(self).__name__} cannot hold {bent[0]}: its displacement field is no matrix to "
                             "choose; put it in the Compose and use its p")
        if self.kind == "geometry":
            for attr in ("interpolation", "border", "fill"):
                given = {getattr(op, attr) for op in self.ops if getattr(op, attr, None) is not None}
                if len(given) > 1:
                    raise ValueError(f"{type(self).__name__}: the ops ask for different {attr} ({sorted(map(str, given))}); "
                                     "one geometric pass has one: give them the same, or none")
                setattr(self, attr, given.pop() if given else None)
        if self.kind == "color":
            self.needs_mean = any(op.needs_mean for op in self.ops)

    def _fields(self) -> dict[str, Any]:
        skip = {"interpolation", "border", "fill", "needs_mean", "draws"}
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k not in skip}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def steps(self, draws: Draws, n: int) -> np.ndarray:
        """int64 [N, S]: the inner op each sample takes at each step, -1 for none."""
        raise NotImplementedError

    def stream(self, k: int) -> int:
        """The number of the inner draws the k-th inner op takes (`inner_draws`): k itself; a
        structure that is one part of a larger one (pixelpipe.ops.policies) numbers its ops
        in the whole, so that parts never share a stream."""
        return k

    # ------------------------------------------------------------------ the three kinds
    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        steps = self.steps(draws, len(sizes))
        if self.kind == "geometry":
            matrix, out = self._geometry(draws, sizes, steps)
            return {"steps": steps, "matrix": matrix, "out": out}
        if self.kind == "color":
            params = {"steps": steps}
            for k in self._used(steps):
                for name, v in self.ops[k].sample(inner_draws(draws, self.stream(k)), sizes).items():
                    params[f"{k}:{name}"] = v
            return params
        return {"steps": steps}

    def _used(self, steps: np.ndarray) -> list[int]:
        return [int(k) for k in np.unique(steps) if k >= 0]

    def _geometry(self, draws: Draws, sizes: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each sample's matrix and output size after its steps: at each step every op samples
        only the rows that took it, at their current size (steps_and_pairs: every op's leading
        draws hashed in one evaluation; a row's draws are its own, so the numbers of sampling
        every row and keeping these)."""
        n = len(sizes)
        matrix = np.tile(np.eye(3), (n, 1, 1))
        cur = np.asarray(sizes, dtype=np.float64)
        step: np.ndarray | None = None
        out, at = cur, -1
        for j, k, rows, sub in self.steps_and_pairs({"steps": steps}, draws):
            if j != at:  # a new step: the one before takes effect
                if step is not None:
                    matrix, cur = step @ matrix, out
                step, out, at = np.tile(np.eye(3), (n, 1, 1)), cur.copy(), j
            op = self.ops[k]
            m, size = op.transform(op.sample(sub, cur[rows]), cur[rows])
            step[rows], out[rows] = m, size
        if step is not None:
            matrix, cur = step @ matrix, out
        return matrix, cur

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return params["matrix"], params["out"]

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        steps = params["steps"]
        n = steps.shape[0]
        total = _identity(n)
        mean = None if means is None else np.asarray(means, dtype=np.float64)
        for j in range(steps.shape[1]):
            col = steps[:, j]
            step = _identity(n)
            for k in self._used(col):
                op = self.ops[k]
                own = {name[len(f"{k}:"):]: v for name, v in params.items() if name.startswith(f"{k}:")}
                m = op.color(own, mean if op.needs_mean else None)
                step[col == k] = m[col == k]
            a, b = step[:, :, :3], step[:, :, 3]
            total = np.concatenate([a @ total[:, :, :3], (a @ total[:, :, 3:]) + b[:, :, None]], 2)
            if mean is not None:
                mean = (a @ mean[:, :, None])[:, :, 0] + b
        return total

    def step_pairs(self, params: Params, draws: Draws) -> list[tuple[int, np.ndarray, Draws]]:
        """(op, rows, draws) for every (step, op) pair the batch uses, in step order: the rows
        that take inner op k at a step, and their draws (inner_draws(draws, stream, rows)) with
        every used op's leading draws hashed in one evaluation (random.op_blocks)."""
        return [(k, rows, sub) for _, k, rows, sub in self.steps_and_pairs(params, draws)]

    def steps_and_pairs(self, params: Params, draws: Draws) -> list[tuple[int, int, np.ndarray, Draws]]:
        """step_pairs() with each pair's step first: (step, op, rows, draws)."""
        steps = params["steps"]
        used = [(j, k) for j in range(steps.shape[1]) for k in self._used(steps[:, j])]
        if not used:
            return []
        ks = sorted({k for _, k in used})
        streams = {k: inner_op(draws.op, self.stream(k)) for k in ks}
        pre = draws.prefix_np()
        blocks = dict(zip(ks, op_blocks(pre, [streams[k] for k in ks], [self.ops[k].draws for k in ks])))
        idx = draws.indices.detach().cpu().numpy()
        per_row = isinstance(draws.epoch, np.ndarray)
        out = []
        for j, k in used:
            rows = np.flatnonzero(steps[:, j] == k)
            out.append((j, k, rows, Draws(draws.seed, draws.epoch[rows] if per_row else draws.epoch, idx[rows], streams[k],
                                       pre[rows], block=blocks[k][rows])))
        return out

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        if x.device.type != "cpu":
            return self.apply_gathered(x, params, draws, owned=False)
        steps = params["steps"]
        n = x.shape[0]
        # the rows an op changed are copied into x in place once x is this call's own copy:
        # one copy of the batch per call, not one per op and step (a policy runs a dozen)
        own = False
        for j in range(steps.shape[1]):
            col = steps[:, j]
            for k in self._used(col):
                rows = np.flatnonzero(col == k)
                sub = inner_draws(draws, self.stream(k), rows)
                sizes = np.tile(np.array(x.shape[-2:], dtype=np.float64), (len(rows), 1))
                op = self.ops[k]
                if len(rows) == n:
                    x, own = op.apply(x, op.sample(sub, sizes), sub), False  # it may return its input
                    continue
                # consecutive rows (often one sample: a policy's op fires for a few of a batch)
                # as a view, written back as a slice: no gather, no index
                run = int(rows[-1]) - int(rows[0]) + 1 == len(rows)
                a, b = int(rows[0]), int(rows[-1]) + 1
                pick = None if run else to_device(rows, x.device)
                part = x[a:b] if run else x[pick]  # indexing: CPU index_select is far slower
                y = op.apply(part, op.sample(sub, sizes), sub)
                if y.shape[1:] != x.shape[1:]:
                    raise ValueError(f"{type(self).__name__}: {type(op).__name__} changed the image's shape "
                                     f"{tuple(x.shape[1:])} to {tuple(y.shape[1:])}; ops chosen per sample must keep it")
                if not own:
                    x, own = x.clone(memory_format=torch.contiguous_format), True
                if run:
                    x[a:b].copy_(y)
                else:
                    x.index_copy_(0, pick, y.to(x.dtype))
        return x

    def apply_gathered(self, x: torch.Tensor, params: Params, draws: Draws, owned: bool) -> torch.Tensor:
        """apply() as a GPU runs it (any device runs it, with the same numbers): the host work of
        all the (step, op) pairs first, then their launches. Every op's leading draws are hashed
        in one evaluation (random.op_blocks), the rows of every pair and the per-row numbers of
        the ops that state them (`operands` and `apply_columns`: a policy's operations) go to
        the device in one copy, and each pair gathers its rows with index_select, runs, and
        writes them back with index_copy_. Why: with a copy per pair and per parameter, and each
        op hashing its own draws, apply() took 7.8 ms of host time per 256-image batch of
        RandAugment(2, 9) on a GPU host (16 pairs), where the whole pipeline's kernels took 2 ms.
        owned: x is the caller's to overwrite (PixelOp.apply_owned's x); else it is copied
        once, before the first rows are written back."""
        n = x.shape[0]
        size = np.array(x.shape[-2:], dtype=np.float64)
        upload = Upload()
        pairs = []
        for k, rows, sub in self.step_pairs(params, draws):
            op = self.ops[k]
            p = op.sample(sub, np.tile(size, (len(rows), 1)))
            staged = None
            if hasattr(op, "apply_columns"):
                staged = {name: upload.add(v, x.dtype if v.dtype.kind == "f" else torch.int32)
                          for name, v in op.operands(p).items()}
            pairs.append((op, p, sub, staged, None if len(rows) == n else upload.add(rows, torch.int64)))
        sent = upload.send(x.device)
        for op, p, sub, staged, pick in pairs:
            part = x if pick is None else x.index_select(0, sent[pick])
            if staged is None:
                y = op.apply(part, p, sub)
            else:
                y = op.apply_columns(part, {name: sent[at].view(-1, 1, 1, 1) for name, at in staged.items()})
            if y.shape[1:] != x.shape[1:]:
                raise ValueError(f"{type(self).__name__}: {type(op).__name__} changed the image's shape "
                                 f"{tuple(x.shape[1:])} to {tuple(y.shape[1:])}; ops chosen per sample must keep it")
            if pick is None:  # every row: the op's result (a user's op may keep it: not ours to write)
                x, owned = y.to(x.dtype), staged is not None and y is not part
                continue
            if not owned:
                x, owned = x.clone(memory_format=torch.contiguous_format), True
            x.index_copy_(0, sent[pick], y.to(x.dtype))
        return x


def _kind_of(name: str, ops: Any) -> str:
    try:
        ops = list(ops)
    except TypeError:
        raise ValueError(f"{name} needs a list of ops, got {type(ops).__name__}") from None
    if not ops:
        raise ValueError(f"{name} needs at least one op")
    kinds = set()
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise TypeError(f"{name}: ops[{i}] is {type(op).__name__}, not a pixelpipe op")
        if op.kind not in _KINDS:
            raise ValueError(f"{name}: ops[{i}] ({type(op).__name__}) is a {op.kind} op; a choice per sample holds "
                             "geometric, colour or pixel ops")
        kinds.add(op.kind)
    if len(kinds) > 1:
        raise ValueError(f"{name}: the ops must be of one kind (geometric, colour or pixel), got {sorted(kinds)}: "
                         "the result must fold into one matrix, one colour map or one pixel step")
    return kinds.pop()


class OneOf(_Structure):
    """Apply one op of the list per sample, chosen with the given weights, with probability p
    (albumentations' OneOf).

    Args:
        ops: ops of one kind: geometric, colour or pixel (the structure is then of that kind).
        weights: relative chances of the ops (default equal).
        p: probability that a sample gets one (else none).

    Example: ``OneOf([GaussianBlur(5), MedianBlur(5), MotionBlur(7)], p=0.3)``.
    """

    draws = 2

    def __init__(self, ops: Sequence[Op], weights: Sequence[float] | None = None, p: float = 1.0) -> None:
        self._setup(ops)
        self.weights = _weights(weights, len(self.ops)).tolist()
        self.p = check_prob("p", p)

    def steps(self, draws: Draws, n: int) -> np.ndarray:
        cum = np.cumsum(self.weights)
        pick = np.minimum(np.searchsorted(cum, draws.uniform_np(1).astype(np.float64) * cum[-1], side="right"),
                          len(self.ops) - 1)
        return np.where(draws.bernoulli_np(0, self.p), pick, -1).reshape(n, 1).astype(np.int64)


class RandomChoice(OneOf):
    """Apply one op of the list per sample, chosen with the given weights (torchvision's
    RandomChoice; its `p` is the weights here: `p` is a probability everywhere in pixelpipe).

    Example: ``RandomChoice([RandomRotate((90, 90)), RandomRotate((-90, -90))])``.
    """

    def __init__(self, ops: Sequence[Op], weights: Sequence[float] | None = None) -> None:
        super().__init__(ops, weights, 1.0)

    def _fields(self) -> dict[str, Any]:
        return {"ops": self.ops, "weights": self.weights}


class SomeOf(_Structure):
    """Apply n ops of the list per sample, chosen uniformly, in the list's order, with
    probability p (albumentations' SomeOf).

    Args:
        ops: ops of one kind.
        n: how many ops each sample gets.
        replace: draw with replacement (an op may apply more than once).
        p: probability that a sample gets its n ops (else none).

    Example: ``SomeOf([RandomEqualize(1.0), RandomPosterize(4, 1.0), RandomSolarize(0.5, 1.0)], n=2)``.
    """

    def __init__(self, ops: Sequence[Op], n: int = 1, replace: bool = False, p: float = 1.0) -> None:
        self._setup(ops)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or (not replace and n > len(self.ops)):
            raise ValueError(f"n must be a whole number in [0, {len(self.ops)}] (the number of ops, without "
                             f"replacement), got {n!r}")
        self.n = n
        self.replace = bool(replace)
        self.p = check_prob("p", p)
        self.draws = 1 + (n if self.replace else len(self.ops))

    def _fields(self) -> dict[str, Any]:
        return {"ops": self.ops, "n": self.n, "replace": self.replace, "p": self.p}

    def steps(self, draws: Draws, n: int) -> np.ndarray:
        k = len(self.ops)
        if self.replace:
            u = draws.uniforms_np(range(1, 1 + self.n)).astype(np.float64)
            chosen = np.minimum(np.floor(u * k), k - 1).astype(np.int64)
        else:
            keys = draws.uniforms_np(range(1, 1 + k))
            chosen = np.argsort(keys, axis=1, kind="stable")[:, : self.n]
        chosen = np.sort(chosen, axis=1)  # in the list's order
        return np.where(draws.bernoulli_np(0, self.p)[:, None], chosen, -1).reshape(n, self.n)


class RandomOrder(_Structure):
    """Apply every op of the list, in an order drawn per sample (torchvision's RandomOrder).
    For geometric ops the matrices multiply in that order; for colour ops the colour maps
    compose in it (contrast and other mean-based ops see the mean as the earlier ops left it).

    Example: ``RandomOrder([RandomRotate(30), RandomAffine(0, shear=20)])``.
    """

    def __init__(self, ops: Sequence[Op]) -> None:
        self._setup(ops)
        self.draws = len(self.ops)

    def steps(self, draws: Draws, n: int) -> np.ndarray:
        keys = draws.uniforms_np(range(len(self.ops)))
        return np.argsort(keys, axis=1, kind="stable").astype(np.int64).reshape(n, len(self.ops))
