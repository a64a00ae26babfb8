"""Synthetic, photo-like JPEG datasets for tests and benchmarks, with no download.

The images are built to make decoders and resamplers do the work real photos make them do:
varied sizes and aspect ratios, some grayscale files, smooth gradients, hard-edged shapes,
periodic texture at several frequencies and fine noise (so the JPEG entropy coder and any
anti-aliasing filter see high frequencies, not flat colour).
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, ImageChops, ImageDraw

__all__ = ["synthetic", "synthetic_volumes"]

MIN_SIDE, MAX_SIDE = 160, 1000  # every side lies in [MIN_SIDE, MAX_SIDE]
MAX_ASPECT = 3.0  # width / height lies in [1 / MAX_ASPECT, MAX_ASPECT]
GRAY_FRACTION = 0.1
NUM_CLASSES = 10


def synthetic(n: int, seed: int = 0, quality: int = 90) -> list[tuple[bytes, int]]:
    """n JPEG files with integer labels in [0, 10).

    Image i depends only on (seed, i): it is drawn from numpy.random.default_rng((seed, i)), so
    synthetic(10)[3] == synthetic(1000)[3], and seeds 0 and 1 share no images (a generator
    seeded with seed + i would make seed 1 the seed-0 dataset shifted by one image).

    Sizes: aspect ratio (width / height) log-uniform in [1/3, 3], short side log-uniform
    between 160 and what keeps the long side <= 1000. About 10% are grayscale (JPEG mode L).

    Args:
        n: number of images (>= 0).
        seed: dataset seed (>= 0).
        quality: JPEG quality, 1..100.

    Example:
        >>> data, label = synthetic(2)[0]
        >>> isinstance(data, bytes), 0 <= label < 10
        (True, True)
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    return [_one(np.random.default_rng((seed, i)), quality) for i in range(n)]


def _one(rng: np.random.Generator, quality: int) -> tuple[bytes, int]:
    label = int(rng.integers(NUM_CLASSES))
    h, w = _size(rng)
    gray = bool(rng.random() < GRAY_FRACTION)
    img = _background(rng, h, w)
    _shapes(rng, img)
    # Add the luma texture (stored with +128) in C: img + tex - 128, clipped to 0..255.
    tex = Image.fromarray(_texture(rng, h, w))
    img = ImageChops.add(img, Image.merge("RGB", (tex, tex, tex)), 1.0, -128)
    if gray:
        img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue(), label


def _size(rng: np.random.Generator) -> tuple[int, int]:
    """(height, width) with a log-uniform aspect ratio and short side."""
    aspect = math.exp(rng.uniform(-math.log(MAX_ASPECT), math.log(MAX_ASPECT)))
    ratio = max(aspect, 1 / aspect)
    short = math.exp(rng.uniform(math.log(MIN_SIDE), math.log(MAX_SIDE / ratio)))
    long = min(MAX_SIDE, round(short * ratio))
    short = max(MIN_SIDE, round(short))
    return (short, long) if aspect >= 1 else (long, short)


def _background(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """A linear gradient between two colours, mixed with soft colour blobs.

    Both are smooth, so they are computed on a small grid and upsampled by Pillow (bicubic,
    in C): a bilinear function is reproduced by the interpolation, and no full-size float
    image is ever built.
    """
    gh, gw = int(rng.integers(3, 8)), int(rng.integers(3, 8))
    c0, c1 = rng.uniform(0, 255, (2, 3))
    angle = rng.uniform(0, 2 * math.pi)
    t = (np.linspace(0, 1, gh)[:, None] * math.sin(angle)
         + np.linspace(0, 1, gw)[None, :] * math.cos(angle))
    t = (t - t.min()) / max(float(np.ptp(t)), 1e-6)
    grid = c0 + t[:, :, None] * (c1 - c0)
    mix = rng.uniform(0.15, 0.6)
    grid = grid * (1 - mix) + rng.uniform(0, 255, (gh, gw, 3)) * mix
    small = Image.fromarray(np.clip(grid, 0, 255).astype(np.uint8))
    return small.resize((w, h), Image.Resampling.BICUBIC)


def _shapes(rng: np.random.Generator, pil: Image.Image) -> None:
    """A few filled ellipses, rectangles and polygons, some with outlines."""
    draw = ImageDraw.Draw(pil)
    w, h = pil.size
    for _ in range(int(rng.integers(2, 8))):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(0.05, 0.35) * w, rng.uniform(0.05, 0.35) * h
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        outline = tuple(int(v) for v in rng.integers(0, 256, 3)) if rng.random() < 0.4 else None
        kind = rng.integers(3)
        if kind == 0:
            draw.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=fill, outline=outline, width=3)
        elif kind == 1:
            draw.rectangle(
                (cx - rx, cy - ry, cx + rx, cy + ry), fill=fill, outline=outline, width=3
            )
        else:
            k = int(rng.integers(3, 8))
            angles = np.sort(rng.uniform(0, 2 * math.pi, k))
            radii = rng.uniform(0.4, 1.0, k)
            pts = [
                (cx + rx * r * math.cos(a), cy + ry * r * math.sin(a))
                for a, r in zip(angles, radii)
            ]
            draw.polygon(pts, fill=fill, outline=outline, width=3)


def _texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Luma detail as uint8 H x W, 128 = none: sine gratings whose strength varies over the
    image (smooth areas next to textured ones), mid-frequency blotches and fine noise.

    A grating sin(a x + b y + p) is evaluated as sin(ax)cos(by + p) + cos(ax)sin(by + p), so the
    trigonometry runs on one row and one column and the full-size work is multiply-adds.
    """
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    grating = np.zeros((h, w), np.float32)
    for _ in range(int(rng.integers(1, 4))):
        period = math.exp(rng.uniform(math.log(2.5), math.log(80)))  # pixels: fine to coarse
        angle = rng.uniform(0, math.pi)
        k = 2 * math.pi / period
        a, b, p = k * math.cos(angle), k * math.sin(angle), rng.uniform(0, 2 * math.pi)
        amp = rng.uniform(5, 30)
        grating += (np.sin(a * x) * amp) * np.cos(b * y + p)
        grating += (np.cos(a * x) * amp) * np.sin(b * y + p)
    out = grating * _smooth(rng, h, w, rng.integers(2, 5), 0.0, 1.0)
    out += _smooth(rng, h, w, max(h // 8, 2), -1.0, 1.0) * rng.uniform(5, 25)  # blotches
    out += rng.standard_normal((h, w), dtype=np.float32) * rng.uniform(1, 6)  # sensor noise
    out += 128.0
    return np.clip(out, 0, 255, out=out).astype(np.uint8)


def _smooth(
    rng: np.random.Generator, h: int, w: int, cells: int, lo: float, hi: float
) -> np.ndarray:
    """Random values in [lo, hi] on a grid of about `cells` rows, upsampled smoothly to h x w."""
    gh = int(cells)
    gw = max(2, round(gh * w / h))
    grid = Image.fromarray(rng.integers(0, 256, (gh, gw), dtype=np.uint8))
    up = np.asarray(grid.resize((w, h), Image.Resampling.BILINEAR), np.float32)
    return up * ((hi - lo) / 255) + lo


def synthetic_volumes(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """n CT-like volumes with label maps, for `pixelpipe show --volumes` without data and for
    examples: (image int16 [D, H, W] in Hounsfield-like units, label uint8 [D, H, W]).

    Volume i depends only on (seed, i). Each is 40 to 72 voxels per axis: air (-1000) around
    an ellipsoid body (about 40) with noise, a bright sphere (label 1, about 300) off the centre
    and a dense box (label 2, about 900) towards the opposite octant. Both cross the three
    middle planes off their centres, so a flip or a rotation shows in each middle slice.

    Example:
        >>> image, label = synthetic_volumes(1)[0]
        >>> image.dtype, label.dtype, image.shape == label.shape, set(np.unique(label)) <= {0, 1, 2}
        (dtype('int16'), dtype('uint8'), True, True)
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return [_volume(np.random.default_rng((seed, i, 3))) for i in range(n)]


def _volume(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    d, h, w = (int(v) for v in rng.integers(40, 73, 3))
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, s) for s in (d, h, w)), indexing="ij")
    radii = rng.uniform(0.7, 0.9, 3)
    body = (z / radii[0]) ** 2 + (y / radii[1]) ** 2 + (x / radii[2]) ** 2 < 1
    vol = np.where(body, 40.0 + 30 * np.sin(3 * x + 2 * z), -1000.0) + rng.normal(0, 15, (d, h, w))
    label = np.zeros((d, h, w), dtype=np.uint8)
    centre, r = rng.uniform(0.1, 0.2, 3) * rng.choice([-1, 1], 3), rng.uniform(0.25, 0.32)
    sphere = (z - centre[0]) ** 2 + (y - centre[1]) ** 2 + (x - centre[2]) ** 2 < r**2
    vol[sphere] = 300 + rng.normal(0, 15, int(sphere.sum()))
    label[sphere] = 1
    lo = np.where(centre > 0, -0.45, -0.05)  # the octant opposite the sphere, across the middle planes
    box = (z > lo[0]) & (z < lo[0] + 0.5) & (y > lo[1]) & (y < lo[1] + 0.5) & (x > lo[2]) & (x < lo[2] + 0.5)
    vol[box] = 900
    label[box] = 2
    return np.clip(vol, -1024, 3000).round().astype(np.int16), label
