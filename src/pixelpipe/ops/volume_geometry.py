"""Geometric volume ops as 4x4 matrices: random affine, flips, quarter turns, resizing,
resampling to a voxel size (Spacing) and reorienting to an axis code (Orientation).

Each op draws its per-sample parameters for the whole batch in numpy (no loop over samples)
and returns a forward matrix (input voxel coordinates -> output voxel coordinates, array-axis
order; see ops.volume_kinds) and the output size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data.random import Draws
from .checks import check_prob, check_range
from .volume_kinds import Params, VolumeGeometryOp, VolumeState, about_centre, linear, translation

__all__ = ["Orientation", "RandomAffine3D", "RandomFlip3D", "RandomRotate90_3D", "Resize3D", "Spacing",
           "per_axis", "per_axis_range", "size3"]


def per_axis(name: str, value: Any, lo: float = -math.inf, hi: float = math.inf) -> tuple[float, float, float]:
    """Three numbers (one per array axis) from one number or three, each within [lo, hi]."""
    vals = (value,) * 3 if isinstance(value, (int, float)) else tuple(value)
    if len(vals) != 3 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
        raise ValueError(f"{name} must be a number or 3 numbers (one per axis), got {value!r}")
    for v in vals:
        if math.isnan(v) or not lo <= v <= hi:
            raise ValueError(f"{name} must lie within [{lo}, {hi}], got {value!r}")
    return tuple(float(v) for v in vals)  # type: ignore[return-value]


def per_axis_range(name: str, value: Any, lo: float = -math.inf, hi: float = math.inf,
                   symmetric_from: float = 0.0) -> tuple[tuple[float, float], ...]:
    """Three (low, high) ranges, one per axis, from: a number d (each axis (c - d, c + d), c =
    symmetric_from), a pair (the same range on each axis), or three numbers or pairs."""
    if isinstance(value, (int, float)) or (len(value) == 2 and all(isinstance(v, (int, float)) for v in value)):
        r = check_range(name, value, lo, hi, symmetric_from=symmetric_from)
        return (r, r, r)
    if len(value) != 3:
        raise ValueError(f"{name} must be a number, a (low, high) pair or 3 of either (one per axis), got {value!r}")
    return tuple(check_range(f"{name}[{k}]", v, lo, hi, symmetric_from=symmetric_from)
                 for k, v in enumerate(value))


def size3(name: str, size: Any) -> tuple[int, int, int]:
    """(D, H, W) output size from an int or three positive ints."""
    vals = (size,) * 3 if isinstance(size, int) else tuple(size)
    if len(vals) != 3 or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in vals):
        raise ValueError(f"{name} must be a positive int or 3 positive ints (D, H, W), got {size!r}")
    return vals  # type: ignore[return-value]


def _rotations(angles: np.ndarray) -> np.ndarray:
    """[N, 3, 3]: R0 @ R1 @ R2, Rk the rotation by angles[:, k] (radians) about array axis k
    (right-handed in array-axis order)."""
    n = len(angles)
    out = np.tile(np.eye(3), (n, 1, 1))
    for k in (2, 1, 0):
        a, b = [ax for ax in range(3) if ax != k]
        c, s = np.cos(angles[:, k]), np.sin(angles[:, k])
        r = np.tile(np.eye(3), (n, 1, 1))
        r[:, a, a], r[:, a, b], r[:, b, a], r[:, b, b] = c, -s, s, c
        out = r @ out
    return out


class RandomAffine3D(VolumeGeometryOp):
    """Random rotation about each axis, scale, shear and translation about the volume's centre,
    with probability p (MONAI's RandAffine, TorchIO's RandomAffine).

    Args:
        degrees: rotation angles in degrees about array axes 0, 1, 2: a number d (each axis
            in (-d, d)), a (low, high) pair, or three of either.
        scale: zoom factors (> 1 enlarges): a (low, high) pair or three pairs; None: 1.
        shear: shear angles in degrees of each axis pair (0-1, 0-2, 1-2), in (-90, 90):
            a number d, a pair, or three; None: no shear.
        translate: shifts in voxels of the output per axis (as MONAI's translate_range): a
            number t ((-t, t)), a pair, or three; None: no shift.
        p: probability that a sample is transformed (others get the identity).

    The linear part is rotation @ shear @ scale; the output has the input's size.
    """

    draws = 13

    def __init__(self, degrees: Any = 0.0, scale: Any = None, shear: Any = None, translate: Any = None,
                 p: float = 1.0) -> None:
        self.degrees = per_axis_range("degrees", degrees, -360.0, 360.0)
        self.scale = None if scale is None else per_axis_range("scale", scale, 1e-3, 1e3, symmetric_from=1.0)
        self.shear = None if shear is None else per_axis_range("shear", shear, -89.0, 89.0)
        self.translate = None if translate is None else per_axis_range("translate", translate)
        self.p = check_prob("p", p)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        f64 = np.float64
        on = draws.bernoulli_np(0, self.p)
        u = draws.uniforms_np(range(1, 13)).astype(f64)  # [N, 12]: 3 angles, 3 scales, 3 shears, 3 shifts

        def span(cols: slice, ranges: Any, base: float) -> np.ndarray:
            if ranges is None:
                return np.full((len(on), 3), base)
            lo = np.array([r[0] for r in ranges])
            hi = np.array([r[1] for r in ranges])
            return np.where(on[:, None], lo + (hi - lo) * u[:, cols], base)

        return {"angles": np.deg2rad(span(slice(0, 3), self.degrees, 0.0)),
                "scale": span(slice(3, 6), self.scale, 1.0),
                "shear": np.deg2rad(span(slice(6, 9), self.shear, 0.0)),
                "shift": span(slice(9, 12), self.translate, 0.0)}

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        n = len(state)
        sh = np.tan(params["shear"])
        shear = np.tile(np.eye(3), (n, 1, 1))
        shear[:, 0, 1], shear[:, 0, 2], shear[:, 1, 2] = sh[:, 0], sh[:, 1], sh[:, 2]
        scale = np.zeros((n, 3, 3))
        scale[:, [0, 1, 2], [0, 1, 2]] = params["scale"]
        lin = _rotations(params["angles"]) @ shear @ scale
        return about_centre(lin, state.sizes, shift=params["shift"]), state.sizes


class RandomFlip3D(VolumeGeometryOp):
    """Mirror each volume along array axis k with probability p[k] (one number: every axis).

    Flipping twice gives the input back exactly (the matrix is its own inverse)."""

    draws = 3

    def __init__(self, p: float | Sequence[float] = 0.5) -> None:
        self.p = per_axis("p", p, 0.0, 1.0)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        return {"flip": np.stack([draws.bernoulli_np(k, self.p[k]) for k in range(3)], 1)}

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        f = params["flip"]
        m = linear(np.eye(3) * np.where(f, -1.0, 1.0)[:, None, :])
        m[:, :3, 3] = np.where(f, state.sizes, 0.0)
        return m, state.sizes


class RandomRotate90_3D(VolumeGeometryOp):
    """Rotate by k quarter turns in the plane of two array axes, k uniform in 0..max_k, with
    probability p (MONAI's RandRotate90): the same voxels as torch.rot90(volume, k, dims=axes).
    Odd k swap the two axes' sizes: samples then differ
    in size, so a crop or Resize3D after it makes a batched tensor.

    Args:
        axes: the plane, two distinct array axes (default (1, 2): H and W).
        max_k: the largest number of quarter turns (1 to 3).
        p: probability that a sample is rotated at all.
    """

    draws = 2

    def __init__(self, axes: tuple[int, int] = (1, 2), max_k: int = 3, p: float = 0.5) -> None:
        a = tuple(axes)
        if len(a) != 2 or a[0] == a[1] or any(v not in (0, 1, 2) for v in a):
            raise ValueError(f"axes must be two distinct array axes among 0, 1, 2, got {axes!r}")
        if isinstance(max_k, bool) or not isinstance(max_k, int) or not 1 <= max_k <= 3:
            raise ValueError(f"max_k must be an int in [1, 3], got {max_k!r}")
        self.axes, self.max_k, self.p = a, max_k, check_prob("p", p)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        k = 1 + (draws.uniform_np(1) * self.max_k).astype(np.int64).clip(0, self.max_k - 1)
        return {"k": np.where(draws.bernoulli_np(0, self.p), k, 0)}

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.axes
        k = params["k"] % 4
        ang = k * (np.pi / 2)
        c, s = np.rint(np.cos(ang)), np.rint(np.sin(ang))
        lin = np.tile(np.eye(3), (len(k), 1, 1))
        lin[:, a, a], lin[:, a, b], lin[:, b, a], lin[:, b, b] = c, -s, s, c
        out = state.sizes.copy()
        odd = k % 2 == 1
        out[odd, a], out[odd, b] = state.sizes[odd, b], state.sizes[odd, a]
        return about_centre(lin, state.sizes, out), out


class Resize3D(VolumeGeometryOp):
    """Scale each volume to `size` (D, H, W), each axis on its own (the voxel faces of the
    input's box land on those of the output's)."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size3("size", size)

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        out = np.tile(np.array(self.size, dtype=np.float64), (len(state), 1))
        return linear(np.eye(3) * (out / state.sizes)[:, None, :]), out


class Spacing(VolumeGeometryOp):
    """Resample each volume to the voxel size `pixdim` (mm along array axes 0, 1, 2), from its
    own current spacing (MONAI's Spacing). The centre of voxel 0 stays where it is in the
    world (the affine's origin is kept), and the output covers the input's voxel centres:
    size = floor((n - 1) * spacing / pixdim) + 1 per axis."""

    def __init__(self, pixdim: float | Sequence[float]) -> None:
        self.pixdim = per_axis("pixdim", pixdim, 1e-6, 1e6)
        if min(self.pixdim) <= 0:
            raise ValueError(f"pixdim must be positive, got {pixdim!r}")

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        s = state.spacing / np.array(self.pixdim)  # output voxels per input voxel
        out = np.floor((state.sizes - 1) * s + 1e-6) + 1
        # index space: i_out = i_in * s, i = p - 0.5
        return translation(np.full_like(s, 0.5)) @ linear(np.eye(3) * s[:, None, :]) @ \
            translation(np.full_like(s, -0.5)), out


_CODES = {"R": (0, 1.0), "L": (0, -1.0), "A": (1, 1.0), "P": (1, -1.0), "S": (2, 1.0), "I": (2, -1.0)}
_PERMS = np.array(list(itertools.permutations(range(3))))  # [6, 3]


class Orientation(VolumeGeometryOp):
    """Reorder and flip array axes so that they point along `axcodes` in the world (MONAI's
    Orientation, nibabel's as_closest_canonical for "RAS"): output axis k runs towards the
    world direction axcodes[k] (R/L = world x, A/P = y, S/I = z, NIfTI's RAS+ world).

    Each sample's current affine decides: the array axis closest to each world axis (the
    permutation maximising the summed direction cosines, over all six) is taken, flipped when
    it points the other way. Only whole-voxel reorderings: no interpolation happens."""

    def __init__(self, axcodes: str = "RAS") -> None:
        codes = str(axcodes).upper()
        if len(codes) != 3 or any(c not in _CODES for c in codes) or len({_CODES[c][0] for c in codes}) != 3:
            raise ValueError(f"axcodes must be 3 letters naming each world axis once, from R/L, A/P, S/I, "
                             f"got {axcodes!r}")
        self.axcodes = codes

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        n = len(state)
        direction = state.affine[:, :3, :3] / state.spacing[:, None, :]  # unit columns: world dir of each axis
        world = np.array([_CODES[c][0] for c in self.axcodes])  # world axis of output axis k
        sign = np.array([_CODES[c][1] for c in self.axcodes])
        # perm[k] = the input array axis becoming output axis k; score all six per sample
        cos = direction[:, world[None, :], _PERMS]  # [N, 6, 3]: direction[n, world[k], perm[k]]
        best = np.argmax(np.abs(cos).sum(-1), 1)
        perm = _PERMS[best]  # [N, 3]
        flip = np.take_along_axis(cos[np.arange(n), best], np.arange(3)[None].repeat(n, 0), 1) * sign < 0
        lin = np.zeros((n, 3, 3))
        rows = np.arange(3)[None].repeat(n, 0)
        lin[np.arange(n)[:, None], rows, perm] = np.where(flip, -1.0, 1.0)
        in_sizes = np.take_along_axis(state.sizes, perm, 1)
        m = linear(lin)
        m[:, :3, 3] = np.where(flip, in_sizes, 0.0)
        return m, in_sizes
