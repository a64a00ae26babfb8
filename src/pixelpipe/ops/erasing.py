"""Erasing, as pixel ops in output coordinates: RandomErasing, Cutout, GridMask.

Each draws per-sample regions on the host from the image size it gets (the stage's output
size) and fills them in one masked select over the batch. The fill value is in the units of
the tensor the op gets: [0, 1] before Normalize, normalised values after it (where torchvision
and timm usually erase, so that 0 is the mean colour and "random" is noise of the data's
spread). Erasing moves no pixel, so boxes, keypoints and masks are left as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..data.random import Draws, normal_keyed
from ..data.transfer import to_device
from .checks import check_prob, check_range, check_size
from .kinds import Op, Params, PixelOp
from .pixelwise import column, draws_of_rows, inside

__all__ = ["Cutout", "GridMask", "RandomErasing"]

Value = float | Sequence[float] | str


def check_value(value: Any) -> float | tuple[float, ...] | str:
    """A fill value: a finite number, one per channel, or "random" (per-pixel standard normal)."""
    if isinstance(value, str):
        if value != "random":
            raise ValueError(f"value must be a number, a number per channel, or 'random', got {value!r}")
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"value must be finite, got {value}")
        return float(value)
    try:
        values = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"value must be a number, a number per channel, or 'random', got {value!r}") from None
    if len(values) not in (1, 3) or not all(math.isfinite(v) for v in values):
        raise ValueError(f"value must hold 1 or 3 finite numbers (one per channel), got {value!r}")
    return values


def fill(x: torch.Tensor, where: torch.Tensor, value: float | tuple[float, ...] | str, draws: Draws,
         draw: int, rows: np.ndarray | None = None) -> torch.Tensor:
    """x with `where` (bool [N, 1, H, W]) set to value; "random" takes per-pixel standard
    normal values from draws.normal_field(draw, ...), the same for a sample in any batch.
    `rows` (host int64, optional) are the samples where `where` has any pixel: the noise is
    made for those alone (its field is per sample, so the same numbers), not for the batch."""
    if isinstance(value, str) and rows is not None and len(rows) < x.shape[0]:
        if len(rows) == 0:
            return x
        pick = to_device(rows, x.device)
        part = fill(x[pick], where[pick], value, draws_of_rows(draws, rows), draw)
        return x.index_copy(0, pick, part)
    if isinstance(value, str):
        v = draws.normal_field(draw, x.shape[1:], x.device).to(x.dtype)
    elif isinstance(value, tuple) and len(value) > 1:
        if len(value) != x.shape[1]:
            raise ValueError(f"value has {len(value)} numbers for images of {x.shape[1]} channel(s)")
        v = column(np.array(value), x).view(1, -1, 1, 1)  # an asynchronous copy (pixelwise.column)
    else:  # a number: torch.where casts it to x's dtype as torch.tensor(value, dtype) does
        return torch.where(where, value[0] if isinstance(value, tuple) else value, x)
    return torch.where(where, v, x)


def erased_rows(params: Params) -> np.ndarray:
    """The rows of RandomErasing's params whose rectangle is not empty."""
    return np.flatnonzero((params["height"] > 0) & (params["width"] > 0))


def noise_output(x: torch.Tensor, owned: bool) -> torch.Tensor:
    """The tensor rectangles of noise are written into: x itself where the caller owns it and it
    is contiguous, else a contiguous copy."""
    return x if owned and x.is_contiguous() else x.clone(memory_format=torch.contiguous_format)


def noise_in_rectangles(x: torch.Tensor, rows: np.ndarray, top: np.ndarray, left: np.ndarray, height: np.ndarray,
                        width: np.ndarray, draws: Draws, draw: int, owned: bool = False) -> torch.Tensor:
    """x with one rectangle per sample of `rows` (host arrays of the batch's rectangles, inside
    the image) set to draws.normal_field(draw, x.shape[1:]) there: the same numbers `fill`
    gives, computed for the rectangles' pixels only (an erased rectangle is 2-33% of the
    image: the whole field cost 9 ns a value on 2 CPU cores, most of RandomErasing's time).
    Each rectangle's field positions are a broadcast sum of channel, row and column offsets;
    on the CPU its values are copied in as a slice of its sample (no index per value),
    elsewhere `noise_on_device` makes them on the device. owned: x is the caller's to
    overwrite (PixelOp.apply_owned's x), so the rectangles go into x itself, not a copy."""
    if len(rows) == 0:
        return x
    out = noise_output(x, owned)
    if x.device.type != "cpu":
        return noise_on_device(out, rows, top, left, height, width, draws, draw)
    c, h, w = x.shape[1:]
    t, lf = top[rows].astype(np.int64), left[rows].astype(np.int64)
    rh, rw = height[rows].astype(np.int64), width[rows].astype(np.int64)
    counts = c * rh * rw
    # row-major in the sample's [C, H, W] field, channel by channel, each rectangle's row by row
    values = draws.normal_rectangles_np(draw, np.stack([np.asarray(rows, dtype=np.int64), t, lf, rh, rw], 1), (c, h, w))
    if values is None:  # no C library: each value's element and sample in numpy
        chan = np.arange(c, dtype=np.int64).reshape(c, 1, 1) * (h * w)
        element = np.concatenate([(chan + ((t[k] + np.arange(rh[k])) * w).reshape(1, -1, 1)
                                   + (lf[k] + np.arange(rw[k])).reshape(1, 1, -1)).reshape(-1)
                                  for k in range(len(rows))])
        values = draws.normal_field_at_np(draw, np.repeat(rows, counts), element)
    values = values.to(x.dtype)
    for k, v in enumerate(torch.split(values, counts.tolist())):
        out[int(rows[k]), :, t[k]:t[k] + rh[k], lf[k]:lf[k] + rw[k]] = v.view(c, int(rh[k]), int(rw[k]))
    return out


# the rows of noise_on_device's table, one column per rectangle: the end of its values in the
# list of all values, where they start, its width, height and area, its top-left corner's
# element in its sample's field, its sample's offset in the flat batch, the field's row
# stride less the width and channel stride less the area, and its sample's two field states
# (int32 values)
_END, _START, _WIDTH, _HEIGHT, _AREA, _CORNER, _SAMPLE, _ROW_GAP, _CHANNEL_GAP, _STATE, _STATE_OTHER = range(11)


def noise_table(shape: tuple[int, int, int], rows: np.ndarray, top: np.ndarray, left: np.ndarray,
                height: np.ndarray, width: np.ndarray, draws: Draws, draw: int) -> np.ndarray:
    """int64 [11, R]: a column of numbers per rectangle of `rows` (the rows named above
    noise_on_device) for images of `shape` (C, H, W), from which a device finds each noise
    value's rectangle, position and field states."""
    c, h, w = shape
    t, lf = top[rows].astype(np.int64), left[rows].astype(np.int64)
    rh, rw = height[rows].astype(np.int64), width[rows].astype(np.int64)
    area = rh * rw
    table = np.empty((11, len(rows)), dtype=np.int64)
    table[_END] = np.cumsum(c * area)
    table[_START] = table[_END] - c * area
    table[_WIDTH], table[_HEIGHT], table[_AREA] = rw, rh, area
    table[_CORNER], table[_SAMPLE] = t * w + lf, np.asarray(rows, dtype=np.int64) * (c * h * w)
    table[_ROW_GAP], table[_CHANNEL_GAP] = w - rw, h * w - area
    for at, d in ((_STATE, draw), (_STATE_OTHER, draw + 1000003)):
        table[at] = draws.hashes_np(d)[rows].view(np.int32)
    return table


def noise_on_device(out: torch.Tensor, rows: np.ndarray, top: np.ndarray, left: np.ndarray, height: np.ndarray,
                    width: np.ndarray, draws: Draws, draw: int) -> torch.Tensor:
    """noise_in_rectangles' values written into `out` (contiguous [N, C, H, W], any device): the
    host uploads a column of numbers per rectangle (noise_table), and the device finds each
    value's rectangle (a search among the rectangles' ends) and field position (divisions by
    the rectangle's width and area) from its place in the list of values, then hashes it
    (random.normal_keyed: normal_field_at's operations, so the bits Draws.normal_field_at_np
    gives). Why: with the positions made in numpy and hashed on the device from uploaded
    arrays, RandomErasing(0.25, value="random") cost 12.9 ms of host time per 256-image batch
    on a GPU host, for about 1.7 million values; this is one upload and about 60 small
    launches (one Triton launch on CUDA: kernels.triton.erasing, through kernels.pixel_forms)."""
    table = noise_table(tuple(out.shape[1:]), rows, top, left, height, width, draws, draw)
    tab = to_device(table, out.device)
    k = torch.arange(int(table[_END, -1]), dtype=torch.int64, device=out.device)
    own = tab.index_select(1, torch.searchsorted(tab[_END], k, right=True))  # [11, K]: each value's rectangle
    local = k.sub_(own[_START])  # channel * area + row * width + column
    channel = torch.div(local, own[_AREA], rounding_mode="floor")
    row = torch.div(local, own[_WIDTH], rounding_mode="floor").sub_(channel * own[_HEIGHT])
    # corner + channel * H * W + row * W + column
    element = local.add_(own[_CORNER]).add_(channel.mul_(own[_CHANNEL_GAP])).add_(row.mul_(own[_ROW_GAP]))
    values = normal_keyed(own[_STATE].to(torch.int32), own[_STATE_OTHER].to(torch.int32), element)
    out.view(-1)[element.add_(own[_SAMPLE])] = values.to(out.dtype)
    return out


class RandomErasing(PixelOp):
    """Erase one rectangle per image (torchvision's RandomErasing), with probability p.

    Args:
        p: probability that an image gets a rectangle.
        scale: (low, high) fraction of the image's area the rectangle covers, drawn uniform.
        ratio: (low, high) aspect ratio (height / width) of the rectangle, drawn log-uniform.
        value: the fill: a number, one per channel, or "random" (per-pixel standard normal
            values, for erasing after Normalize as timm's mode="pixel" does).
        tries: torchvision draws up to 10 (area, ratio) pairs and keeps the first rectangle
            that fits inside the image; an image where none fits is left as it is.

    As torchvision: height = round(sqrt(area * ratio)), width = round(sqrt(area / ratio)), the
    top-left corner uniform among the positions that keep the rectangle inside. The rectangle
    is in output pixels (of the stage the op stands in), drawn per sample from its own draws.

    Example: ``RandomErasing(0.25, value="random")`` after Normalize (DeiT's recipe).
    """

    def __init__(self, p: float = 0.5, scale: tuple[float, float] = (0.02, 0.33),
                 ratio: tuple[float, float] = (0.3, 3.3), value: Value = 0.0, tries: int = 10) -> None:
        self.p = check_prob("p", p)
        self.scale = check_range("scale", scale, 0.0, 1.0)
        self.ratio = check_range("ratio", ratio, 0.0)
        if self.ratio[0] <= 0:
            raise ValueError(f"ratio must be > 0, got {ratio!r}")
        self.value = check_value(value)
        if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
            raise ValueError(f"tries must be a whole number >= 1, got {tries!r}")
        self.tries = tries
        self.draws = 3 + 2 * tries  # on, `tries` areas, `tries` ratios, the corner (2)

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "draws"}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        t = self.tries
        h, w = sizes[:, 0:1], sizes[:, 1:2]
        area = h * w * draws.uniforms_np(range(1, 1 + t), *self.scale).astype(np.float64)
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = np.exp(draws.uniforms_np(range(1 + t, 1 + 2 * t), log_lo, log_hi).astype(np.float64))
        eh = np.rint(np.sqrt(area * aspect))
        ew = np.rint(np.sqrt(area / aspect))
        fits = (eh < h) & (ew < w)  # torchvision's condition (an empty rectangle fits too)
        first = fits.argmax(1)
        rows = np.arange(len(sizes))
        eh, ew = eh[rows, first], ew[rows, first]
        ok = fits[rows, first] & draws.bernoulli_np(0, self.p)
        top = np.floor(draws.uniform_np(1 + 2 * t) * (h[:, 0] - eh + 1))
        left = np.floor(draws.uniform_np(2 + 2 * t) * (w[:, 0] - ew + 1))
        eh, ew = np.where(ok, eh, 0), np.where(ok, ew, 0)
        return {"top": top, "left": left, "height": eh, "width": ew}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        top, left = params["top"], params["left"]
        rows = erased_rows(params)
        if self.value == "random":  # noise for the rectangles' pixels alone
            return noise_in_rectangles(x, rows, top, left, params["height"], params["width"], draws, self.draws)
        where = inside(top, left, top + params["height"], left + params["width"], x.shape[2:], x.device)
        return fill(x, where, self.value, draws, self.draws, rows)

    @property
    def stores_values(self) -> bool:
        """Noise is computed in float32 and rounded as it is stored, so it may be written into
        a float16 output as well as into float32 later cast (engine.pixels)."""
        return self.value == "random"

    def apply_owned(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        """apply() on an x the caller owns and reads no more (engine.pixels): noise goes into x
        itself, without the copy of the batch apply() makes first."""
        if self.value != "random":
            return self.apply(x, params, draws)
        rows = erased_rows(params)
        return noise_in_rectangles(x, rows, params["top"], params["left"], params["height"], params["width"], draws,
                                   self.draws, owned=True)


class Cutout(PixelOp):
    """Erase squares of a fixed size at random centres (DeVries and Taylor's Cutout), with
    probability p. A square may stick out of the image: only its inside part is erased.

    Args:
        size: the square's (height, width) in output pixels; floats in (0, 1] are fractions of
            the image's height and width; one number is a square.
        num_holes: squares per image, each at its own centre (they may overlap).
        value: the fill: a number, one per channel, or "random" (per-pixel standard normal).
        p: probability that an image gets its squares.

    Example: ``Cutout(16)`` on CIFAR's 32x32 images (the paper's setting).
    """

    def __init__(self, size: int | float | tuple[Any, Any], num_holes: int = 1, value: Value = 0.0,
                 p: float = 1.0) -> None:
        self.size = check_size("size", size, allow_fraction=True)
        if isinstance(num_holes, bool) or not isinstance(num_holes, int) or num_holes < 1:
            raise ValueError(f"num_holes must be a whole number >= 1, got {num_holes!r}")
        self.num_holes = num_holes
        self.value = check_value(value)
        self.p = check_prob("p", p)
        self.draws = 1 + 2 * num_holes

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "draws"}

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        h, w = sizes[:, 0], sizes[:, 1]
        sh, sw = (np.round(s * side) if isinstance(s, float) else np.full_like(side, s)
                  for s, side in zip(self.size, (h, w)))
        centre = draws.uniforms_np(range(1, 1 + 2 * self.num_holes)).astype(np.float64).reshape(-1, self.num_holes, 2)
        cy = np.floor(centre[:, :, 0] * h[:, None])
        cx = np.floor(centre[:, :, 1] * w[:, None])
        top, left = cy - np.floor(sh / 2)[:, None], cx - np.floor(sw / 2)[:, None]
        on = draws.bernoulli_np(0, self.p)[:, None]
        holes = np.ones_like(top)
        return {"top": top, "left": left, "height": np.where(on, sh[:, None] * holes, 0),
                "width": np.where(on, sw[:, None] * holes, 0)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        where = torch.zeros((x.shape[0], 1, *x.shape[2:]), dtype=torch.bool, device=x.device)
        for k in range(self.num_holes):  # a pass per hole, over the whole batch
            top, left = params["top"][:, k], params["left"][:, k]
            where |= inside(top, left, top + params["height"][:, k], left + params["width"][:, k], x.shape[2:],
                            x.device)
        rows = np.flatnonzero(((params["height"] > 0) & (params["width"] > 0)).any(1))
        return fill(x, where, self.value, draws, self.draws, rows)


class GridMask(PixelOp):
    """Erase a grid of squares (Chen et al., "GridMask Data Augmentation", 2020), with
    probability p.

    The image is tiled by cells of d x d pixels, d drawn per image; in each cell a square of
    side d - l is erased, l = round(ratio * d) (clamped to 1..d-1), so that a fraction
    (1 - ratio)**2 of the image is erased. The grid is shifted by a random offset in [0, d) on
    each axis and turned by a random angle about the image's centre.

    Args:
        d: (low, high) cell sides in output pixels, a whole number drawn uniform per image,
            both ends included (the paper's (96, 224) for 224-pixel ImageNet crops).
        ratio: the kept share of each cell's side (the paper's r; 0.6 on ImageNet).
        rotate: angles are drawn uniform in [0, rotate) degrees (the paper: 0, no rotation).
        invert: erase the grid lines instead, keeping the squares (the paper's mode 0).
        value: the fill: a number, one per channel, or "random" (per-pixel standard normal).
        p: probability that an image is masked.

    Example: ``GridMask((32, 96), ratio=0.6, rotate=45, p=0.7)`` for 224-pixel images.
    """

    draws = 5

    def __init__(self, d: tuple[int, int] = (96, 224), ratio: float = 0.6, rotate: float = 0.0,
                 invert: bool = False, value: Value = 0.0, p: float = 0.5) -> None:
        lo, hi = check_range("d", d, 2.0)
        if lo != int(lo) or hi != int(hi):
            raise ValueError(f"d must be whole numbers of pixels >= 2, got {d!r}")
        self.d = (int(lo), int(hi))
        ratio = float(ratio)
        if not 0.0 < ratio < 1.0:
            raise ValueError(f"ratio must be in (0, 1), got {ratio}")
        self.ratio = ratio
        rotate = float(rotate)
        if not 0.0 <= rotate <= 360.0:
            raise ValueError(f"rotate must be in [0, 360] degrees, got {rotate}")
        self.rotate = rotate
        self.invert = bool(invert)
        self.value = check_value(value)
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        lo, hi = self.d
        d = np.minimum(lo + np.floor(draws.uniform_np(1) * (hi - lo + 1)), hi).astype(np.float64)
        keep = np.clip(np.floor(d * self.ratio + 0.5), 1, d - 1)
        return {"d": d, "keep": keep, "dy": np.floor(draws.uniform_np(2) * d), "dx": np.floor(draws.uniform_np(3) * d),
                "angle": np.deg2rad(draws.uniform_np(4, 0.0, self.rotate).astype(np.float64)),
                "on": draws.bernoulli_np(0, self.p)}

    def apply(self, x: torch.Tensor, params: Params, draws: Draws) -> torch.Tensor:
        h, w = x.shape[2:]
        dev = x.device
        f64 = torch.float64
        ys = torch.arange(h, device=dev, dtype=f64).view(1, h, 1) + 0.5 - h / 2
        xs = torch.arange(w, device=dev, dtype=f64).view(1, 1, w) + 0.5 - w / 2
        cos, sin = (to_device(np.ascontiguousarray(f(params["angle"])), dev).view(-1, 1, 1)
                    for f in (np.cos, np.sin))
        u = cos * xs + sin * ys + w / 2  # the grid's coordinates of each pixel centre
        v = -sin * xs + cos * ys + h / 2
        d, keep = (to_device(params[k], dev).view(-1, 1, 1) for k in ("d", "keep"))
        dy, dx = (to_device(params[k], dev).view(-1, 1, 1) for k in ("dy", "dx"))
        in_lines = (torch.remainder(v - dy, d) < keep) | (torch.remainder(u - dx, d) < keep)
        erase = in_lines if self.invert else ~in_lines
        where = (erase.unsqueeze(1) & column(params["on"], x)).expand(-1, 1, h, w)
        return fill(x, where, self.value, draws, self.draws, np.flatnonzero(params["on"]))
