"""Random geometric ops expressed as matrices: flips, rotations (any angle, or quarter turns),
affine and perspective warps, and Warp for a user's own per-sample matrix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from .checks import BORDERS, INTERPOLATIONS, check_choice, check_fill, check_prob, check_range, check_size
from .kinds import GeometryOp, Op, Params
from .matrices import affine, host

__all__ = ["RandomFlip", "RandomRotate", "RandomRotate90", "RandomAffine", "RandomPerspective", "Warp"]


class _Warping(GeometryOp):
    def _common(self, interpolation: str | None, border: str | None, fill: Any) -> None:
        self.interpolation = check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.border = check_choice("border", border, BORDERS)
        self.fill = check_fill(fill)


def _about_centre(linear: np.ndarray, sizes: np.ndarray, out_sizes: np.ndarray | None = None,
                  shift: np.ndarray | None = None) -> np.ndarray:
    """Apply 2x2 linear maps ([N, 2, 2]) about the image centre; the centre lands on the
    output centre (plus `shift`, [N, 2] (x, y), when given)."""
    hw = sizes
    ohw = hw if out_sizes is None else out_sizes
    cy, cx = hw[:, 0] / 2, hw[:, 1] / 2
    oy, ox = ohw[:, 0] / 2, ohw[:, 1] / 2
    if shift is not None:
        ox, oy = ox + shift[:, 0], oy + shift[:, 1]
    a, b, c, d = linear[:, 0, 0], linear[:, 0, 1], linear[:, 1, 0], linear[:, 1, 1]
    # translate(o) @ linear @ translate(-centre)
    return affine(len(a), a, b, ox - (a * cx + b * cy), c, d, oy - (c * cx + d * cy))


def _rotation(deg: np.ndarray) -> np.ndarray:
    """[N, 2, 2] numpy rotations by `deg` degrees, counter-clockwise on screen (y points down)."""
    a = np.deg2rad(deg)
    c, s = np.cos(a), np.sin(a)
    return np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)


class RandomFlip(GeometryOp):
    """Mirror each image left-right with probability `horizontal`, top-bottom with `vertical`."""

    draws = 2

    def __init__(self, horizontal: float = 0.5, vertical: float = 0.0) -> None:
        self.horizontal = check_prob("horizontal", horizontal)
        self.vertical = check_prob("vertical", vertical)

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        return {"horizontal": draws.bernoulli_np(0, self.horizontal), "vertical": draws.bernoulli_np(1, self.vertical)}

    def eval_form(self, style: str) -> list[Op]:
        """An axis flipped with probability 1 is no random choice: it is kept."""
        h, v = self.horizontal == 1.0, self.vertical == 1.0
        return [RandomFlip(float(h), float(v))] if h or v else []

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, v = params["horizontal"], params["vertical"]
        m = affine(len(h), a=np.where(h, -1.0, 1.0), tx=np.where(h, sizes[:, 1], 0.0),
                   d=np.where(v, -1.0, 1.0), ty=np.where(v, sizes[:, 0], 0.0))
        return m, sizes


class RandomRotate(_Warping):
    """Rotate by an angle uniform in `degrees` (one number d means (-d, d)), counter-clockwise for
    positive angles, about the image centre, with probability p.

    expand=False keeps the size (corners are cut, uncovered areas get the border); expand=True
    grows the output to hold the whole rotated image (sizes then differ between samples, so a
    later Resize or crop is needed for a batched tensor).
    """

    def __init__(self, degrees: float | tuple[float, float], p: float = 1.0, expand: bool = False,
                 interpolation: str | None = None, border: str | None = None, fill: Any = None) -> None:
        self.degrees = check_range("degrees", degrees, symmetric_from=0.0)
        self.p = check_prob("p", p)
        self.expand = bool(expand)
        self._common(interpolation, border, fill)

    draws = 2

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        angle = draws.uniform_np(0, *self.degrees).astype(np.float64)
        return {"angle": np.where(draws.bernoulli_np(1, self.p), angle, 0.0)}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rot = _rotation(params["angle"])
        out = sizes
        if self.expand:
            c, s = np.abs(rot[:, 0, 0]), np.abs(rot[:, 0, 1])
            h, w = sizes[:, 0], sizes[:, 1]
            out = np.stack([np.ceil(w * s + h * c - 1e-6), np.ceil(w * c + h * s - 1e-6)], 1)
        return _about_centre(rot, sizes, out), out


# cos and sin of k quarter turns, exact (np.cos(np.pi / 2) is 6e-17, not 0)
_QUARTER_COS = np.array([1.0, 0.0, -1.0, 0.0])
_QUARTER_SIN = np.array([0.0, 1.0, 0.0, -1.0])


class RandomRotate90(GeometryOp):
    """Turn each image by k quarter turns counter-clockwise, k uniform in 0..3, with
    probability p (albumentations' RandomRotate90; numpy's rot90(image, k)).

    A quarter turn maps pixel centres onto pixel centres, so the warp reads each output pixel
    from exactly one input pixel: the result is exact with any interpolation (tested), and
    boxes, keypoints and masks turn with it. An odd k swaps the height and the width: images
    that are not square then differ in size within a batch, which a batch tensor cannot hold,
    so a fixed-size geometric op must follow in the same stage (a Resize((h, w)),
    RandomResizedCrop or CenterCrop: their matrices fold into one warp) or the images must be
    square; otherwise the Compose raises an error saying so.

    Example: ``RandomRotate90(p=0.75)`` on square tiles (aerial and microscopy images).
    """

    draws = 2

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_prob("p", p)

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        k = draws.choice_np(1, 4)
        return {"k": np.where(draws.bernoulli_np(0, self.p), k, 0)}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = params["k"]
        c, s = _QUARTER_COS[k], _QUARTER_SIN[k]
        linear = np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)  # as _rotation, exact
        out = np.where((k % 2 == 1)[:, None], sizes[:, ::-1], sizes)
        return _about_centre(linear, sizes, out), out


class RandomAffine(_Warping):
    """Random rotation, translation, scale and shear about the image centre, with probability p.

    Args:
        degrees: angle range in degrees (one number d -> (-d, d)).
        translate: (a, b): shifts uniform in (-a*width, a*width) and (-b*height, b*height).
        scale: (low, high) zoom factor range.
        shear: degrees; d -> x shear in (-d, d); (lo, hi) -> x shear; (xlo, xhi, ylo, yhi) ->
            both. The linear part is rotation @ shear @ scale, with
            shear = [[1, tan(sx)], [tan(sy), 1]].
    """

    def __init__(self, degrees: float | tuple[float, float] = 0, translate: tuple[float, float] | None = None,
                 scale: tuple[float, float] | None = None, shear: Any = None, p: float = 1.0,
                 interpolation: str | None = None, border: str | None = None, fill: Any = None) -> None:
        self.degrees = check_range("degrees", degrees, symmetric_from=0.0)
        if translate is not None:
            try:
                a, b = (float(v) for v in translate)
            except (TypeError, ValueError):
                raise ValueError(f"translate must be an (a, b) pair of fractions, got {translate!r}") from None
            if not (0.0 <= a <= 1.0 and 0.0 <= b <= 1.0):
                raise ValueError(f"translate fractions must be in [0, 1], got {translate}")
            translate = (float(a), float(b))
        self.translate = translate
        self.scale = None if scale is None else check_range("scale", scale, 0.0)
        if self.scale is not None and self.scale[0] <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.shear = self._shear(shear)
        self.p = check_prob("p", p)
        self._common(interpolation, border, fill)

    @staticmethod
    def _shear(shear: Any) -> tuple[float, float, float, float] | None:
        if shear is None:
            return None
        if isinstance(shear, (int, float)):
            lo, hi = check_range("shear", shear, -90.0, 90.0, symmetric_from=0.0)
            return (lo, hi, 0.0, 0.0)
        shear = tuple(shear)
        if len(shear) == 2:
            return (*check_range("shear", shear, -90.0, 90.0), 0.0, 0.0)
        if len(shear) == 4:
            return (*check_range("shear x", shear[:2], -90.0, 90.0), *check_range("shear y", shear[2:], -90.0, 90.0))
        raise ValueError(f"shear must be a number, 2 or 4 numbers (degrees), got {shear!r}")

    draws = 7
    PARAMS = ("angle", "tx", "ty", "scale", "shear_x", "shear_y")

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        f64 = np.float64
        on = draws.bernoulli_np(0, self.p)
        angle = draws.uniform_np(1, *self.degrees).astype(f64)
        zero = np.zeros_like(angle)
        tx = ty = zero
        if self.translate is not None:
            tx = np.round(draws.uniform_np(2, -1.0, 1.0).astype(f64) * self.translate[0] * sizes[:, 1])
            ty = np.round(draws.uniform_np(3, -1.0, 1.0).astype(f64) * self.translate[1] * sizes[:, 0])
        zoom = np.ones_like(angle) if self.scale is None else draws.uniform_np(4, *self.scale).astype(f64)
        shx = shy = zero
        if self.shear is not None:
            shx = draws.uniform_np(5, self.shear[0], self.shear[1]).astype(f64)
            shy = draws.uniform_np(6, self.shear[2], self.shear[3]).astype(f64)
        keep = lambda v, base: np.where(on, v, base)
        return {"angle": keep(angle, zero), "tx": keep(tx, zero), "ty": keep(ty, zero),
                "scale": keep(zoom, 1.0), "shear_x": keep(shx, zero), "shear_y": keep(shy, zero)}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = np.deg2rad(params["angle"])
        c, s = np.cos(a), np.sin(a)
        kx, ky = np.tan(np.deg2rad(params["shear_x"])), np.tan(np.deg2rad(params["shear_y"]))
        z = params["scale"]
        # rotation [[c, s], [-s, c]] @ shear [[1, kx], [ky, 1]], times the scale, written out
        # (a stacked matmul may go through BLAS, whose roundings the C planner could not repeat)
        linear = np.empty((len(z), 2, 2))
        linear[:, 0, 0], linear[:, 0, 1] = (c + s * ky) * z, (c * kx + s) * z
        linear[:, 1, 0], linear[:, 1, 1] = (c * ky - s) * z, (c - s * kx) * z
        shift = np.stack([params["tx"], params["ty"]], 1)
        return _about_centre(linear, sizes, shift=shift), sizes


def homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """float64 [N, 3, 3] matrices mapping 4 points src [N, 4, 2] onto dst [N, 4, 2] (x, y)."""
    n = src.shape[0]
    a = np.zeros((n, 8, 8))
    b = np.zeros((n, 8))
    x, y = src[..., 0], src[..., 1]
    u, v = dst[..., 0], dst[..., 1]
    a[:, 0::2, 0], a[:, 0::2, 1], a[:, 0::2, 2] = x, y, 1.0
    a[:, 0::2, 6], a[:, 0::2, 7] = -u * x, -u * y
    a[:, 1::2, 3], a[:, 1::2, 4], a[:, 1::2, 5] = x, y, 1.0
    a[:, 1::2, 6], a[:, 1::2, 7] = -v * x, -v * y
    b[:, 0::2], b[:, 1::2] = u, v
    h = np.linalg.solve(a, b[..., None])[..., 0] if n else b
    return np.concatenate([h, np.ones((n, 1))], 1).reshape(n, 3, 3)


class RandomPerspective(_Warping):
    """A random perspective warp with probability p: each corner moves inwards by up to
    `distortion` times half the image's width and height (torchvision's definition)."""

    def __init__(self, distortion: float = 0.5, p: float = 0.5, interpolation: str | None = None,
                 border: str | None = None, fill: Any = None) -> None:
        distortion = float(distortion)
        if not 0.0 <= distortion <= 1.0:
            raise ValueError(f"distortion must be in [0, 1], got {distortion}")
        self.distortion = distortion
        self.p = check_prob("p", p)
        self._common(interpolation, border, fill)

    draws = 9

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        on = draws.bernoulli_np(0, self.p)
        moves = draws.uniforms_np(range(1, 9)).astype(np.float64) * on[:, None] * self.distortion
        return {"moves": moves.reshape(-1, 4, 2)}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = sizes[:, 0], sizes[:, 1]
        zero = np.zeros_like(h)
        corners = np.stack([np.stack([zero, zero], 1), np.stack([w, zero], 1),
                            np.stack([w, h], 1), np.stack([zero, h], 1)], 1)
        inward = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.float64)
        half = np.stack([w, h], 1)[:, None, :] / 2
        moved = corners + inward * params["moves"] * half
        return homography(corners, moved), sizes


class Warp(_Warping):
    """Any per-sample warp from a few lines of plain PyTorch.

    Args:
        matrix_fn: called as ``matrix_fn(sizes, draws)`` with sizes a float64 [N, 2] tensor of
            (height, width) and draws a `pixelpipe.data.random.Draws` (``draws.uniform(k, lo, hi)``
            gives a per-sample [N] tensor); returns [N, 3, 3] forward matrices mapping input
            pixel coordinates (x, y, 1) to output coordinates.
        size: output (height, width); None keeps each image's size.

    Example: a random shear per image::

        def shear(sizes, draws):
            m = torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1)
            m[:, 0, 1] = draws.uniform(0, -0.2, 0.2)
            return m
        Warp(shear)

    In an evaluation Compose a Warp is kept as it is: pixelpipe cannot tell whether its
    function is random (one that uses its `draws` stays random there).
    """

    deterministic = True

    def __init__(self, matrix_fn: Callable[[torch.Tensor, Draws], torch.Tensor],
                 size: int | tuple[int, int] | None = None, interpolation: str | None = None,
                 border: str | None = None, fill: Any = None) -> None:
        if not callable(matrix_fn):
            raise ValueError(f"matrix_fn must be callable, got {type(matrix_fn).__name__}")
        self.matrix_fn = matrix_fn
        self.size = None if size is None else tuple(int(v) for v in check_size("size", size))
        self._common(interpolation, border, fill)

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        # the user's function gets tensors (its own copy of the sizes)
        m = host(self.matrix_fn(torch.tensor(sizes, dtype=torch.float64), draws))
        if m.shape != (sizes.shape[0], 3, 3):
            raise ValueError(f"Warp's matrix_fn returned shape {tuple(m.shape)}, expected ({sizes.shape[0]}, 3, 3)")
        finite = np.isfinite(m).reshape(len(m), 9).all(1)
        if not finite.all():
            bad = int(np.argmin(finite))
            raise ValueError(f"Warp's matrix_fn returned a non-finite matrix for sample {int(draws.indices[bad])}")
        return {"matrix": m}

    def transform(self, params: Params, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = sizes if self.size is None else np.broadcast_to(np.array(self.size, dtype=np.float64), sizes.shape)
        return params["matrix"], out
