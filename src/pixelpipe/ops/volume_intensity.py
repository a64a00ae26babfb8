"""Intensity ops on volumes: windowing, normalisation with per-sample statistics, gamma,
contrast, Gaussian noise and a smooth bias field.

Each op draws its per-sample parameters for the whole batch and returns one `Step` of the
pointwise program that runs on the warped volume (kernels.reference.pointwise3d defines each
step; consecutive affine-and-clip steps fold into one). Values are in the input's own units
(Hounsfield units for CT) until an op maps them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..data.random import Draws
from .checks import check_finite, check_prob, check_range
from .volume_kinds import Params, Step, VolumeIntensityOp, VolumeState

__all__ = ["GaussianNoise3D", "NormalizeIntensity", "RandomBiasField", "RandomContrast3D", "RandomGamma3D",
           "ScaleIntensityRange", "bias_terms"]


def _affine_clip(n: int, a: Any, b: Any, lo: float = -math.inf, hi: float = math.inf) -> Step:
    full = lambda v: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)).copy()
    return Step("affine_clip", {"a": full(a), "b": full(b), "lo": full(lo), "hi": full(hi)})


class ScaleIntensityRange(VolumeIntensityOp):
    """Window the intensities: [a_min, a_max] maps linearly onto [b_min, b_max], clipped to it
    when `clip` (MONAI's ScaleIntensityRange; CT windowing, e.g. a_min=-1000, a_max=400)."""

    def __init__(self, a_min: float, a_max: float, b_min: float = 0.0, b_max: float = 1.0, clip: bool = True) -> None:
        self.a_min, self.a_max = check_finite("a_min", a_min), check_finite("a_max", a_max)
        self.b_min, self.b_max = check_finite("b_min", b_min), check_finite("b_max", b_max)
        if self.a_max == self.a_min:
            raise ValueError(f"a_max must differ from a_min, got both {a_min}")
        self.clip = bool(clip)

    def step(self, params: Params, draws: Draws) -> Step:
        k = (self.b_max - self.b_min) / (self.a_max - self.a_min)
        lo, hi = sorted((self.b_min, self.b_max)) if self.clip else (-math.inf, math.inf)
        return _affine_clip(len(draws), k, self.b_min - k * self.a_min, lo, hi)


class NormalizeIntensity(VolumeIntensityOp):
    """(x - mean) / std per sample (MONAI's NormalizeIntensity, over all channels), from the
    statistics of the volume as it reaches this op (after the warp and the steps before).

    Args:
        nonzero: statistics over the voxels != 0 only, and only those are normalised (zeros
            stay 0), as MONAI's nonzero=True.
        subtrahend, divisor: fixed numbers instead of the per-sample mean and std.
        eps: a std below it counts as 1 (a constant volume becomes 0, not NaN).
    """

    def __init__(self, nonzero: bool = False, subtrahend: float | None = None, divisor: float | None = None,
                 eps: float = 1e-8) -> None:
        self.nonzero = bool(nonzero)
        self.subtrahend = None if subtrahend is None else check_finite("subtrahend", subtrahend)
        self.divisor = None if divisor is None else check_finite("divisor", divisor)
        if self.divisor == 0:
            raise ValueError("divisor must not be 0")
        self.eps = check_finite("eps", eps)
        if self.eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")

    def step(self, params: Params, draws: Draws) -> Step:
        n = len(draws)
        if self.subtrahend is not None and self.divisor is not None and not self.nonzero:
            return _affine_clip(n, 1.0 / self.divisor, -self.subtrahend / self.divisor)
        fixed = lambda v: np.full(n, np.nan if v is None else v)  # NaN: the sample's own statistic
        return Step("normalize", {"nonzero": np.full(n, float(self.nonzero)), "sub": fixed(self.subtrahend),
                                  "div": fixed(self.divisor), "eps": np.full(n, self.eps)})


class _Random(VolumeIntensityOp):
    draws = 2

    def _on(self, draws: Draws) -> np.ndarray:
        return draws.bernoulli_np(0, self.p)  # type: ignore[attr-defined]


class RandomGamma3D(_Random):
    """Gamma on each volume's own range, with probability p (MONAI's RandAdjustContrast):
    y = ((x - min) / (max - min)) ** gamma * (max - min) + min, gamma uniform in `gamma`."""

    def __init__(self, gamma: float | tuple[float, float] = (0.5, 4.5), p: float = 0.1) -> None:
        self.gamma = check_range("gamma", (gamma, gamma) if isinstance(gamma, (int, float)) else gamma, 1e-3, 1e3)
        self.p = check_prob("p", p)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        return {"gamma": np.where(self._on(draws), draws.uniform_np(1, *self.gamma).astype(np.float64), 1.0)}

    def step(self, params: Params, draws: Draws) -> Step:
        return Step("gamma", {"gamma": params["gamma"]})


class RandomContrast3D(_Random):
    """Scale each volume's deviations from its own mean by a factor uniform in `factor`, with
    probability p: y = mean + f * (x - mean)."""

    def __init__(self, factor: float | tuple[float, float] = (0.75, 1.25), p: float = 0.5) -> None:
        self.factor = check_range("factor", factor, 0.0, 1e3, symmetric_from=1.0)
        self.p = check_prob("p", p)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        return {"factor": np.where(self._on(draws), draws.uniform_np(1, *self.factor).astype(np.float64), 1.0)}

    def step(self, params: Params, draws: Draws) -> Step:
        return Step("contrast", {"factor": params["factor"]})


class GaussianNoise3D(_Random):
    """Add mean + sigma * z, z standard normal per voxel and channel, with probability p
    (MONAI's RandGaussianNoise). sigma: a number or a (low, high) range drawn per sample.
    The noise is a function of (seed, epoch, sample index, op position, voxel), so a sample
    gets the same noise in any batch (Draws.normal_field)."""

    def __init__(self, mean: float = 0.0, sigma: float | tuple[float, float] = 0.1, p: float = 0.5) -> None:
        self.mean = check_finite("mean", mean)
        self.sigma = check_range("sigma", (sigma, sigma) if isinstance(sigma, (int, float)) else sigma, 0.0)
        self.p = check_prob("p", p)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        on = self._on(draws)
        return {"sigma": np.where(on, draws.uniform_np(1, *self.sigma).astype(np.float64), 0.0),
                "mean": np.where(on, self.mean, 0.0)}

    def step(self, params: Params, draws: Draws) -> Step:
        return Step("noise", {"sigma": params["sigma"], "mean": params["mean"]}, draws)


def bias_terms(order: int) -> list[tuple[int, int, int]]:
    """The monomials z^i y^j x^k with i + j + k <= order of a bias field (TorchIO's order)."""
    return [(i, j, k) for i in range(order + 1) for j in range(order + 1 - i) for k in range(order + 1 - i - j)]


class RandomBiasField(_Random):
    """Multiply by a smooth field exp(sum c_t * monomial_t(z, y, x)), coordinates of the output
    voxel centres in [-1, 1] per axis, coefficients uniform in (-coefficients, coefficients),
    with probability p (TorchIO's RandomBiasField; MONAI's RandBiasField)."""

    def __init__(self, coefficients: float = 0.5, order: int = 3, p: float = 0.5) -> None:
        self.coefficients = check_finite("coefficients", coefficients)
        if self.coefficients < 0:
            raise ValueError(f"coefficients must be >= 0, got {coefficients}")
        if isinstance(order, bool) or not isinstance(order, int) or not 0 <= order <= 5:
            raise ValueError(f"order must be an int in [0, 5], got {order!r}")
        self.order, self.p = order, check_prob("p", p)

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        k = len(bias_terms(self.order))
        c = draws.uniforms_np(range(1, 1 + k), -self.coefficients, self.coefficients).astype(np.float64)
        return {"coefs": np.where(self._on(draws)[:, None], c, 0.0)}

    def step(self, params: Params, draws: Draws) -> Step:
        return Step("bias", {"coefs": params["coefs"], "order": np.full(len(draws), float(self.order))})
