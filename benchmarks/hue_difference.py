"""How far pixelpipe's fused hue (a rotation about the grey axis in YIQ) is from torchvision's
hue (a shift of H in HSV), on real photographs. Prints a table; used in docs/design.md.

    python benchmarks/hue_difference.py [--data ../shared/data/imagenet-sample] [-n 50]

The HSV shift is written here in numpy following its textbook definition (torchvision's
adjust_hue converts RGB -> HSV, adds the shift to H modulo 1, converts back).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from pixelpipe.ops.color import _hue_matrix


def hsv_shift(rgb: np.ndarray, shift: float) -> np.ndarray:
    """rgb float in [0, 1], HxWx3 -> hue-shifted rgb."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    mx, mn = rgb.max(-1), rgb.min(-1)
    d = mx - mn
    safe = np.where(d > 0, d, 1.0)
    h = np.where(mx == r, (g - b) / safe % 6, np.where(mx == g, (b - r) / safe + 2, (r - g) / safe + 4)) / 6
    h = np.where(d > 0, h, 0.0)
    s = np.where(mx > 0, d / np.where(mx > 0, mx, 1.0), 0.0)
    v = mx
    h = (h + shift) % 1.0
    i = np.floor(h * 6)
    f = h * 6 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.astype(int) % 6
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros_like(rgb)
    for k, (cr, cg, cb) in enumerate(choices):
        m = i == k
        out[..., 0][m], out[..., 1][m], out[..., 2][m] = cr[m], cg[m], cb[m]
    return out


def yiq_rotate(rgb: np.ndarray, shift: float) -> np.ndarray:
    m = _hue_matrix(torch.tensor([shift], dtype=torch.float64))[0].numpy()
    return np.clip(rgb @ m[:, :3].T + m[:, 3] / 255.0, 0.0, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/imagenet-sample"))
    ap.add_argument("-n", type=int, default=50)
    args = ap.parse_args()
    files = sorted(Path(args.data).glob("*.JPEG"))[: args.n]
    if not files:
        raise SystemExit(f"no JPEGs in {args.data}")
    images = []
    for f in files:
        im = Image.open(f).convert("RGB")
        im.thumbnail((160, 160))
        images.append(np.asarray(im, dtype=np.float64) / 255.0)
    print(f"hue: YIQ rotation (pixelpipe) vs HSV shift (torchvision), {len(images)} photos from {args.data}")
    print(f"{'shift (turns)':>14}{'mean abs diff (0-255)':>24}{'99th pct':>10}{'max':>8}")
    for shift in (0.02, 0.05, 0.1, 0.25, 0.5):
        diffs = np.concatenate([np.abs(hsv_shift(a, shift) - yiq_rotate(a, shift)).ravel() for a in images]) * 255
        print(f"{shift:>14.2f}{diffs.mean():>24.2f}{np.percentile(diffs, 99):>10.1f}{diffs.max():>8.1f}")


if __name__ == "__main__":
    main()
