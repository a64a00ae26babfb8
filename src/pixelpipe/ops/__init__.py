"""Augmentation ops. Each samples per-sample parameters and states its contribution through one
of the kinds in `pixelpipe.ops.kinds`; the planner (pixelpipe.plan) fuses them."""

from .color import ColorJitter, Normalize, RandomGrayscale
from .crop import CenterCrop, CenterResizedCrop, Crop, Pad, RandomResizedCrop, Resize
from .geometry import RandomAffine, RandomFlip, RandomPerspective, RandomRotate, Warp
from .kinds import BatchOp, ColorOp, GeometryOp, Op, PixelOp
from .noise import GaussianNoise
from .photometric import RandomInvert
from .tensor import Lambda

__all__ = [
    "Op", "GeometryOp", "ColorOp", "PixelOp", "BatchOp",
    "Resize", "Crop", "CenterCrop", "CenterResizedCrop", "RandomResizedCrop", "Pad",
    "RandomFlip", "RandomRotate", "RandomAffine", "RandomPerspective", "Warp",
    "ColorJitter", "RandomGrayscale", "RandomInvert", "Normalize", "GaussianNoise", "Lambda",
]
