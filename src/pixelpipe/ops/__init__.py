"""Augmentation ops. Each samples per-sample parameters and states its contribution through one
of the kinds in `pixelpipe.ops.kinds`; the planner (pixelpipe.plan) fuses them."""

from .blur import GaussianBlur, MedianBlur, MotionBlur, RandomAdjustSharpness, RandomSharpness
from .color import ColorJitter, Normalize, RandomGrayscale
from .crop import CenterCrop, CenterResizedCrop, Crop, Pad, RandomResizedCrop, Resize
from .detection import RandomIoUCrop, RandomZoomOut, SanitizeBoxes
from .erasing import Cutout, GridMask, RandomErasing
from .geometry import RandomAffine, RandomFlip, RandomPerspective, RandomRotate, Warp
from .kinds import BatchOp, ColorOp, GeometryOp, Op, PixelOp, TargetsOp
from .letterbox import LetterBox, RandomShortestSize, ScaleJitter
from .levels import RandomAutocontrast, RandomEqualize, RandomGamma, RandomPosterize, RandomSolarize
from .mixing import CutMix, MixUp
from .noise import GaussianNoise
from .photometric import ChannelShuffle, RandomInvert, RGBShift
from .structure import OneOf, RandomChoice, RandomOrder, SomeOf
from .tensor import Lambda
from .volume_crop import CenterCrop3D, RandomCrop3D, RandomCropByLabel
from .volume_elastic import ElasticDeformation3D
from .volume_geometry import Orientation, RandomAffine3D, RandomFlip3D, RandomRotate90_3D, Resize3D, Spacing
from .volume_intensity import (
    GaussianNoise3D,
    NormalizeIntensity,
    RandomBiasField,
    RandomContrast3D,
    RandomGamma3D,
    ScaleIntensityRange,
)
from .volume_kinds import VolumeGeometryOp, VolumeIntensityOp, VolumeOp

__all__ = [
    "Op", "GeometryOp", "ColorOp", "PixelOp", "BatchOp", "TargetsOp",
    "Resize", "Crop", "CenterCrop", "CenterResizedCrop", "RandomResizedCrop", "Pad",
    "RandomFlip", "RandomRotate", "RandomAffine", "RandomPerspective", "Warp",
    "ColorJitter", "RandomGrayscale", "RandomInvert", "Normalize", "GaussianNoise", "Lambda",
    "ChannelShuffle", "RGBShift",
    "RandomPosterize", "RandomSolarize", "RandomAutocontrast", "RandomEqualize", "RandomGamma",
    "GaussianBlur", "MotionBlur", "MedianBlur", "RandomSharpness", "RandomAdjustSharpness",
    "RandomIoUCrop", "RandomZoomOut", "ScaleJitter", "RandomShortestSize", "LetterBox", "SanitizeBoxes",
    "RandomErasing", "Cutout", "GridMask",
    "MixUp", "CutMix",
    "OneOf", "RandomChoice", "SomeOf", "RandomOrder",
    # the volume ops (Compose3D's; not 2-D Ops)
    "VolumeOp", "VolumeGeometryOp", "VolumeIntensityOp",
    "RandomAffine3D", "RandomFlip3D", "RandomRotate90_3D", "Resize3D", "Spacing", "Orientation",
    "RandomCrop3D", "CenterCrop3D", "RandomCropByLabel", "ElasticDeformation3D",
    "ScaleIntensityRange", "NormalizeIntensity", "RandomGamma3D", "RandomContrast3D", "GaussianNoise3D",
    "RandomBiasField",
]
