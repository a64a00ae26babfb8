"""Blur and sharpness, as pixel ops on the warped image: GaussianBlur, MotionBlur, MedianBlur,
RandomSharpness and RandomAdjustSharpness.

Every filter has a per-sample kernel: the kernels of a batch are built on the host (a few
numbers per sample) and the whole batch is filtered at once, so nothing loops over samples:
separable and 3x3 filters as sums of shifted views (the same bits on the CPU and a GPU),
MotionBlur's 2-D kernels by one grouped convolution. Borders follow the library each op
mirrors: torchvision's GaussianBlur pads by reflection, OpenCV's motion blur (albumentations)
by reflection, Pillow's median filter by replicating the edge, torchvision's sharpness leaves
the outermost pixels as they are.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.random import Draws
from ..data.transfer import to_device
from .checks import check_prob, check_range, one_or_pair
from .kinds import Op, Params, PixelOp
from .pixelwise import column, pad_reflect, where_on

__all__ = ["GaussianBlur", "MedianBlur", "MotionBlur", "RandomAdjustSharpness", "RandomSharpness", "sharpen"]


def _odd_sizes(name: str, value: Any, allow_one: bool = True) -> tuple[int, int]:
    """(height, width) of a kernel: an odd whole number or a pair of them."""
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        kh, kw = pair
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an odd whole number or a (height, width) pair, got {value!r}") from None
    least = 1 if allow_one else 3
    for k in (kh, kw):
        if isinstance(k, bool) or not isinstance(k, int) or k < least or k % 2 == 0:
            raise ValueError(f"{name} must be odd whole numbers >= {least}, got {value!r}")
    return (kh, kw)


def _filter(x: torch.Tensor, kernels: torch.Tensor, dim: int, before: int, after: int) -> torch.Tensor:
    """Correlate each sample's rows (dim 3) or columns (dim 2) with its own 1-D kernel
    (kernels float [N, k]), padded by reflection: a sum over the taps of the padded batch
    shifted, each tap's weights a column of per-sample numbers. Separate float32 products and
    sums in one order, so the CPU and a GPU give the same bits, whatever the batch (a
    convolution would leave the order, and on a GPU TF32 rounding, to the library). Each tap's
    products go into one reused buffer and are added in place: the same roundings as
    `out = out + shifted * w` without two new tensors per tap (a 23-tap blur of 224x224 images
    took 2.6-5 ms an image that way on one CPU thread, ~2 ms so)."""
    size = x.shape[dim]
    padded = pad_reflect(x, dim, before, after)
    weights = kernels.to(device=x.device, dtype=x.dtype)
    out = padded.narrow(dim, 0, size) * weights[:, 0].view(-1, 1, 1, 1)
    products = torch.empty_like(out)
    for t in range(1, kernels.shape[1]):
        torch.mul(padded.narrow(dim, t, size), weights[:, t].view(-1, 1, 1, 1), out=products)
        out.add_(products)
    return out


def _filter2d(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Correlate each sample with its own 2-D kernel (float [N, kh, kw], odd sides), padded by
    reflection: one grouped convolution over the batch (a group per sample and channel). On a
    GPU it runs in float64: cuDNN may round float32 inputs to TF32 (a quarter of a grey level)
    unless a process-wide switch is off, and flipping that switch here would race with the
    Pipeline's other threads and the training loop; float64 is never rounded so."""
    n, c, h, w = x.shape
    kh, kw = kernels.shape[1:]
    padded = pad_reflect(pad_reflect(x, 2, kh // 2, kh // 2), 3, kw // 2, kw // 2)
    dt = torch.float64 if x.device.type == "cuda" else x.dtype
    weight = kernels.to(device=x.device, dtype=dt).repeat_interleave(c, 0).view(n * c, 1, kh, kw)
    out = F.conv2d(padded.reshape(1, n * c, *padded.shape[2:]).to(dt), weight, groups=n * c)
    return out.view(n, c, h, w).to(x.dtype)


TINY_WEIGHT = 2.0**-100  # weights below it are 0 (see gaussian_kernels)


def gaussian_kernels(size: int, sigma: np.ndarray) -> np.ndarray:
    """float64 [N, size]: the normalised Gaussian of each sigma, sampled at the integer offsets
    -(size-1)/2 .. (size-1)/2 (torchvision's _get_gaussian_kernel1d), with weights below
    TINY_WEIGHT set to 0. Why: for sigmas of about 0.14-0.94 a 23-tap kernel's outer weights
    fall among float32's subnormal numbers, and a CPU multiplies subnormals tens of times more
    slowly (a 224x224 image's blur took 5.4 ms on one core instead of 1.5). A weight of 2**-100
    times a grey level adds nothing to any sum that a weight of the kernel's centre reaches
    (less than half a float32 ulp of it), so the blur of an image changes only where the centre
    taps see exact zeros; the GPU uses the same weights, so CPU and GPU still agree bit for bit.
    The Gaussian is computed for the offsets 0 .. (size-1)/2 and mirrored (an offset and its
    negative square to the same number: the same table, half the exponentials)."""
    half = np.arange(size // 2 + 1, dtype=np.float64)
    e = np.exp(-0.5 * (half[None, :] / sigma[:, None]) ** 2)
    k = np.concatenate([e[:, :0:-1], e], axis=1)
    k /= k.sum(1, keepdims=True)
    k[k < TINY_WEIGHT] = 0.0
    return k


class GaussianBlur(PixelOp):
    """Blur each image with a Gaussian of a per-image sigma (torchvision's GaussianBlur:
    the kernel sampled at integer offsets and normalised, borders padded by reflection), with
    probability p.

    Args:
        kernel_size: the kernel's (height, width), odd; one number is a square. torchvision
            takes (width, height): the house order is (height, width) everywhere.
        sigma: the Gaussian's standard deviation in output pixels; a (low, high) range draws
            one per image, uniform (torchvision's default (0.1, 2.0)); the same sigma applies
            along both axes.
        p: probability that an image is blurred (torchvision blurs always: p=1.0).

    The blur is separable: two 1-D passes over the batch, of kernel_size taps each, the
    same bits on the CPU and a GPU (where the engine runs them as two Triton launches:
    kernels.pixel_forms). It runs on the stage's output, so its sigma is in output pixels. Example (SimCLR):
    ``GaussianBlur(23, sigma=(0.1, 2.0), p=0.5)`` after ``RandomResizedCrop(224)``.
    """

    draws = 2

    def __init__(self, kernel_size: int | tuple[int, int], sigma: float | tuple[float, float] = (0.1, 2.0),
                 p: float = 1.0) -> None:
        self.kernel_size = _odd_sizes("kernel_size", kernel_size)
        pair = (sigma, sigma) if isinstance(sigma, (int, float)) else sigma
        self.sigma = check_range("sigma", pair, 0.0)
        if self.sigma[0] <= 0:
            raise ValueError(f"sigma must be > 0, got {sigma!r}")
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"kernel_size": one_or_pair(self.kernel_size), "sigma": one_or_pair(self.sigma), "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 and self.sigma[0] == self.sigma[1] else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        sigma = draws.uniform_np(1, *self.sigma).astype(np.float64)
        return {"sigma": sigma, "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        rows = np.flatnonzero(params["on"])
        if len(rows) == 0:
            return x
        # only the rows that are blurred are filtered (each row's taps are its own, so the same
        # bits as filtering the batch)
        part = x if len(rows) == x.shape[0] else x[to_device(rows, x.device)]
        sigma = params["sigma"][rows]
        kh, kw = self.kernel_size
        if kw > 1:
            part = _filter(part, to_device(gaussian_kernels(kw, sigma), x.device), 3, kw // 2, kw // 2)
        if kh > 1:
            part = _filter(part, to_device(gaussian_kernels(kh, sigma), x.device), 2, kh // 2, kh // 2)
        return part if len(rows) == x.shape[0] else x.index_copy(0, to_device(rows, x.device), part)


def motion_kernels(size: int, length: np.ndarray, angle: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """float64 [N, size, size]: a line segment through the centre, `length` pixels long (<=
    size), at `angle` degrees (counter-clockwise from the x axis; y grows downwards), its
    weight growing along the line by `direction` (-1: all at the back, 0: even, 1: at the
    front), normalised. Each pixel gets the (weighted) length of the segment that falls in it,
    from 16 points per pixel of length, so a horizontal line of length 7 is 7 equal taps."""
    n = length.shape[0]
    steps = 16 * size
    u = (np.arange(steps) + 0.5) / steps * 2.0 - 1.0  # [-1, 1], midpoints of equal pieces
    t = u[None, :] * (length[:, None] / 2)  # [N, S] offsets along the line
    theta = np.deg2rad(angle)[:, None]
    centre = (size - 1) / 2
    xi = np.clip(np.floor(centre + t * np.cos(theta) + 0.5), 0, size - 1).astype(np.int64)
    yi = np.clip(np.floor(centre - t * np.sin(theta) + 0.5), 0, size - 1).astype(np.int64)
    weight = np.clip(1.0 + direction[:, None] * u, 0.0, None)
    out = np.zeros((n, size * size))
    rows = np.repeat(np.arange(n)[:, None], steps, 1)
    np.add.at(out, (rows, yi * size + xi), weight)
    return (out / out.sum(1, keepdims=True)).reshape(n, size, size)


class MotionBlur(PixelOp):
    """Blur along a line, as a moving camera does (albumentations' MotionBlur): per image a
    line of random length, angle and direction, with probability p.

    Args:
        kernel_size: the largest line length (odd, >= 3): the kernel is kernel_size square.
        length: (low, high) line lengths in pixels, drawn uniform per image (default (3,
            kernel_size)); a length of 1 is no blur.
        angle: (low, high) angles in degrees, counter-clockwise from the x axis.
        direction: (low, high) in [-1, 1]: 0 spreads the weight evenly along the line, 1 puts
            it at the front (the line's weight grows linearly), -1 at the back.
        p: probability that an image is blurred.

    Each kernel pixel weighs the length of the line that falls in it, normalised;
    borders are padded by reflection (OpenCV's default). Example: ``MotionBlur(9, p=0.3)``.
    """

    draws = 5

    def __init__(self, kernel_size: int = 7, length: tuple[float, float] | None = None,
                 angle: tuple[float, float] = (0.0, 360.0), direction: tuple[float, float] = (0.0, 0.0),
                 p: float = 0.5) -> None:
        self.kernel_size = _odd_sizes("kernel_size", kernel_size, allow_one=False)[0]
        if isinstance(kernel_size, tuple) and kernel_size[0] != kernel_size[1]:
            raise ValueError(f"kernel_size must be one odd number (the kernel is square), got {kernel_size!r}")
        self.length = check_range("length", (3.0, float(self.kernel_size)) if length is None else length,
                                  1.0, float(self.kernel_size))
        self.angle = check_range("angle", angle)
        self.direction = check_range("direction", direction, -1.0, 1.0)
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        return {"on": draws.bernoulli_np(0, self.p),
                "length": draws.uniform_np(1, *self.length).astype(np.float64),
                "angle": draws.uniform_np(2, *self.angle).astype(np.float64),
                "direction": draws.uniform_np(3, *self.direction).astype(np.float64)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        if x.shape[0] == 0:
            return x
        k = motion_kernels(self.kernel_size, params["length"], params["angle"], params["direction"])
        out = _filter2d(x, to_device(k, x.device))
        return where_on(params["on"], out, x)


class MedianBlur(PixelOp):
    """Replace each value by the median of its kernel_size x kernel_size neighbourhood (Pillow's
    ImageFilter.MedianFilter, OpenCV's medianBlur), per channel, with probability p.

    Args:
        kernel_size: odd side of the square window; a (low, high) pair draws an odd size per
            image in low..high (albumentations' blur_limit).
        p: probability that an image is filtered.

    Borders replicate the edge pixel (Pillow and OpenCV both do), so uint8 images that were
    not resampled get exactly Pillow's result (tested). The windows are unfolded: memory of
    kernel_size**2 times the batch, one pass per distinct size drawn.
    Example: ``MedianBlur(5, p=0.2)``.
    """

    draws = 2

    def __init__(self, kernel_size: int | tuple[int, int] = 3, p: float = 0.5) -> None:
        lo, hi = _odd_sizes("kernel_size", kernel_size, allow_one=False)
        if lo > hi:
            raise ValueError(f"kernel_size range is out of order: {kernel_size!r}")
        self.kernel_size = (lo, hi)
        self.p = check_prob("p", p)

    def _fields(self) -> dict[str, Any]:
        return {"kernel_size": one_or_pair(self.kernel_size), "p": self.p}

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 and self.kernel_size[0] == self.kernel_size[1] else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        lo, hi = self.kernel_size
        count = (hi - lo) // 2 + 1
        k = lo + 2 * draws.choice_np(1, count)
        return {"kernel_size": np.where(draws.bernoulli_np(0, self.p), k, 1)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        out = x
        sizes = params["kernel_size"]
        for k in np.unique(sizes[sizes > 1]).tolist():  # a pass per distinct size, not per sample
            rows = np.flatnonzero(sizes == k)
            pick = to_device(rows, x.device)
            part = x[pick]  # indexing: CPU index_select of a few rows is far slower
            r = k // 2
            padded = F.pad(part, (r, r, r, r), mode="replicate")  # the edge pixel repeated
            windows = padded.unfold(2, k, 1).unfold(3, k, 1)  # [n, C, H, W, k, k]
            med = windows.reshape(*windows.shape[:4], k * k).median(-1).values
            out = out.index_copy(0, pick, med) if len(rows) < x.shape[0] else med
        return out


class RandomSharpness(PixelOp):
    """Sharpen or soften each image by a per-image factor (torchvision's adjust_sharpness):
    blend with the image smoothed by the 3x3 kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13,
    out = smooth + factor * (x - smooth), clamped to [0, 1]; the outermost pixels are kept.
    Factor 0 gives the smoothed image, 1 the image itself, 2 twice as sharp.

    Args:
        factor: a (low, high) range drawn uniform per image; one number f means (max(0, 1 - f),
            1 + f), as ColorJitter's factors.
        p: probability that an image is changed.

    Example: ``RandomSharpness((0.5, 2.0))``; torchvision's fixed-factor form is
    `RandomAdjustSharpness`.
    """

    draws = 2

    def __init__(self, factor: float | tuple[float, float] = 0.5, p: float = 0.5) -> None:
        if isinstance(factor, (int, float)):
            if not math.isfinite(factor) or factor < 0:
                raise ValueError(f"factor must be a finite number >= 0, got {factor}")
            factor = (max(0.0, 1.0 - factor), 1.0 + factor)
        self.factor = check_range("factor", factor, 0.0)
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return [self] if self.p == 1.0 and self.factor[0] == self.factor[1] else []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        return {"factor": draws.uniform_np(1, *self.factor).astype(np.float64), "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        n, c, h, w = x.shape
        on = np.asarray(params["on"], dtype=bool)
        if h <= 2 or w <= 2 or n == 0 or not on.any():
            return x
        return where_on(on, sharpen(x, column(params["factor"], x)), x)  # one select, not a copy per kept sample


def sharpen(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """RandomSharpness's blend on every sample of x ([N, C, H, W], H and W > 2), with its
    factor (x's dtype, [N, 1, 1, 1] on x's device): a new tensor."""
    h, w = x.shape[2:]
    # the 3x3 smoothing of the inside, as a sum of shifted views (see _filter: the same
    # bits on every device): 8 neighbours of weight 1 and the centre of weight 5, over 13
    # (added in place into one buffer: the same roundings as new tensors per neighbour)
    inner = x[:, :, 1:-1, 1:-1]
    smooth = inner * 5.0
    for dy in range(3):
        for dx in range(3):
            if dy != 1 or dx != 1:
                smooth.add_(x[:, :, dy:dy + h - 2, dx:dx + w - 2])
    smooth.div_(13.0)
    # the blend goes straight into the output's inside, the outermost pixels copied beside
    # it: the same numbers as blending into a new tensor and writing it into a copy of x,
    # two passes over the batch fewer
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    out[:, :, 0], out[:, :, -1] = x[:, :, 0], x[:, :, -1]
    out[:, :, 1:-1, 0], out[:, :, 1:-1, -1] = x[:, :, 1:-1, 0], x[:, :, 1:-1, -1]
    blended = torch.sub(inner, smooth, out=out[:, :, 1:-1, 1:-1])
    blended.mul_(factor).add_(smooth).clamp_(0.0, 1.0)
    return out


class RandomAdjustSharpness(RandomSharpness):
    """torchvision's RandomAdjustSharpness: `RandomSharpness` with one fixed factor,
    applied with probability p. Example: ``RandomAdjustSharpness(2.0, p=0.5)``."""

    def __init__(self, sharpness_factor: float, p: float = 0.5) -> None:
        f = float(sharpness_factor)
        if not math.isfinite(f) or f < 0:
            raise ValueError(f"sharpness_factor must be a finite number >= 0, got {sharpness_factor}")
        super().__init__((f, f), p)

    def _fields(self) -> dict[str, Any]:
        return {"sharpness_factor": self.factor[0], "p": self.p}
