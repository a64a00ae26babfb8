"""What the GPU decoding tests share (tests/test_decode_gpu.py, tests/test_decode_gpu_views.py):
images encoded with Pillow, the ImageNet sample's photos, decoders per setting, the probe that
tries region decodes in a subprocess first (NVIDIA/nvImageCodec#55), and the tolerances, whose
reasons test_decode_gpu.py's docstring gives. Imported only by modules that skipped already
where there is no CUDA device or nvImageCodec."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import SAMPLE_DIR, SAMPLE_MISSING
from PIL import Image, ImageOps

from pixelpipe.decode import read_header
from pixelpipe.decode.gpu import GpuDecoder

PILLOW_MEAN, PILLOW_MAX = 1.5, 40
REGION_MEAN, REGION_MAX = 0.5, 40
HW_FRACTIONS = [None, 0.0, 1.0]
CUDA = torch.device("cuda")


def save(im: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def with_orientation(im: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return save(im, "JPEG", quality=92, exif=exif.tobytes())


def pillow_rgb(data: bytes) -> np.ndarray:
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def assert_close(got: torch.Tensor, ref: np.ndarray, mean: float, peak: float, what: str) -> None:
    g = got.cpu().numpy().astype(np.int16)
    assert g.shape == ref.shape, f"{what}: shape {g.shape}, expected {ref.shape}"
    d = np.abs(g - ref.astype(np.int16))
    assert d.mean() < mean and d.max() < peak, (
        f"{what}: mean |diff| {d.mean():.3f} (< {mean}), max {d.max()} (< {peak})")


def sample_photos(n: int) -> list[bytes]:
    """The first n RGB/grey JPEGs of the sample (CMYK files go to the CPU on purpose)."""
    if not SAMPLE_DIR.is_dir():
        return []
    out = []
    for path in sorted(SAMPLE_DIR.glob("*.JPEG")):
        data = path.read_bytes()
        info = read_header(data)
        if info.format == "jpeg" and info.channels in (1, 3):
            out.append(data)
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    out = sample_photos(12)
    if not out:
        pytest.skip(SAMPLE_MISSING)
    return out


@pytest.fixture(scope="module")
def small() -> Image.Image:
    """A 131 x 97 RGB image with detail everywhere (neither side a multiple of 8 or 16)."""
    photos = sample_photos(1)
    if photos:
        return Image.open(io.BytesIO(photos[0])).convert("RGB").crop((40, 60, 171, 157))
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:97, 0:131]
    img = np.stack([x * 2, y * 2, (x * y) % 256], -1) + rng.normal(0, 12, (97, 131, 3))
    return Image.fromarray(img.clip(0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def decoders():
    made: dict[object, GpuDecoder] = {}

    def get(hw_fraction: float | None = None, roi_decode: bool = True, fancy: bool = True) -> GpuDecoder:
        key = (hw_fraction, roi_decode, fancy)
        if key not in made:
            made[key] = GpuDecoder(CUDA, hw_fraction=hw_fraction, roi_decode=roi_decode, fancy_upsampling=fancy)
        return made[key]

    yield get
    for d in made.values():
        d.close()


PROBE = r"""
import io, sys
sys.path[:0] = {path!r}
import numpy as np, torch
from PIL import Image
from pixelpipe.decode import read_header
from pixelpipe.decode import read_header
from pixelpipe.decode.gpu import GpuDecoder
rng = np.random.default_rng(0)
blobs = [open(p, "rb").read() for p in {files!r}]
for i in range(32):
    h, w = (int(v) for v in rng.integers(64, 640, 2))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x ^ y) % 256], -1) + rng.normal(0, 8, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    blobs.append(buf.getvalue())
regions = []
for b in blobs:
    h, w = read_header(b).oriented_size
    y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
    regions.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
for hw in (None, 0.0, 1.0):
    batch, fallback, why = GpuDecoder(torch.device("cuda"), hw_fraction=hw).decode_regions(
        blobs, regions)
    torch.cuda.synchronize()
    print(f"hw_fraction={{hw}}: {{len(blobs)}} regions, {{len(fallback)}} fell back {{why[:1]}}")
"""


@pytest.fixture(scope="module")
def roi_safe() -> str:
    """Run region decodes in a subprocess first; fail (not crash) if that process dies."""
    files = [str(p) for p in sorted(SAMPLE_DIR.glob("*.JPEG"))[:32]] if SAMPLE_DIR.is_dir() else []
    code = PROBE.format(path=sys.path, files=files)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=False, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.fail("region decoding hung for 10 minutes in a subprocess")
    if done.returncode != 0:
        how = (f"was killed by signal {-done.returncode}" if done.returncode < 0
               else f"exited with {done.returncode}")
        pytest.fail(
            f"region (ROI) decoding {how} in a subprocess: NVIDIA/nvImageCodec#55 (0.9.0 ROI "
            "decode crashes on H100/B200, fails on A100)? Use GpuDecoder(roi_decode=False).\n"
            + (done.stdout + done.stderr)[-3000:])
    return done.stdout
