"""The kinds of op the planner knows, and the flat protocol every op follows.

An op never touches pixels where the planner can avoid it. It *samples* per-sample parameters
from a `Draws` and states its contribution through one of four kinds:

- `GeometryOp`: a forward 3x3 matrix per sample (input pixel coordinates -> output pixel
  coordinates) and the output size. Consecutive ones multiply; the image is resampled once;
  boxes, keypoints and masks follow the same matrices.
- `ColorOp`: an affine colour map per sample (3x4, on RGB in 0..255 units). A chain folds into
  one matrix, applied in the warp's pointwise epilogue.
- `PixelOp`: a per-sample function of the image tensor and the op's own parameters (noise,
  erasing, blur, a user's `Lambda`), run on the warped float image where the plan puts it.
- `BatchOp`: a function of the whole output batch (image and targets), for ops that mix
  samples (MixUp, CutMix); it runs last.
- `TargetsOp`: rules on the targets alone (SanitizeBoxes' `box_rules`), applied when the
  targets are put in their output form; it touches no pixel and stands with the batch ops.
- `CompoundOp`: ops of several of these kinds that share one per-sample choice (an
  augmentation policy picks a rotation for some samples and a posterize for others): its
  `parts()` are ops of the kinds above, which the planner puts where their kinds go, all at
  the compound's position, so that they draw the same numbers.

A new op subclasses one kind and is found by the planner through that kind: nothing else
changes. Every op takes `per_frame=True` (a keyword its constructor gains from `Op`): on
clips (pixelpipe.augment_clips), such an op draws its parameters for each frame, keyed by
(clip, frame), instead of once per clip (see pixelpipe.data.clips); on images it changes
nothing. Parameters, sizes and matrices are numpy float64 arrays with one row per sample:
planning runs on the host once per batch, on a few hundred numbers, where each torch call on
the CPU costs more than the arithmetic; torch is for pixels. Coordinates are continuous: pixel
(row i, column j) covers [j, j+1) x [i, i+1), its centre is (j + 0.5, i + 0.5); matrices act
on column vectors (x, y, 1).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..data.targets import BoxRules
from .checks import check_prob

__all__ = ["EVAL_STYLES", "AppliedWithP", "BatchOp", "ColorOp", "CompoundOp", "GeometryOp", "Op", "Params",
           "PixelOp", "TargetsOp"]

Params = dict[str, np.ndarray]
# the styles of an evaluation form (Op.eval_form; pixelpipe.eval says what each means)
EVAL_STYLES = ("center", "imagenet")


class Op:
    """Base of every op. `kind` names the planner's kind: "geometry", "color", "pixel",
    "batch" or "normalize".

    `per_frame`: False (default), every frame of a clip shares the clip's draw of this op;
    True, each frame draws anew, from draws keyed by (seed, epoch, clip, frame, op), so a
    ColorJitter flickers while the crop stays. Every subclass's constructor takes it as a
    keyword (`ColorJitter(0.4, per_frame=True)`); batch ops (which mix whole clips) and
    targets ops refuse it."""

    kind: str = "op"
    per_frame: bool = False
    # how many leading draws (0..draws-1) sample() uses: a stage hashes them for all its ops in
    # one evaluation (`random.op_blocks`); draws beyond are hashed when asked for
    draws: int = 0
    # True: the op has no randomness, and its evaluation form is itself
    deterministic: bool = False

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        """Draw this op's per-sample parameters. sizes: float64 [N, 2] (height, width)."""
        return {}

    def eval_form(self, style: str) -> list[Op]:
        """The ops this op becomes in the deterministic evaluation form of its Compose
        (`Compose.eval`): itself when it is deterministic, [] to drop it. `style` is
        "center" or "imagenet" (see pixelpipe.eval). Random ops override this."""
        if self.deterministic:
            return [self]
        raise TypeError(f"{type(self).__name__} does not say what it becomes in an evaluation Compose: give it a "
                        "method eval_form(self, style) returning the ops it becomes (an empty list drops it), "
                        "or build the evaluation Compose yourself")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__init__  # its own, or what it inherits (a mixin's, as AppliedWithP's, or object's)
        if not hasattr(init, "_per_frame"):
            cls.__init__ = _taking_per_frame(init)  # type: ignore[method-assign]

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "per_frame"}

    def __repr__(self) -> str:
        fields = {**self._fields(), **({"per_frame": True} if self.per_frame else {})}
        args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        return f"{type(self).__name__}({args})"


def _taking_per_frame(init: Callable[..., None]) -> Callable[..., None]:
    """An op's __init__ that also takes the keyword `per_frame` (see Op), its signature
    showing it. Only True is stored on the op, so an op's repr names it only when it is on."""

    @functools.wraps(init)
    def __init__(self: Op, *args: Any, per_frame: bool = False, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not isinstance(per_frame, bool):
            raise ValueError(f"{type(self).__name__}: per_frame must be True or False, got {per_frame!r}")
        if per_frame:
            if self.kind in ("batch", "targets"):
                raise ValueError(f"{type(self).__name__} is a {self.kind} op: it works on whole clips, so "
                                 "per_frame=True does not apply to it")
            self.per_frame = True

    sig = inspect.signature(init)
    params = list(sig.parameters.values())
    if "per_frame" not in sig.parameters:
        at = next((k for k, q in enumerate(params) if q.kind is inspect.Parameter.VAR_KEYWORD), len(params))
        params.insert(at, inspect.Parameter("per_frame", inspect.Parameter.KEYWORD_ONLY, default=False,
                                            annotation="bool"))
    __init__.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    __init__._per_frame = True  # type: ignore[attr-defined]
    return __init__


class GeometryOp(Op):
    """A geometric op: a per-sample forward matrix and output size.

    `interpolation`, `border` and `fill` left as None take the stage's values (bilinear,
    "constant", 0); ops with different explicit values are resampled in separate passes. An op
    whose parameters depend on its sample's boxes (RandomIoUCrop) sets `needs_targets = True`
    and is called as `sample(draws, sizes, targets)`, the boxes as the ops before it in its
    stage moved them.
    """

    needs_targets: bool = False
    # True: a displacement field, not a matrix (ops.elastic): its transform() is the identity
    # and its sample() returns "field" and "grid", which the stage hands to the warp
    # (plan.deform); a stage takes one such op, a second one starts the next stage
    deformation: bool = False
    # True: the op maps whatever window the op before it leaves onto its output size (Resize),
    # so a geometric op before it with a `resampled(params, sizes)` form (Crop: its window
    # unrounded) hands it that exact window instead of its whole-pixel one (plan.stages)
    resamples_window: bool = False

    kind = "geometry"
    interpolation: str | None = None
    border: str | None = None
    fill: tuple[float, ...] | None = None

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (matrix float64 [N, 3, 3], output sizes float64 [N, 2] of (height, width))."""
        raise NotImplementedError


class ColorOp(Op):
    """A colour op: a per-sample affine colour transform on RGB in 0..255 units."""

    kind = "color"

    def color(self, params: Params, means: np.ndarray | None) -> np.ndarray:
        """Return float64 [N, 3, 4]: out = A @ rgb + b. `means` ([N, 3], the per-sample mean
        colour of the image entering this op) is given to ops with `needs_mean = True`."""
        raise NotImplementedError

    needs_mean: bool = False
    # True: color() also takes means [K, N, 3] (K mean colours per sample) and returns
    # [K, N, 3, 4]; otherwise the planner tiles the parameters K times and calls it on K * N rows
    stacked_means: bool = False


class PixelOp(Op):
    """A per-sample function of the image tensor.

    `apply(x, params, draws)` gets the batch as float32 [N, C, H, W] (C = the Compose's output
    channels), values in [0, 1], or normalised when the op stands after Normalize, and returns
    a tensor of the same kind. It computes with the parameters `sample` drew (numpy [N] arrays)
    and, for per-pixel randomness, the `draws` it is handed (`Draws.field`): the same sample
    gets the same result in any batch, on any device. Pixel ops keep pixels where they are, so
    boxes, keypoints and masks are left as they are.

    `per_sample` says that each sample's result depends on that sample alone (and its draws),
    so that the Engine may run the op on pieces of a batch, on several threads (engine.pixels);
    an op that looks across samples sets it False and gets the whole batch.
    """

    kind = "pixel"
    per_sample: bool = True

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        raise NotImplementedError


class BatchOp(Op):
    """An op on the whole output batch: `apply(batch, params, draws)` gets the batch dict
    ("image" and whatever targets and values came with it) and returns the new dict. It runs
    after every other op; it may mix samples, so its result for a sample depends on the other
    samples of its batch."""

    kind = "batch"

    def apply(self, batch: dict[str, Any], params: Params, draws: Draws) -> dict[str, Any]:
        raise NotImplementedError


class TargetsOp(Op):
    """Rules on the output targets: `box_rules` (data.targets.BoxRules) say which moved boxes
    are dropped when the batch's targets are put in their output form. A Compose takes one;
    like a batch op it comes after every op that moves pixels."""

    kind = "targets"
    deterministic = True
    box_rules: BoxRules


class CompoundOp(Op):
    """Ops of several kinds sharing one per-sample choice (see the module docstring).

    `parts()` returns them in the order they apply, each a GeometryOp, ColorOp or PixelOp. The
    planner places every part at the compound's position in the list, so each part's `Draws`
    are the compound's own: a part draws the shared choice as its siblings do. Parts are
    placed by kind like any op, so a geometric part joins the warp of its stage: where a
    compound's parts interleave kinds, the folding reorders them, and the compound's
    docstring says how."""

    kind = "compound"

    def parts(self) -> list[Op]:
        raise NotImplementedError


class AppliedWithP:
    """Mixin for an op whose only randomness is whether it applies to a sample: draw 0, with
    probability p, lands in params[flag]. Put it before the kind: ``class X(AppliedWithP,
    PixelOp)``. With p = 1 there is no random choice, so the op keeps itself in an evaluation
    Compose; otherwise it is dropped."""

    draws = 1
    flag = "on"

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 else []  # type: ignore[list-item]

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        return {self.flag: draws.bernoulli_np(0, self.p)}
