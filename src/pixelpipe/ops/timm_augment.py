"""TimmRandAugment: timm's RandAugment ("rand-m9-mstd0.5-inc1", DeiT's and most ViT recipes'),
with the operations chosen per sample.

timm's variant differs from torchvision's (pixelpipe.ops.policies.RandAugment) in its
operations and their arguments (timm.data.auto_augment, written out here from its definitions):
fifteen operations, no Identity, among them Invert and SolarizeAdd; every chosen operation
fires with probability `prob` (0.5); the magnitude of each application is drawn from a normal
of mean `magnitude` and std `magnitude_std`, clipped to [0, 10] (levels out of 10, not bins of
31); the "increasing" set makes every operation stronger as the level grows; uncovered areas
take the ImageNet mean colour. Like the other policies it is a CompoundOp: the geometric
operations fold into the stage's warp, the others run after it in step order (the order
caveats of pixelpipe.ops.policies apply).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from .augment_space import _apply, operands
from .geometry import _about_centre, _rotation
from .kinds import GeometryOp, Op, Params, PixelOp
from .levels_cpu import fast, solarize_add_cpu
from .matrices import affine
from .pixelwise import column, grey_levels
from .policies import _Policy
from .policy_program import by_operation, program_of

__all__ = ["TimmRandAugment"]

LEVEL_MAX = 10.0  # timm's _LEVEL_DENOM: magnitudes are levels out of 10
GEOMETRIC = ("ShearX", "ShearY", "TranslateXRel", "TranslateYRel", "Rotate")
INCREASING = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
              "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
              "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
PLAIN = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color", "Contrast",
         "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
IMAGENET_FILL = (124.0, 116.0, 104.0)  # timm's img_mean: round(255 * ImageNet mean)


class _TimmOp(Op):
    """One timm operation with its magnitude rule: level ~ N(magnitude, std) clipped to
    [0, 10] (draws 0 and 1, Box-Muller), a sign (draw 2: negative where u > 0.5, timm's
    _randomly_negate), and the operation's argument from them (`arg`)."""

    draws = 3

    def _init(self, name: str, magnitude: float, std: float, translate_pct: float) -> None:
        self.name, self.magnitude, self.std, self.translate_pct = name, magnitude, std, translate_pct

    def __repr__(self) -> str:
        return f"{self.name}(m={self.magnitude}, mstd={self.std})"

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        t, sign = self.levels(draws, len(sizes))
        return {"arg": self.arg(t, sign, np.asarray(sizes, dtype=np.float64))}

    def levels(self, draws: Draws, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(level / 10, sign), float64 [n], from draws 0..2 of n rows: the level ~ N(magnitude,
        std) clipped to [0, 10], the sign -1 where draw 2 > 0.5."""
        level = np.full(n, self.magnitude)
        if self.std > 0:
            u1 = np.maximum(draws.uniform_np(0).astype(np.float64), 1.0 / (1 << 24))
            u2 = draws.uniform_np(1).astype(np.float64)
            level = level + self.std * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
        level = np.clip(level, 0.0, LEVEL_MAX)
        return level / LEVEL_MAX, np.where(draws.uniform_np(2) > 0.5, -1.0, 1.0)

    def arg(self, t: np.ndarray, sign: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """timm's level_to_arg at t = level / 10, per sample."""
        name = self.name
        if name == "Rotate":
            return sign * 30.0 * t
        if name in ("ShearX", "ShearY"):
            return sign * 0.3 * t
        if name in ("TranslateXRel", "TranslateYRel"):  # in pixels of the image's width or height
            return sign * self.translate_pct * t * sizes[:, 1 if name == "TranslateXRel" else 0]
        if name == "Posterize":
            return np.floor(t * 4)
        if name == "PosterizeIncreasing":
            return 4 - np.floor(t * 4)
        if name == "Solarize":
            return np.minimum(256, np.floor(t * 256))
        if name == "SolarizeIncreasing":
            return 256 - np.minimum(256, np.floor(t * 256))
        if name == "SolarizeAdd":
            return np.minimum(128, np.floor(t * 110))
        if name.endswith("Increasing"):  # the enhance factors, 1 +- 0.9 t, at least 0.1
            return np.maximum(0.1, 1.0 + sign * 0.9 * t)
        if name in ("Color", "Contrast", "Brightness", "Sharpness"):
            return t * 1.8 + 0.1
        return np.zeros_like(t)  # AutoContrast, Equalize, Invert


class TimmGeometry(_TimmOp, GeometryOp):
    """A shear (PIL's (1, f, 0, 0, 1, 0): x' = x - f y), a translation (by -arg pixels, PIL's
    (1, 0, arg, 0, 1, 0)) or a rotation (arg degrees counter-clockwise about the centre)."""

    def rowwise_key(self) -> tuple[Any, ...]:
        """All that sample() and transform() read besides the draws, whose sample() reads its
        leading draws row by row and whose transform() keeps the size (ops.policy_geometry)."""
        return (type(self), self.name, self.magnitude, self.std, self.translate_pct)

    def __init__(self, name: str, magnitude: float, std: float, translate_pct: float,
                 interpolation: str | None, fill: tuple[float, ...] | None) -> None:
        self._init(name, magnitude, std, translate_pct)
        self.interpolation, self.fill = interpolation, fill

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = params["arg"]
        n = len(a)
        if self.name == "ShearX":
            return affine(n, b=-a), sizes
        if self.name == "ShearY":
            return affine(n, c=-a), sizes
        if self.name == "TranslateXRel":
            return affine(n, tx=-a), sizes
        if self.name == "TranslateYRel":
            return affine(n, ty=-a), sizes
        return _about_centre(_rotation(a), sizes), sizes


class TimmPixels(_TimmOp, PixelOp):
    """A colour or levels operation of timm's, on the float image (Pillow's ImageOps and
    ImageEnhance definitions; the enhance factors f blend as torchvision's 1 + m)."""

    def __init__(self, name: str, magnitude: float, std: float) -> None:
        self._init(name, magnitude, std, 0.0)
        self.operation = name.removesuffix("Increasing")  # what it computes (PolicySteps.operation_names)

    def operands(self, params: Params) -> dict[str, np.ndarray]:
        """The one per-sample number apply() computes with (augment_space.operands' form: a
        factor, a posterize mask, a solarize threshold in levels; SolarizeAdd's addend), for
        the policy kernels (PolicySteps.program): the same numbers apply() makes of params."""
        a = np.asarray(params["arg"], dtype=np.float64)
        base = self.operation
        if base in ("Color", "Contrast", "Brightness", "Sharpness"):
            return operands(base, a - 1.0)
        if base == "Posterize":
            return operands("Posterize", np.minimum(a, 8.0))
        if base == "Solarize":
            return operands("Solarize", a / 255.0)
        if base == "SolarizeAdd":
            return {"add": a}
        return {}  # AutoContrast, Equalize, Invert

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        if x.shape[0] == 0:
            return x
        a = np.asarray(params["arg"], dtype=np.float64)
        base = self.operation
        if base in ("Color", "Contrast", "Brightness", "Sharpness"):
            return _apply(base, x, a - 1.0)
        if base == "Posterize":
            return _apply("Posterize", x, np.minimum(a, 8.0))
        if base == "Solarize":  # Pillow's threshold in grey levels: 256 inverts nothing
            return _apply("Solarize", x, a / 255.0)
        if base == "SolarizeAdd":
            return solarize_add_cpu(x, a) if fast(x) else solarize_add_reference(x, a)
        return _apply(base, x, a)  # AutoContrast, Equalize, Invert


class TimmProgram:
    """PolicySteps.program for TimmRandAugment's pixel operations, every (sample, step) at once
    (ops.policy_program's way for torchvision's: the operations' draws hashed once and gathered
    per entry, each entry's level, sign and argument computed together, grouped by operation
    only for the argument's rule): the same numbers as the pair form, which took 1.29 ms per
    batch of 256 on a 2-core CPU for DeiT's config (tests/test_policy_program.py)."""

    def __init__(self, ops: list[TimmPixels]) -> None:
        self.ops = ops
        first: dict[str, TimmPixels] = {}  # an operation of each name: arg() and operands() depend on the name alone
        for op in ops:
            first.setdefault(op.name, op)
        self.kinds = list(first.values())
        self.name_of = np.array([list(first).index(op.name) for op in ops], dtype=np.int64)

    @classmethod
    def of(cls, ops: list[Op]) -> TimmProgram | None:
        if not ops or not all(type(op) is TimmPixels for op in ops):
            return None
        if len({(op.magnitude, op.std) for op in ops}) != 1:  # one policy's: one magnitude rule
            return None
        return cls(ops)  # type: ignore[arg-type]

    def __call__(self, streams: list[int], steps: np.ndarray, draws: Draws,
                 size: Any) -> tuple[np.ndarray, np.ndarray]:
        kinds = self.kinds

        def entry_values(k: np.ndarray, entry: Draws) -> np.ndarray:
            n = len(k)
            t, sign = self.ops[0].levels(entry, n)  # every operation's rule (one magnitude and spread: `of`)
            sizes = np.tile(np.array([float(size[0]), float(size[1])]), (n, 1))
            return by_operation(self.name_of[k], len(kinds), lambda j, pick: kinds[j].operands(
                {"arg": kinds[j].arg(t[pick], sign[pick], sizes[pick])}))

        return program_of(self.ops, streams, steps, draws, entry_values)


def solarize_add_reference(x: torch.Tensor, add: np.ndarray) -> torch.Tensor:
    """Grey levels under 128 raised by `add` (numpy [N], whole numbers >= 0), at most to 255, /
    255: the twin of levels_cpu.solarize_add_cpu, on any device."""
    levels = grey_levels(x)
    added = torch.where(levels < 128, (levels + column(add, x, torch.int64)).clamp_(max=255), levels)
    return added.to(x.dtype) * (1.0 / 255.0)


class TimmRandAugment(_Policy):
    """timm's RandAugment, per sample: `num_ops` operations drawn uniformly (with replacement)
    among timm's fifteen, each firing with probability `prob`, at a level drawn from
    N(magnitude, magnitude_std) clipped to [0, 10].

    Args:
        num_ops, magnitude, magnitude_std, increasing: timm's "rand-m{magnitude}-n{num_ops}-
            mstd{magnitude_std}-inc{1 if increasing}" (DeiT: 2, 9, 0.5, True; `from_config`
            reads such a string).
        prob: each chosen operation's probability (timm's 0.5).
        translate_pct: the largest translation, a fraction of the side (timm's 0.45).
        interpolation: the stage's filter (None keeps the stage's; DeiT's timm runs bicubic).
        fill: the colour of uncovered areas, 0..255 (timm: the ImageNet mean, 124, 116, 104).

    Example: ``TimmRandAugment.from_config("rand-m9-mstd0.5-inc1")``.
    """

    def __init__(self, num_ops: int = 2, magnitude: float = 9.0, magnitude_std: float = 0.5, increasing: bool = True,
                 prob: float = 0.5, translate_pct: float = 0.45, interpolation: str | None = None,
                 fill: Any = IMAGENET_FILL) -> None:
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops must be a whole number >= 0, got {num_ops!r}")
        magnitude, magnitude_std = float(magnitude), float(magnitude_std)
        if not 0.0 <= magnitude <= LEVEL_MAX:
            raise ValueError(f"magnitude must be a level in [0, {LEVEL_MAX:g}], got {magnitude}")
        if not 0.0 <= magnitude_std < math.inf:
            raise ValueError(f"magnitude_std must be a finite number >= 0, got {magnitude_std}")
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be a probability in [0, 1], got {prob}")
        if not 0.0 <= translate_pct <= 1.0:
            raise ValueError(f"translate_pct must be in [0, 1], got {translate_pct}")
        self.num_ops, self.magnitude, self.magnitude_std = num_ops, magnitude, magnitude_std
        self.increasing, self.prob, self.translate_pct = bool(increasing), float(prob), float(translate_pct)
        self._common(interpolation, fill)
        self.draws = 2 * num_ops  # the operation of each step, then whether it fires
        self.names = INCREASING if self.increasing else PLAIN
        self._k = len(self.names)
        self._build([self._op(name) for _ in range(num_ops) for name in self.names])

    def _op(self, name: str) -> Op:
        if name in GEOMETRIC:
            return TimmGeometry(name, self.magnitude, self.magnitude_std, self.translate_pct, self.interpolation,
                                self.fill)
        return TimmPixels(name, self.magnitude, self.magnitude_std)

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in super()._fields().items() if k != "names"}

    @classmethod
    def from_config(cls, config: str, **kwargs: Any) -> TimmRandAugment:
        """From timm's config string, e.g. "rand-m9-mstd0.5-inc1" (keys m, n, mstd, inc, p)."""
        parts = config.split("-")
        if parts[0] != "rand":
            raise ValueError(f"config must start with 'rand-' (timm's RandAugment), got {config!r}")
        keys = {"m": "magnitude", "n": "num_ops", "mstd": "magnitude_std", "inc": "increasing", "p": "prob"}
        args: dict[str, Any] = {}
        for part in parts[1:]:
            key = part.rstrip("0123456789.")
            if key not in keys or key == part:
                raise ValueError(f"config {config!r}: unknown or empty section {part!r} (known: {', '.join(keys)})")
            value = float(part[len(key):])
            args[keys[key]] = int(value) if key == "n" else bool(value) if key == "inc" else value
        return cls(**{**args, **kwargs})

    def program_form(self, ops: list[Op]) -> TimmProgram | None:
        """PolicySteps.program's one-pass form for timm's pixel operations (TimmProgram)."""
        return TimmProgram.of(ops)

    def choices(self, draws: Draws, n: int) -> np.ndarray:
        k = self._k
        steps = []
        for j in range(self.num_ops):
            entry = j * k + draws.choice_np(j, k)
            fires = draws.uniform_np(self.num_ops + j) < self.prob
            steps.append(np.where(fires, entry, -1))
        return np.stack(steps, 1) if steps else np.zeros((n, 0), dtype=np.int64)
