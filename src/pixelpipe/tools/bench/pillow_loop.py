"""The baseline every CPU figure is compared with: a plain Pillow + numpy loop doing the same
transforms as the pipeline being measured.

Per image, in a thread pool: decode with Pillow (the whole image, RGB), then each op of the
pipeline as its own Pillow call, the way torchvision's PIL transforms apply them (every
geometric op resamples the image it is given; pixelpipe folds them into one warp), then
normalise with numpy into float16 CHW; then stack the batch. This is what a hand-written
PyTorch Dataset with Pillow transforms does, minus the DataLoader's process overhead (threads
share the cores the same way pixelpipe's decoding threads do).

The ops, with pixelpipe's parameter ranges (tools/bench/pipelines.py, presets.py):
  random resized crop   torchvision's window; crop + resize in one call (bilinear, antialiased;
                        bicubic for deit, as its preset)
  flip                  Image.transpose
  resize / centre crop  Image.resize of the shorter side (bilinear), Image.crop
  rotate                Image.rotate (bilinear)
  affine                Image.transform(AFFINE) about the centre (bilinear), torchvision's matrix
  perspective           Image.transform(PERSPECTIVE) (bilinear), torchvision's corner moves
  colour jitter         ImageEnhance Brightness, Contrast, Color; hue as torchvision's PIL backend
                        (a shift of the H plane in HSV)
  grayscale             Image.convert("L") then back to RGB
  Gaussian blur         ImageFilter.GaussianBlur(sigma)
  RandAugment           two of torchvision's fourteen operations at bin 9 of 31, as its PIL
                        backend applies them (ImageOps, ImageEnhance, Image.transform, nearest)
  random erasing        one rectangle of noise (torchvision's window rule), in numpy
Pillow has no mirrored border: the warps fill with black where pixelpipe's presets reflect
(the same resampling work).
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from ...ops.geometry import homography
from ...presets import IMAGENET_MEAN, IMAGENET_STD
from .pipelines import SHEAR_DEGREES

MEAN = np.array(IMAGENET_MEAN, dtype=np.float32)
STD = np.array(IMAGENET_STD, dtype=np.float32)
SIZE, VAL_RESIZE = 224, 256

PilOp = Callable[[Image.Image, random.Random], Image.Image]


def _crop_window(rng: random.Random, width: int, height: int, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return left, top, left + w, top + h
    w, h = width, height
    return 0, 0, w, h


# ----------------------------------------------------------------------------- the ops
def resized_crop(size: int = SIZE, scale: tuple[float, float] = (0.08, 1.0), bicubic: bool = False) -> PilOp:
    resample = Image.BICUBIC if bicubic else Image.BILINEAR

    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        return im.resize((size, size), resample, box=_crop_window(rng, im.width, im.height, scale))
    return op


def flip(p: float = 0.5) -> PilOp:
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        return im.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < p else im
    return op


def resize_shorter(side: int) -> PilOp:
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        if im.width <= im.height:
            w, h = side, int(side * im.height / im.width)
        else:
            w, h = int(side * im.width / im.height), side
        return im.resize((w, h), Image.BILINEAR)
    return op


def centre_crop(size: int = SIZE) -> PilOp:
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        left, top = int(round((im.width - size) / 2)), int(round((im.height - size) / 2))
        return im.crop((left, top, left + size, top + size))
    return op


def rotate(degrees: float, p: float = 1.0) -> PilOp:
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        if rng.random() >= p:
            return im
        return im.rotate(rng.uniform(-degrees, degrees), Image.BILINEAR)
    return op


def affine(degrees: float = 0.0, translate: tuple[float, float] | None = None,
           scale: tuple[float, float] | None = None, shear: float | tuple[float, float] = 0.0,
           p: float = 1.0) -> PilOp:
    """torchvision's RandomAffine on a PIL image: the inverse of centre-translate-rotate-shear-
    scale, handed to Image.transform."""
    shear_range = (-shear, shear) if isinstance(shear, (int, float)) else shear

    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        if rng.random() >= p:
            return im
        w, h = im.size
        angle = math.radians(rng.uniform(-degrees, degrees))
        tx = round(rng.uniform(-translate[0], translate[0]) * w) if translate else 0
        ty = round(rng.uniform(-translate[1], translate[1]) * h) if translate else 0
        zoom = rng.uniform(*scale) if scale else 1.0
        sx = math.radians(rng.uniform(*shear_range))
        # forward linear part rotation @ shear_x, times zoom; its inverse maps output to input
        a, b = math.cos(angle) * zoom, (math.cos(angle) * math.tan(sx) - math.sin(angle)) * zoom
        c, d = math.sin(angle) * zoom, (math.sin(angle) * math.tan(sx) + math.cos(angle)) * zoom
        det = a * d - b * c
        ia, ib, ic, id_ = d / det, -b / det, -c / det, a / det
        cx, cy = w / 2, h / 2
        ox, oy = cx + tx, cy + ty
        coeffs = (ia, ib, cx - ia * ox - ib * oy, ic, id_, cy - ic * ox - id_ * oy)
        return im.transform(im.size, Image.AFFINE, coeffs, Image.BILINEAR)
    return op


def perspective(distortion: float, p: float = 0.5) -> PilOp:
    """torchvision's RandomPerspective: each corner moves inwards by up to distortion times half
    the size; the coefficients from the 4 point pairs (an 8x8 solve)."""
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        if rng.random() >= p:
            return im
        w, h = im.size
        dx, dy = distortion * w / 2, distortion * h / 2
        start = [(0, 0), (w - 1, 0), (w - 1, h - 1), (0, h - 1)]
        end = [(rng.uniform(0, dx), rng.uniform(0, dy)), (w - 1 - rng.uniform(0, dx), rng.uniform(0, dy)),
               (w - 1 - rng.uniform(0, dx), h - 1 - rng.uniform(0, dy)), (rng.uniform(0, dx), h - 1 - rng.uniform(0, dy))]
        inverse = homography(np.array([end], dtype=np.float64), np.array([start], dtype=np.float64))[0]  # out -> in
        return im.transform(im.size, Image.PERSPECTIVE, tuple(inverse.reshape(9)[:8]), Image.BILINEAR)
    return op


def _factor(value: float | tuple[float, float]) -> tuple[float, float]:
    return (max(0.0, 1 - value), 1 + value) if isinstance(value, (int, float)) else value


def color_jitter(brightness: float | tuple[float, float] = 0.0, contrast: float | tuple[float, float] = 0.0,
                 saturation: float = 0.0, hue: float = 0.0, p: float = 1.0) -> PilOp:
    enhancers = [(ImageEnhance.Brightness, _factor(brightness)) if brightness else None,
                 (ImageEnhance.Contrast, _factor(contrast)) if contrast else None,
                 (ImageEnhance.Color, _factor(saturation)) if saturation else None]

    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        if rng.random() >= p:
            return im
        for e in enhancers:
            if e is not None:
                im = e[0](im).enhance(rng.uniform(*e[1]))
        if hue:
            h, s, v = im.convert("HSV").split()
            shifted = np.array(h, dtype=np.uint8) + np.uint8(int(rng.uniform(-hue, hue) * 255) % 256)
            im = Image.merge("HSV", (Image.fromarray(shifted, "L"), s, v)).convert("RGB")
        return im
    return op


def grayscale(p: float) -> PilOp:
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        return im.convert("L").convert("RGB") if rng.random() < p else im
    return op


def gaussian_blur(kernel: int, sigma: tuple[float, float] = (0.1, 2.0), p: float = 0.5) -> PilOp:
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        return im.filter(ImageFilter.GaussianBlur(rng.uniform(*sigma))) if rng.random() < p else im
    return op


def rand_augment(num_ops: int = 2, magnitude: int = 9, bins: int = 31) -> PilOp:
    """torchvision's RandAugment on a PIL image: per step one of its fourteen operations,
    signed magnitudes negated half the time."""
    t = magnitude / (bins - 1)
    bits = int(8 - round(magnitude / ((bins - 1) / 4)))

    def one(im: Image.Image, name: str, sign: float) -> Image.Image:
        w, h = im.size
        shear, shift = sign * 0.3 * t, sign * 150 / 331 * t
        if name == "ShearX":
            return im.transform(im.size, Image.AFFINE, (1, shear, 0, 0, 1, 0), Image.NEAREST)
        if name == "ShearY":
            return im.transform(im.size, Image.AFFINE, (1, 0, 0, shear, 1, 0), Image.NEAREST)
        if name == "TranslateX":
            return im.transform(im.size, Image.AFFINE, (1, 0, -int(shift * w), 0, 1, 0), Image.NEAREST)
        if name == "TranslateY":
            return im.transform(im.size, Image.AFFINE, (1, 0, 0, 0, 1, -int(shift * h)), Image.NEAREST)
        if name == "Rotate":
            return im.rotate(sign * 30 * t, Image.NEAREST)
        enhance = {"Brightness": ImageEnhance.Brightness, "Color": ImageEnhance.Color,
                   "Contrast": ImageEnhance.Contrast, "Sharpness": ImageEnhance.Sharpness}
        if name in enhance:
            return enhance[name](im).enhance(1 + sign * 0.9 * t)
        if name == "Posterize":
            return ImageOps.posterize(im, bits)
        if name == "Solarize":
            return ImageOps.solarize(im, int(255 * (1 - t)))
        if name == "AutoContrast":
            return ImageOps.autocontrast(im)
        if name == "Equalize":
            return ImageOps.equalize(im)
        return im  # Identity

    names = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
             "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]

    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        for _ in range(num_ops):
            im = one(im, rng.choice(names), -1.0 if rng.random() <= 0.5 else 1.0)
        return im
    return op


def random_erasing(p: float = 0.25, scale=(0.02, 0.33), ratio=(0.3, 3.3)) -> PilOp:
    """torchvision's RandomErasing window (10 tries), filled with uniform noise."""
    def op(im: Image.Image, rng: random.Random) -> Image.Image:
        if rng.random() >= p:
            return im
        w, h = im.size
        for _ in range(10):
            area = w * h * rng.uniform(*scale)
            aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
            eh, ew = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
            if eh < h and ew < w:
                top, left = rng.randint(0, h - eh), rng.randint(0, w - ew)
                a = np.array(im)
                a[top:top + eh, left:left + ew] = np.random.default_rng(rng.getrandbits(32)).integers(
                    0, 256, (eh, ew, 3), dtype=np.uint8)
                return Image.fromarray(a)
        return im
    return op


# ----------------------------------------------------------------------------- the pipelines
def pillow_ops(pipeline: str) -> list[PilOp]:
    """The Pillow ops of a bench pipeline (pipelines.PIPELINES) or a preset (presets.PRESETS),
    at 224 x 224."""
    train = [resized_crop(), flip()]
    val = [resize_shorter(VAL_RESIZE), centre_crop()]
    table: dict[str, list[PilOp]] = {
        "rn50": train,
        "imagenet_train": train,
        "val": val,
        "imagenet_val": val,
        "rich": train + [affine(degrees=7, shear=SHEAR_DEGREES), color_jitter(0.2, 0.2, 0.2, 0.05)],
        "light": [resized_crop(scale=(0.35, 1.0)), flip(), color_jitter(0.1, 0.1, p=0.5)],
        "heavy": train + [affine(15, (0.1, 0.1), (0.9, 1.1), 10, p=0.5), perspective(0.3, p=0.3),
                          color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8), grayscale(0.2)],
        "randaugment": train + [rand_augment(2, 9), random_erasing(0.25)],
        "deit": [resized_crop(bicubic=True), flip(), rand_augment(2, 9), random_erasing(0.25)],  # bicubic, as the preset
        "simclr": train + [color_jitter(0.8, 0.8, 0.8, 0.2, p=0.8), grayscale(0.2), gaussian_blur(23)],
        "fastai_like": [resize_shorter(SIZE), centre_crop(), flip(), perspective(0.2, p=0.75), rotate(10, p=0.75),
                        affine(scale=(1.0, 1.1), p=0.75), color_jitter(brightness=0.2, p=0.75),
                        color_jitter(contrast=(0.8, 1.25), p=0.75)],
    }
    if pipeline not in table:
        raise ValueError(f"no Pillow loop for pipeline {pipeline!r}; choose from {', '.join(table)}")
    return table[pipeline]


def run_one(data: bytes, seed: int, ops: Sequence[PilOp]) -> np.ndarray:
    """One image through the Pillow ops: float16 [3, 224, 224], normalised."""
    rng = random.Random(seed)
    im = Image.open(io.BytesIO(data)).convert("RGB")
    for op in ops:
        im = op(im, rng)
    a = (np.asarray(im, dtype=np.float32) / 255.0 - MEAN) / STD
    return a.astype(np.float16).transpose(2, 0, 1)


def pillow_batches(blobs: Sequence[bytes], batch_size: int, threads: int, pipeline: str = "rn50",
                   seed: int = 0) -> Iterator[torch.Tensor]:
    """Yield float16 [B, 3, 224, 224] batches made by the Pillow loop with `threads` threads."""
    ops = pillow_ops(pipeline)
    with ThreadPoolExecutor(threads) as pool:
        for start in range(0, len(blobs), batch_size):
            chunk = blobs[start : start + batch_size]
            arrays = list(pool.map(lambda b, s: run_one(b, s, ops), chunk,
                                   range(seed + start, seed + start + len(chunk))))
            yield torch.from_numpy(np.stack(arrays))
