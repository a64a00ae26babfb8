"""What a warp and a pointwise pass are asked to compute: the contract every implementation
(the plain-torch reference, the CPU fast path, the Triton kernel) follows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import native
from .deform import Deformation

_AFFINE_ROW = np.array([0.0, 0.0, 1.0])


def is_affine(m: np.ndarray) -> bool:
    """True when every matrix of m [N, 3, 3] has the last row (0, 0, 1): no perspective."""
    return bool((m[:, 2] == _AFFINE_ROW).all())


def stretch_at(inv: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sy, sx), each [N, P]: how many source pixels one output pixel spans along each source
    axis (the norms of the inverse map's Jacobian rows, perspective division included) at the
    output points (x, y) ([P], or [N, P] per sample) of the maps inv [N, 3, 3]."""
    a, b, c = (inv[:, k, :, None] for k in range(3))  # rows of the inverse, [N, 3, 1]
    pz = c[:, 0] * x + c[:, 1] * y + c[:, 2]
    u = (a[:, 0] * x + a[:, 1] * y + a[:, 2]) / pz
    v = (b[:, 0] * x + b[:, 1] * y + b[:, 2]) / pz
    sx = np.hypot((a[:, 0] - u * c[:, 0]) / pz, (a[:, 1] - u * c[:, 1]) / pz)
    sy = np.hypot((b[:, 0] - v * c[:, 0]) / pz, (b[:, 1] - v * c[:, 1]) / pz)
    return sy, sx


@dataclass
class WarpSpec:
    """Per-sample geometry of one resampling pass.

    Output pixel (i, j) has centre (x, y) = (j + 0.5, i + 0.5). Its source point is
    inverse @ (x, y, 1) after perspective division, in *image* coordinates: those of the image
    as decoded (at DCT scale when the decoder reduced it), pixel (r, c) covering [c, c+1) x [r, r+1).

    Attributes (numpy arrays: the planner makes them on the host, per batch):
        inverse: float64 [N, 3, 3], output -> image coordinates.
        image_size: int64 [N, 2] (height, width) of the image; the border rule applies beyond it.
        origin: int64 [N, 2] (y, x): buffer pixel (0, 0) of the stored sample is image pixel
            (y, x) (a decoded region starts at its own corner).
        clip: int64 [N, 4] (y0, x0, y1, x1): the image pixels the warp may read. Filter taps on
            image pixels outside it are dropped and the remaining weights renormalised, as
            Pillow does at image edges; the result therefore does not depend on how much of the
            image was decoded.
        out_size: (height, width) of every output.
        interpolation: "nearest", "bilinear" or "bicubic".
        border: "constant", "reflect", "replicate" or "wrap" for taps beyond the image.
        fill: 3 floats (0..255) read by taps beyond the image with border "constant".
        antialias: stretch the filter by the local shrink factor (from the Jacobian of the
            inverse map, per output pixel) when the warp shrinks.
        deform: a displacement field between the matrices (kernels.deform), or None. The source
            point is then the deformation's, while `inverse` (outer @ inner, the matrix part)
            still gives the antialiasing stretch, its bound and the taps: the field's own
            stretch is not followed (it is smooth, near 1).
    """

    inverse: np.ndarray
    image_size: np.ndarray
    origin: np.ndarray
    clip: np.ndarray
    out_size: tuple[int, int]
    interpolation: str = "bilinear"
    border: str = "constant"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    antialias: bool = True
    deform: Deformation | None = None

    def __len__(self) -> int:
        return int(self.inverse.shape[0])

    def __post_init__(self) -> None:
        # tensors given (by a test or an older caller) become the arrays every consumer reads
        self.inverse = _array(self.inverse, np.float64)
        self.image_size = _array(self.image_size, np.int64)
        self.origin = _array(self.origin, np.int64)
        self.clip = _array(self.clip, np.int64)

    def __getitem__(self, rows: Any) -> WarpSpec:
        """The spec of some samples (an index array, a boolean mask or a slice); a stretch
        computed already is sliced with it."""
        part = WarpSpec(self.inverse[rows], self.image_size[rows], self.origin[rows], self.clip[rows],
                        self.out_size, self.interpolation, self.border, self.fill, self.antialias,
                        None if self.deform is None else self.deform[rows])
        if "_max_scale" in self.__dict__:
            part.__dict__["_max_scale"] = self.__dict__["_max_scale"][rows]
        return part

    def max_scale(self) -> np.ndarray:
        """float64 [N, 2] (y, x): per sample, the largest antialiasing stretch over the output
        (sampled on a 3x3 grid of points), within [1, MAX_AA_SCALE]. Every implementation clamps
        the per-pixel stretch to this, which bounds the number of taps per sample."""
        from .filters import MAX_AA_SCALE

        cached = self.__dict__.get("_max_scale")
        if cached is not None:
            return cached
        n = len(self)
        inv = self.inverse
        if not self.antialias or self.interpolation == "nearest" or n == 0:
            best = np.ones((n, 2))
        elif is_affine(inv):
            # affine: the Jacobian is the same everywhere, and the grid below reduces to this
            # exactly (pz = 1, the u and v terms vanish)
            best = np.hypot(inv[:, 1::-1, 0], inv[:, 1::-1, 1])  # rows v then u: (y, x)
        else:
            H, W = self.out_size
            f = np.array([0.0, 0.5, 1.0])
            sy, sx = stretch_at(inv, np.tile(f * W, 3), np.repeat(f * H, 3))  # the 3x3 grid
            best = np.stack([sy.max(1), sx.max(1)], 1)
        self.__dict__["_max_scale"] = np.clip(best, 1.0, MAX_AA_SCALE)
        return self.__dict__["_max_scale"]

    def taps(self) -> np.ndarray:
        """int64 [N, 2] (y, x): filter taps per axis each sample needs: ceil(2 R s), or 1 for
        nearest. Taps sit strictly inside (u - R s, u + R s) around the source point (the
        filters vanish at +-R)."""
        from .filters import SUPPORT

        if self.interpolation == "nearest":
            return np.ones((len(self), 2), dtype=np.int64)
        r = SUPPORT[self.interpolation]
        return np.maximum(np.ceil(2 * r * self.max_scale() - 1e-9).astype(np.int64), 1)

    def packed_np(self) -> np.ndarray:
        """float64 [N, 21]: inverse (9), image h, w, origin y, x, clip y0, x0, y1, x1, max
        scale y, x, taps y, x. One row per sample for kernels, written in place (one array, no
        concatenation of converted parts)."""
        n = len(self)
        out = np.empty((n, 21))
        lib = native.library()
        if lib is not None and n and self._rows_native(lib, out):
            return out
        out[:, 0:9] = self.inverse.reshape(n, 9)
        out[:, 9:11] = self.image_size
        out[:, 11:13] = self.origin
        out[:, 13:17] = self.clip
        out[:, 17:19] = self.max_scale()
        out[:, 19:21] = self.taps()
        return out

    def _rows_native(self, lib: Any, out: np.ndarray) -> bool:
        """packed_np's rows from planner.c (the same numbers) for affine inverses; False for
        numpy to take a perspective batch. Keeps the max scale it computed, as max_scale() does."""
        from .filters import MAX_AA_SCALE, SUPPORT

        nearest = self.interpolation == "nearest"
        stretch = int(self.antialias and not nearest and "_max_scale" not in self.__dict__)
        arrays = [np.ascontiguousarray(a) for a in (self.inverse, self.image_size, self.origin, self.clip)]
        two_r = 0.0 if nearest else 2 * SUPPORT[self.interpolation]
        if lib.pp_warp_rows(*(native.address(a) for a in arrays), len(self), stretch, two_r, MAX_AA_SCALE,
                            native.address(out)) >= 0:
            return False
        if "_max_scale" in self.__dict__:  # computed before (a window's spec, sliced): its numbers
            out[:, 17:19] = self.__dict__["_max_scale"]
            out[:, 19:21] = self.taps()
        else:
            self.__dict__["_max_scale"] = out[:, 17:19].copy()
        return True


def _array(x: Any, dtype: type) -> np.ndarray:
    """x (a tensor or array-like) as a numpy array of dtype (no copy when it is one already)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


@dataclass
class PointwiseSpec:
    """Per-sample colour transform, then clamp, normalisation, cast and layout.

    out = clamp(color[:, :, :3] @ rgb + color[:, :, 3], 0, 255) in pixel units; then for a
    float dtype out / 255, and with normalisation (out - mean) / std (per channel, in 0..1
    units, as torchvision's Normalize); uint8 rounds to nearest. channels=1 gives the grey
    (ITU-R 601: 0.299 R + 0.587 G + 0.114 B) of the result.
    """

    color: torch.Tensor | None  # float64 [N, 3, 4] or None for identity
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    dtype: torch.dtype
    layout: str  # "NCHW" or "NHWC"
    channels: int  # 1 or 3

    def scale_bias(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per output channel (k, b) with out = clamped * k + b: /255 and the normalisation
        folded into one multiply-add (identity for uint8). The fast paths use this; the
        reference spells the steps out."""
        c = self.channels
        if self.dtype == torch.uint8:
            return (1.0,) * c, (0.0,) * c
        mean = self.mean if self.mean is not None else (0.0,)
        std = self.std if self.std is not None else (1.0,)
        if len(mean) == 1:
            mean, std = mean * 3, std * 3
        mean, std = mean[:c], std[:c]
        return tuple(1.0 / (255.0 * v) for v in std), tuple(-m / v for m, v in zip(mean, std))
