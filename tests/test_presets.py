"""Presets: plain Composes with the documented outputs, defaults and arguments."""

from __future__ import annotations

import inspect as pyinspect
import io

import numpy as np
import pytest
import torch
from PIL import Image

import pixelpipe as pp
from pixelpipe import presets
from pixelpipe.data.random import Draws
from pixelpipe.tools.datasets import synthetic

SIZE = 24  # small outputs keep the CPU reference warp quick
RANDOM = ("imagenet_train", "fastai_like", "light", "heavy", "simclr", "deit")
# presets of one normalised image tensor per input (yolo: a detection preset, its own tests)
CLASSIFICATION = [name for name in presets.PRESETS if name != "yolo"]
# the noise deit erases with is in normalised units: its rectangles cannot agree with the
# unnormalised run, so the normalisation check runs without them
NO_ERASING = {"deit": {"random_erasing": 0.0}}
MEAN = torch.tensor(presets.IMAGENET_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(presets.IMAGENET_STD).view(1, 3, 1, 1)


@pytest.fixture(scope="module")
def blobs() -> list[bytes]:
    return [b for b, _ in synthetic(6)]


def small(images: list[bytes], side: int = 64) -> list[torch.Tensor]:
    """The images decoded and shrunk by Pillow (HWC uint8), so each preset runs on small
    inputs; the second one is made grayscale (1 channel)."""
    out = []
    for i, b in enumerate(images):
        im = Image.open(io.BytesIO(b)).convert("L" if i == 1 else "RGB")
        im.thumbnail((side, side))
        a = np.array(im)
        out.append(torch.from_numpy(a[:, :, None] if a.ndim == 2 else a))
    return out


def test_names_and_docstrings() -> None:
    assert list(presets.PRESETS) == ["imagenet_train", "imagenet_val", "fastai_like", "light", "heavy", "simclr",
                                     "deit", "yolo"]
    for name, fn in presets.PRESETS.items():
        assert fn is getattr(presets, name)
        doc = pyinspect.getdoc(fn)
        assert "When to use" in doc, f"{name}: the docstring must say when to use it"
        assert isinstance(fn(), pp.Compose)


@pytest.mark.parametrize("name", CLASSIFICATION)
def test_default_output_is_normalised_float32_nchw(name: str, blobs: list[bytes]) -> None:
    images = small(blobs)
    assert any(im.shape[2] == 1 for im in images) and any(im.shape[2] == 3 for im in images)
    t = presets.PRESETS[name](SIZE, **NO_ERASING.get(name, {}))
    x = t(images, seed=1)
    assert x.shape == (len(images), 3, SIZE, SIZE) and x.dtype == torch.float32
    # normalised with the ImageNet mean/std: the same ops without Normalize, rescaled, agree
    raw = presets.PRESETS[name](SIZE, normalize=False, **NO_ERASING.get(name, {}))(images, seed=1)
    assert 0.0 <= float(raw.min()) and float(raw.max()) <= 1.0
    torch.testing.assert_close(x, (raw - MEAN) / STD, atol=1e-4, rtol=1e-4)
    assert float(x.min()) < 0.0  # would not hold for unnormalised values


@pytest.mark.parametrize("name", CLASSIFICATION)
def test_dtype_and_layout_arguments(name: str, blobs: list[bytes]) -> None:
    images = small(blobs[:3])
    half = presets.PRESETS[name](SIZE, dtype=torch.float16, layout="NHWC")(images)
    assert half.shape == (3, SIZE, SIZE, 3) and half.dtype == torch.float16
    ref = presets.PRESETS[name](SIZE)(images)
    torch.testing.assert_close(half.permute(0, 3, 1, 2).float(), ref, atol=0.02, rtol=0.01)
    u8 = presets.PRESETS[name](SIZE, dtype=torch.uint8)  # uint8 drops Normalize by default
    assert not any(isinstance(op, pp.Normalize) for op in u8.ops)
    y = u8(images)
    assert y.dtype == torch.uint8 and y.shape == (3, 3, SIZE, SIZE)
    with pytest.raises(ValueError, match="normalize=True needs a float dtype"):
        presets.PRESETS[name](SIZE, dtype=torch.uint8, normalize=True)


def test_custom_mean_and_std(blobs: list[bytes]) -> None:
    images = small(blobs[:2])
    raw = presets.imagenet_val(SIZE, normalize=False)(images)
    x = presets.imagenet_val(SIZE, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))(images)
    torch.testing.assert_close(x, (raw - 0.5) / 0.25, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", RANDOM)
def test_random_presets_vary_by_epoch_and_repeat_exactly(name: str, blobs: list[bytes]) -> None:
    images = small(blobs)
    t = presets.PRESETS[name](SIZE)
    a, b, again = t(images, epoch=0), t(images, epoch=1), t(images, epoch=0)
    assert torch.equal(a, again)
    changed = [not torch.allclose(a[i], b[i]) for i in range(len(images))]
    assert sum(changed) >= len(images) - 1, f"{name}: epochs 0 and 1 gave the same output"


def test_val_is_deterministic_and_matches_pillow(blobs: list[bytes]) -> None:
    images = small(blobs, side=80)
    t = presets.imagenet_val(32, crop_fraction=0.5, normalize=False)  # resize to 64, crop 32
    x = t(images, seed=0, epoch=0)
    assert torch.equal(x, t(images, seed=7, epoch=3))
    for img, out in zip(images, x):
        pil = Image.fromarray(img.numpy()[:, :, 0] if img.shape[2] == 1 else img.numpy())
        w, h = pil.size
        s = 64 / min(w, h)
        pil = pil.convert("RGB").resize((max(64, int(w * s)), max(64, int(h * s))), Image.Resampling.BILINEAR)
        left, top = round((pil.size[0] - 32) / 2), round((pil.size[1] - 32) / 2)  # as Crop rounds
        want = np.asarray(pil.crop((left, top, left + 32, top + 32)), dtype=np.float32) / 255
        got = out.permute(1, 2, 0).numpy()
        assert np.abs(got - want).mean() < 3 / 255  # same resize filter and crop window


def test_val_sizes() -> None:
    ops = presets.imagenet_val(224).ops
    assert ops[0].size == 256 and ops[1].size == (224, 224)
    assert presets.imagenet_val(160, crop_fraction=1.0).ops[0].size == 160
    with pytest.raises(ValueError, match="crop_fraction"):
        presets.imagenet_val(224, crop_fraction=0)


def test_fastai_like_has_fastai_defaults() -> None:
    ops = presets.fastai_like().ops
    kinds = [type(op).__name__ for op in ops]
    assert kinds == ["Resize", "CenterCrop", "RandomFlip", "RandomPerspective", "RandomRotate",
                     "RandomAffine", "ColorJitter", "ColorJitter", "Normalize"]
    flip, warp, rotate, zoom, bright, contrast = ops[2:8]
    assert flip.horizontal == 0.5 and flip.vertical == 0.0
    assert warp.distortion == pytest.approx(0.2) and warp.p == 0.75  # max_warp, p_affine
    assert rotate.degrees == (-10.0, 10.0) and rotate.p == 0.75  # max_rotate
    assert zoom.scale == (1.0, 1.1) and zoom.p == 0.75 and zoom.degrees == (0.0, 0.0)  # max_zoom
    assert bright.brightness == pytest.approx((0.8, 1.2)) and bright.p == 0.75  # max_lighting
    assert bright.contrast is None and contrast.brightness is None
    assert contrast.contrast == pytest.approx((0.8, 1.25)) and contrast.p == 0.75  # p_lighting
    assert pp.Compose(ops).stages[0].border == "reflect"  # pad_mode="reflection"
    doubled = presets.fastai_like(mult=2.0).ops
    assert doubled[4].degrees == (-20.0, 20.0) and doubled[3].distortion == pytest.approx(0.4)
    assert doubled[5].scale == (1.0, 1.1)  # fastai's mult leaves the zoom alone
    with pytest.raises(ValueError, match="mult"):
        presets.fastai_like(mult=6.0)


def test_fastai_like_probabilities_are_per_op() -> None:
    """p_affine applies to each affine op on its own draw, as in fastai: a sample is rotated
    with probability 0.75 whether or not it was zoomed."""
    t = presets.fastai_like(32)
    n = 4000
    idx = torch.arange(n)
    sizes = torch.full((n, 2), 32.0, dtype=torch.float64)
    rotated = t.ops[4].sample(Draws(0, 0, idx, 4), sizes.numpy())["angle"] != 0
    zoomed = t.ops[5].sample(Draws(0, 0, idx, 5), sizes.numpy())["scale"] != 1
    assert rotated.mean() == pytest.approx(0.75, abs=0.03)
    assert zoomed.mean() == pytest.approx(0.75, abs=0.03)
    assert (rotated & zoomed).mean() == pytest.approx(0.75 * 0.75, abs=0.03)


def test_presets_are_plain_composes_to_edit(blobs: list[bytes]) -> None:
    t = presets.imagenet_train(SIZE)
    assert "RandomResizedCrop" in repr(t) and "stage 0" in t.plan()
    edited = pp.Compose(t.ops[:2] + [pp.RandomGrayscale(1.0)] + t.ops[2:], dtype=t.dtype, layout=t.layout)
    x = edited(small(blobs[:2]), seed=3)
    grey = x * STD + MEAN
    torch.testing.assert_close(grey[:, 0], grey[:, 1], atol=1e-4, rtol=0)  # the edit took effect


@pytest.mark.parametrize("size", [0, -3, 2.5, True])
def test_bad_size(size: object) -> None:
    for fn in presets.PRESETS.values():
        with pytest.raises(ValueError, match="size"):
            fn(size)


def test_simclr_is_the_papers_view() -> None:
    ops = presets.simclr(224).ops
    jitter, grey, blur = ops[2], ops[3], ops[4]
    assert np.allclose(jitter.brightness, (0.2, 1.8)) and jitter.hue == (-0.2, 0.2) and jitter.p == 0.8
    assert grey.p == 0.2 and blur.kernel_size == (23, 23) and blur.sigma == (0.1, 2.0) and blur.p == 0.5
    cifar = presets.simclr(32, strength=0.5, blur=0.0).ops
    assert not any(isinstance(op, pp.GaussianBlur) for op in cifar)
    assert np.allclose(cifar[2].saturation, (0.6, 1.4))
    with pytest.raises(ValueError, match="strength"):
        presets.simclr(strength=2.0)


def test_deit_erases_after_normalising_with_noise() -> None:
    names = [type(op).__name__ for op in presets.deit(224).ops]
    assert names == ["RandomResizedCrop", "RandomFlip", "TimmRandAugment", "Normalize", "RandomErasing"]
    ra = presets.deit(224).ops[2]
    assert (ra.num_ops, ra.magnitude, ra.magnitude_std, ra.increasing, ra.interpolation) == (2, 9.0, 0.5, True, "bicubic")
    erase = presets.deit(224).ops[-1]
    assert erase.p == 0.25 and erase.value == "random"
    assert presets.deit(224).ops[0].interpolation == "bicubic"
    assert presets.deit(224, dtype=torch.uint8).ops[-1].value == 0.0
    assert type(presets.deit(224, random_erasing=0.0).ops[-1]).__name__ == "Normalize"


def test_yolo_has_yolos_defaults() -> None:
    ops = presets.yolo().ops
    assert [type(op).__name__ for op in ops] == ["LetterBox", "RandomAffine", "RandomFlip", "RandomHSV", "Mosaic"]
    box, affine, flip, hsv, mosaic = ops
    assert box.size == (640, 640) and box.fill == (114.0, 114.0, 114.0)
    assert affine.translate == (0.1, 0.1) and affine.scale == (0.5, 1.5) and affine.degrees == (0.0, 0.0)
    assert flip.horizontal == 0.5 and flip.vertical == 0.0
    assert hsv.hue == (-0.015, 0.015) and np.allclose(hsv.saturation, (0.3, 1.7)) and np.allclose(hsv.value, (0.6, 1.4))
    assert mosaic.p == 1.0 and mosaic.box_format == "xyxy"
    assert presets.yolo(mosaic=0.0).ops[-1].__class__.__name__ == "RandomHSV"
    assert presets.yolo(box_format="cxcywh").targets.box_format == "cxcywh"
    assert type(presets.yolo(normalize=True).ops[-2]).__name__ == "Normalize"
    for bad in ({"mosaic": 1.5}, {"flip": -0.1}, {"translate": 2.0}, {"scale": 1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            presets.yolo(**bad)


def test_yolo_moves_boxes_with_the_images(blobs: list[bytes]) -> None:
    """Boxes stay inside the output and keep their labels; the output is in [0, 1] and repeats
    exactly for a seed and epoch; without a mosaic, a box around a white square on black still
    encloses the square's pixels after the affine and the flip."""
    images = small(blobs)
    t = presets.yolo(48)
    boxes = [torch.tensor([[4.0, 4.0, 30.0, 40.0], [10.0, 2.0, 20.0, 12.0]]) for _ in images]
    labels = [torch.tensor([1, 2]) for _ in images]
    out = t(images, seed=3, boxes=boxes, labels=labels)
    again = t(images, seed=3, boxes=boxes, labels=labels)
    assert torch.equal(out["image"], again["image"])
    assert out["image"].shape == (len(images), 3, 48, 48) and out["image"].dtype == torch.float32
    assert out["image"].min() >= 0 and out["image"].max() <= 1
    for b, lab in zip(out["boxes"], out["labels"]):
        assert b.shape[0] == lab.shape[0] and set(lab.tolist()) <= {1, 2}
        assert (b >= 0).all() and (b[:, 2] <= 48).all() and (b[:, 3] <= 48).all()
    square = np.zeros((40, 40, 3), np.uint8)
    square[10:30, 8:24] = 255
    plain = presets.yolo(40, mosaic=0.0, hsv=(0.0, 0.0, 0.0))
    moved = plain([torch.from_numpy(square)] * 4, seed=5, boxes=[torch.tensor([[8.0, 10.0, 24.0, 30.0]])] * 4)
    for img, b in zip(moved["image"], moved["boxes"]):
        ys, xs = np.nonzero(img[0].numpy() > 0.75)
        if len(xs) == 0:  # translated off the output
            continue
        x0, y0, x1, y1 = b[0].tolist()
        assert x0 - 1 <= xs.min() and xs.max() + 1 <= x1 + 1 and y0 - 1 <= ys.min() and ys.max() + 1 <= y1 + 1
