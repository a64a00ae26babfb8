"""What a warp and a pointwise pass are asked to compute: the contract every implementation
(the plain-torch reference, the CPU fast path, the Triton kernel) follows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def is_affine(m: np.ndarray) -> bool:
    """True when every matrix of m [N, 3, 3] has the last row (0, 0, 1): no perspective."""
    return bool((m[:, 2, 0] == 0).all() and (m[:, 2, 1] == 0).all() and (m[:, 2, 2] == 1).all())


@dataclass
class WarpSpec:
    """Per-sample geometry of one resampling pass.

    Output pixel (i, j) has centre (x, y) = (j + 0.5, i + 0.5). Its source point is
    inverse @ (x, y, 1) after perspective division, in *image* coordinates: those of the image
    as decoded (at DCT scale when the decoder reduced it), pixel (r, c) covering [c, c+1) x [r, r+1).

    Attributes:
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
    """

    inverse: torch.Tensor
    image_size: torch.Tensor
    origin: torch.Tensor
    clip: torch.Tensor
    out_size: tuple[int, int]
    interpolation: str = "bilinear"
    border: str = "constant"
    fill: tuple[float, float, float] = (0.0, 0.0, 0.0)
    antialias: bool = True

    def __len__(self) -> int:
        return int(self.inverse.shape[0])

    def max_scale(self) -> torch.Tensor:
        """float64 [N, 2] (y, x): per sample, the largest antialiasing stretch over the output
        (sampled on a 3x3 grid of points), within [1, MAX_AA_SCALE]. Every implementation clamps
        the per-pixel stretch to this, which bounds the number of taps per sample."""
        from .filters import MAX_AA_SCALE

        cached = self.__dict__.get("_max_scale")
        if cached is not None:
            return cached
        n = len(self)
        if not self.antialias or self.interpolation == "nearest" or n == 0:
            return torch.ones(n, 2, dtype=torch.float64)
        # numpy, all nine points at once: this runs per batch on the planning thread, where
        # torch's per-op overhead on [N] tensors made it a millisecond
        inv = self.inverse.detach().cpu().to(torch.float64).numpy()
        if is_affine(inv):
            # affine: the Jacobian is the same everywhere, and the grid below reduces to this
            # exactly (pz = 1, the u and v terms vanish)
            best = np.stack([np.hypot(inv[:, 1, 0], inv[:, 1, 1]), np.hypot(inv[:, 0, 0], inv[:, 0, 1])], 1)
            self.__dict__["_max_scale"] = torch.from_numpy(np.clip(best, 1.0, MAX_AA_SCALE))
            return self.__dict__["_max_scale"]
        H, W = self.out_size
        f = np.array([0.0, 0.5, 1.0])
        x, y = np.tile(f * W, 3), np.repeat(f * H, 3)  # [9]: (x, y) over the 3x3 grid
        a, b, c = (inv[:, k, :, None] for k in range(3))  # rows of the inverse, [N, 3, 1]
        pz = c[:, 0] * x + c[:, 1] * y + c[:, 2]
        u = (a[:, 0] * x + a[:, 1] * y + a[:, 2]) / pz
        v = (b[:, 0] * x + b[:, 1] * y + b[:, 2]) / pz
        sx = np.hypot((a[:, 0] - u * c[:, 0]) / pz, (a[:, 1] - u * c[:, 1]) / pz).max(1)
        sy = np.hypot((b[:, 0] - v * c[:, 0]) / pz, (b[:, 1] - v * c[:, 1]) / pz).max(1)
        self.__dict__["_max_scale"] = torch.from_numpy(np.clip(np.stack([sy, sx], 1), 1.0, MAX_AA_SCALE))
        return self.__dict__["_max_scale"]

    def taps(self) -> torch.Tensor:
        """int64 [N, 2] (y, x): filter taps per axis each sample needs: ceil(2 R s), or 1 for
        nearest. Taps sit strictly inside (u - R s, u + R s) around the source point (the
        filters vanish at +-R)."""
        from .filters import SUPPORT

        if self.interpolation == "nearest":
            return torch.ones(len(self), 2, dtype=torch.int64)
        r = SUPPORT[self.interpolation]
        taps = np.ceil(2 * r * self.max_scale().numpy() - 1e-9).astype(np.int64)
        return torch.from_numpy(np.maximum(taps, 1))

    def packed(self) -> torch.Tensor:
        """float64 [N, 21]: inverse (9), image h, w, origin y, x, clip y0, x0, y1, x1,
        max scale y, x, taps y, x. One row per sample for kernels."""
        return torch.from_numpy(self.packed_np())

    def packed_np(self) -> np.ndarray:
        """`packed` as numpy (what the kernel's upload takes: no torch CPU op on the way)."""
        n = len(self)
        # numpy: once per batch on the planning thread (torch's cat and casts cost twice as much)
        host = lambda t: t.detach().cpu().numpy().reshape(n, -1)
        return np.concatenate([host(self.inverse), host(self.image_size), host(self.origin),
                               host(self.clip), host(self.max_scale()), host(self.taps())], 1, dtype=np.float64)


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
