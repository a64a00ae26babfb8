"""Ready-made transform lists: plain `Compose` objects to print, adapt and hand to a Pipeline.

Each preset is a function returning an ordinary `Compose`; nothing about it is special.
``print(t)`` lists its ops with every argument, ``print(t.plan())`` the fused passes, and
``t.ops`` is a plain list to edit and wrap again::

    >>> import pixelpipe as pp
    >>> from pixelpipe import presets
    >>> t = presets.imagenet_train(size=160)
    >>> [type(op).__name__ for op in t.ops]
    ['RandomResizedCrop', 'RandomFlip', 'Normalize']
    >>> t2 = pp.Compose(t.ops[:2] + [pp.ColorJitter(0.2, 0.2)] + t.ops[2:], dtype=t.dtype)

Every preset outputs float32 NCHW tensors normalised with the ImageNet mean and std unless its
arguments say otherwise: `dtype` (uint8, float16, bfloat16, float32), `layout` ("NCHW" or
"NHWC"), `normalize` (None: normalise unless dtype is uint8, whose range cannot hold normalised
values) and `mean`/`std` (0..1 units, as torchvision's Normalize).

`PRESETS` maps each name to its function (the `--transforms` names of `pixelpipe show`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .compose import Compose
from .ops import (
    CenterCrop,
    ColorJitter,
    GaussianBlur,
    LetterBox,
    Mosaic,
    Normalize,
    Op,
    RandomAffine,
    RandomErasing,
    RandomFlip,
    RandomGrayscale,
    RandomHSV,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotate,
    Resize,
    TimmRandAugment,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "PRESETS",
    "deit",
    "fastai_like",
    "heavy",
    "imagenet_train",
    "imagenet_val",
    "light",
    "simclr",
    "yolo",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _finish(ops: list[Op], dtype: torch.dtype, layout: str, normalize: bool | None,
            mean: Sequence[float], std: Sequence[float], after: list[Op] | None = None) -> Compose:
    """Append Normalize as asked, then `after` (ops that work on the normalised values), and
    build the Compose (which checks dtype and layout)."""
    if normalize is None:
        normalize = dtype != torch.uint8
    if normalize:
        if dtype == torch.uint8:
            raise ValueError("normalize=True needs a float dtype (float32, float16 or bfloat16); "
                             "with dtype=torch.uint8 pass normalize=False and normalise later")
        ops = ops + [Normalize(mean, std)]
    return Compose(ops + (after or []), dtype=dtype, layout=layout)


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int (the output side in pixels), got {size!r}")
    return size


def imagenet_train(size: int = 224, scale: tuple[float, float] = (0.08, 1.0), *,
                   dtype: torch.dtype = torch.float32, layout: str = "NCHW",
                   normalize: bool | None = None, mean: Sequence[float] = IMAGENET_MEAN,
                   std: Sequence[float] = IMAGENET_STD) -> Compose:
    """The standard ImageNet training recipe: random resized crop, horizontal flip, normalise.

    A window of 8% to 100% of the image area (`scale`) with an aspect ratio in [3/4, 4/3] is
    resized to size x size, and flipped left-right with probability 0.5. This is torchvision's
    ResNet reference recipe and `pixelpipe bench --pipeline rn50`; DALI's ResNet-50 example
    does the same (with area 10-100% and ratio 0.8-1.25).

    When to use it: training a classifier from scratch on ImageNet-like photographs, and as the
    baseline other recipes are compared with. For fine-tuning on a small dataset prefer
    `light`; for long schedules where the model overfits, `heavy`.

    Example:
        >>> imagenet_train(224, dtype=torch.float16, layout="NHWC").dtype
        torch.float16
    """
    size = _check_size(size)
    ops: list[Op] = [RandomResizedCrop(size, scale=scale), RandomFlip(horizontal=0.5)]
    return _finish(ops, dtype, layout, normalize, mean, std)


def imagenet_val(size: int = 224, crop_fraction: float = 0.875, *,
                 dtype: torch.dtype = torch.float32, layout: str = "NCHW",
                 normalize: bool | None = None, mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD) -> Compose:
    """The standard evaluation transform: resize the shorter side, take the centre, normalise.

    The shorter side is resized to round(size / crop_fraction) (256 for size 224), then the
    central size x size square is kept. Nothing is random: every epoch and seed give the same
    tensor.

    When to use it: validation, test and inference of models trained with `imagenet_train`,
    `light` or `heavy`. Match `crop_fraction` to the model's (timm calls it crop_pct; 0.875
    for most torchvision ResNets, 0.9 to 1.0 for many newer models).

    Example:
        >>> [type(op).__name__ for op in imagenet_val(224).ops]
        ['Resize', 'CenterCrop', 'Normalize']
    """
    size = _check_size(size)
    if not 0.0 < crop_fraction <= 1.0:
        raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
    ops: list[Op] = [Resize(round(size / crop_fraction)), CenterCrop(size)]
    return _finish(ops, dtype, layout, normalize, mean, std)


def fastai_like(size: int = 224, mult: float = 1.0, *, dtype: torch.dtype = torch.float32,
                layout: str = "NCHW", normalize: bool | None = None,
                mean: Sequence[float] = IMAGENET_MEAN,
                std: Sequence[float] = IMAGENET_STD) -> Compose:
    """fast.ai's default augmentation, `aug_transforms()`, on the central square of each image.

    The defaults of fastai's aug_transforms: a horizontal flip with probability 0.5; a
    perspective warp of magnitude 0.2 (max_warp), a rotation of up to 10 degrees (max_rotate)
    and a zoom of 1 to 1.1 (max_zoom), each applied with probability 0.75 (p_affine);
    brightness and contrast changes of 0.2 (max_lighting), each with probability 0.75
    (p_lighting). Uncovered areas are filled by reflection, as fastai's pad_mode="reflection"
    does; because pixelpipe resamples once from the source, rotations near the crop read the
    real pixels around it and only the image's own edges are mirrored. `mult` scales the
    rotation, warp and lighting magnitudes, as fastai's `mult`.

    The image first becomes its central size x size square (`Resize(size)`, `CenterCrop(size)`),
    like fastai's usual item transform `Resize(size)`. Differences from fastai, all within the
    same magnitudes: the warp moves each corner independently (torchvision's perspective)
    where fastai tilts two opposite edges; the zoom is about the image centre, not a random
    point; brightness multiplies pixel values where fastai shifts them in logit space, and
    the contrast factor is uniform in [0.8, 1.25] where fastai draws it log-uniformly.

    When to use it: fine-tuning a pretrained model the way fast.ai courses do, or comparing
    with a fastai run. The central crop keeps the subject; pair with `imagenet_val(size,
    crop_fraction=1.0)` for evaluation.

    Example:
        >>> t = fastai_like(224)
        >>> print(t.plan())  # doctest: +ELLIPSIS
        Plan: 9 ops -> 1 stage(s); output NCHW float32, 3 channel(s)
          stage 0: warp[Resize, CenterCrop, RandomFlip, RandomPerspective, RandomRotate, ...
    """
    size = _check_size(size)
    if not mult >= 0:
        raise ValueError(f"mult must be >= 0, got {mult}")
    rotate, lighting, warp = 10.0 * mult, 0.2 * mult, 0.2 * mult
    if warp > 1.0 or lighting >= 1.0:
        raise ValueError(f"mult={mult} makes the warp ({warp}) exceed 1 or the lighting ({lighting}) reach 1")
    p_affine, p_lighting = 0.75, 0.75
    ops: list[Op] = [
        Resize(size),
        CenterCrop(size),
        RandomFlip(horizontal=0.5),
        RandomPerspective(distortion=warp, p=p_affine),
        RandomRotate(rotate, p=p_affine, border="reflect"),
        RandomAffine(scale=(1.0, 1.1), p=p_affine),
        ColorJitter(brightness=lighting, p=p_lighting),
        ColorJitter(contrast=(1.0 - lighting, 1.0 / (1.0 - lighting)), p=p_lighting),
    ]
    return _finish(ops, dtype, layout, normalize, mean, std)


def light(size: int = 224, *, dtype: torch.dtype = torch.float32, layout: str = "NCHW",
          normalize: bool | None = None, mean: Sequence[float] = IMAGENET_MEAN,
          std: Sequence[float] = IMAGENET_STD) -> Compose:
    """Mild augmentation: a large random crop, a flip and a small brightness/contrast change.

    The window covers 35% to 100% of the image (aspect ratio 3/4 to 4/3), so the subject
    mostly stays in view; a left-right flip with probability 0.5; brightness and contrast
    factors in [0.9, 1.1] for half of the samples.

    When to use it: fine-tuning a pretrained model, small datasets, short schedules, or
    images whose subject must stay whole (centred products, documents; drop the flip where
    left and right matter, e.g. text).
    """
    size = _check_size(size)
    ops: list[Op] = [
        RandomResizedCrop(size, scale=(0.35, 1.0)),
        RandomFlip(horizontal=0.5),
        ColorJitter(brightness=0.1, contrast=0.1, p=0.5),
    ]
    return _finish(ops, dtype, layout, normalize, mean, std)


def heavy(size: int = 224, *, dtype: torch.dtype = torch.float32, layout: str = "NCHW",
          normalize: bool | None = None, mean: Sequence[float] = IMAGENET_MEAN,
          std: Sequence[float] = IMAGENET_STD) -> Compose:
    """Strong augmentation: `imagenet_train` plus affine and perspective warps and strong colour.

    Random resized crop (8-100% of the area) and a flip; for half of the samples a random
    affine warp (rotation up to 15 degrees, shift up to 10%, zoom 0.9-1.1, shear up to 10
    degrees; uncovered areas mirrored); a perspective warp (0.3) for 30%; colour jitter
    (brightness, contrast, saturation 0.4, hue 0.1) for 80% and grayscale for 20%, the colour
    strengths of SimCLR's views.

    When to use it: long schedules and large models that overfit with `imagenet_train`, and
    self-supervised or contrastive training where two views of an image must differ a lot.
    Too strong for short fine-tuning runs (use `light`).
    """
    size = _check_size(size)
    ops: list[Op] = [
        RandomResizedCrop(size),
        RandomFlip(horizontal=0.5),
        RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=10, p=0.5,
                     border="reflect"),
        RandomPerspective(distortion=0.3, p=0.3),
        ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1, p=0.8),
        RandomGrayscale(p=0.2),
    ]
    return _finish(ops, dtype, layout, normalize, mean, std)


def _odd(v: float) -> int:
    k = max(int(v), 1)
    return k if k % 2 else k + 1


def simclr(size: int = 224, strength: float = 1.0, blur: float = 0.5, *, dtype: torch.dtype = torch.float32,
           layout: str = "NCHW", normalize: bool | None = None, mean: Sequence[float] = IMAGENET_MEAN,
           std: Sequence[float] = IMAGENET_STD) -> Compose:
    """SimCLR's view (Chen et al. 2020, appendix A): a random resized crop (8-100% of the
    area) and a flip; colour jitter of brightness, contrast and saturation 0.8 * strength and
    hue 0.2 * strength for 80% of the samples; grayscale for 20%; a Gaussian blur with a kernel
    a tenth of the size (odd) and sigma uniform in (0.1, 2.0) for `blur` of them.

    `strength` is the paper's colour strength s (1.0 on ImageNet, 0.5 on CIFAR-10); `blur` is
    the blur's probability (0.5 in the paper; its CIFAR-10 setting leaves the blur out:
    blur=0). BYOL's second view adds a RandomSolarize(0.5, p=0.2) after the blur: edit the ops.
    Call the Compose twice with different seeds (or epochs) for the two views of a batch.

    When to use it: contrastive self-supervised pre-training (SimCLR, MoCo v2, BYOL), where
    two views of an image must differ a lot in colour and framing.

    Example:
        >>> [type(op).__name__ for op in simclr(224).ops]  # doctest: +NORMALIZE_WHITESPACE
        ['RandomResizedCrop', 'RandomFlip', 'ColorJitter', 'RandomGrayscale', 'GaussianBlur', 'Normalize']
    """
    size = _check_size(size)
    if not 0.0 <= strength <= 1.25:
        raise ValueError(f"strength must be in [0, 1.25] (hue 0.2 * strength stays within 0.25 turns), got {strength}")
    if not 0.0 <= blur <= 1.0:
        raise ValueError(f"blur must be a probability in [0, 1], got {blur}")
    s = strength
    ops: list[Op] = [
        RandomResizedCrop(size),
        RandomFlip(horizontal=0.5),
        ColorJitter(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s, p=0.8),
        RandomGrayscale(p=0.2),
    ]
    if blur > 0:
        ops.append(GaussianBlur(_odd(0.1 * size), sigma=(0.1, 2.0), p=blur))
    return _finish(ops, dtype, layout, normalize, mean, std)


def deit(size: int = 224, magnitude: float = 9.0, random_erasing: float = 0.25, *, dtype: torch.dtype = torch.float32,
         layout: str = "NCHW", normalize: bool | None = None, mean: Sequence[float] = IMAGENET_MEAN,
         std: Sequence[float] = IMAGENET_STD) -> Compose:
    """DeiT's training transform (Touvron et al. 2021, timm's create_transform with
    auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, re_mode="pixel", bicubic): a random
    resized crop (8-100%, bicubic) and a flip; timm's RandAugment (`TimmRandAugment`: two of
    its fifteen operations, each firing half the time, at levels drawn from N(magnitude, 0.5),
    the "increasing" set, uncovered areas in the ImageNet mean colour); the normalisation; then
    RandomErasing of one rectangle for `random_erasing` of the samples, filled with per-pixel
    normal noise in normalised units (timm's "pixel" mode; black, 0, when the output is not
    normalised).

    DeiT's MixUp (0.8) and CutMix (1.0), one of them per batch, are batch ops to add at the end
    (pp.MixUp, pp.CutMix with the number of classes); the preset leaves them out.

    When to use it: training vision transformers (ViT, DeiT) or other data-hungry models on
    ImageNet-like data with long schedules.
    """
    size = _check_size(size)
    if not 0.0 <= random_erasing <= 1.0:
        raise ValueError(f"random_erasing must be a probability in [0, 1], got {random_erasing}")
    ops: list[Op] = [
        RandomResizedCrop(size, interpolation="bicubic"),
        RandomFlip(horizontal=0.5),
        TimmRandAugment(2, magnitude, 0.5, increasing=True, interpolation="bicubic"),
    ]
    normalised = normalize if normalize is not None else dtype != torch.uint8
    after: list[Op] = []
    if random_erasing > 0:
        after.append(RandomErasing(random_erasing, value="random" if normalised else 0.0))
    return _finish(ops, dtype, layout, normalize, mean, std, after)


def yolo(size: int = 640, mosaic: float = 1.0, translate: float = 0.1, scale: float = 0.5, degrees: float = 0.0,
         flip: float = 0.5, hsv: tuple[float, float, float] = (0.015, 0.7, 0.4), fill: int = 114, *,
         box_format: str = "xyxy", dtype: torch.dtype = torch.float32, layout: str = "NCHW",
         normalize: bool | None = False, mean: Sequence[float] = IMAGENET_MEAN,
         std: Sequence[float] = IMAGENET_STD) -> Compose:
    """YOLOv5/v8's training augmentation (its hyp.scratch defaults) for detection: each image
    letterboxed into a `size` square (grey `fill` padding), moved by up to `translate` of the
    side, zoomed by a factor in (1 - scale, 1 + scale) and rotated by up to `degrees`, flipped
    left-right with probability `flip`, its hue, saturation and value jittered in HSV by `hsv`
    (hsv_h, hsv_s, hsv_v), then a mosaic of four images of the batch for `mosaic` of the
    samples. Boxes (in `box_format`, the Compose's) and their labels follow every step; boxes
    cut below 2 pixels or 10% of their area by the mosaic are dropped.

    Outputs float values in [0, 1], YOLO's input (normalize=False); normalize=True applies
    mean and std before the mosaic. The Compose returns a dict ("image", and "boxes" and
    "labels" when given), since the mosaic is a batch op.

    How it differs from YOLO's own: YOLO pastes four images into a canvas twice the size and
    crops it back with its random affine; here each image gets its affine first and the mosaic
    takes a quadrant of each around a random centre (Mosaic's docstring), so every output
    pixel is still resampled once.

    When to use it: training single-stage detectors (YOLO, RetinaNet-style) from scratch or
    fine-tuning them on COCO-like data with boxes.

    Example:
        >>> [type(op).__name__ for op in yolo(320).ops]  # doctest: +NORMALIZE_WHITESPACE
        ['LetterBox', 'RandomAffine', 'RandomFlip', 'RandomHSV', 'Mosaic']
    """
    size = _check_size(size)
    for name, v in (("mosaic", mosaic), ("flip", flip)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {v}")
    if not 0.0 <= translate <= 1.0:
        raise ValueError(f"translate must be a fraction of the side in [0, 1], got {translate}")
    if not 0.0 <= scale < 1.0:
        raise ValueError(f"scale must be in [0, 1) (zoom factors 1 - scale .. 1 + scale), got {scale}")
    ops: list[Op] = [LetterBox(size, fill=fill),
                     RandomAffine(degrees, translate=(translate, translate), scale=(1.0 - scale, 1.0 + scale),
                                  fill=fill),
                     RandomFlip(horizontal=flip),
                     RandomHSV(*hsv, p=1.0)]
    if normalize:
        if dtype == torch.uint8:
            raise ValueError("normalize=True needs a float dtype (float32, float16 or bfloat16)")
        ops.append(Normalize(mean, std))
    if mosaic > 0:
        ops.append(Mosaic(p=mosaic, box_format=box_format))
    return Compose(ops, dtype=dtype, layout=layout, box_format=box_format)


PRESETS: dict[str, Callable[..., Compose]] = {
    "imagenet_train": imagenet_train,
    "imagenet_val": imagenet_val,
    "fastai_like": fastai_like,
    "light": light,
    "heavy": heavy,
    "simclr": simclr,
    "deit": deit,
    "yolo": yolo,
}
