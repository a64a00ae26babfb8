"""The public surface: pinned names, a light import, Compose's arguments and calling rules."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import grey, make_image, run, varied_images

import pixelpipe as pp
from pixelpipe import Compose

PUBLIC = [
    "ImageBatch", "Compose", "Engine", "GpuDecoding", "Pipeline", "SampleError", "decode",
    "VideoPipeline", "ClipSampler", "augment_clips",
    "Op", "GeometryOp", "ColorOp", "PixelOp", "BatchOp", "TargetsOp",
    "Resize", "Crop", "CenterCrop", "RandomResizedCrop", "RandomCrop", "CenterResizedCrop", "Pad",
    "RandomFlip", "RandomRotate", "RandomRotate90", "RandomAffine", "RandomPerspective", "ElasticTransform", "Warp",
    "ColorJitter", "RandomGrayscale", "RandomInvert", "Normalize", "GaussianNoise", "SaltAndPepper", "Lambda",
    "ChannelShuffle", "RGBShift", "RandomHSV",
    "RandomPosterize", "RandomSolarize", "RandomAutocontrast", "RandomEqualize", "RandomGamma", "JpegQuality",
    "GaussianBlur", "MotionBlur", "MedianBlur", "RandomSharpness", "RandomAdjustSharpness",
    "RandomIoUCrop", "RandomZoomOut", "ScaleJitter", "RandomShortestSize", "LetterBox", "SanitizeBoxes",
    "RandomErasing", "Cutout", "GridMask",
    "MixUp", "CutMix", "Mosaic",
    "OneOf", "RandomChoice", "SomeOf", "RandomOrder", "AutoAugment", "RandAugment", "TimmRandAugment", "TrivialAugmentWide", "AugMix", "show",
    "VolumeBatch", "Compose3D", "VolumePipeline", "VolumeOp", "VolumeGeometryOp", "VolumeIntensityOp",
    "RandomAffine3D", "RandomFlip3D", "RandomRotate90_3D", "Resize3D", "Spacing", "Orientation",
    "RandomCrop3D", "CenterCrop3D", "RandomCropByLabel", "ElasticDeformation3D",
    "ScaleIntensityRange", "NormalizeIntensity", "RandomGamma3D", "RandomContrast3D", "GaussianNoise3D",
    "RandomBiasField", "show_volumes", "show_clips",
]


def test_all_is_pinned():
    assert pp.__all__ == PUBLIC
    assert len(set(pp.__all__)) == len(pp.__all__)


def test_public_names_resolve():
    import builtins

    for name in PUBLIC:
        assert getattr(pp, name) is not None  # "decode" and "Pipeline" load lazily
        assert not hasattr(builtins, name), f"{name} shadows a builtin"
    with pytest.raises(AttributeError):
        pp.no_such_name  # noqa: B018


def test_import_is_light():
    # one subprocess: after `import pixelpipe`, then after a CPU run
    code = (
        "import sys, torch, pixelpipe as pp\n"
        "heavy = ('triton', 'nvidia.nvimgcodec', 'kornia', 'torchvision')\n"
        "loaded = lambda: ','.join(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))\n"
        "print(loaded())\n"
        "pp.Compose([pp.RandomResizedCrop(8), pp.RandomRotate(10)])([torch.zeros(20, 20, 3, dtype=torch.uint8)])\n"
        "print('triton' in sys.modules)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    after_import, after_run = res.stdout.split("\n")[:2]
    assert after_import == "", f"import pixelpipe imported: {after_import}"
    assert after_run == "False", "a CPU run imported triton"


# ----------------------------------------------------------------------------- Compose arguments
@pytest.mark.parametrize("kwargs, name", [
    ({"dtype": torch.int32}, "dtype"),
    ({"dtype": torch.float64}, "dtype"),
    ({"layout": "CHW"}, "layout"),
    ({"layout": "nchw"}, "layout"),
    ({"channels": 2}, "channels"),
    ({"channels": 4}, "channels"),
    ({"mask_fill": 0.5}, "mask_fill"),
])
def test_compose_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Compose([pp.Resize(8)], **kwargs)


@pytest.mark.parametrize("make, name", [
    (lambda: pp.Engine(num_threads=0), "num_threads"),
    (lambda: pp.Engine(num_threads=1.5), "num_threads"),
    (lambda: pp.Engine(max_pixels=0), "max_pixels"),
    (lambda: pp.GpuDecoding(hw_fraction=1.5), "hw_fraction"),  # GPU settings: checked here, not at the first GPU batch
    (lambda: pp.GpuDecoding(hw_fraction=-0.1), "hw_fraction"),
    (lambda: pp.GpuDecoding(roi="maybe"), "roi"),
    (lambda: pp.GpuDecoding(lanes=0), "lanes"),
])
def test_engine_rejects_bad_arguments(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_engine_and_device_are_exclusive():
    with pytest.raises(ValueError, match="engine or a device"):
        Compose([pp.Resize(8)])([np.zeros((9, 9, 3), np.uint8)], engine=pp.Engine(), device="cpu")


def test_grey_output_needs_one_normalize_value():
    """channels=1 with three different means would use only the first (red's): an error at
    construction; one value, or three equal ones, is fine."""
    with pytest.raises(ValueError, match=r"channels=1 .* one mean and std"):
        Compose([pp.Resize(8), pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])], channels=1)
    for mean, std in (([0.5], [0.25]), ([0.5] * 3, [0.25] * 3)):
        Compose([pp.Resize(8), pp.Normalize(mean, std)], channels=1)


def test_compose_rejects_non_ops():
    with pytest.raises(TypeError, match=r"ops\[1\]"):
        Compose([pp.Resize(8), lambda x: x])


def test_normalize_needs_a_float_dtype():
    with pytest.raises(ValueError, match="uint8"):
        Compose([pp.Resize(8), pp.Normalize([0.5] * 3, [0.2] * 3)], dtype=torch.uint8)


def test_indices_must_match_the_batch():
    c = Compose([pp.Resize((8, 8))])
    with pytest.raises(ValueError, match="indices"):
        c(varied_images(3), indices=[0, 1])


def test_single_image_is_refused():
    c = Compose([pp.Resize((8, 8))])
    with pytest.raises(TypeError, match="list"):
        c(torch.zeros(10, 10, 3, dtype=torch.uint8))


def test_different_sizes_need_a_fixed_size_op():
    with pytest.raises(ValueError, match="different sizes"):
        run([pp.RandomFlip()], varied_images(3))


def test_default_indices_are_positions():
    imgs = varied_images(5)
    ops = [pp.RandomResizedCrop(12), pp.RandomFlip()]
    assert torch.equal(run(ops, imgs, seed=4), run(ops, imgs, seed=4, indices=torch.arange(5)))
    assert torch.equal(run(ops, imgs, seed=4, indices=[0, 1, 2, 3, 4]), run(ops, imgs, seed=4))


def test_the_same_compose_is_reusable():
    imgs = varied_images(6)
    c = Compose([pp.RandomResizedCrop(12), pp.ColorJitter(0.3, 0.3)])
    first = c(imgs, seed=1, epoch=3)
    c(imgs[:2], seed=9)
    assert torch.equal(c(imgs, seed=1, epoch=3), first)


# ----------------------------------------------------------------------------- channels
def test_grey_images_are_replicated_to_three_channels():
    g = make_image(12, 14, 0)
    out = run([], [g], dtype=torch.uint8)
    assert out.shape == (1, 3, 12, 14)
    for c in range(3):
        np.testing.assert_array_equal(out[0, c].numpy(), g)


def test_one_channel_output_is_the_grey():
    img = make_image(12, 14)
    colour = run([], [img])
    mono = run([], [img], channels=1)
    assert mono.shape == (1, 1, 12, 14)
    torch.testing.assert_close(mono, grey(colour), atol=1e-6, rtol=0)
    mono8 = run([], [img], channels=1, dtype=torch.uint8, layout="NHWC")
    assert mono8.shape == (1, 12, 14, 1)
    assert float((mono8[0, ..., 0].float() - grey(colour)[0, 0] * 255).abs().max()) <= 0.5 + 1e-3


def test_no_ops_is_a_plain_conversion():
    imgs = [make_image(9, 11), make_image(9, 11, seed=3)]
    out = run([], imgs, dtype=torch.uint8, layout="NHWC")
    np.testing.assert_array_equal(out.numpy(), np.stack(imgs))
    f = run([], imgs)
    torch.testing.assert_close(f, torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).float() / 255,
                               atol=1e-6, rtol=0)


def test_plan_and_repr_name_the_ops():
    c = Compose([pp.RandomResizedCrop(12), pp.RandomFlip(), pp.ColorJitter(0.2)], dtype=torch.float16)
    text = c.plan()
    assert "RandomResizedCrop" in text and "RandomFlip" in text and "ColorJitter" in text
    assert "float16" in text
    r = repr(c)
    assert "RandomResizedCrop" in r and "ColorJitter" in r


def test_decode_is_callable_and_its_submodules_import() -> None:
    """pixelpipe.decode(files) decodes, and `import pixelpipe.decode.gpu as g` still works,
    whatever was imported before (Compose imports the decoder submodules)."""
    import importlib
    import io

    from PIL import Image

    import pixelpipe
    from pixelpipe import ImageBatch

    for name in ("pixelpipe.decode.gpu", "pixelpipe.decode.on_device", "pixelpipe.decode.turbo"):
        importlib.import_module(name)
    import pixelpipe.decode.headers as headers  # noqa: F401  (the form that needs the package)

    buf = io.BytesIO()
    Image.new("RGB", (5, 3), (10, 20, 30)).save(buf, "PNG")
    from pixelpipe import decode

    for fn in (pixelpipe.decode, decode):
        batch = fn([buf.getvalue()])
        assert isinstance(batch, ImageBatch) and batch.sizes.tolist() == [[3, 5]]
        assert batch[0][1, 2].tolist() == [10, 20, 30]
    import inspect

    assert list(inspect.signature(pixelpipe.decode).parameters)[:2] == ["images", "device"]  # help() shows them
