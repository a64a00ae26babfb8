"""Draw the pictures of docs/ops.md, docs/getting-started.md and docs/design.md into docs/img/.

    python docs/make_pictures.py               # a synthetic image (what docs/img holds)
    python docs/make_pictures.py --photo       # the goldfish photo from ../shared/data, for a
                                               # local look (ImageNet photos stay out of the repo)
    python docs/make_pictures.py --photo some.jpg --out /tmp/img

Every op picture is computed by pixelpipe itself: one strip per op (the input, then the op's
output for a few arguments or epochs, each captioned with the code that made it) and one grid
per preset in `pixelpipe.presets.PRESETS` (`pixelpipe.tools.show`). design-flow.png, the layers
and the way a batch flows through them, is drawn with Pillow from the boxes listed in `flow()`.
The output is deterministic: running the script again on the same photo, with the same
pixelpipe, torch and Pillow, writes the same bytes.

The folder must stay under 1.5 MiB (tests/test_docs.py; the script exits with status 1 when it
is not), and the input's fine texture is what the bytes go to, so the pictures spend area only
where it shows something: the op strips' tiles are 144 px, the presets' 128 px (three epochs)
and the catalogue's 112 px (the output alone); a strip shows each output once;
every PNG is reduced to a palette (256 colours; 64 for the catalogue) without dithering.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

import pixelpipe as pp
from pixelpipe import presets
from pixelpipe.decode import decode_region
from pixelpipe.tools.show import grid_size, show

HERE = Path(__file__).resolve().parent
PHOTO = HERE.parent.parent / "shared" / "data" / "imagenet-sample" / "n01443537_goldfish.JPEG"
TILE = 144
SHORT_SIDE = 240  # the ops' input: the photo with its shorter side reduced to this
COLOURS = 256
MAX_TOTAL, MAX_PNG = 1.5 * 2**20, 120_000  # bytes: tests/test_docs.py's caps on docs/img
# the augmentation catalogue's pictures (one per op, its output alone: the input is the one every
# strip above starts with) are smaller, so that docs/img stays under its cap
SMALL_TILE = 112
SMALL_COLOURS = 64
# the presets' grids (docs/getting-started.md): the original and epochs 0..2, smaller tiles
PRESET_TILE = 128
PRESET_EPOCHS = 3


# the boxes of the synthetic image's ellipse and rectangle, (x0, y0, x1, y1) fractions
SHAPES = [[0.26, 0.05, 0.47, 0.53], [0.84, 0.36, 1.0, 0.71]]


@dataclass
class Column:
    caption: str
    ops: list[pp.ops.Op]
    epoch: int = 0
    boxes: list[list[float]] | None = None  # (x0, y0, x1, y1) fractions of the input: drawn on the output


def shear(sizes: torch.Tensor, draws: pp.random.Draws) -> torch.Tensor:
    """Warp's example: a random horizontal shear about the image centre, per sample."""
    n = len(sizes)
    s = draws.uniform(0, -0.6, 0.6).to(torch.float64)
    m = torch.eye(3, dtype=torch.float64).repeat(n, 1, 1)
    m[:, 0, 1] = s
    m[:, 0, 2] = -s * sizes[:, 0] / 2  # keep the centre row in place
    return m


def blur(x: torch.Tensor) -> torch.Tensor:
    """Lambda's example: a 5x5 box blur of the batch (float32 NCHW in [0, 1])."""
    return torch.nn.functional.avg_pool2d(x, 5, stride=1, padding=2, count_include_pad=False)


def epochs(caption: str, ops: list[pp.ops.Op], ks: Sequence[int] = (0, 1, 2),
           boxes: list[list[float]] | None = None) -> list[Column]:
    """The columns of a random op: its output at epochs ks, captioned once ("code: epochs 0,
    1, 2") under the first, the caption running on under the others."""
    first = f"{caption}: epoch{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}"
    return [Column(first if i == 0 else "", ops, k, boxes) for i, k in enumerate(ks)]


def strips() -> dict[str, list[Column]]:
    """Picture name -> its columns. Random ops show epochs 0..2; deterministic ones variants."""
    return {
        "resize": [Column("Resize(64)", [pp.Resize(64)]),
                   Column("Resize((120, 240))", [pp.Resize((120, 240))]),
                   Column("Resize((240, 120))", [pp.Resize((240, 120))])],
        "crop": [Column("Crop(0.5)", [pp.Crop(0.5)]),
                 Column("Crop(0.5, anchor=(0., 0.))", [pp.Crop(0.5, anchor=(0.0, 0.0))]),
                 Column("Crop((150, 200), anchor=(20, 40))", [pp.Crop((150, 200), anchor=(20, 40))])],
        "center_crop": [Column("CenterCrop(0.6)", [pp.CenterCrop(0.6)]),
                        Column("CenterCrop(160)", [pp.CenterCrop(160)]),
                        Column("CenterCrop((120, 340))", [pp.CenterCrop((120, 340))])],
        "random_resized_crop": epochs("RandomResizedCrop(160)", [pp.RandomResizedCrop(160)]),
        "center_resized_crop": [Column("CenterResizedCrop(160)", [pp.CenterResizedCrop(160)]),
                                Column("CenterResizedCrop((120, 240))", [pp.CenterResizedCrop((120, 240))]),
                                Column("... ratio=(2, 2)", [pp.CenterResizedCrop((120, 240), ratio=(2, 2))])],
        "pad": [Column("Pad(40)", [pp.Pad(40)]),
                Column("Pad(40, mode='reflect')", [pp.Pad(40, mode="reflect")]),
                Column("Pad(40, mode='wrap')", [pp.Pad(40, mode="wrap")])],
        "random_flip": [Column("RandomFlip(1.0)", [pp.RandomFlip(1.0)]),
                        Column("RandomFlip(0.0, 1.0)", [pp.RandomFlip(0.0, 1.0)]),
                        Column("RandomFlip(1.0, 1.0)", [pp.RandomFlip(1.0, 1.0)])],
        "random_rotate": [Column("RandomRotate((30, 30))", [pp.RandomRotate((30, 30))]),
                          Column("... border='reflect'", [pp.RandomRotate((30, 30), border="reflect")]),
                          Column("... expand=True", [pp.RandomRotate((30, 30), expand=True)])],
        "random_affine": epochs("RandomAffine(15, (0.1, 0.1), (0.8, 1.2), 10)",
                                [pp.RandomAffine(15, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10)]),
        "random_perspective": epochs("RandomPerspective(0.5, p=1.0)", [pp.RandomPerspective(0.5, p=1.0)]),
        # the default field moves pixels by a few pixels: a stronger, smoother one and the
        # control-point form show the shape of the deformation; boxes follow it
        "elastic_transform": [Column("ElasticTransform()", [pp.ElasticTransform()], 0, SHAPES),
                              Column("alpha 1000, sigma 16", [pp.ElasticTransform(1000.0, 16.0)], 0, SHAPES),
                              Column("control points (4, 6), 30 px",
                                     [pp.ElasticTransform(control_points=(4, 6), max_displacement=30.0)], 0, SHAPES)],
        # epochs whose draws show the shear clearly (0 and 1 happen to draw small ones)
        "warp": epochs("Warp(shear, border='reflect')", [pp.Warp(shear, border="reflect")], (2, 5, 7)),
        "color_jitter": [Column("brightness=(1.5, 1.5)", [pp.ColorJitter(brightness=(1.5, 1.5))]),
                         Column("contrast=(0.4, 0.4)", [pp.ColorJitter(contrast=(0.4, 0.4))]),
                         Column("saturation=(2.0, 2.0)", [pp.ColorJitter(saturation=(2.0, 2.0))]),
                         Column("hue=(0.25, 0.25)", [pp.ColorJitter(hue=(0.25, 0.25))])],
        # an epoch that draws the op and one that keeps the input
        "random_grayscale": epochs("RandomGrayscale(0.5)", [pp.RandomGrayscale(0.5)], (1, 2)),
        "random_invert": epochs("RandomInvert(0.5)", [pp.RandomInvert(0.5)], (1, 2)),
        "normalize": [Column("Normalize(ImageNet)", [pp.Normalize(presets.IMAGENET_MEAN, presets.IMAGENET_STD)]),
                      Column("Normalize([0.5]*3, [0.5]*3)", [pp.Normalize([0.5] * 3, [0.5] * 3)])],
        "gaussian_noise": [Column("GaussianNoise(sigma=0.08)", [pp.GaussianNoise(sigma=0.08)]),
                           Column("GaussianNoise(sigma=0.2)", [pp.GaussianNoise(sigma=0.2)]),
                           Column("GaussianNoise(0.1, sigma=0.1)", [pp.GaussianNoise(0.1, sigma=0.1)])],
        **detection_strips(),
        "lambda": [Column("Lambda(blur)", [pp.Lambda(blur)]),
                   Column("crop, Lambda(blur), rotate",
                          [pp.CenterCrop(0.7), pp.Lambda(blur), pp.RandomRotate((20, 20), border="reflect")])],
    }


def detection_strips() -> dict[str, list[Column]]:
    """The detection ops; the boxes of the picture's two shapes drawn where they land (yellow).
    The ops that pick a size are followed by a fixed window anchored top-left (what a batch
    pads them to), so that the sizes they drew show."""
    b = SHAPES
    corner = lambda h, w: pp.Crop((h, w), anchor=(0.0, 0.0), fill=114)
    return {
        "random_zoom_out": epochs("RandomZoomOut(p=1.0), Resize((180, 240))",
                                  [pp.RandomZoomOut(p=1.0), pp.Resize((180, 240))], boxes=b),
        "random_iou_crop": epochs("RandomIoUCrop(), Resize((180, 240))",
                                  [pp.RandomIoUCrop(), pp.Resize((180, 240))], (0, 1, 3), b),
        "scale_jitter": epochs("ScaleJitter(240, (0.3, 1.0)), Crop((140, 240), anchor=(0., 0.))",
                               [pp.ScaleJitter(240, (0.3, 1.0)), corner(140, 240)], boxes=b),
        "random_shortest_size": epochs("RandomShortestSize((60, 140), 240), Crop((140, 240), anchor=(0., 0.))",
                                       [pp.RandomShortestSize((60, 140), 240), corner(140, 240)], boxes=b),
        "letterbox": [Column("LetterBox(240, fill=114)", [pp.LetterBox(240, fill=114)], 0, b),
                      Column("LetterBox((240, 120))", [pp.LetterBox((240, 120))], 0, b),
                      Column("... anchor=(0., 0.)", [pp.LetterBox(240, anchor=(0.0, 0.0))], 0, b)],
        "sanitize_boxes": [Column("Crop(0.5, anchor=(0., 0.))", [pp.Crop(0.5, anchor=(0.0, 0.0))], 0, b),
                           Column("... SanitizeBoxes(min_visibility=0.3)",
                                  [pp.Crop(0.5, anchor=(0.0, 0.0)), pp.SanitizeBoxes(min_visibility=0.3)], 0, b)],
    }


def catalogue_strips() -> dict[str, list[Column]]:
    """The augmentation catalogue: a small picture per op, of its output for one or two
    arguments or epochs (`run_any` runs it; batch ops mix the image with itself turned)."""
    flip, turn = pp.RandomFlip(1.0), pp.RandomRotate((90, 90))
    return {
        "random_crop": [Column("RandomCrop(160, padding=30)", [pp.RandomCrop(160, padding=30)], 1)],
        "random_rotate90": [Column("epoch 1, then Resize", [pp.RandomRotate90(1.0), pp.Resize((180, 240))], 1)],
        "channel_shuffle": [Column("ChannelShuffle", [pp.ChannelShuffle(1.0)], 1)],
        "rgb_shift": [Column("red +80", [pp.RGBShift((80, 80), 0, 0, p=1.0)])],
        "random_hsv": [Column("hue +0.25 turns", [pp.RandomHSV((0.25, 0.25), p=1.0)])],
        "salt_and_pepper": [Column("amount 0.1", [pp.SaltAndPepper(0.1, p=1.0)])],
        "jpeg_quality": [Column("quality 5", [pp.JpegQuality(5, p=1.0)])],
        "random_posterize": [Column("2 bits", [pp.RandomPosterize(2, p=1.0)])],
        "random_solarize": [Column("threshold 0.5", [pp.RandomSolarize(0.5, p=1.0)])],
        "random_autocontrast": [Column("autocontrast", [pp.RandomAutocontrast(1.0)])],
        "random_equalize": [Column("equalize", [pp.RandomEqualize(1.0)])],
        "random_gamma": [Column("gamma 2.0", [pp.RandomGamma(2.0, p=1.0)]),
                         Column("gamma 0.5", [pp.RandomGamma(0.5, p=1.0)])],
        "gaussian_blur": [Column("31 taps, sigma 8", [pp.GaussianBlur(31, 8.0)])],
        "motion_blur": [Column("length <= 21", [pp.MotionBlur(21, p=1.0)])],
        "median_blur": [Column("11x11 median", [pp.MedianBlur(11, p=1.0)])],
        "random_sharpness": [Column("factor 5", [pp.RandomSharpness((5.0, 5.0), p=1.0)])],
        "random_adjust_sharpness": [Column("factor 0", [pp.RandomAdjustSharpness(0.0, p=1.0)])],
        "random_erasing": [Column("value=0", [pp.RandomErasing(1.0)]),
                           Column("value='random'", [pp.RandomErasing(1.0, value="random")], 1)],
        "cutout": [Column("3 holes of 60", [pp.Cutout(60, num_holes=3)])],
        "grid_mask": [Column("d 40-80, turned", [pp.GridMask((40, 80), rotate=45, p=1.0)])],
        "mix_up": [Column("with a 2nd image", [pp.MixUp(num_classes=2)])],
        "cut_mix": [Column("with a 2nd image", [pp.CutMix(num_classes=2)], 2)],
        "mosaic": [Column("with the 2nd image", [pp.Mosaic()], 1)],
        "one_of": [Column(f"epoch {k}", [pp.OneOf([flip, turn])], k) for k in (0, 1)],
        "random_choice": [Column("epoch 4", [pp.RandomChoice([flip, turn])], 4)],
        "some_of": [Column("2 of 3",
                           [pp.SomeOf([pp.RandomEqualize(1.0), pp.RandomSolarize(0.5, p=1.0),
                                       pp.GaussianBlur(9, 3.0)], n=2)])],
        "rand_augment": [Column(f"epoch {k}", [pp.RandAugment(2, 15)], k) for k in (0, 1)],
        "timm_rand_augment": [Column("rand-m9-mstd0.5-inc1", [pp.TimmRandAugment(prob=1.0)], 2)],
        "trivial_augment_wide": [Column("epoch 2", [pp.TrivialAugmentWide()], 2)],
        "auto_augment": [Column("epoch 3", [pp.AutoAugment()], 3)],
        "aug_mix": [Column("severity 6", [pp.AugMix(severity=6)], 1)],
        "random_order": [Column(f"epoch {k}",
                                [pp.RandomOrder([pp.RandomRotate((30, 30)), pp.RandomAffine(0, shear=(30, 30))])], k)
                         for k in (0, 1)],
    }


def save_catalogue(image: np.ndarray, save: Callable[..., None]) -> None:
    """The catalogue's pictures (catalogue_strips), through main's `save`: SMALL_TILE tiles of
    the output alone, SMALL_COLOURS colours."""
    for stem, columns in catalogue_strips().items():
        tiles = [run_any(c, image) for c in columns]
        captions = [c.caption for c in columns]
        save(f"op-{stem.replace('_', '-')}", lambda tiles=tiles, captions=captions: show(
            tiles, captions=captions, columns=len(tiles), tile=SMALL_TILE), SMALL_COLOURS)


def run_any(column: Column, image: np.ndarray) -> np.ndarray:
    """`run`, or for batch ops the first row of a batch of the image and itself turned by 180
    degrees (labels 0 and 1), so that the mixing shows."""
    if not any(isinstance(op, pp.BatchOp) for op in column.ops):
        return run(column, image)
    other = torch.from_numpy(np.ascontiguousarray(image[::-1, ::-1]))
    out = pp.Compose(column.ops)([torch.from_numpy(image), other], seed=0, epoch=column.epoch, label=torch.tensor([0, 1]))
    return (out["image"][0].clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()


# ----------------------------------------------------------------------------- presets
def preset_grid(name: str, photo: np.ndarray) -> Image.Image:
    """`show`'s grid of a preset on the photo: the original, then PRESET_EPOCHS epochs (one for
    a preset without random ops, whose epochs are all alike). yolo's mosaic mixes four images
    of a batch: it gets the batch of `yolo_batch` with its boxes, and the grid keeps its first
    row."""
    t = presets.PRESETS[name]()
    columns = PRESET_EPOCHS if any(not op.deterministic for op in t.ops) else 1
    caption = f"presets.{name}()"
    if name != "yolo":
        return show([photo], t, captions=[caption], columns=columns, tile=PRESET_TILE)
    images, boxes, labels = yolo_batch(photo)
    grid = show(images, t, captions=[f"{caption}, a batch of 4 (its first sample)"] + [""] * 3,
                columns=columns, tile=PRESET_TILE, boxes=boxes, box_labels=labels)
    return grid.crop((0, 0, *grid_size(1, columns + 1, PRESET_TILE)))


def yolo_batch(photo: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], list[list[int]]]:
    """Four images for the mosaic, so that its quadrants tell them apart: the photo, then the
    photo flipped left-right, upside down and both, its hue turned by one, two and three
    quarter turns; the boxes of its two shapes (pixels, labels 0 and 1) moved with them."""
    h, w = photo.shape[:2]
    images, boxes = [], []
    for k, (fh, fv) in enumerate(((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0))):
        hue = (0.25 * k + 0.5) % 1.0 - 0.5  # a quarter turn more per image, in [-0.5, 0.5)
        ops = [pp.RandomFlip(fh, fv), pp.ColorJitter(hue=(hue, hue))] if k else []
        t = pp.Compose(ops, dtype=torch.uint8, layout="NHWC")
        out = t([torch.from_numpy(photo)], boxes=[(torch.tensor(SHAPES) * torch.tensor([w, h, w, h])).tolist()])
        images.append(out["image"][0].numpy())
        boxes.append(out["boxes"][0].numpy())
    return images, boxes, [[0, 1]] * 4


# ----------------------------------------------------------------------------- design-flow.png
@dataclass
class Step:
    title: str
    where: str  # the modules that do it
    what: str  # one or two short lines


def flow() -> tuple[list[Step], list[Step]]:
    """The steps one batch goes through: planning on the host, then the pixels."""
    host = [Step("reader", "readers/, loader/", "bytes or arrays,\nlabel, targets"),
            Step("header", "decode/headers", "size, orientation;\nnothing decoded"),
            Step("sampled parameters", "ops/, data/random", "per-sample draws of\n(seed, epoch, index, op)"),
            Step("plan", "plan/", "one matrix, one colour\nmatrix, source regions")]
    pixels = [Step("decode", "decode/", "only the region;\nreduced DCT scale"),
              Step("one warp", "kernels/", "every geometric op\nat once, antialiased"),
              Step("one pointwise pass", "kernels/", "colour, clamp, normalise,\ncast, layout"),
              Step("pixel ops", "ops/ (PixelOp)", "noise, Lambda, ...\non float NCHW"),
              Step("output + targets", "plan/output, data/targets", "tensor; boxes, keypoints,\nmasks moved; batch ops")]
    return host, pixels


def draw_flow() -> Image.Image:
    """The layers (Pipeline > Engine > Compose) and the way one batch flows through them."""
    w, h = 1240, 470
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=15)
    small = ImageFont.load_default(size=13)
    big = ImageFont.load_default(size=17)
    ink, grey, accent = (30, 30, 30), (110, 110, 110), (40, 90, 160)

    def box(x0: int, y0: int, x1: int, y1: int, step: Step, fill: tuple[int, int, int]) -> None:
        d.rounded_rectangle((x0, y0, x1, y1), 8, fill=fill, outline=ink, width=2)
        cx = (x0 + x1) // 2
        d.text((cx, y0 + 12), step.title, font=big, fill=ink, anchor="mt")
        d.text((cx, y0 + 36), step.where, font=small, fill=accent, anchor="mt")
        d.multiline_text((cx, y0 + 58), step.what, font=small, fill=grey, anchor="ma", align="center", spacing=3)

    def arrow(x0: int, y0: int, x1: int, y1: int) -> None:
        d.line((x0, y0, x1, y1), fill=ink, width=2)
        dx, dy = np.sign(x1 - x0), np.sign(y1 - y0)
        tip = [(x1, y1), (x1 - 9 * dx - 5 * dy, y1 - 9 * dy - 5 * dx), (x1 - 9 * dx + 5 * dy, y1 - 9 * dy + 5 * dx)]
        d.polygon(tip, fill=ink)

    # the layers: a Pipeline holds the reader and an Engine; the Engine runs a Compose's plan
    d.rounded_rectangle((10, 10, w - 10, h - 10), 14, outline=grey, width=2)
    d.text((26, 20), "Pipeline (loader/): epoch order, shards, prefetch threads, cache, errors, stats",
           font=font, fill=ink)
    d.rounded_rectangle((250, 52, w - 24, h - 24), 12, outline=accent, width=2)
    d.text((266, 62), "Engine (engine/): decoding threads, GPU decoder, device. It runs a Compose "
           "(compose.py: ops + output form), planned into stages by plan/", font=font, fill=accent)
    host, pixels = flow()
    bw, bh, gap = 214, 112, 24
    y_host, y_pix = 100, 300
    xs = [30] + [270 + k * (bw + gap) for k in range(3)]
    for k, step in enumerate(host):
        box(xs[k], y_host, xs[k] + bw, y_host + bh, step, (250, 250, 244) if k == 0 else (244, 248, 255))
        if k:
            arrow(xs[k - 1] + bw, y_host + bh // 2, xs[k] - 2, y_host + bh // 2)
    d.text((xs[1], y_host + bh + 10), "on the host: a few hundred numbers per batch (numpy, or C)",
           font=small, fill=grey)
    bw2, gap2 = 172, 17
    xs2 = [270 + k * (bw2 + gap2) for k in range(len(pixels))]
    for k, step in enumerate(pixels):
        box(xs2[k], y_pix, xs2[k] + bw2, y_pix + bh, step, (255, 247, 240))
        if k:
            arrow(xs2[k - 1] + bw2, y_pix + bh // 2, xs2[k] - 2, y_pix + bh // 2)
    d.text((xs2[0], y_pix + bh + 10), "the pixels: on the CPU's threads or the GPU (nvImageCodec, one Triton "
           "kernel for the warp and the pointwise pass)", font=small, fill=grey)
    # plan -> decode: down from the plan's box, left, down into decode's box
    px, mid = xs[3] + bw // 2, (y_host + bh + y_pix) // 2 + 8
    d.line((px, y_host + bh, px, mid), fill=ink, width=2)
    d.line((px, mid, xs2[0] + bw2 // 2, mid), fill=ink, width=2)
    arrow(xs2[0] + bw2 // 2, mid, xs2[0] + bw2 // 2, y_pix - 2)
    return img


def run(column: Column, image: np.ndarray) -> np.ndarray:
    """The column's ops on the image (float32 NCHW, as a Lambda expects), back to HWC uint8
    for display. Normalised values are shown as (x + 2.5) / 5, which fits their range."""
    t = pp.Compose(column.ops, box_format="xyxyn")
    if column.boxes is not None:
        out = t([torch.from_numpy(image)], seed=0, epoch=column.epoch, boxes=[column.boxes])
        return draw_boxes(out["image"][0], out["boxes"][0])
    x = t([torch.from_numpy(image)], seed=0, epoch=column.epoch)[0]
    if any(isinstance(op, pp.Normalize) for op in column.ops):
        x = (x + 2.5) / 5
    return (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()


def draw_boxes(x: torch.Tensor, boxes: torch.Tensor) -> np.ndarray:
    """A CHW float image with its boxes ([K, 4] fractions) drawn in yellow, as HWC uint8."""
    img = Image.fromarray((x.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy())
    h, w = x.shape[1:]
    draw = ImageDraw.Draw(img)
    for x0, y0, x1, y1 in (boxes * torch.tensor([w, h, w, h])).tolist():
        draw.rectangle([x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)], outline=(255, 220, 0), width=max(2, w // 80))
    return np.asarray(img)


def small_png(img: Image.Image, colours: int = COLOURS) -> bytes:
    """PNG bytes of img reduced to COLOURS colours (median cut, no dithering: dither noise
    costs more bytes than the banding it hides at this size)."""
    q = img.quantize(colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    q.save(buf, "PNG", optimize=True)
    return buf.getvalue()


def load_photo(path: Path | None, synthetic: bool) -> tuple[bytes, str]:
    if not synthetic:
        path = path or PHOTO
        if path.is_file():
            return path.read_bytes(), path.name
        print(f"{path} not found; using a synthetic image", file=sys.stderr)
    from pixelpipe.tools.datasets import synthetic as make

    for data, _ in make(40, seed=3):  # the first landscape image of a fixed synthetic set
        arr = decode_region(data, rgb=True)[0]
        if arr.shape[1] > arr.shape[0] * 1.2 and arr.shape[2] == 3:
            return data, "synthetic"
    raise RuntimeError("no landscape image in the synthetic set")


def decoded(data: bytes) -> np.ndarray:
    """The photo decoded, without its outermost pixel on each side (the goldfish photo has a
    1-pixel black frame, which mirrored borders would draw as lines inside the pictures)."""
    return np.ascontiguousarray(decode_region(data, rgb=True)[0][1:-1, 1:-1])


def reduce(arr: np.ndarray) -> np.ndarray:
    """The photo with its shorter side reduced to SHORT_SIDE (antialiased, by pixelpipe)."""
    if min(arr.shape[:2]) <= SHORT_SIDE:
        return arr
    t = pp.Compose([pp.Resize(SHORT_SIDE)], dtype=torch.uint8, layout="NHWC")
    return t([torch.from_numpy(arr)])[0].numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photo", type=Path, nargs="?", const=PHOTO, default=None,
                        help=f"draw on a photograph instead of the synthetic image (default photo {PHOTO})")
    parser.add_argument("--out", type=Path, default=HERE / "img", help="output folder (default docs/img)")
    args = parser.parse_args(argv)
    data, name = load_photo(args.photo, args.photo is None)
    photo = decoded(data)
    image = reduce(photo)
    args.out.mkdir(parents=True, exist_ok=True)
    written: list[tuple[str, int]] = []

    def save(stem: str, make: Callable[[], Image.Image], colours: int = COLOURS) -> None:
        png = small_png(make(), colours)
        (args.out / f"{stem}.png").write_bytes(png)
        written.append((stem, len(png)))

    for stem, columns in strips().items():
        tiles = [image] + [run(c, image) for c in columns]
        captions = [f"input ({image.shape[1]}x{image.shape[0]})"] + [c.caption for c in columns]
        save(f"op-{stem.replace('_', '-')}",
             lambda tiles=tiles, captions=captions: show(tiles, captions=captions, columns=len(tiles) - 1, tile=TILE))
    save_catalogue(image, save)
    save("design-flow", draw_flow)
    for preset in presets.PRESETS:
        save(f"preset-{preset.replace('_', '-')}", lambda preset=preset: preset_grid(preset, photo))
    total = sum(n for _, n in written)
    for stem, n in written:
        print(f"{stem + '.png':<32}{n / 1024:8.1f} KiB")
    print(f"{len(written)} pictures of {name} in {args.out}: {total / 1024:.0f} KiB "
          f"(cap {MAX_TOTAL / 1024:.0f} KiB, {MAX_PNG:,} bytes a picture)")
    return 0 if total < MAX_TOTAL and all(n < MAX_PNG for _, n in written) else 1


if __name__ == "__main__":
    sys.exit(main())
