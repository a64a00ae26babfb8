"""Augmentation ops. Each samples per-sample parameters and states its contribution; the
planner (pixelpipe.plan) fuses them."""

from ._base import ColorOp, GeometryOp, Op
from .color import ColorJitter, Normalize, RandomGrayscale
from .crop import CenterCrop, Crop, Pad, RandomResizedCrop, Resize
from .geometry import RandomAffine, RandomFlip, RandomPerspective, RandomRotate, Warp
from .tensor import Lambda

__all__ = [
    "Op", "GeometryOp", "ColorOp",
    "Resize", "Crop", "CenterCrop", "RandomResizedCrop", "Pad",
    "RandomFlip", "RandomRotate", "RandomAffine", "RandomPerspective", "Warp",
    "ColorJitter", "RandomGrayscale", "Normalize", "Lambda",
]
