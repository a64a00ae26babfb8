"""Augmentation policies: AutoAugment, RandAugment, TrivialAugmentWide, with the operation
chosen per sample.

A policy is a `CompoundOp`: its operations (`augment_space`) are geometric (shears,
translations, rotations) and pixel ops (colour and levels), and each sample draws which of
them it takes at each step. The choice is a per-sample program of steps over the policy's
operations, as `OneOf` and `SomeOf` draw (`structure._Structure`); the policy hands the planner
two such structures over the same program: one of its geometric operations, which folds into
the stage's one warp like any per-sample choice among matrices (identity where a step chose
no geometry), and one of its pixel operations, run on the warped image on the rows that chose
each. Both sit at the policy's position, so they draw the same choices; every operation of
every step draws its magnitude from its own stream.

Order: torchvision applies the chosen operations one after the other. Here every geometric
operation of a sample (in step order, multiplied into one matrix) comes before its colour and
pixel operations, which keep their step order and are clamped after each as torchvision
does. Pointwise operations commute with a warp, so the two orders differ only (a) in the
colour of the uncovered corners when an operation that changes black (Invert, Solarize,
Brightness, Posterize...) came before a shear, translation or rotation, and (b) in what the
image-wide statistics see: AutoContrast, Equalize and Contrast measure the warped image
(corners included) rather than the unwarped one, and Sharpness filters it. The distribution of
the operations and of their magnitudes, which is what the recipes tune, is unchanged; in
exchange the image is resampled once, with the stage's filter (bilinear by default, where
torchvision resamples once per geometric operation with nearest), and the policy's geometry
costs nothing beyond the crop's warp.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..data.transfer import to_device
from .augment_space import AUTOAUGMENT_SPACE, RANDAUGMENT_SPACE, TRIVIALAUGMENT_SPACE, primitive
from .checks import INTERPOLATIONS, check_choice, check_fill
from .kinds import CompoundOp, GeometryOp, Op, Params
from .policy_geometry import GeometryProgram
from .policy_program import PrimitiveProgram
from .structure import _Structure, inner_op

__all__ = ["AutoAugment", "RandAugment", "TrivialAugmentWide", "POLICIES"]


class PolicySteps(_Structure):
    """The operations of one kind of a policy, over the policy's per-sample program: a
    structure whose steps are the policy's choices restricted to its operations."""

    def __init__(self, ops: list[Op], policy: _Policy, entries: list[int]) -> None:
        self._setup(ops)
        self._policy = policy
        self._entries = np.asarray(entries, dtype=np.int64)
        local = np.full(len(policy.entries) + 1, -1, dtype=np.int64)  # the last slot takes -1 (no entry)
        local[self._entries] = np.arange(len(entries))
        self._local = local
        self.draws = policy.draws
        self.name = type(policy).__name__
        self._program: PrimitiveProgram | bool | None = None  # program()'s one-pass form, made on first use
        self._matrices: GeometryProgram | bool | None = None  # _geometry()'s, likewise

    def _fields(self) -> dict[str, Any]:
        return {"policy": self.name}

    def steps(self, draws: Draws, n: int) -> np.ndarray:
        return self._local[self._policy.choices(draws, n)]

    def stream(self, k: int) -> int:
        return int(self._entries[k])

    def operation_names(self) -> list[str]:
        """What each of the part's operations computes: its `operation` where it has one (timm's
        "ColorIncreasing" computes "Color"), else its `name` ("Brightness", "Rotate"...)."""
        return [getattr(op, "operation", op.name) for op in self.ops]

    def _geometry(self, draws: Draws, sizes: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """_Structure._geometry, in one pass over every (sample, step) where the part's operations
        allow it (torchvision's and timm's shears, translations, rotations: ops.policy_geometry,
        the same matrices)."""
        if self._matrices is None:
            self._matrices = GeometryProgram.of(self.ops) or False
        if self._matrices:
            streams = [inner_op(draws.op, self.stream(k)) for k in range(len(self.ops))]
            return self._matrices(streams, steps, draws, np.asarray(sizes, dtype=np.float64))
        return super()._geometry(draws, sizes, steps)

    def program(self, params: Params, draws: Draws, size: Any) -> tuple[np.ndarray, np.ndarray]:
        """The pixel part's per-sample program as numbers, for a kernel that runs every sample's
        operation in one pass a step: (which, values), int64 and float64 [S, N]: at step s,
        sample i takes operation which[s, i] (an index into operation_names(); -1 none) with
        the one number it computes with, values[s, i] (augment_space.operands: a factor, a
        posterize mask or a solarize threshold in levels; 0 for the operations without one),
        drawn as apply() draws them. size: the images' (height, width)."""
        steps = params["steps"]
        if self._program is None:
            self._program = self._policy.program_form(self.ops) or False
        if self._program:  # every (sample, step) at once (the policy's program_form)
            return self._program([inner_op(draws.op, self.stream(k)) for k in range(len(self.ops))], steps, draws, size)
        values = np.zeros(steps.T.shape, dtype=np.float64)
        sizes = np.array([float(size[0]), float(size[1])])
        for j, k, rows, sub in self.steps_and_pairs(params, draws):
            op = self.ops[k]
            numbers = op.operands(op.sample(sub, np.tile(sizes, (len(rows), 1))))
            if len(numbers) > 1:
                raise ValueError(f"{self.name}: {op.name} computes with {len(numbers)} numbers, a kernel step takes one")
            for v in numbers.values():
                values[j, rows] = v
        return steps.T.copy(), values

    def apply_owned(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        """apply() on an x that the caller owns and does not read again (the CPU engine's pieces,
        engine.pixels): the same operations on the same rows with the same parameters, so the
        same numbers, for less. Measured on one CPU thread, pieces of 8 224x224 images, outside
        the operations themselves: apply() copied x first (about 1.5 ms a piece); it gathered
        rows with x[index] and wrote them back with index_copy_ (2-3x index_select and row
        copies, torch 2.13); and each operation's draws cost 75 us of numpy hashing, where one
        op_blocks evaluation here hashes those of every operation the piece uses. The rows are
        the operations' to overwrite (apply_owned where an operation has it: a policy's
        brightness, colour, contrast and invert write into them, no new image and copy back). On
        other devices: apply_gathered, writing into x."""
        if x.device.type != "cpu":
            return self.apply_gathered(x, params, draws, owned=True)
        n = x.shape[0]
        size = np.array(x.shape[-2:], dtype=np.float64)
        for k, rows, sub in self.step_pairs(params, draws):
            op = self.ops[k]
            a, b = int(rows[0]), int(rows[-1]) + 1
            run = b - a == len(rows)  # consecutive rows: a view, written back as a slice
            part = x[a:b] if run else x.index_select(0, to_device(rows, x.device))
            apply = getattr(op, "apply_owned", op.apply)  # part is ours: a view of the caller's x, or our copy
            y = apply(part, op.sample(sub, np.tile(size, (len(rows), 1))), sub)
            if run and y is part:  # written into x's rows
                continue
            if y.shape[1:] != x.shape[1:]:
                raise ValueError(f"{self.name}: {type(op).__name__} changed the image's shape "
                                 f"{tuple(x.shape[1:])} to {tuple(y.shape[1:])}")
            if len(rows) == n and y.dtype == x.dtype:
                x = y  # a new tensor of the operation's, or x itself: ours either way
            elif run:
                x[a:b].copy_(y)
            else:
                for i, r in enumerate(rows.tolist()):
                    x[r].copy_(y[i])
        return x


class _Policy(CompoundOp):
    """A policy's operations (`entries`, None for Identity) and its per-sample `choices`."""

    entries: list[Op | None]

    def _common(self, interpolation: str | None, fill: Any) -> None:
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.fill = check_fill(fill)

    def _build(self, entries: list[Op | None]) -> None:
        self.entries = entries
        self._valid = np.array([k if op is not None else -1 for k, op in enumerate(entries)] + [-1], dtype=np.int64)
        geo = [k for k, op in enumerate(entries) if isinstance(op, GeometryOp)]
        pix = [k for k, op in enumerate(entries) if op is not None and not isinstance(op, GeometryOp)]
        self._parts = [PolicySteps([entries[k] for k in ks], self, ks) for ks in (geo, pix) if ks]  # type: ignore[misc]

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k not in ("entries", "draws")}

    def parts(self) -> list[Op]:
        return list(self._parts)

    def program_form(self, ops: list[Op]) -> Any:
        """PolicySteps.program's one-pass form for this policy's pixel operations `ops`, or
        None (the pair form): torchvision's operations' (ops.policy_program.PrimitiveProgram)."""
        return PrimitiveProgram.of(ops)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def choices(self, draws: Draws, n: int) -> np.ndarray:
        """int64 [N, S]: the entry each sample takes at each step, -1 for none (Identity, or
        an operation that did not fire)."""
        raise NotImplementedError


def _check_bins(num_magnitude_bins: int) -> int:
    if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
        raise ValueError(f"num_magnitude_bins must be a whole number >= 2, got {num_magnitude_bins!r}")
    return num_magnitude_bins


class RandAugment(_Policy):
    """RandAugment (Cubuk et al. 2020; torchvision's RandAugment): `num_ops` steps, each an
    operation chosen uniformly per sample among Identity, ShearX, ShearY, TranslateX,
    TranslateY, Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize,
    AutoContrast and Equalize, at bin `magnitude` of `num_magnitude_bins`, signed magnitudes
    negated with probability 1/2 (torchvision's tables: `pixelpipe.ops.augment_space`).

    Args:
        num_ops: operations per sample (with replacement: a sample may take one twice).
        magnitude: the bin, 0..num_magnitude_bins - 1 (9 of 31: torchvision's default, timm's m9).
        num_magnitude_bins: how many bins each table has.
        interpolation: the warp's filter for the whole stage; None keeps the stage's (bilinear).
        fill: the colour of uncovered corners (default black, torchvision's fill).

    Per sample, not per batch: each sample draws its own operations, signs and, for the
    geometric ones, a matrix folded into the stage's warp. The module docstring says where the
    folding reorders geometric and colour operations and why that is acceptable.

    Example (DeiT): ``[RandomResizedCrop(224), RandomFlip(), RandAugment(2, 9), Normalize(...),
    RandomErasing(0.25)]``.
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: str | None = None, fill: Any = None) -> None:
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops must be a whole number >= 0, got {num_ops!r}")
        _check_bins(num_magnitude_bins)
        if isinstance(magnitude, bool) or not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"magnitude must be a bin, a whole number in [0, {num_magnitude_bins - 1}], "
                             f"got {magnitude!r}")
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins
        self._common(interpolation, fill)
        self.draws = num_ops
        space = list(RANDAUGMENT_SPACE.values())
        self._k = len(space)
        self._build([primitive(s, num_magnitude_bins, magnitude, self.interpolation, self.fill)
                     for _ in range(num_ops) for s in space])

    def choices(self, draws: Draws, n: int) -> np.ndarray:
        picks = [j * self._k + draws.choice_np(j, self._k) for j in range(self.num_ops)]
        chosen = np.stack(picks, 1) if picks else np.zeros((n, 0), dtype=np.int64)
        return self._valid[chosen]


class TrivialAugmentWide(_Policy):
    """TrivialAugment Wide (Müller and Hutter 2021; torchvision's TrivialAugmentWide): one
    operation per sample, chosen uniformly among RandAugment's fourteen, at a bin drawn
    uniformly per sample among `num_magnitude_bins`, on the wide tables (shears up to 0.99,
    translations up to 32 pixels, rotations up to 135 degrees, colour factors 1 +- 0.99,
    posterize down to 2 bits), signed magnitudes negated with probability 1/2.

    Args: as RandAugment's. Example: ``[RandomResizedCrop(176), RandomFlip(),
    TrivialAugmentWide(), Normalize(...)]`` (torchvision's ResNet-50 recipe).
    """

    draws = 1

    def __init__(self, num_magnitude_bins: int = 31, interpolation: str | None = None, fill: Any = None) -> None:
        self.num_magnitude_bins = _check_bins(num_magnitude_bins)
        self._common(interpolation, fill)
        space = list(TRIVIALAUGMENT_SPACE.values())
        self._k = len(space)
        self._build([primitive(s, num_magnitude_bins, None, self.interpolation, self.fill) for s in space])

    def choices(self, draws: Draws, n: int) -> np.ndarray:
        return self._valid[draws.choice_np(0, self._k)].reshape(n, 1)


# torchvision's AutoAugmentPolicy tables: 25 sub-policies of two (operation, probability,
# magnitude bin of 10) each, from "AutoAugment: Learning Augmentation Strategies from Data"
POLICIES: dict[str, list[tuple[tuple[str, float, int | None], tuple[str, float, int | None]]]] = {
    "imagenet": [
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ],
    "cifar10": [
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ],
    "svhn": [
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ],
}


class AutoAugment(_Policy):
    """AutoAugment (Cubuk et al. 2019; torchvision's AutoAugment): per sample one of the
    policy's 25 sub-policies, uniformly; each of its two operations applies with its own
    probability, at its magnitude bin of 10, signed magnitudes negated with probability 1/2.

    Args:
        policy: "imagenet", "cifar10" or "svhn" (torchvision's AutoAugmentPolicy tables, in
            `POLICIES`).
        interpolation, fill: as RandAugment's.

    Example: ``[RandomResizedCrop(224), RandomFlip(), AutoAugment("imagenet"), Normalize(...)]``.
    """

    draws = 3  # the sub-policy, then whether each of its two operations fires

    def __init__(self, policy: str = "imagenet", interpolation: str | None = None, fill: Any = None) -> None:
        self.policy = check_choice("policy", policy, tuple(POLICIES), optional=False)
        self._common(interpolation, fill)
        table = POLICIES[self.policy]
        self._p = np.array([[p for _, p, _ in sub] for sub in table])  # [25, 2]
        self._build([primitive(AUTOAUGMENT_SPACE[name], 10, 0 if at is None else at, self.interpolation, self.fill)
                     for sub in table for name, _, at in sub])

    def choices(self, draws: Draws, n: int) -> np.ndarray:
        sub = draws.choice_np(0, len(self._p))
        fires = np.stack([draws.uniform_np(1 + j) < self._p[sub, j] for j in range(2)], 1)  # [N, 2]
        entry = sub[:, None] * 2 + np.arange(2)[None, :]
        return np.where(fires, self._valid[entry], -1)
