"""Ops that choose a window and a size: Resize, Crop, CenterCrop, RandomCrop, RandomResizedCrop, its
deterministic counterpart CenterResizedCrop, and Pad."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..data.random import Draws
from .checks import BORDERS, INTERPOLATIONS, check_choice, check_fill, check_range, check_size
from .kinds import GeometryOp, Op, Params
from .matrices import affine

__all__ = ["CenterCrop", "CenterResizedCrop", "Crop", "Pad", "RandomCrop", "RandomResizedCrop", "Resize"]

IMAGENET_CROP = 224 / 256  # the usual validation crop keeps 224/256 of the resized shorter side


class Resize(GeometryOp):
    """Resize each image.

    Args:
        size: int -> the shorter side becomes `size`, aspect ratio kept (the longer side is
            truncated to an int, as torchvision does); (height, width) -> exactly that size.
        max_size: with an int size, cap the longer side at max_size (the shorter side then
            shrinks below `size`).
        interpolation: "nearest", "bilinear" (default) or "bicubic". Shrinking is antialiased.

    Example: ``Resize(256)`` turns a 500x375 (w x h) image into 341x256.
    """

    resamples_window = True  # a crop before it hands it its exact window (Crop.resampled)

    deterministic = True

    def __init__(self, size: int | tuple[int, int], max_size: int | None = None,
                 interpolation: str | None = None, border: str | None = None) -> None:
        if isinstance(size, int) and not isinstance(size, bool):
            if size <= 0:
                raise ValueError(f"size must be positive, got {size}")
            self.size: int | tuple[int, int] = size
        else:
            h, w = check_size("size", size)
            self.size = (int(h), int(w))
            if max_size is not None:
                raise ValueError("max_size only applies when size is a single int (the shorter side)")
        if max_size is not None and (not isinstance(max_size, int) or max_size <= 0):
            raise ValueError(f"max_size must be a positive int or None, got {max_size!r}")
        if max_size is not None and isinstance(self.size, int) and max_size < self.size:
            raise ValueError(f"max_size ({max_size}) must be >= size ({self.size})")
        self.max_size = max_size
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.border = check_choice("border", border, BORDERS)

    def output_size(self, sizes: np.ndarray) -> np.ndarray:
        h, w = sizes[:, 0], sizes[:, 1]
        if isinstance(self.size, tuple):
            return np.broadcast_to(np.array(self.size, dtype=np.float64), sizes.shape).copy()
        short, long = np.minimum(h, w), np.maximum(h, w)
        new_short = np.full_like(short, float(self.size))
        # (1 + 1e-12): a crop's exact fractional window (Crop.resampled) has sides such as 0.9 * 686
        # whose quotient may land a rounding error below a whole number; a quotient of whole sides
        # is a whole number or at least 1 / short away from one, so it floors as without it
        new_long = np.floor(self.size * long / short * (1 + 1e-12))
        if self.max_size is not None:  # torchvision's rule: rescale from the uncapped size
            over = new_long > self.max_size
            new_short = np.where(over, np.floor(self.max_size * new_short / np.maximum(new_long, 1)), new_short)
            new_long = np.where(over, float(self.max_size), new_long)
        wide = w >= h  # the height is the short side
        out = np.stack([np.where(wide, new_short, new_long), np.where(wide, new_long, new_short)], 1)
        return np.maximum(out, 1.0)

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = self.output_size(sizes)
        scale = out / sizes
        return affine(len(out), a=scale[:, 1], d=scale[:, 0]), out


def _anchor(value: Any) -> tuple[tuple[float, float], bool]:
    """(y, x) anchor and whether it is relative (floats in [0, 1]) or absolute (ints)."""
    if isinstance(value, (int, float)):
        value = (value, value)
    try:
        y, x = value
    except (TypeError, ValueError):
        raise ValueError(f"anchor must be a (y, x) pair, got {value!r}") from None
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (y, x))
    floats = all(isinstance(v, float) for v in (y, x))
    if ints:
        if y < 0 or x < 0:
            raise ValueError(f"an absolute anchor (ints, top/left pixels) must be >= 0, got {value!r}")
        return (float(y), float(x)), False
    if floats:
        if not (0.0 <= y <= 1.0 and 0.0 <= x <= 1.0):
            raise ValueError(f"a relative anchor (floats) must be in [0, 1], got {value!r}")
        return (y, x), True
    raise ValueError(f"anchor must be two ints (pixels) or two floats in [0, 1], got {value!r}")


class Crop(GeometryOp):
    """Cut a window out of each image.

    Args:
        size: (height, width) or one number. Ints are pixels; floats in (0, 1] are fractions
            of each image's own size, so ``Crop(0.8)`` keeps the central 80% of every image
            whatever its size. A fractional window is rounded to whole pixels (its size and
            its place), except where a Resize comes next among the geometric ops of the same
            stage: that Resize then resamples the exact window, as Pillow's
            ``resize(size, box=window)`` does.
        anchor: where the window sits. Two floats in [0, 1] place it relative to the free
            space: (0., 0.) top-left, (0.5, 0.5) centred, (1., 1.) bottom-right. Two ints are
            the absolute (top, left) pixel.
        border, fill: what fills a window that reaches past the image (default: constant 0).
    """

    deterministic = True

    def __init__(self, size: Any, anchor: Any = (0.5, 0.5), border: str | None = None,
                 fill: Any = None) -> None:
        self.size = check_size("size", size, allow_fraction=True)
        self.anchor, self._relative = _anchor(anchor)
        self.border = check_choice("border", border, BORDERS)
        self.fill = check_fill(fill)

    def _fields(self) -> dict[str, Any]:
        anchor = self.anchor if self._relative else tuple(int(v) for v in self.anchor)
        return {"size": self.size, "anchor": anchor, "border": self.border, "fill": self.fill}

    def _box(self, sizes: np.ndarray, exact: bool = False) -> tuple[np.ndarray, ...]:
        """(top, left, height, width) float64 [N] each. A fractional side and its place are
        rounded to whole pixels, or kept as they are with `exact`; pixel sides and absolute
        anchors are whole pixels either way."""
        H, W = sizes[:, 0], sizes[:, 1]
        box = []
        for v, a, full in zip(self.size, self.anchor, (H, W)):
            fraction = not isinstance(v, int)
            if not fraction:
                side = np.full_like(full, float(v))
            elif exact:
                side = v * full
            else:
                side = np.maximum(np.round(v * full), 1.0)
            if not self._relative:
                start = np.full_like(full, a)
            else:
                start = a * (full - side)
                start = start if exact and fraction else np.round(start)
            box.append((start, side))
        (top, h), (left, w) = box
        return top, left, h, w

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top, left, h, w = self._box(sizes)
        return affine(len(top), tx=-left, ty=-top), np.stack([h, w], 1)

    def resampled(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """transform() for a crop that a Resize resamples in the same stage: a fractional side
        keeps its exact window (size and place unrounded, the output size a fraction too), so
        that the Resize maps that window onto its output as Pillow's ``resize(box=...)`` does."""
        top, left, h, w = self._box(sizes, exact=True)
        return affine(len(top), tx=-left, ty=-top), np.stack([h, w], 1)


class CenterCrop(Crop):
    """Crop(size) centred in each image; see Crop for fractional sizes."""

    def __init__(self, size: Any, border: str | None = None, fill: Any = None) -> None:
        super().__init__(size, (0.5, 0.5), border, fill)

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"size": self.size}
        if self.border is not None:
            out["border"] = self.border
        if self.fill is not None:
            out["fill"] = self.fill
        return out


class RandomResizedCrop(GeometryOp):
    """Crop a random window of random area and aspect ratio, resized to `size`.

    The window is drawn per sample as torchvision does: up to 10 tries of an area fraction
    uniform in `scale` and a log-uniform aspect ratio in `ratio`, keeping the first that fits,
    else a centred crop with the ratio clamped. Windows are whole pixels.
    """

    TRIES = 10
    draws = 2 * TRIES + 2

    def __init__(self, size: int | tuple[int, int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), interpolation: str | None = None) -> None:
        h, w = check_size("size", size)
        self.size = (int(h), int(w))
        self.scale = check_range("scale", scale, 0.0, 1.0)
        if self.scale[1] <= 0:
            raise ValueError(f"scale must allow a positive area, got {scale}")
        self.ratio = check_range("ratio", ratio, 0.0)
        if self.ratio[0] <= 0:
            raise ValueError(f"ratio must be positive, got {ratio}")
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)

    def eval_form(self, style: str) -> list[Op]:
        """"center": CenterResizedCrop, the framing of this op's own fallback window;
        "imagenet": Resize of the shorter side to round(max(size) * 256 / 224), then
        CenterCrop(size)."""
        if style == "imagenet":
            short = round(max(self.size) / IMAGENET_CROP)
            return [Resize(short, interpolation=self.interpolation), CenterCrop(self.size)]
        return [CenterResizedCrop(self.size, self.ratio, self.interpolation)]

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        H, W = sizes[:, 0], sizes[:, 1]
        area = (H * W)[:, None]
        u = draws.uniforms_np(2 * self.TRIES + 2).astype(np.float64)
        u_area, u_ratio = u[:, 0 : 2 * self.TRIES : 2], u[:, 1 : 2 * self.TRIES : 2]
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u_area)
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = np.exp(lo + (hi - lo) * u_ratio)
        w = np.round(np.sqrt(target * aspect))
        h = np.round(np.sqrt(target / aspect))
        ok = (w > 0) & (h > 0) & (w <= W[:, None]) & (h <= H[:, None])
        fallback = ~ok.any(1)
        rows, pick = np.arange(len(H)), ok.argmax(1)  # the first try that fits
        h, w = h[rows, pick], w[rows, pick]
        # fallback: centred crop with the aspect ratio clamped into `ratio`
        in_ratio = W / H
        fb_w = np.where(in_ratio < self.ratio[0], W, np.where(in_ratio > self.ratio[1], np.round(H * self.ratio[1]), W))
        fb_h = np.where(in_ratio < self.ratio[0], np.round(W / self.ratio[0]), H)
        fb_h = np.where(in_ratio > self.ratio[1], H, fb_h)
        h = np.maximum(np.where(fallback, fb_h, h), 1)
        w = np.maximum(np.where(fallback, fb_w, w), 1)
        u_top, u_left = u[:, 2 * self.TRIES], u[:, 2 * self.TRIES + 1]
        top = np.minimum(np.floor(u_top * (H - h + 1)), H - h)
        left = np.minimum(np.floor(u_left * (W - w + 1)), W - w)
        top = np.where(fallback, np.floor((H - h) / 2), top)
        left = np.where(fallback, np.floor((W - w) / 2), left)
        return {"top": top, "left": left, "height": h, "width": w}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = sizes.shape[0]
        sy, sx = self.size[0] / params["height"], self.size[1] / params["width"]
        m = affine(n, a=sx, tx=sx * -params["left"], d=sy, ty=sy * -params["top"])
        return m, np.broadcast_to(np.array(self.size, dtype=np.float64), (n, 2))


class CenterResizedCrop(GeometryOp):
    """The deterministic counterpart of RandomResizedCrop: the centred window of the whole
    image whose aspect ratio (width / height) is clamped into `ratio`, resized to `size`.

    An image whose ratio already lies in `ratio` is resized whole; a wider one loses its left
    and right edges, a taller one its top and bottom. This is exactly the window
    RandomResizedCrop falls back to when none of its tries fits, so a model sees the same
    framing it saw in training when the random crop covered the whole image.

    Args:
        size: output (height, width), or one int for a square.
        ratio: (low, high) aspect ratios (width / height) kept as they are.
        interpolation: "nearest", "bilinear" (default) or "bicubic"; shrinking is antialiased.
    """

    deterministic = True

    def __init__(self, size: int | tuple[int, int], ratio: tuple[float, float] = (3 / 4, 4 / 3),
                 interpolation: str | None = None) -> None:
        h, w = check_size("size", size)
        self.size = (int(h), int(w))
        self.ratio = check_range("ratio", ratio, 0.0)
        if self.ratio[0] <= 0:
            raise ValueError(f"ratio must be positive, got {ratio}")
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)

    def window(self, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
        """(top, left, height, width) float64 [N] each, whole pixels."""
        H, W = sizes[:, 0], sizes[:, 1]
        lo, hi = self.ratio
        aspect = W / H
        w = np.maximum(np.where(aspect > hi, np.round(H * hi), W), 1.0)
        h = np.maximum(np.where(aspect < lo, np.round(W / lo), H), 1.0)
        return np.floor((H - h) / 2), np.floor((W - w) / 2), h, w

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top, left, h, w = self.window(sizes)
        sx, sy = self.size[1] / w, self.size[0] / h
        out = np.broadcast_to(np.array(self.size, dtype=np.float64), (sizes.shape[0], 2))
        return affine(len(sx), a=sx, tx=sx * -left, d=sy, ty=sy * -top), out


class Pad(GeometryOp):
    """Add a border around each image.

    Args:
        padding: one int (all sides), (left/right, top/bottom) or (left, top, right, bottom).
        mode: "constant" (with `fill`), "reflect", "replicate" or "wrap".
    """

    deterministic = True

    def __init__(self, padding: int | tuple[int, ...], mode: str = "constant", fill: Any = 0) -> None:
        if isinstance(padding, int):
            padding = (padding,) * 4
        padding = tuple(padding)
        if len(padding) == 2:
            padding = (padding[0], padding[1], padding[0], padding[1])
        if len(padding) != 4 or any(not isinstance(p, int) or p < 0 for p in padding):
            raise ValueError(f"padding must be ints >= 0: one, (lr, tb) or (l, t, r, b); got {padding!r}")
        self.padding = padding
        self.border = check_choice("mode", mode, BORDERS, optional=False)
        self.fill = check_fill(fill)

    def _fields(self) -> dict[str, Any]:
        return {"padding": self.padding, "mode": self.border, "fill": self.fill}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        l, t, r, b = (float(p) for p in self.padding)
        return affine(sizes.shape[0], tx=l, ty=t), sizes + np.array([t + b, l + r])


def _padding(padding: Any) -> tuple[int, int, int, int]:
    """torchvision's padding forms as (left, top, right, bottom) whole pixels >= 0."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        padding = (padding,)
    try:
        values = tuple(padding)
    except TypeError:
        raise ValueError(f"padding must be an int or 1, 2 or 4 ints, got {padding!r}") from None
    if len(values) not in (1, 2, 4) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"padding must be ints >= 0: one, (left/right, top/bottom) or (left, top, right, "
                         f"bottom); got {padding!r}")
    if len(values) == 1:
        return (values[0],) * 4
    if len(values) == 2:
        return (values[0], values[1], values[0], values[1])
    return values  # type: ignore[return-value]


class RandomCrop(GeometryOp):
    """Cut a window of a fixed size at a random place (torchvision's RandomCrop), as a matrix.

    Args:
        size: the window's (height, width) in pixels; one int is a square.
        padding: pad each image first: one int (all sides), (left/right, top/bottom) or
            (left, top, right, bottom), as torchvision takes it.
        pad_if_needed: pad a side that is shorter than the window by the difference on both of
            its ends (torchvision's rule), so that every image fits.
        fill: the colour of a "constant" padding (one value or three, 0..255).
        border: how the padding is filled: "constant" (with `fill`), "reflect" (torchvision's
            "reflect"), "replicate" (its "edge") or "wrap"; torchvision's "symmetric" has no
            counterpart.

    The window's top-left corner is uniform among the whole-pixel positions of the padded
    image, drawn per sample; padding and cropping fold into one translation, so the op reads
    only the window from the decoder and costs nothing in the warp. An image smaller than the
    window (after padding) is an error naming the sample, as in torchvision: give
    pad_if_needed=True or a Resize before. Without padding the op sets no border or fill, so
    it sits in any stage.

    Example (CIFAR): ``RandomCrop(32, padding=4)``.
    """

    draws = 2

    def __init__(self, size: int | tuple[int, int], padding: int | tuple[int, ...] | None = None,
                 pad_if_needed: bool = False, fill: Any = 0, border: str = "constant") -> None:
        h, w = check_size("size", size)
        self.size = (int(h), int(w))
        self.padding = None if padding is None else _padding(padding)
        self.pad_if_needed = bool(pad_if_needed)
        self._border = check_choice("border", border, BORDERS, optional=False)
        self._fill = check_fill(fill)
        if self.padding is not None or self.pad_if_needed:  # only then can the window read past the image
            self.border, self.fill = self._border, self._fill

    def _fields(self) -> dict[str, Any]:
        return {"size": self.size, "padding": self.padding, "pad_if_needed": self.pad_if_needed,
                "fill": self._fill, "border": self._border}

    def eval_form(self, style: str) -> list[Op]:
        """CenterCrop(size) of the padded image: the window's expected place."""
        return [_CenteredRandomCrop(self)]

    def padded(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(left, top, padded height, padded width), float64 [N] each, torchvision's rule."""
        left, top, right, bottom = (float(v) for v in (self.padding or (0, 0, 0, 0)))
        ph, pw = sizes[:, 0] + top + bottom, sizes[:, 1] + left + right
        top_n, left_n = np.full_like(ph, top), np.full_like(pw, left)
        if self.pad_if_needed:
            dh = np.maximum(self.size[0] - ph, 0.0)
            dw = np.maximum(self.size[1] - pw, 0.0)
            top_n, left_n = top_n + dh, left_n + dw
            ph, pw = ph + 2 * dh, pw + 2 * dw
        small = (ph < self.size[0]) | (pw < self.size[1])
        if small.any():
            k = int(np.argmax(small))
            raise ValueError(f"RandomCrop: sample {k} of the batch is {int(sizes[k, 0])}x{int(sizes[k, 1])} "
                             f"(h x w) after padding {int(ph[k])}x{int(pw[k])}, smaller than the window "
                             f"{self.size[0]}x{self.size[1]}; give pad_if_needed=True or resize before")
        return left_n, top_n, ph, pw

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        left, top, ph, pw = self.padded(sizes)
        y = np.minimum(np.floor(draws.uniform_np(0).astype(np.float64) * (ph - self.size[0] + 1)), ph - self.size[0])
        x = np.minimum(np.floor(draws.uniform_np(1).astype(np.float64) * (pw - self.size[1] + 1)), pw - self.size[1])
        return {"dx": left - x, "dy": top - y}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = sizes.shape[0]
        return affine(n, tx=params["dx"], ty=params["dy"]), np.broadcast_to(np.array(self.size, np.float64), (n, 2))


class _CenteredRandomCrop(GeometryOp):
    """A RandomCrop's evaluation form: its window centred in the padded image (torchvision's
    CenterCrop rounding: top = round((padded height - height) / 2))."""

    deterministic = True

    def __init__(self, crop: RandomCrop) -> None:
        self.crop = crop
        self.border, self.fill = crop.border, crop.fill

    def __repr__(self) -> str:
        return f"CenterCrop of {self.crop!r}"

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        left, top, ph, pw = self.crop.padded(sizes)
        y = np.round((ph - self.crop.size[0]) / 2)
        x = np.round((pw - self.crop.size[1]) / 2)
        return self.crop.transform({"dx": left - x, "dy": top - y}, sizes)
