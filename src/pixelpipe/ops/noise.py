"""Noise added to the pixels: GaussianNoise, SaltAndPepper."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..data.transfer import to_device
from .checks import check_prob, check_range, one_or_pair
from .kinds import Op, Params, PixelOp

__all__ = ["GaussianNoise", "SaltAndPepper"]


class GaussianNoise(PixelOp):
    """Add Gaussian noise to each image: x + mean + sigma * z, z standard normal per pixel and
    channel, then clamped to [0, 1] (torchvision's GaussianNoise, on images in [0, 1]), with
    probability p.

    Args:
        mean: the noise's mean, in [0, 1] image units.
        sigma: its standard deviation (>= 0); a (low, high) pair draws one sigma per image,
            uniform in that range (albumentations' std_range).
        clip: clamp the result to [0, 1]. Keep the op before Normalize: after it, values are
            no longer in [0, 1].
        p: probability that an image gets noise.

    The noise of a sample is a function of (seed, epoch, sample index, op position), like
    every draw, so a sample gets the same noise in any batch and on any device (up to float32
    rounding of the normal transform).

    Example: ``GaussianNoise(sigma=(0.01, 0.05), p=0.5)``.
    """

    draws = 2

    def __init__(self, mean: float = 0.0, sigma: float | tuple[float, float] = 0.1, clip: bool = True,
                 p: float = 1.0) -> None:
        self.mean = float(mean)
        if not np.isfinite(self.mean):
            raise ValueError(f"mean must be a finite number, got {mean}")
        self.sigma = check_range("sigma", (sigma, sigma) if isinstance(sigma, (int, float)) else sigma, 0.0)
        self.clip = bool(clip)
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        lo, hi = self.sigma
        return {"mean": self.mean, "sigma": lo if lo == hi else self.sigma, "clip": self.clip, "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        on = draws.bernoulli_np(0, self.p)
        sigma = draws.uniform_np(1, *self.sigma).astype(np.float64)
        return {"sigma": np.where(on, sigma, 0.0), "on": on}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        n = x.shape[0]
        sigma = to_device(params["sigma"].astype(np.float32), x.device).view(n, 1, 1, 1)
        on = to_device(params["on"], x.device).view(n, 1, 1, 1)
        noise = draws.normal_field(2, x.shape[1:], x.device)
        out = torch.where(on, x + (self.mean + sigma * noise), x)
        return out.clamp_(0.0, 1.0) if self.clip else out


class SaltAndPepper(PixelOp):
    """Set random pixels to white (salt) or black (pepper), all channels of a pixel together
    (albumentations' SaltAndPepper), with probability p.

    Args:
        amount: (low, high) share of the pixels that get noise, drawn uniform per image; one
            number is a fixed share.
        salt_vs_pepper: (low, high) share of the noisy pixels that are salt, drawn uniform per
            image; one number is a fixed share.
        p: probability that an image gets noise.

    Each pixel takes one number u of a per-pixel field (`Draws.field`): salt where
    u < amount * salt, pepper where amount * salt <= u < amount. So the shares are exact in
    expectation (albumentations draws exact counts; the difference is the binomial spread of
    the count, a fraction sqrt(amount / pixels) of it), and a sample gets the same pixels in
    any batch and on any device. Salt is 1 and pepper 0, in [0, 1] image units: keep the op
    before Normalize.

    Example: ``SaltAndPepper((0.01, 0.06), p=0.3)``.
    """

    draws = 3

    def __init__(self, amount: float | tuple[float, float] = (0.01, 0.06),
                 salt_vs_pepper: float | tuple[float, float] = (0.4, 0.6), p: float = 0.5) -> None:
        self.amount = check_range("amount", (amount, amount) if isinstance(amount, (int, float)) else amount, 0.0, 1.0)
        sv = salt_vs_pepper
        self.salt_vs_pepper = check_range("salt_vs_pepper", (sv, sv) if isinstance(sv, (int, float)) else sv, 0.0, 1.0)
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"amount": one_or_pair(self.amount), "salt_vs_pepper": one_or_pair(self.salt_vs_pepper), "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        on = draws.bernoulli_np(0, self.p)
        amount = np.where(on, draws.uniform_np(1, *self.amount).astype(np.float64), 0.0)
        salt = amount * draws.uniform_np(2, *self.salt_vs_pepper).astype(np.float64)
        return {"amount": amount, "salt": salt}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        n = x.shape[0]
        if n == 0:
            return x
        u = draws.field(self.draws, x.shape[2:], x.device).unsqueeze(1)  # [N, 1, H, W]: one per pixel
        amount = to_device(params["amount"].astype(np.float32), x.device).view(n, 1, 1, 1)
        salt = to_device(params["salt"].astype(np.float32), x.device).view(n, 1, 1, 1)
        out = torch.where(u < amount, torch.zeros((), dtype=x.dtype, device=x.device), x)
        return torch.where(u < salt, torch.ones((), dtype=x.dtype, device=x.device), out)
