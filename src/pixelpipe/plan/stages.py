"""The planner: folds a list of ops into stages, by the ops' kinds (pixelpipe.ops.kinds).

A *stage* is a run of geometric and colour ops executed as one resampling pass and one
pointwise pass (colour, clamp and, when it comes before them, Normalize), followed by the pixel
ops that stand after them in the list, run on the warped image. A stage ends where fusion is
impossible: where a geometric or colour op follows a pixel op (its input is the pixel op's
result), where two geometric ops ask for different interpolation, border or fill, and at a
second displacement field (ElasticTransform: one field per warp). A Crop whose next geometric
op in the stage is a Resize hands it the exact fractional window (Crop.resampled), not the
window rounded to whole pixels that a crop ending the geometry keeps. Batch ops
run last, on the whole output batch. `build` makes the `Program` a Compose runs; new ops join a
kind and need no change here.

Per batch, `Stage.sample` turns a stage into a `StagePlan` (pixelpipe.plan.stage_plan).

Ops with `per_frame=True` (their positions in `Stage.per_frame`) draw, when the batch's frame
numbers are given (clips: pixelpipe.augment_clips), from the prefix with each row's frame
folded in (random.frame_prefix); every other op from the batch's prefix. Nothing else about
them differs: they fold into the same passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..data.random import Draws, epochs, frame_prefix, op_blocks_by_prefix, prefix
from ..data.targets import TargetForm, Targets
from ..ops.color import Normalize
from ..ops.kinds import BatchOp, ColorOp, CompoundOp, GeometryOp, Op, Params, PixelOp, TargetsOp
from ..ops.matrices import host
from . import fast
from .deform import Elastic
from .output import INTERMEDIATE, Form, Output
from .stage_plan import StagePlan

__all__ = ["Program", "Stage", "build"]


@dataclass
class Stage:
    """Ops fused into one warp + one pointwise pass, then the pixel ops after them. `ops` and
    `pixels` hold (position, op) pairs; `normalize_at` is where Normalize applies among the
    pixel ops (0: in the pointwise pass, before them); `per_frame` the positions of the ops
    that draw per frame of a clip (module docstring)."""

    ops: list[tuple[int, Op]] = field(default_factory=list)
    pixels: list[tuple[int, PixelOp]] = field(default_factory=list)
    per_frame: set[int] = field(default_factory=set)
    interpolation: str = "bilinear"
    border: str = "constant"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    normalize: Normalize | None = None
    normalize_at: int = 0
    _explicit: dict[str, Any] = field(default_factory=dict, repr=False)  # filter settings an op set

    @property
    def geometry(self) -> list[tuple[int, GeometryOp]]:
        return [(i, op) for i, op in self.ops if isinstance(op, GeometryOp)]

    @property
    def colors(self) -> list[tuple[int, ColorOp]]:
        return [(i, op) for i, op in self.ops if isinstance(op, ColorOp)]

    def describe(self) -> str:
        geo = ", ".join(_name(op) for _, op in self.geometry) or "none"
        col = ", ".join(_name(op) for _, op in self.colors) or "none"
        fused = self.normalize is not None and self.normalize_at == 0
        text = (f"warp[{geo}] ({self.interpolation}, border={self.border}) -> "
                f"pointwise[{col}; clamp; {'normalize' if fused else 'no normalize'}]")
        if self.pixels:
            names = [_name(op) for _, op in self.pixels]
            if self.normalize is not None and not fused:
                names.insert(self.normalize_at, "normalize")
            text += f" -> pixel[{', '.join(names)}]"
        return text

    def sample(self, seed: int, epoch: Any, indices: Any, sizes: Any, targets: Targets | None = None,
               frames: Any = None) -> StagePlan:
        """Draw every op's parameters and fold them. indices: int64 [N] global sample indices
        and sizes: float64 [N, 2] input (h, w), each a tensor or a numpy array; epoch: an int,
        or int64 [N] per-sample epochs (random.epochs); frames: int64 [N], each row's frame
        number in its clip, or None (images: per-frame ops draw as the others). A geometric op
        with `needs_targets` (RandomIoUCrop) draws with `sample(draws, sizes, targets)`: the
        batch's targets (None when it has none) as the stage's earlier ops moved them into the
        op's input."""
        sizes = host(sizes).reshape(-1, 2)
        n = sizes.shape[0]
        prefixes = self.prefixes(prefix(seed, epoch, indices), frames, [pos for pos, _ in self.ops])
        # every op's leading draws, hashed in one evaluation per prefix
        blocks = op_blocks_by_prefix(prefixes, [pos for pos, _ in self.ops],
                                     [fast.block_draws(op) for _, op in self.ops]) if n else None
        matrix: np.ndarray | None = None
        cur = sizes
        color_params: list[tuple[ColorOp, Params]] = []
        elastic: Elastic | None = None
        resized = _resized_crops(self.ops)
        for k, (pos, op) in enumerate(self.ops):
            draws = Draws(seed, epoch, indices, pos, prefixes[k], None if blocks is None else blocks[k])
            if isinstance(op, GeometryOp) and op.deformation:  # its field, and the matrices before it
                params = op.sample(draws, cur)
                before = matrix if matrix is not None else np.tile(np.eye(3), (n, 1, 1))
                elastic = Elastic(before.copy(), params["field"], params["grid"])
                m, cur = op.transform(params, cur)
                matrix = m if matrix is None else m @ matrix
            elif isinstance(op, GeometryOp) and getattr(op, "needs_targets", False):
                if targets is None or matrix is None:
                    seen = targets
                elif elastic is not None:  # through the field drawn before it in this stage
                    seen = elastic.move(targets, matrix, cur)
                else:
                    seen = fast.move_targets(targets, matrix, cur)
                m, cur = fast.plan_seeing(op, draws, cur, seen)
                matrix = m if matrix is None else m @ matrix
            elif k in resized:  # the exact fractional window, for the Resize after it
                m, cur = op.resampled(op.sample(draws, cur), cur)  # type: ignore[attr-defined]
                matrix = m if matrix is None else m @ matrix
            elif isinstance(op, GeometryOp):
                m, cur = fast.plan_geometry(op, draws, cur)
                matrix = m if matrix is None else m @ matrix
            else:
                color_params.append((op, fast.sample(op, draws, cur)))  # type: ignore[arg-type]
        if matrix is None:
            matrix = np.zeros((n, 3, 3))
            matrix[:, 0, 0] = matrix[:, 1, 1] = matrix[:, 2, 2] = 1.0
        return StagePlan(self, matrix, sizes, np.asarray(cur, dtype=np.float64), color_params, elastic)

    def prefixes(self, shared: np.ndarray, frames: Any, positions: list[int]) -> list[np.ndarray]:
        """The hash prefix each op at `positions` draws from: the batch's (`shared`), or, for a
        per-frame op when frames are given, the per-frame one (made once)."""
        if frames is None or not self.per_frame.intersection(positions):
            return [shared] * len(positions)
        framed = frame_prefix(shared, frames)
        return [framed if pos in self.per_frame else shared for pos in positions]

    def resolve(self, op: GeometryOp) -> bool:
        """Fold op's explicit filter settings into the stage; False if they conflict."""
        given = {a: getattr(op, a, None) for a in ("interpolation", "border", "fill")}
        given = {a: v for a, v in given.items() if v is not None}
        if any(a in self._explicit and self._explicit[a] != v for a, v in given.items()):
            return False
        for a, v in given.items():
            self._explicit[a] = v
            setattr(self, a, v)
        return True


def _name(op: Op) -> str:
    return getattr(op, "name", None) or type(op).__name__


def _resized_crops(ops: list[tuple[int, Op]]) -> set[int]:
    """Where in `ops` a geometric op with a `resampled` form (a Crop) stands whose next
    geometric op resamples whatever window it gets (`resamples_window`: a Resize): the two
    fold into one map of the exact window (fractions of the image unrounded) onto the next
    op's output, as Pillow's resize(box=...) resamples a fractional window."""
    geo = [k for k, (_, op) in enumerate(ops) if isinstance(op, GeometryOp)]
    return {k for k, nxt in zip(geo, geo[1:])
            if hasattr(ops[k][1], "resampled") and ops[nxt][1].resamples_window}  # type: ignore[attr-defined]


@dataclass
class Program:
    """A list of ops planned: its stages, its batch ops and its output form."""

    ops: list[Op]
    output: Output
    stages: list[Stage]
    batch_ops: list[tuple[int, BatchOp]]
    targets: TargetForm = field(default_factory=TargetForm)  # how boxes come in and targets go out
    targets_op: TargetsOp | None = None  # whose rules `targets` carries

    def form(self, k: int) -> Form:
        """What stage k's pointwise pass writes: the output form (with the normalisation) when
        it is the last stage and no pixel op follows; otherwise float32 NCHW in [0, 1], in the
        output's channels for the last stage (normalised when Normalize precedes its pixel ops)."""
        stage = self.stages[k]
        if k + 1 < len(self.stages):
            return INTERMEDIATE
        norm = stage.normalize if stage.normalize is not None and stage.normalize_at == 0 else None
        mean, std = (norm.mean, norm.std) if norm is not None else (None, None)
        if stage.pixels:
            return Form(INTERMEDIATE.dtype, "NCHW", self.output.channels, mean, std)
        out = self.output
        return Form(out.dtype, out.layout, out.channels, mean, std)

    def describe(self) -> str:
        out = self.output
        lines = [f"Plan: {len(self.ops)} ops -> {len(self.stages)} stage(s); output {out.layout} "
                 f"{str(out.dtype).replace('torch.', '')}, {out.channels} channel(s)"]
        for k, s in enumerate(self.stages):
            lines.append(f"  stage {k}: {s.describe()}")
        last = [op for _, op in self.batch_ops] + ([self.targets_op] if self.targets_op is not None else [])
        if last:
            lines.append(f"  then on the batch: {', '.join(_name(op) for op in last)}")
        return "\n".join(lines)

    def mix(self, batch: dict[str, Any], seed: int, epoch: Any, indices: np.ndarray) -> dict[str, Any]:
        """The batch ops, in order, on the output batch (image and targets)."""
        if not self.batch_ops:
            return batch
        per = epochs(epoch)
        shared = prefix(seed, per, indices)
        sizes = np.tile(np.asarray(batch["image"].shape[-2:] if self.output.layout == "NCHW"
                                   else batch["image"].shape[1:3], dtype=np.float64), (len(indices), 1))
        for pos, op in self.batch_ops:
            draws = Draws(seed, per, indices, pos, shared)
            batch = op.apply(batch, op.sample(draws, sizes), draws)
            if not isinstance(batch, dict) or "image" not in batch:
                raise TypeError(f"{_name(op)}.apply must return the batch dict (with 'image'), got {type(batch).__name__}")
        return batch


def build(ops: list[Op], output: Output, targets: TargetForm | None = None) -> Program:
    """Plan the op list into stages (see the module docstring); errors name the op's place."""
    stages: list[Stage] = []
    batch_ops: list[tuple[int, BatchOp]] = []
    targets_op: TargetsOp | None = None
    last: Op | None = None  # the first batch or targets op: every op after it must be one too
    current: Stage | None = None
    normalized = False
    for pos, op in _placed(ops):
        if last is not None and not isinstance(op, (BatchOp, TargetsOp)):
            raise ValueError(f"op {pos} ({type(ops[pos]).__name__}) comes after the batch op {_name(last)}: "
                             "batch ops work on the finished batch and come last")
        if isinstance(op, TargetsOp):
            if targets_op is not None:
                raise ValueError(f"op {pos}: a second {_name(op)} (after {_name(targets_op)}); give one, with all the "
                                 "rules")
            targets_op, last = op, last or op
            continue
        if isinstance(op, BatchOp):
            batch_ops.append((pos, op))
            last = last or op
            continue
        if isinstance(op, (GeometryOp, ColorOp)) and normalized:
            raise ValueError(f"op {pos} ({type(ops[pos]).__name__}) comes after Normalize; only pixel ops (e.g. Lambda) "
                             "and batch ops may follow Normalize (colour and geometric ops work on pixel values)")
        if current is None or (isinstance(op, (GeometryOp, ColorOp)) and current.pixels):
            if current is not None:
                stages.append(current)
            current = Stage()
        if ops[pos].per_frame:  # a compound's parts draw per frame when it does
            current.per_frame.add(pos)
        if isinstance(op, GeometryOp):
            if op.deformation and any(g.deformation for _, g in current.geometry):  # one field per warp
                stages.append(current)
                current = Stage(per_frame={pos} if ops[pos].per_frame else set())
            if not current.resolve(op):
                stages.append(current)
                current = Stage(per_frame={pos} if ops[pos].per_frame else set())
                current.resolve(op)
            current.ops.append((pos, op))
        elif isinstance(op, ColorOp):
            current.ops.append((pos, op))
        elif isinstance(op, Normalize):
            if normalized:
                raise ValueError(f"op {pos}: a second Normalize")
            current.normalize, current.normalize_at = op, len(current.pixels)
            normalized = True
        elif isinstance(op, PixelOp):
            current.pixels.append((pos, op))
        else:
            raise TypeError(f"op {pos}: {op!r} is of no kind the planner knows: subclass one of pixelpipe.ops "
                            "GeometryOp, ColorOp, PixelOp or BatchOp (or TargetsOp, for rules on the targets)")
    stages.append(current if current is not None else Stage())  # a plain conversion still needs one pass
    form = targets or TargetForm()
    if targets_op is not None:
        form = replace(form, rules=targets_op.box_rules)
    program = Program(list(ops), output, stages, batch_ops, form, targets_op)
    _check_output(program)
    return program


def _placed(ops: list[Op]) -> list[tuple[int, Op]]:
    """(position, op) for each op, a CompoundOp's parts each at the compound's position (so
    that they draw alike: ops.kinds.CompoundOp)."""
    out: list[tuple[int, Op]] = []
    for pos, op in enumerate(ops):
        if isinstance(op, CompoundOp):
            parts = op.parts()
            for part in parts:
                if not isinstance(part, (GeometryOp, ColorOp, PixelOp)):
                    raise TypeError(f"op {pos} ({_name(op)}): its parts must be geometric, colour or pixel ops, "
                                    f"got {type(part).__name__}")
            out.extend((pos, part) for part in parts)
        else:
            out.append((pos, op))
    return out


def _check_output(program: Program) -> None:
    out = program.output
    norm = next((s.normalize for s in program.stages if s.normalize is not None), None)
    if out.dtype.is_floating_point is False and norm is not None:
        raise ValueError("Normalize produces values outside uint8; use a float dtype or drop Normalize")
    if out.channels == 1 and norm is not None and (len(set(norm.mean)) > 1 or len(set(norm.std)) > 1):
        raise ValueError(f"channels=1 gives one grey channel: Normalize needs one mean and std for it "
                         f"(e.g. Normalize([m], [s])), got mean={list(norm.mean)}, std={list(norm.std)}")
