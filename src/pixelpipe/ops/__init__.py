"""Augmentation ops. Each samples per-sample parameters and states its contribution through one
of the kinds in `pixelpipe.ops.kinds`; the planner (pixelpipe.plan) fuses them."""

from .augmix import AugMix
from .blur import GaussianBlur, MedianBlur, MotionBlur, RandomAdjustSharpness, RandomSharpness
from .color import ColorJitter, Normalize, RandomGrayscale
from .crop import CenterCrop, CenterResizedCrop, Crop, Pad, RandomCrop, RandomResizedCrop, Resize
from .detection import RandomIoUCrop, RandomZoomOut, SanitizeBoxes
from .elastic import ElasticTransform
from .erasing import Cutout, GridMask, RandomErasing
from .geometry import RandomAffine, RandomFlip, RandomPerspective, RandomRotate, RandomRotate90, Warp
from .hsv import RandomHSV
from .jpeg import JpegQuality
from .kinds import BatchOp, ColorOp, CompoundOp, GeometryOp, Op, PixelOp, TargetsOp
from .letterbox import LetterBox, RandomShortestSize, ScaleJitter
from .levels import RandomAutocontrast, RandomEqualize, RandomGamma, RandomPosterize, RandomSolarize
from .mixing import CutMix, MixUp
from .mosaic import Mosaic
from .noise import GaussianNoise, SaltAndPepper
from .photometric import ChannelShuffle, RandomInvert, RGBShift
from .policies import AutoAugment, RandAugment, TrivialAugmentWide
from .structure import OneOf, RandomChoice, RandomOrder, SomeOf
from .tensor import Lambda
from .timm_augment import TimmRandAugment
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
    "Op", "GeometryOp", "ColorOp", "PixelOp", "BatchOp", "TargetsOp", "CompoundOp",
    "Resize", "Crop", "CenterCrop", "CenterResizedCrop", "RandomResizedCrop", "RandomCrop", "Pad",
    "RandomFlip", "RandomRotate", "RandomRotate90", "RandomAffine", "RandomPerspective", "ElasticTransform", "Warp",
    "ColorJitter", "RandomGrayscale", "RandomInvert", "Normalize", "GaussianNoise", "SaltAndPepper", "Lambda",
    "ChannelShuffle", "RGBShift", "RandomHSV",
    "RandomPosterize", "RandomSolarize", "RandomAutocontrast", "RandomEqualize", "RandomGamma", "JpegQuality",
    "GaussianBlur", "MotionBlur", "MedianBlur", "RandomSharpness", "RandomAdjustSharpness",
    "RandomIoUCrop", "RandomZoomOut", "ScaleJitter", "RandomShortestSize", "LetterBox", "SanitizeBoxes",
    "RandomErasing", "Cutout", "GridMask",
    "MixUp", "CutMix", "Mosaic",
    "OneOf", "RandomChoice", "SomeOf", "RandomOrder", "AutoAugment", "RandAugment", "TimmRandAugment", "TrivialAugmentWide", "AugMix",
    # the volume ops (Compose3D's; not 2-D Ops)
    "VolumeOp", "VolumeGeometryOp", "VolumeIntensityOp",
    "RandomAffine3D", "RandomFlip3D", "RandomRotate90_3D", "Resize3D", "Spacing", "Orientation",
    "RandomCrop3D", "CenterCrop3D", "RandomCropByLabel", "ElasticDeformation3D",
    "ScaleIntensityRange", "NormalizeIntensity", "RandomGamma3D", "RandomContrast3D", "GaussianNoise3D",
    "RandomBiasField",
]
