"""Draw the pictures of docs/ops.md and docs/getting-started.md into docs/img/.

    python docs/make_pictures.py               # a synthetic image (what docs/img holds)
    python docs/make_pictures.py --photo       # the goldfish photo from ../shared/data, for a
                                               # local look (ImageNet photos stay out of the repo)
    python docs/make_pictures.py --photo some.jpg --out /tmp/img

Every picture is computed by pixelpipe itself: one strip per op (the input, then the op's
output for a few arguments or epochs, each captioned with the code that made it) and one grid
per preset (`pixelpipe.tools.show`). The output is deterministic: running the script again on the
same photo writes the same bytes. Tiles are 160 px and the PNGs are reduced to 256 colours,
which keeps the whole folder well under 1.5 MB.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import pixelpipe as pp
from pixelpipe import presets
from pixelpipe.decode import decode_region
from pixelpipe.tools.show import show

HERE = Path(__file__).resolve().parent
PHOTO = HERE.parent.parent / "shared" / "data" / "imagenet-sample" / "n01443537_goldfish.JPEG"
TILE = 160
SHORT_SIDE = 240  # the ops' input: the photo with its shorter side reduced to this
COLOURS = 256


@dataclass
class Column:
    caption: str
    ops: list[pp.ops.Op]
    epoch: int = 0


def shear(sizes: torch.Tensor, draws: pp.random.Draws) -> torch.Tensor:
    """Warp's example: a random horizontal shear about the image centre, per sample."""
    n = len(sizes)
    s = draws.uniform(0, -0.6, 0.6).to(torch.float64)
    m = torch.eye(3, dtype=torch.float64).repeat(n, 1, 1)
    m[:, 0, 1] = s
    m[:, 0, 2] = -s * sizes[:, 0] / 2  # keep the centre row in place
    return m


def noise(x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)  # fixed, so the picture does not change between runs
    return (x + 0.08 * torch.randn(x.shape, generator=g)).clamp(0, 1)


def strips() -> dict[str, list[Column]]:
    """Picture name -> its columns. Random ops show epochs 0..2; deterministic ones variants."""
    epochs = lambda caption, op: [Column(f"{caption}, epoch {k}", [op], k) for k in range(3)]
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
        "random_resized_crop": epochs("RandomResizedCrop(160)", pp.RandomResizedCrop(160)),
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
                                pp.RandomAffine(15, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10)),
        "random_perspective": epochs("RandomPerspective(0.5, p=1.0)", pp.RandomPerspective(0.5, p=1.0)),
        # epochs whose draws show the shear clearly (0 and 1 happen to draw small ones)
        "warp": [Column(f"Warp(shear, ...), epoch {k}", [pp.Warp(shear, border="reflect")], k) for k in (2, 5, 7)],
        "color_jitter": [Column("brightness=(1.5, 1.5)", [pp.ColorJitter(brightness=(1.5, 1.5))]),
                         Column("contrast=(0.4, 0.4)", [pp.ColorJitter(contrast=(0.4, 0.4))]),
                         Column("saturation=(2.0, 2.0)", [pp.ColorJitter(saturation=(2.0, 2.0))]),
                         Column("hue=(0.25, 0.25)", [pp.ColorJitter(hue=(0.25, 0.25))])],
        "random_grayscale": [Column("RandomGrayscale(1.0)", [pp.RandomGrayscale(1.0)]),
                             *[Column(f"RandomGrayscale(0.5), epoch {k}", [pp.RandomGrayscale(0.5)], k)
                               for k in range(2)]],
        "normalize": [Column("Normalize(ImageNet)", [pp.Normalize(presets.IMAGENET_MEAN, presets.IMAGENET_STD)]),
                      Column("Normalize([0.5]*3, [0.5]*3)", [pp.Normalize([0.5] * 3, [0.5] * 3)])],
        "lambda": [Column("Lambda(noise)", [pp.Lambda(noise)]),
                   Column("crop, Lambda(noise), rotate",
                          [pp.CenterCrop(0.7), pp.Lambda(noise), pp.RandomRotate((20, 20), border="reflect")])],
    }


def run(column: Column, image: np.ndarray) -> np.ndarray:
    """The column's ops on the image (float32 NCHW, as a Lambda expects), back to HWC uint8
    for display. Normalised values are shown as (x + 2.5) / 5, which fits their range."""
    t = pp.Compose(column.ops)
    x = t([torch.from_numpy(image)], seed=0, epoch=column.epoch)[0]
    if any(isinstance(op, pp.Normalize) for op in column.ops):
        x = (x + 2.5) / 5
    return (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()


def small_png(img: Image.Image) -> bytes:
    """PNG bytes of img reduced to COLOURS colours (median cut, no dithering: dither noise
    costs more bytes than the banding it hides at this size)."""
    q = img.quantize(COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
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

    def save(stem: str, make: Callable[[], Image.Image]) -> None:
        png = small_png(make())
        (args.out / f"{stem}.png").write_bytes(png)
        written.append((stem, len(png)))

    for stem, columns in strips().items():
        tiles = [image] + [run(c, image) for c in columns]
        captions = [f"input ({image.shape[1]}x{image.shape[0]})"] + [c.caption for c in columns]
        save(f"op-{stem.replace('_', '-')}",
             lambda tiles=tiles, captions=captions: show(tiles, captions=captions, columns=len(tiles) - 1, tile=TILE))
    for preset in presets.PRESETS:
        save(f"preset-{preset.replace('_', '-')}",
             lambda preset=preset: show([photo], preset, captions=[f"presets.{preset}()"], columns=4, tile=TILE))
    total = sum(n for _, n in written)
    for stem, n in written:
        print(f"{stem + '.png':<32}{n / 1024:8.1f} KiB")
    print(f"{len(written)} pictures of {name} in {args.out}: {total / 1024:.0f} KiB")
    return 0 if total < 1.5 * 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
