"""The operations of the augmentation policies (AutoAugment, RandAugment, TrivialAugmentWide) and
their magnitude spaces, as torchvision's transforms v2 define them.

Each operation of a policy is a *primitive*: an op of one kind whose only parameter is a signed
magnitude, drawn per sample from a table of magnitude bins (`Space`): at a fixed bin
(RandAugment, AutoAugment) or at a bin drawn uniformly (TrivialAugmentWide), negated with
probability 1/2 where the space is signed. Shears, translations and rotations are geometric
primitives (a matrix each); every other operation is a pixel primitive on the float image in
[0, 1], clamped after it as torchvision clamps after each operation:

- ShearX(m): x' = x - m y about the top-left corner (torchvision's shear of atan(m) degrees
  with center=[0, 0], the original AutoAugment's PIL (1, m, 0, 0, 1, 0)); ShearY(m): y' = y - m x.
- TranslateX(m): x' = x + int(m) (truncated towards 0, whole pixels); TranslateY likewise.
- Rotate(m): m degrees counter-clockwise about the centre (torchvision's F.rotate).
- Brightness(m): (1 + m) x. Color(m): saturation, (1 + m) x + (-m) grey(x). Contrast(m):
  (1 + m) x + (-m) mean(grey(x)) over the image. Sharpness(m): RandomSharpness with factor 1 + m.
- Posterize(m): int(m) bits kept. Solarize(m): invert values >= m (in [0, 1] units).
- AutoContrast, Equalize, Invert: as RandomAutocontrast, RandomEqualize and 1 - x.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from .blur import RandomSharpness, sharpen
from .color import GREY
from .geometry import _about_centre, _rotation
from .kinds import GeometryOp, Op, Params, PixelOp
from .levels import (
    RandomAutocontrast,
    RandomEqualize,
    RandomPosterize,
    RandomSolarize,
    autocontrast,
    equalize_reference,
    posterize_mask,
    posterize_masked,
    solarize_above,
    solarize_levels,
)
from .matrices import affine
from .pixelwise import column

__all__ = ["AUGMIX_COLOUR", "AUGMIX_SPACE", "AUTOAUGMENT_SPACE", "RANDAUGMENT_SPACE", "TRIVIALAUGMENT_SPACE", "Space", "Table",
           "apply_columns", "operands", "primitive"]


class Table:
    """A magnitude table: (bins, sizes [N, 2]) -> magnitudes float64 [N, bins], possibly a
    read-only broadcast view (a class, not a lambda, so that a Compose holding a policy
    pickles)."""

    def __call__(self, bins: int, sizes: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@functools.lru_cache(maxsize=256)
def _linspace(lo: float, hi: float, bins: int) -> np.ndarray:
    """np.linspace(lo, hi, bins), made once (read-only): a policy samples its tables per
    operation and call, and np.linspace costs about 20 us each time."""
    out = np.linspace(lo, hi, bins)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class _Linspace(Table):
    """linspace(lo, hi, bins), the same for every sample."""

    lo: float
    hi: float

    def __call__(self, bins: int, sizes: np.ndarray) -> np.ndarray:
        return np.broadcast_to(_linspace(self.lo, self.hi, bins), (len(sizes), bins))  # read-only, no copy


@dataclass(frozen=True)
class _OfSide(Table):
    """linspace(0, share * side, bins), side the sample's height (axis 0) or width (axis 1)."""

    share: float
    axis: int

    def __call__(self, bins: int, sizes: np.ndarray) -> np.ndarray:
        return _linspace(0.0, 1.0, bins)[None, :] * (self.share * sizes[:, self.axis : self.axis + 1])


@dataclass(frozen=True)
class _Posterize(Table):
    """top - round(arange(bins) / ((bins - 1) / span)) bits (numpy and torch round half to even)."""

    span: int
    top: int = 8

    def __call__(self, bins: int, sizes: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.top - np.round(np.arange(bins) / ((bins - 1) / self.span)), (len(sizes), bins))


@dataclass(frozen=True)
class Space:
    """One operation of a policy's space: its name, its magnitude table (None: it takes no
    magnitude) and whether a magnitude is negated with probability 1/2."""

    name: str
    table: Table | None
    signed: bool


def _space(shear: float, translate: tuple[Table, Table], rotate: float, colour: float, posterize: int,
           extra: tuple[str, ...] = ()) -> dict[str, Space]:
    spaces = [Space("ShearX", _Linspace(0.0, shear), True), Space("ShearY", _Linspace(0.0, shear), True),
              Space("TranslateX", translate[0], True), Space("TranslateY", translate[1], True),
              Space("Rotate", _Linspace(0.0, rotate), True)]
    spaces += [Space(name, _Linspace(0.0, colour), True) for name in ("Brightness", "Color", "Contrast", "Sharpness")]
    spaces += [Space("Posterize", _Posterize(posterize), False), Space("Solarize", _Linspace(1.0, 0.0), False),
               Space("AutoContrast", None, False), Space("Equalize", None, False)]
    spaces += [Space(name, None, False) for name in extra]
    return {s.name: s for s in spaces}


# torchvision.transforms.v2's _AUGMENTATION_SPACE of each policy (Identity is no operation: a
# policy step that chose it does nothing)
_TORCHVISION = (0.3, (_OfSide(150.0 / 331.0, 1), _OfSide(150.0 / 331.0, 0)), 30.0, 0.9, 4)
AUTOAUGMENT_SPACE = _space(*_TORCHVISION, extra=("Invert",))
RANDAUGMENT_SPACE = {"Identity": Space("Identity", None, False), **_space(*_TORCHVISION)}
TRIVIALAUGMENT_SPACE = {"Identity": Space("Identity", None, False),
                        **_space(0.99, (_Linspace(0.0, 32.0), _Linspace(0.0, 32.0)), 135.0, 0.99, 6)}

# AugMix's: shears, translations of a third of the side, rotations; posterize from 4 bits; the
# colour operations only with all_ops
AUGMIX_SPACE = _space(0.3, (_OfSide(1 / 3, 1), _OfSide(1 / 3, 0)), 30.0, 0.9, 4)
AUGMIX_SPACE["Posterize"] = Space("Posterize", _Posterize(4, top=4), False)
AUGMIX_COLOUR = ("Brightness", "Color", "Contrast", "Sharpness")

GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


class _Primitive(Op):
    """A policy operation with its magnitude rule: at bin `bin`, or uniform over the bins when
    `bin` is None; draw 0 is the bin, draw 1 the sign."""

    draws = 2

    def _init(self, space: Space, bins: int, bin: int | None, span: int | None = None) -> None:
        self.space, self.bins, self.bin = space, bins, bin
        self.span = bins if span is None else span  # a drawn bin is uniform in 0..span-1
        self.name = space.name

    def __repr__(self) -> str:
        at = "random bin" if self.bin is None else f"bin {self.bin}"
        return f"{self.name}({at} of {self.bins})" if self.space.table is not None else self.name

    def eval_form(self, style: str) -> list[Op]:
        return []

    def bin_magnitudes(self, size: np.ndarray) -> np.ndarray | None:
        """float64 [bins]: the magnitude of each bin for images of `size` (height, width), as
        sample() reads them; None for an operation that takes no magnitude."""
        if self.space.table is None:
            return None
        return np.asarray(self.space.table(self.bins, np.asarray(size, dtype=np.float64).reshape(1, 2))[0])

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        n = len(sizes)
        if self.space.table is None:
            return {"magnitude": np.zeros(n)}
        table = self.space.table(self.bins, np.asarray(sizes, dtype=np.float64))
        if self.bin is None:
            at = draws.choice_np(0, self.span)
        else:
            at = np.full(n, self.bin, dtype=np.int64)
        magnitude = table[np.arange(n), at]
        if self.space.signed:  # torchvision negates where rand() <= 0.5
            magnitude = np.where(draws.uniform_np(1) <= 0.5, -magnitude, magnitude)
        return {"magnitude": magnitude}


class GeometricPrimitive(_Primitive, GeometryOp):
    """A shear, translation or rotation of a policy, as a matrix (see the module docstring)."""

    def rowwise_key(self) -> tuple[Any, ...]:
        """All that sample() and transform() read besides the draws, whose sample() reads its
        leading draws row by row and whose transform() keeps the size (ops.policy_geometry)."""
        return (type(self), self.space, self.bins, self.bin, self.span)

    def __init__(self, space: Space, bins: int, bin: int | None, interpolation: str | None = None,
                 fill: tuple[float, ...] | None = None, span: int | None = None) -> None:
        self._init(space, bins, bin, span)
        self.interpolation, self.fill = interpolation, fill

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = params["magnitude"]
        n = len(m)
        if self.name == "ShearX":
            return affine(n, b=-m), sizes
        if self.name == "ShearY":
            return affine(n, c=-m), sizes
        if self.name == "TranslateX":
            return affine(n, tx=np.trunc(m)), sizes
        if self.name == "TranslateY":
            return affine(n, ty=np.trunc(m)), sizes
        return _about_centre(_rotation(m), sizes), sizes


def _grey(x: torch.Tensor) -> torch.Tensor:
    """[N, 1, H, W]: the grey of RGB (0.299, 0.587, 0.114), or the one channel itself."""
    if x.shape[1] == 1:
        return x
    return (x * _grey_weights(x)).sum(1, keepdim=True)


_GREY_ON: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _grey_weights(x: torch.Tensor) -> torch.Tensor:
    """GREY in x's dtype on x's device, [1, 3, 1, 1], copied there once: a copy from the host's
    pageable memory per call made the host wait for the device's queue (twice per Color or
    Contrast of a policy on a GPU)."""
    key = (x.device, x.dtype)
    w = _GREY_ON.get(key)
    if w is None:
        w = _GREY_ON[key] = GREY.to(device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return w


def _blend(x: torch.Tensor, other: torch.Tensor, factor: np.ndarray) -> torch.Tensor:
    """torchvision's _blend: clamp(f x + (1 - f) other) per sample (the sum made in place in
    the product: the same roundings, one new image fewer)."""
    return _blend_by(x, other, column(factor, x))


def _blend_by(x: torch.Tensor, other: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return (f * x).add_((1.0 - f) * other).clamp_(0.0, 1.0)


def _apply(name: str, x: torch.Tensor, m: np.ndarray) -> torch.Tensor:
    on = np.ones(len(m), dtype=bool)
    if name == "Brightness":
        return (x * column(1.0 + m, x)).clamp_(0.0, 1.0)
    if name == "Color":
        return _blend(x, _grey(x), 1.0 + m)
    if name == "Contrast":
        return _blend(x, _grey(x).mean((2, 3), keepdim=True), 1.0 + m)
    if name == "Sharpness":
        return _SHARPNESS.apply(x, {"factor": 1.0 + m, "on": on}, _NO_DRAWS)
    if name == "Posterize":
        return _POSTERIZE.apply(x, {"bits": m.astype(np.int64), "on": on}, _NO_DRAWS)
    if name == "Solarize":
        return _SOLARIZE.apply(x, {"threshold": m, "on": on}, _NO_DRAWS)
    if name == "AutoContrast":
        return _AUTOCONTRAST.apply(x, {"on": on}, _NO_DRAWS)
    if name == "Equalize":
        return _EQUALIZE.apply(x, {"on": on}, _NO_DRAWS)
    if name == "Invert":
        return 1.0 - x
    raise ValueError(f"no policy operation named {name!r}")


def apply_into(name: str, x: torch.Tensor, m: np.ndarray) -> bool:
    """_apply's operation written into x itself where it has an in-place form with the same
    numbers (the same elementwise products and sums, each rounded once as there): True when
    done, False for the operations without one (x untouched)."""
    if name == "Brightness":
        x.mul_(column(1.0 + m, x)).clamp_(0.0, 1.0)
    elif name in ("Color", "Contrast"):
        other = _grey(x) if name == "Color" else _grey(x).mean((2, 3), keepdim=True)
        f = column(1.0 + m, x)
        rest = (1.0 - f) * other  # before x changes: a one-channel x is its own grey
        x.mul_(f).add_(rest).clamp_(0.0, 1.0)
    elif name == "Invert":
        x.neg_().add_(1.0)  # 1 - x is 1 + (-x), exactly
    else:
        return False
    return True


def operands(name: str, m: np.ndarray) -> dict[str, np.ndarray]:
    """The per-sample numbers operation `name` computes with at magnitudes m (numpy [N]), as
    `apply_columns` takes them: float64 arrays (given to it in the image's dtype) and int64
    arrays (given as int32). The same numbers _apply makes of m."""
    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return {"factor": 1.0 + m}
    if name == "Posterize":
        return {"mask": posterize_mask(m.astype(np.int64))}
    if name == "Solarize":
        return {"at": solarize_levels(m)}
    return {}


def apply_columns(name: str, x: torch.Tensor, columns: dict[str, torch.Tensor]) -> torch.Tensor:
    """_apply's operation on x (float [N, C, H, W] in [0, 1]) with its per-sample numbers
    (`operands`) given as [N, 1, 1, 1] tensors on x's device: the arithmetic _apply runs on
    every device but the CPU (its torch forms; the CPU's own forms give the same numbers), so
    the same bits there. A policy on a GPU uploads the numbers of all its operations in one
    copy (structure._Structure.apply_gathered) instead of one per operation."""
    if name == "Brightness":
        return (x * columns["factor"]).clamp_(0.0, 1.0)
    if name == "Color":
        return _blend_by(x, _grey(x), columns["factor"])
    if name == "Contrast":
        return _blend_by(x, _grey(x).mean((2, 3), keepdim=True), columns["factor"])
    if name == "Sharpness":
        return x if min(x.shape[2:]) <= 2 else sharpen(x, columns["factor"])
    if name == "Posterize":
        return posterize_masked(x, columns["mask"])
    if name == "Solarize":
        return solarize_above(x, columns["at"])
    if name == "AutoContrast":
        return autocontrast(x)
    if name == "Equalize":
        return equalize_reference(x)
    if name == "Invert":
        return 1.0 - x
    raise ValueError(f"no policy operation named {name!r}")


# the pixel ops whose apply() the pixel primitives call (their parameters come from the policy)
_SHARPNESS, _POSTERIZE, _SOLARIZE = RandomSharpness(), RandomPosterize(8), RandomSolarize(1.0)
_AUTOCONTRAST, _EQUALIZE = RandomAutocontrast(), RandomEqualize()
_NO_DRAWS: Any = None  # those apply() draw nothing


class PixelPrimitive(_Primitive, PixelOp):
    """A colour or pixel operation of a policy, run on the float image and clamped after it."""

    def __init__(self, space: Space, bins: int, bin: int | None, span: int | None = None) -> None:
        self._init(space, bins, bin, span)

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        if x.shape[0] == 0:
            return x
        return _apply(self.name, x, np.asarray(params["magnitude"], dtype=np.float64))

    def apply_owned(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        """apply() on an x the caller owns: written into x where the operation has an in-place
        form (augment_space.apply_into), the same numbers."""
        if x.shape[0] and apply_into(self.name, x, np.asarray(params["magnitude"], dtype=np.float64)):
            return x
        return self.apply(x, params, draws)

    def operands(self, params: Params) -> dict[str, np.ndarray]:
        """The per-sample numbers apply_columns takes (augment_space.operands)."""
        return operands(self.name, np.asarray(params["magnitude"], dtype=np.float64))

    def apply_columns(self, x: torch.Tensor, columns: dict[str, torch.Tensor]) -> torch.Tensor:
        """apply() with operands(params) already on x's device (augment_space.apply_columns)."""
        return apply_columns(self.name, x, columns)


def primitive(space: Space, bins: int, bin: int | None, interpolation: str | None = None,
              fill: tuple[float, ...] | None = None, span: int | None = None) -> Op | None:
    """The op of one policy operation (None for Identity), at bin `bin` of `bins` (None: a bin
    drawn per sample, uniform in 0..span-1, all bins by default)."""
    if space.name == "Identity":
        return None
    if space.name in GEOMETRIC:
        return GeometricPrimitive(space, bins, bin, interpolation, fill, span)
    return PixelPrimitive(space, bins, bin, span)

