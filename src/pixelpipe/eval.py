"""The evaluation form of a training Compose: the same ops, made deterministic.

Training and serving should preprocess identically: the same decoder, the same resampling
filters, the same normalisation, with the random parts taken out. `eval_form(train)` builds that
Compose from the training one, op by op:

========================================  =================================================
training op                               evaluation form
========================================  =================================================
RandomResizedCrop(size, ratio=r)          CenterResizedCrop(size, r): the centred window of
                                          the whole image with its aspect ratio clamped into
                                          r, resized to size (the op's own fallback window)
RandomResizedCrop, style="imagenet"       Resize(round(max(size) * 256 / 224)) then
                                          CenterCrop(size)
RandomFlip, RandomRotate, RandomAffine,   dropped (a RandomFlip axis or a RandomGrayscale
RandomPerspective, RandomGrayscale,       with probability 1 is no random choice: it is kept)
ColorJitter
Resize, Crop, CenterCrop, Pad, Normalize, kept as they are
Lambda, Warp
========================================  =================================================

Warp and Lambda are kept as they are: pixelpipe cannot tell whether a user's function is
random. A Warp whose matrix_fn uses its `draws` stays random in the evaluation form (its draws
still depend on seed, epoch and index); write an evaluation Compose by hand for such a list.
An op of your own can say what it becomes by defining ``eval_form(self, style) -> list[Op]``
(an empty list drops it).

`preprocess(compose, image)` runs the evaluation form on one image (an HWC uint8 array or
tensor, a PIL image, or the encoded bytes of a file) and returns one image tensor; calling the
evaluation Compose on a list does the same to a batch, row by row identically.

Example:
    >>> import torch, pixelpipe as pp
    >>> from pixelpipe.eval import eval_form, preprocess
    >>> train = pp.Compose([pp.RandomResizedCrop(224), pp.RandomFlip(),
    ...                     pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    >>> val = eval_form(train)
    >>> [type(op).__name__ for op in val.ops]
    ['CenterResizedCrop', 'Normalize']
    >>> preprocess(train, torch.zeros(300, 400, 3, dtype=torch.uint8)).shape
    torch.Size([3, 224, 224])
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import numpy as np
import torch

from .compose import Compose
from .ops import (
    CenterCrop,
    ColorJitter,
    Crop,
    Lambda,
    Normalize,
    Pad,
    RandomAffine,
    RandomFlip,
    RandomGrayscale,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotate,
    Resize,
    Warp,
)
from .ops._base import (
    INTERPOLATIONS,
    GeometryOp,
    Op,
    Params,
    affine,
    check_choice,
    check_range,
    check_size,
)

__all__ = ["CenterResizedCrop", "eval_form", "preprocess"]

STYLES = ("center", "imagenet")
IMAGENET_CROP = 224 / 256  # the crop keeps 224/256 of the resized shorter side

_KEPT = (Resize, Crop, Pad, Normalize, Lambda, Warp)  # Crop covers CenterCrop
_DROPPED = (RandomRotate, RandomAffine, RandomPerspective, ColorJitter)
_EVAL_FORMS: weakref.WeakSet[Compose] = weakref.WeakSet()  # Composes made here
_CACHE: weakref.WeakKeyDictionary[Compose, Compose] = weakref.WeakKeyDictionary()


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


def eval_form(compose: Compose, style: str = "center") -> Compose:
    """The evaluation Compose of `compose`: its random ops replaced by their deterministic
    counterparts (see the module docstring), with the same output and running settings
    (dtype, layout, channels, antialias, threads, device, max_pixels and the rest of the
    Compose's arguments).

    Args:
        compose: a training Compose (an evaluation form is returned unchanged in content).
        style: "center" (RandomResizedCrop -> CenterResizedCrop, the same framing as its
            fallback window) or "imagenet" (RandomResizedCrop(size) -> Resize of the shorter
            side to round(max(size) * 256 / 224) then CenterCrop(size), the usual ImageNet
            validation transform).

    Raises:
        ValueError: an unknown style.
        TypeError: an op this function does not know and that has no `eval_form` method.
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(map(repr, STYLES))}, got {style!r}")
    if not isinstance(compose, Compose):
        raise TypeError(f"eval_form needs a Compose, got {type(compose).__name__}")
    ops: list[Op] = []
    for i, op in enumerate(compose.ops):
        ops.extend(_counterpart(i, op, style))
    out = Compose(ops, **_settings(compose))
    _EVAL_FORMS.add(out)
    return out


def _settings(compose: Compose) -> dict[str, Any]:
    """The Compose's constructor arguments other than the ops (dtype, layout, channels, device,
    threads, ...), read back from the attributes of the same names."""
    names = [n for n in inspect.signature(Compose.__init__).parameters if n not in ("self", "ops")]
    return {n: getattr(compose, n) for n in names if hasattr(compose, n)}


def _counterpart(i: int, op: Op, style: str) -> list[Op]:
    hook = getattr(op, "eval_form", None)
    if callable(hook):
        ops = list(hook(style))
        for k, o in enumerate(ops):
            if not isinstance(o, Op):
                raise TypeError(f"ops[{i}] ({type(op).__name__}).eval_form returned {type(o).__name__} "
                                f"at position {k}, not a pixelpipe op")
        return ops
    if isinstance(op, RandomResizedCrop):
        if style == "imagenet":
            short = round(max(op.size) / IMAGENET_CROP)
            return [Resize(short, interpolation=op.interpolation), CenterCrop(op.size)]
        return [CenterResizedCrop(op.size, op.ratio, op.interpolation)]
    if isinstance(op, RandomFlip):
        h, v = op.horizontal == 1.0, op.vertical == 1.0
        return [RandomFlip(float(h), float(v))] if h or v else []
    if isinstance(op, RandomGrayscale):
        return [op] if op.p == 1.0 else []
    if isinstance(op, _DROPPED):
        return []
    if isinstance(op, (*_KEPT, CenterResizedCrop)):
        return [op]
    raise TypeError(f"eval_form does not know ops[{i}] ({type(op).__name__}): build the evaluation "
                    f"Compose yourself, or give {type(op).__name__} a method eval_form(self, style) "
                    "returning the ops it becomes (an empty list drops it)")


def preprocess(compose: Compose, image: Any) -> torch.Tensor:
    """One image through the evaluation form of `compose`: the row a batch would give.

    Args:
        compose: a training Compose (its evaluation form, style "center", is built once and
            cached) or an evaluation Compose made by `eval_form` (used as it is).
        image: an HWC (or HW) uint8 numpy array or tensor with 1, 3 or 4 channels, a PIL image
            (EXIF orientation applied, converted as decoded files are), or the encoded bytes of
            a JPEG, PNG, WebP or BMP file (decoded as the training pipeline decodes them).

    Returns:
        one image: [C, H, W] for an NCHW Compose ([H, W, C] for NHWC) in its dtype, on its
        device (or the input tensor's device when the Compose has none).
    """
    if not isinstance(compose, Compose):
        raise TypeError(f"preprocess needs a Compose, got {type(compose).__name__}")
    if compose in _EVAL_FORMS:
        ev = compose
    else:
        ev = _CACHE.get(compose)
        if ev is None:
            ev = _CACHE[compose] = eval_form(compose)
    return ev([_one_image(image)])[0]


def _one_image(image: Any) -> Any:
    if isinstance(image, (bytes, bytearray, memoryview)):
        return image
    if isinstance(image, (np.ndarray, torch.Tensor)):
        shape = tuple(image.shape)
        if len(shape) == 3 and shape[0] in (1, 3) and shape[2] not in (1, 2, 3, 4):
            raise ValueError(f"the image has shape {shape}, which looks like CHW; pass HWC "
                             "(tensor.permute(1, 2, 0))")
        if len(shape) == 4:
            raise ValueError(f"preprocess takes one image, got shape {shape}; call the evaluation "
                             "Compose on a list of images for a batch")
        return image
    from PIL import Image, ImageOps

    if isinstance(image, Image.Image):
        from .decode.cpu import _to_array

        return _to_array(ImageOps.exif_transpose(image), rgb=False)
    raise TypeError(f"preprocess takes an HWC uint8 array or tensor, a PIL image or encoded bytes, "
                    f"got {type(image).__name__}")
