"""pixelpipe: batched image decoding and per-sample random augmentation, fused into one warp
and one pointwise pass, on the CPU and the GPU."""

from . import decode  # the package, callable as the function decode (see decode/__init__.py)
from .compose import Compose, SampleError
from .compose3d import Compose3D
from .data.batch import ImageBatch
from .data.clips import ClipSampler
from .data.volumes import VolumeBatch
from .engine import Engine, GpuDecoding
from .engine import cuda_queues as _cuda_queues  # noqa: F401  (asks CUDA for 32 hardware queues at import)
from .engine.clips import augment_clips
from .ops import (
    AugMix,
    AutoAugment,
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
    ElasticTransform,
    GaussianBlur,
    GaussianNoise,
    GaussianNoise3D,
    GeometryOp,
    GridMask,
    JpegQuality,
    Lambda,
    LetterBox,
    MedianBlur,
    MixUp,
    Mosaic,
    MotionBlur,
    Normalize,
    NormalizeIntensity,
    OneOf,
    Op,
    Orientation,
    Pad,
    PixelOp,
    RandAugment,
    RandomAdjustSharpness,
    RandomAffine,
    RandomAffine3D,
    RandomAutocontrast,
    RandomBiasField,
    RandomChoice,
    RandomContrast3D,
    RandomCrop,
    RandomCrop3D,
    RandomCropByLabel,
    RandomEqualize,
    RandomErasing,
    RandomFlip,
    RandomFlip3D,
    RandomGamma,
    RandomGamma3D,
    RandomGrayscale,
    RandomHSV,
    RandomInvert,
    RandomIoUCrop,
    RandomOrder,
    RandomPerspective,
    RandomPosterize,
    RandomResizedCrop,
    RandomRotate,
    RandomRotate90,
    RandomRotate90_3D,
    RandomSharpness,
    RandomShortestSize,
    RandomSolarize,
    RandomZoomOut,
    Resize,
    Resize3D,
    RGBShift,
    SaltAndPepper,
    SanitizeBoxes,
    ScaleIntensityRange,
    ScaleJitter,
    SomeOf,
    Spacing,
    TargetsOp,
    TimmRandAugment,
    TrivialAugmentWide,
    VolumeGeometryOp,
    VolumeIntensityOp,
    VolumeOp,
    Warp,
)
from .tools.show import show
from .tools.show_clips import show_clips
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
    "VideoPipeline",
    "ClipSampler",
    "augment_clips",
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
    "RandomCrop",
    "CenterResizedCrop",
    "Pad",
    "RandomFlip",
    "RandomRotate",
    "RandomRotate90",
    "RandomAffine",
    "RandomPerspective",
    "ElasticTransform",
    "Warp",
    "ColorJitter",
    "RandomGrayscale",
    "RandomInvert",
    "Normalize",
    "GaussianNoise",
    "SaltAndPepper",
    "Lambda",
    "ChannelShuffle",
    "RGBShift",
    "RandomHSV",
    "RandomPosterize",
    "RandomSolarize",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomGamma",
    "JpegQuality",
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
    "Mosaic",
    "OneOf",
    "RandomChoice",
    "SomeOf",
    "RandomOrder",
    "AutoAugment",
    "RandAugment",
    "TimmRandAugment",
    "TrivialAugmentWide",
    "AugMix",
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
    "show_clips",
]


def __getattr__(name: str):  # lazy: keep `import pixelpipe` light
    if name == "Pipeline":
        from .loader.pipeline import Pipeline

        return Pipeline
    if name == "VideoPipeline":
        from .loader.video import VideoPipeline

        return VideoPipeline
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
