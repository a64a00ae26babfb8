"""A held-out image set for speed figures: JPEGs of other sizes and content than the ones a
pipeline was tuned on, written to a folder that `pixelpipe bench --data` and the other
benchmarks read.

    python benchmarks/heldout_set.py --out DIR [--synthetic 1200] [--seed 1]
    python benchmarks/heldout_set.py --out DIR --synthetic 0 --photos ../shared/data/imagenet-sample --variants 8

--synthetic N: N generated images (`pixelpipe.tools.datasets.synthetic`, seed --seed: shapes,
gradients and texture, short side 160 px up to a long side of 1,000 px, aspect 1/3 to 3, about
10% greyscale), written as they are generated. --photos DIR: each JPEG of DIR written
--variants times, each time rescaled by a factor log-uniform in [0.5, 2] (Lanczos), cropped to
an aspect ratio log-uniform in [1/2, 2] around a random centre and encoded at a quality in
[70, 97] with 4:2:0, 4:2:2 or 4:4:4 chroma: real photographs, at sizes and encodings the
folder does not have. Every choice comes from numpy's generator seeded with (seed, file
number, variant), so the set is the same on every machine. Prints the count, the pixel sizes'
range and the mean file size.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
from PIL import Image

SUBSAMPLING = (2, 1, 0)  # Pillow's codes for 4:2:0, 4:2:2, 4:4:4


def photo_variant(data: bytes, rng: np.random.Generator) -> bytes:
    """One rescaled, recropped, re-encoded copy of a JPEG (see the module docstring)."""
    img = Image.open(io.BytesIO(data))
    img = img.convert("RGB") if img.mode not in ("RGB", "L") else img
    scale = float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
    w, h = max(16, round(img.width * scale)), max(16, round(img.height * scale))
    img = img.resize((w, h), Image.LANCZOS)
    aspect = float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
    cw, ch = (w, min(h, max(16, round(w / aspect)))) if w / h < aspect else (min(w, max(16, round(h * aspect))), h)
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = img.crop((x0, y0, x0 + cw, y0 + ch))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=int(rng.integers(70, 98)), subsampling=int(rng.choice(SUBSAMPLING)))
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write (made if missing)")
    ap.add_argument("--synthetic", type=int, default=1200, help="generated images (default 1200)")
    ap.add_argument("--photos", default=None, help="a folder of JPEGs to rescale and re-encode")
    ap.add_argument("--variants", type=int, default=8, help="copies of each photo (default 8)")
    ap.add_argument("--seed", type=int, default=1, help="default 1 (the bench's built-in set is seed 0)")
    args = ap.parse_args()
    if args.synthetic < 0 or args.variants < 1:
        ap.error("--synthetic must be >= 0 and --variants >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    blobs: list[tuple[str, bytes]] = []
    if args.synthetic:
        from pixelpipe.tools.datasets import synthetic

        blobs += [(f"syn{i:05d}.jpg", b) for i, (b, _) in enumerate(synthetic(args.synthetic, args.seed))]
    if args.photos:
        files = sorted(p for p in Path(args.photos).iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
        if not files:
            ap.error(f"--photos {args.photos}: no JPEGs")
        for i, p in enumerate(files):
            data = p.read_bytes()
            for v in range(args.variants):
                rng = np.random.default_rng((args.seed, i, v))
                blobs.append((f"photo{i:04d}_{v}.jpg", photo_variant(data, rng)))
    if not blobs:
        ap.error("nothing to write: give --synthetic N or --photos DIR")
    sizes = []
    for name, data in blobs:
        (out / name).write_bytes(data)
        sizes.append(Image.open(io.BytesIO(data)).size)
    sides = np.array(sizes)
    print(f"{len(blobs)} JPEGs in {out}: widths {sides[:, 0].min()}-{sides[:, 0].max()}, heights "
          f"{sides[:, 1].min()}-{sides[:, 1].max()} px, {np.mean([len(d) for _, d in blobs]) / 1e3:.1f} KB on average")


if __name__ == "__main__":
    main()
