"""The evaluation form of a training Compose: the same ops, made deterministic.

Training and serving should preprocess identically: the same decoder, the same resampling
filters, the same normalisation, with the random parts taken out. `train.eval()` builds that
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
ColorJitter and every other random op
Resize, Crop, CenterCrop, Pad, Normalize, kept as they are
Lambda, Warp
========================================  =================================================

Warp and Lambda are kept as they are: pixelpipe cannot tell whether a user's function is
random. A Warp whose matrix_fn uses its `draws` stays random in the evaluation form (its draws
still depend on seed, epoch and index); write an evaluation Compose by hand for such a list.
Each op says what it becomes through its ``eval_form(self, style) -> list[Op]`` (an empty list
drops it); an op of your own defines it, or sets ``deterministic = True`` to be kept.

`FiveCrop` and `TenCrop` give several fixed views of each image, for test-time averaging. They
are not ops: an op maps each sample to one output (the plan holds one matrix per sample, and
targets, indices and batch ops follow samples one to one), where a five-crop maps each image to
five. So each view is its own Compose ([*before, Crop(size, anchor), *after]: one warp per
view, the crop folded with the ops around it, each view decoding only its window from encoded
images), and the views are stacked along a new dimension 1: [N, 5, C, h, w] for NCHW
([N, 5, h, w, C] for NHWC), what torchvision users get from ``torch.stack(FiveCrop(size)(image))``
per image, batched.

`preprocess(compose, image)` runs the evaluation form on one image (an HWC uint8 array or
tensor, a PIL image, or the encoded bytes of a file) and returns one image tensor; calling the
evaluation Compose on a list does the same to a batch, row by row identically.

Example:
    >>> import torch, pixelpipe as pp
    >>> from pixelpipe.eval import preprocess
    >>> train = pp.Compose([pp.RandomResizedCrop(224), pp.RandomFlip(),
    ...                     pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    >>> val = train.eval()
    >>> [type(op).__name__ for op in val.ops]
    ['CenterResizedCrop', 'Normalize']
    >>> preprocess(train, torch.zeros(300, 400, 3, dtype=torch.uint8)).shape
    torch.Size([3, 224, 224])
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .compose import Compose
from .ops.crop import CenterResizedCrop, Crop
from .ops.geometry import RandomFlip
from .ops.kinds import EVAL_STYLES as STYLES
from .ops.kinds import Op

__all__ = ["CenterResizedCrop", "FiveCrop", "STYLES", "TenCrop", "eval_form", "preprocess"]

_CACHE: weakref.WeakKeyDictionary[Compose, Compose] = weakref.WeakKeyDictionary()


def eval_form(compose: Compose, style: str = "center") -> Compose:
    """The evaluation Compose of `compose` (Compose.eval): its random ops replaced by their
    deterministic counterparts (see the module docstring), with the same output form.

    Args:
        compose: a training Compose (an evaluation form is returned unchanged in content).
        style: "center" (RandomResizedCrop -> CenterResizedCrop, the same framing as its
            fallback window) or "imagenet" (RandomResizedCrop(size) -> Resize of the shorter
            side to round(max(size) * 256 / 224) then CenterCrop(size), the usual ImageNet
            validation transform).

    Raises:
        ValueError: an unknown style.
        TypeError: an op that does not say what it becomes (no `eval_form`, not deterministic).
    """
    if not isinstance(compose, Compose):
        raise TypeError(f"eval_form needs a Compose, got {type(compose).__name__}")
    return compose.eval(style)


def preprocess(compose: Compose, image: Any) -> torch.Tensor:
    """One image through the evaluation form of `compose`: the row a batch would give.

    Args:
        compose: a Compose; its evaluation form (style "center") is built once and cached.
            An evaluation form's own evaluation form is itself, so one made by `Compose.eval`
            or `eval_form` gives the same rows.
        image: an HWC (or HW) uint8 numpy array or tensor with 1, 3 or 4 channels, a PIL image
            (EXIF orientation applied, converted as decoded files are), or the encoded bytes of
            a JPEG, PNG, WebP or BMP file (decoded as the training pipeline decodes them).

    Returns:
        one image: [C, H, W] for an NCHW Compose ([H, W, C] for NHWC) in its dtype, on the
        input tensor's device (the CPU for encoded bytes and PIL images).
    """
    if not isinstance(compose, Compose):
        raise TypeError(f"preprocess needs a Compose, got {type(compose).__name__}")
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
        from .decode.cpu import pil_to_array

        return pil_to_array(ImageOps.exif_transpose(image), rgb=False)
    raise TypeError(f"preprocess takes an HWC uint8 array or tensor, a PIL image or encoded bytes, "
                    f"got {type(image).__name__}")


# torchvision's five_crop order: top-left, top-right, bottom-left, bottom-right, centre
ANCHORS = ((0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (0.5, 0.5))


class FiveCrop:
    """The four corner crops and the centre crop of each image (torchvision's FiveCrop),
    stacked: [N, 5, C, h, w].

    Args:
        size: the crops' (height, width); one int is a square.
        before: deterministic ops applied before cropping (a Resize(256), say).
        after: ops applied to each crop (Normalize, say).
        **output: the Compose's output form (dtype, layout, channels, antialias).

    Corners sit at the image's corners, the centre crop at round((H - h) / 2), round((W - w) /
    2) as torchvision's center_crop (tested, 0 levels apart). An image smaller than a crop is
    padded by the stage's border (black), where torchvision raises. Called like a Compose:
    ``FiveCrop(224, before=[Resize(256)])(images)``; images only (no targets).
    """

    def __init__(self, size: int | tuple[int, int], before: Sequence[Op] = (), after: Sequence[Op] = (),
                 **output: Any) -> None:
        self.size = size
        self.views = [Compose([*before, Crop(size, anchor), *after], **output) for anchor in ANCHORS]

    def __call__(self, images: Any, seed: int = 0, epoch: int = 0, indices: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.stack([view(images, seed, epoch, indices, **kwargs) for view in self.views], 1)

    def __len__(self) -> int:
        return len(self.views)


class TenCrop(FiveCrop):
    """FiveCrop's five crops, then the five crops of the image flipped left-right (top-bottom
    with vertical_flip=True), as torchvision's TenCrop: [N, 10, C, h, w]. The flip is a matrix
    folded with the crop: each view is still one warp."""

    def __init__(self, size: int | tuple[int, int], vertical_flip: bool = False, before: Sequence[Op] = (),
                 after: Sequence[Op] = (), **output: Any) -> None:
        super().__init__(size, before, after, **output)
        flip = RandomFlip(0.0, 1.0) if vertical_flip else RandomFlip(1.0, 0.0)
        self.views += [Compose([*before, flip, Crop(size, anchor), *after], **output) for anchor in ANCHORS]
