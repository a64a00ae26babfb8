"""pixelpipe: batched image decoding and per-sample random augmentation, fused into one warp
and one pointwise pass, on the CPU and the GPU."""

from . import decode  # the package, callable as the function decode (see decode/__init__.py)
from .compose import Compose, SampleError
from .compose3d import Compose3D
from .data.batch import ImageBatch
from .data.volumes import VolumeBatch
from .engine import Engine, GpuDecoding
from .ops import (
    BatchOp,
    CenterCrop,
    CenterCrop3D,
    CenterResizedCrop,
    ChannelShuffle,
    ColorJitter,
    ColorOp,
    Crop,
    CutMix,
    Cutout,
    ElasticDeformation3D,
    GaussianBlur,
    GaussianNoise,
    GaussianNoise3D,
    GeometryOp,
    GridMask,
    Lambda,
    LetterBox,
    MedianBlur,
    MixUp,
    MotionBlur,
    Normalize,
    NormalizeIntensity,
    OneOf,
    Op,
    Orientation,
    Pad,
    PixelOp,
    RandomAdjustSharpness,
    RandomAffine,
    RandomAffine3D,
    RandomAutocontrast,
    RandomBiasField,
    RandomChoice,
    RandomContrast3D,
    RandomCrop3D,
    RandomCropByLabel,
    RandomEqualize,
    RandomErasing,
    RandomFlip,
    RandomFlip3D,
    RandomGamma,
    RandomGamma3D,
    RandomGrayscale,
    RandomInvert,
    RandomIoUCrop,
    RandomOrder,
    RandomPerspective,
    RandomPosterize,
    RandomResizedCrop,
    RandomRotate,
    RandomRotate90_3D,
    RandomSharpness,
    RandomShortestSize,
    RandomSolarize,
    RandomZoomOut,
    Resize,
    Resize3D,
    RGBShift,
    SanitizeBoxes,
    ScaleIntensityRange,
    ScaleJitter,
    SomeOf,
    Spacing,
    TargetsOp,
    VolumeGeometryOp,
    VolumeIntensityOp,
    VolumeOp,
    Warp,
)
from .tools.show import show
from .tools.show_volumes import show_volumes

__version__ = "0.1.0"

__all__ = [
    "ImageBatch",
    "Compose",
    "Engine",
    "GpuDecoding",
    "Pipeline",
    "SampleError",
    "decode",
    "Op",
    "GeometryOp",
    "ColorOp",
    "PixelOp",
    "BatchOp",
    "TargetsOp",
    "Resize",
    "Crop",
    "CenterCrop",
    "RandomResizedCrop",
    "CenterResizedCrop",
    "Pad",
    "RandomFlip",
    "RandomRotate",
    "RandomAffine",
    "RandomPerspective",
    "Warp",
    "ColorJitter",
    "RandomGrayscale",
    "RandomInvert",
    "Normalize",
    "GaussianNoise",
    "Lambda",
    "ChannelShuffle",
    "RGBShift",
    "RandomPosterize",
    "RandomSolarize",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomGamma",
    "GaussianBlur",
    "MotionBlur",
    "MedianBlur",
    "RandomSharpness",
    "RandomAdjustSharpness",
    "RandomIoUCrop",
    "RandomZoomOut",
    "ScaleJitter",
    "RandomShortestSize",
    "LetterBox",
    "SanitizeBoxes",
    "RandomErasing",
    "Cutout",
    "GridMask",
    "MixUp",
    "CutMix",
    "OneOf",
    "RandomChoice",
    "SomeOf",
    "RandomOrder",
    "show",
    "VolumeBatch",
    "Compose3D",
    "VolumePipeline",
    "VolumeOp",
    "VolumeGeometryOp",
    "VolumeIntensityOp",
    "RandomAffine3D",
    "RandomFlip3D",
    "RandomRotate90_3D",
    "Resize3D",
    "Spacing",
    "Orientation",
    "RandomCrop3D",
    "CenterCrop3D",
    "RandomCropByLabel",
    "ElasticDeformation3D",
    "ScaleIntensityRange",
    "NormalizeIntensity",
    "RandomGamma3D",
    "RandomContrast3D",
    "GaussianNoise3D",
    "RandomBiasField",
    "show_volumes",
]


def __getattr__(name: str):  # lazy: keep `import pixelpipe` light
    if name == "Pipeline":
        from .loader.pipeline import Pipeline

        return Pipeline
    if name == "VolumePipeline":
        from .loader.volumes import VolumePipeline

        return VolumePipeline
    if name in _MODULES:
        import importlib

        return importlib.import_module(_MODULES[name], __name__)
    raise AttributeError(f"module 'pixelpipe' has no attribute {name!r}")


# public modules reachable as attributes (pixelpipe.presets.imagenet_train(), ...), loaded on use
_MODULES = {"datasets": ".tools.datasets", "random": ".data.random", "readers": ".readers", "kernels": ".kernels",
            "ops": ".ops", "plan": ".plan", "sampler": ".loader.sampler", "presets": ".presets", "eval": ".eval",
            "torch": ".torch", "integrations": ".integrations"}
