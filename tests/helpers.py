"""Shared test helpers: deterministic test images, `check_op` (the contract every op keeps),
torchvision's policy operations written out (`torchvision_pixel_op`) and where the ImageNet
sample lives (`SAMPLE_DIR`, `need_sample`).

`check_op` is called by exactly one test class per op (STYLE.md, idea 8). Expected values are
never produced by the code under test alone: each check compares two runs that must agree by
the op contract (another dtype, another batch, another seed, the op list without the op).
"""

from __future__ import annotations

import ctypes
import functools
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe import Compose, ImageBatch, native
from pixelpipe.ops import Op

DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32)
LAYOUTS = ("NCHW", "NHWC")
# |x.float() - float32 output| allowed for float16/bfloat16 outputs, as (atol, rtol): two ulps of
# the format (2**-9 and 2**-6 relative), absolute at magnitude 2 (normalised values reach ~2.6
# and are formed as a difference of terms of that size). A result rounded once from float32 is
# within half an ulp; test_ops_color.TestNormalize checks that stricter bound on its own.
FLOAT_TOL = {torch.float16: (2 * 2**-9, 2**-9), torch.bfloat16: (2 * 2**-6, 2**-6)}

GREY_WEIGHTS = (0.299, 0.587, 0.114)

# ----------------------------------------------------------------------------- sample photos
# The ImageNet sample (500 real JPEGs) is not in the repository: it lives in ../shared/data,
# beside the checkout, wherever the checkout is (CI clones it anywhere). A GPU host gets a copy
# in the checkout instead (.gpu-host/data, from gpu-host/prepare.sh). Every test finds it here.
CHECKOUT = Path(__file__).resolve().parents[1]
DATA_README = CHECKOUT.parent / "shared" / "data" / "README.md"
SAMPLE_DIR = next((p for p in (DATA_README.parent / "imagenet-sample", CHECKOUT / ".gpu-host" / "data")
                   if p.is_dir()), DATA_README.parent / "imagenet-sample")
SAMPLE_MISSING = (f"the ImageNet sample {SAMPLE_DIR} is absent: put it beside the checkout "
                  f"(see ../shared/data/README.md, i.e. {DATA_README})")


def need_sample(name: str | None = None) -> Path:
    """SAMPLE_DIR, or the file `name` in it; the test is skipped when it is absent, with a
    message naming the README that says where the sample comes from."""
    if not SAMPLE_DIR.is_dir():
        pytest.skip(SAMPLE_MISSING)
    if name is None:
        return SAMPLE_DIR
    path = SAMPLE_DIR / name
    if not path.is_file():
        pytest.skip(f"{path} is missing from the ImageNet sample (see {DATA_README})")
    return path


# ----------------------------------------------------------------------------- images
def make_image(h: int, w: int, c: int = 3, seed: int = 0, noise: float = 6.0) -> np.ndarray:
    """uint8 HWC (or HW when c == 0): smooth gradients and waves plus a little noise, so that
    every pixel differs from its neighbours and any geometric error shows."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for k in range(max(c, 1)):
        fx, fy, ph = rng.uniform(0.15, 0.6), rng.uniform(0.15, 0.6), rng.uniform(0, 6.3)
        wave = 70 * np.sin(fx * x + ph) * np.cos(fy * y - ph)
        ramp = 90 * (x / max(w - 1, 1)) * (1 - k / 3) + 60 * (y / max(h - 1, 1))
        chans.append(50 + wave + ramp + rng.normal(0, noise, (h, w)))
    img = np.clip(np.stack(chans, -1), 0, 255).round().astype(np.uint8)
    return img[..., 0] if c == 0 else img


@functools.cache
def _varied(n: int, lo: int, hi: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(lo, hi + 1, 2))
        out.append(make_image(h, w, 1 if i % 5 == 3 else 3, seed=seed * 1000 + i))
    return tuple(out)


def varied_images(n: int, lo: int = 16, hi: int = 32, seed: int = 0) -> list[torch.Tensor]:
    """n HWC uint8 tensors of random sizes in [lo, hi], every fifth one grey (1 channel)."""
    return [torch.from_numpy(a.copy()) for a in _varied(n, lo, hi, seed)]


def run(ops: Sequence[Op], images, dtype: torch.dtype = torch.float32, layout: str = "NCHW",
        seed: int = 0, epoch: int = 0, indices=None, **kwargs) -> torch.Tensor:
    return Compose(list(ops), dtype=dtype, layout=layout, **kwargs)(
        images, seed=seed, epoch=epoch, indices=indices)


def hwc(x: torch.Tensor) -> np.ndarray:
    """One NCHW sample as an HWC numpy array."""
    return x.permute(1, 2, 0).numpy()


def grey(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """ITU-R 601 grey of RGB along `dim` (what RandomGrayscale, saturation and contrast use)."""
    w = torch.tensor(GREY_WEIGHTS, dtype=x.dtype)
    shape = [1] * x.dim()
    shape[dim] = 3
    return (x * w.view(shape)).sum(dim, keepdim=True)


# ----------------------------------------------------------------------------- policies
TORCHVISION_GREY = np.array([0.2989, 0.587, 0.114])  # torchvision's rgb_to_grayscale


def torchvision_pixel_op(name: str, x: np.ndarray, m: float) -> np.ndarray:
    """torchvision's definition of one colour or pixel operation on a float HWC image in
    [0, 1] (uint8 semantics for the level operations, on round(255 x)), clamped."""
    clip = lambda v: np.clip(v, 0.0, 1.0)
    if name == "Brightness":
        return clip(x * (1 + m))
    if name == "Color":
        return clip((1 + m) * x - m * (x @ TORCHVISION_GREY)[..., None])
    if name == "Contrast":
        return clip((1 + m) * x - m * (x @ TORCHVISION_GREY).mean())
    if name == "Sharpness":  # the 3x3 smoothing inside, the outermost pixels kept, then the blend
        k = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]]) / 13.0
        smooth = x.copy()
        h, w = x.shape[:2]
        smooth[1:-1, 1:-1] = sum(k[i, j] * x[i:i + h - 2, j:j + w - 2] for i in range(3) for j in range(3))
        return clip(smooth + (1 + m) * (x - smooth))
    levels = np.clip(np.round(x * 255), 0, 255).astype(np.uint8)
    if name == "Posterize":
        return (levels & ((0xFF << (8 - int(m))) & 0xFF)) / 255.0
    if name == "Solarize":
        return np.where(x >= m, 1 - x, x)
    if name == "AutoContrast":
        lo, hi = x.min((0, 1)), x.max((0, 1))
        return np.where(hi > lo, (x - lo) / np.where(hi > lo, hi - lo, 1), x)
    if name == "Equalize":
        from PIL import Image, ImageOps

        return np.asarray(ImageOps.equalize(Image.fromarray(levels))) / 255.0
    if name == "Invert":
        return 1 - x
    raise AssertionError(name)


# ----------------------------------------------------------------------------- check_op
class EmptyBatchMismatch(AssertionError):
    """Raised by check_op's last check (empty batch), so that a test class can xfail on that
    bug alone while every other check still fails loudly."""


def _rows_differ(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a != b).flatten(1).any(1)


def check_op(op: Op, *, head: Sequence[Op] = (), tail: Sequence[Op] = (), random: bool = True,
             p_zero: Op | None = None, float_only: bool = False) -> None:
    """Check the contract every op keeps, on Compose([*head, op, *tail]).

    Args:
        op: the op under test.
        head, tail: deterministic ops around it (tail: a Resize or crop when op does not end in
            one fixed size).
        random: op draws per-sample parameters (else it must ignore index, seed and epoch).
        p_zero: the same op with p=0 (or its probabilities at 0): must be the identity.
        float_only: the op needs a float output (Normalize): uint8 must be refused.
    """
    ops = [*head, op, *tail]
    imgs = varied_images(64)
    few = imgs[:8]
    idx8 = torch.arange(8) * 7 + 3

    # -- the input is never written to (list of tensors and ImageBatch)
    before = [t.clone() for t in few]
    batch = ImageBatch.from_list(few)
    data_before = batch.data.clone()
    base = run(ops, few, indices=idx8)
    again = run(ops, batch, indices=idx8)
    assert all(torch.equal(a, b) for a, b in zip(before, few)), "input images were modified"
    assert torch.equal(batch.data, data_before), "ImageBatch data was modified"
    assert torch.equal(base, again), "an ImageBatch and the same list of images give different outputs"

    # -- dtype, device, shape, layout; values agree with the float32 NCHW output
    assert base.dtype == torch.float32 and base.device.type == "cpu"
    assert base.dim() == 4 and base.shape[:2] == (8, 3), base.shape
    if not float_only:
        assert float(base.min()) >= 0.0 and float(base.max()) <= 1.0, "float output outside [0, 1]"
    for dtype in DTYPES:
        if dtype == torch.uint8 and float_only:
            with pytest.raises(ValueError, match="uint8"):
                Compose(ops, dtype=torch.uint8)
            continue
        outs = {}
        for layout in LAYOUTS:
            out = run(ops, few, dtype=dtype, layout=layout, indices=idx8)
            assert out.dtype == dtype and out.device.type == "cpu"
            assert out.is_contiguous()
            expect = base.shape if layout == "NCHW" else base.permute(0, 2, 3, 1).shape
            assert out.shape == expect, (dtype, layout, out.shape, expect)
            outs[layout] = out
        assert torch.equal(outs["NHWC"].permute(0, 3, 1, 2), outs["NCHW"]), f"{dtype}: NHWC != NCHW"
        got = outs["NCHW"].float()
        if dtype == torch.uint8:
            # the same value rounded to the nearest grey level
            assert float((got - base * 255).abs().max()) <= 0.5 + 1e-3, "uint8 != round(float32 * 255)"
        else:
            if dtype == torch.float32:
                assert torch.equal(got, base), "two float32 runs differ"
                continue
            atol, rtol = FLOAT_TOL[dtype]
            torch.testing.assert_close(got, base, atol=atol, rtol=rtol, msg=f"{dtype} differs from float32")

    # -- per-sample randomness: one image under 8 indices, twice, in one batch
    one = [imgs[0]] * 16
    idx = torch.cat([torch.arange(8), torch.arange(8)]) + 100
    out = run(ops, one, dtype=torch.uint8 if not float_only else torch.float32, indices=idx)
    assert torch.equal(out[:8], out[8:]), "the same (image, index) gave different rows in one batch"
    distinct = len({bytes(r.contiguous().view(torch.uint8).numpy()) for r in out[:8]})
    if random:
        assert distinct > 1, "8 different sample indices all got the same augmentation"
    else:
        assert distinct == 1, "a deterministic op gave different outputs for different indices"

    # -- same (seed, epoch, index) -> same pixels for batch sizes 1, 7 and 64, at any position
    idx64 = torch.arange(64) * 3 + 1000
    out64 = run(ops, imgs, seed=5, epoch=2, indices=idx64)
    pos7 = [63, 0, 17, 5, 41, 30, 52]
    out7 = run(ops, [imgs[i] for i in pos7], seed=5, epoch=2, indices=idx64[pos7])
    assert torch.equal(out7, out64[pos7]), "a batch of 7 differs from the same samples in a batch of 64"
    out1 = run(ops, [imgs[41]], seed=5, epoch=2, indices=idx64[41:42])
    assert torch.equal(out1[0], out64[41]), "a batch of 1 differs from the same sample in a batch of 64"

    # -- the seed and the epoch change random ops, and only random ops
    s1 = run(ops, few, seed=1, indices=idx8)
    e1 = run(ops, few, epoch=1, indices=idx8)
    for name, other in (("seed", s1), ("epoch", e1)):
        changed = bool(_rows_differ(other, base).any())
        assert changed == random, f"changing the {name} {'did not change' if random else 'changed'} the output"

    # -- p=0 is the identity: same as the list without the op
    if p_zero is not None:
        dt = torch.float32 if float_only else torch.uint8
        with_op = run([*head, p_zero, *tail], few, dtype=dt, indices=idx8)
        without = run([*head, *tail], few, dtype=dt, indices=idx8)
        assert torch.equal(with_op, without), f"{p_zero!r} is not the identity"

    # -- empty batch: [0, C, H, W] of the fixed output size (checked last, see EmptyBatchMismatch)
    for layout in LAYOUTS:
        dt = torch.float32 if float_only else torch.uint8
        try:
            empty = run(ops, [], dtype=dt, layout=layout)
        except ValueError as e:  # a clear error is acceptable too
            assert "empty" in str(e) or "size" in str(e), f"unclear error for an empty batch: {e}"
            continue
        shape = (0, *base.shape[1:]) if layout == "NCHW" else (0, *base.shape[2:], 3)
        if tuple(empty.shape) != shape or empty.dtype != dt:
            raise EmptyBatchMismatch(f"empty batch gave {tuple(empty.shape)} {empty.dtype}, "
                                     f"expected {shape} {dt}")


def native_built(name: str) -> Path | None:
    """The library `pip install` built from pixelpipe/native/<name> (None where it was not built)."""
    return native.find(Path(native.__file__).with_name(name), "test")


def private_copy(library: Path, tmp_path: Path) -> ctypes.CDLL:
    """A copy of a built native library, loaded on its own: its process-wide function pointers
    can be wired to stand-ins without touching those of the copy pixelpipe itself loaded."""
    copy = tmp_path / f"private-{library.name}"
    shutil.copy(library, copy)
    return ctypes.CDLL(str(copy))


# ----------------------------------------------------------------------------- detection sets
COCO_CATEGORIES = {1: "square", 3: "wide", 7: "tall"}


def _uncompressed_rle(mask: np.ndarray) -> dict:
    """COCO's uncompressed run-length encoding of a 0/1 mask [H, W]: runs in column-major
    order, starting with a run of zeros."""
    flat = mask.T.reshape(-1).astype(np.int64)
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [len(flat)]])).tolist()
    if flat[0] == 1:
        runs = [0, *runs]
    return {"size": list(mask.shape), "counts": runs}


def write_coco(root: Path, n: int = 6, seed: int = 0, keypoints: bool = False, fmt: str = "PNG") -> Path:
    """A COCO-format set of n images (make_image backgrounds, 40..90 px a side) under
    root/images, each with 0..3 solid rectangles (one of COCO_CATEGORIES each), and its
    instances JSON root/instances.json, which this returns. A rectangle's segmentation is its
    polygon (even annotations) or an uncompressed RLE of its pixels (odd ones); image 0 also
    has one crowd annotation; with keypoints, each object has 2 (its top-left and bottom-right
    corner pixels' centres, visible). The JSON's images hold "objects": the rectangles as
    (x0, y0, x1, y1, category) pixels, to check against."""
    import json

    from PIL import Image

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(40, 91, size=2))
        img = make_image(h, w, seed=seed * 1000 + i)
        objects = []
        for _ in range(int(rng.integers(0, 4)) if i else 3):
            x0, y0 = int(rng.integers(0, w - 12)), int(rng.integers(0, h - 12))
            x1, y1 = int(rng.integers(x0 + 6, min(w, x0 + 40) + 1)), int(rng.integers(y0 + 6, min(h, y0 + 40) + 1))
            cat = [1, 3, 7][len(anns) % 3]
            img[y0:y1, x0:x1] = [40 * cat % 256, 255 - 30 * cat, 90]
            objects.append((x0, y0, x1, y1, cat))
            ann = {"id": len(anns) + 1, "image_id": 100 + i, "category_id": cat, "iscrowd": 0,
                   "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0)}
            if len(anns) % 2 == 0:
                ann["segmentation"] = [[x0, y0, x1, y0, x1, y1, x0, y1]]
            else:
                m = np.zeros((h, w), np.uint8)
                m[y0:y1, x0:x1] = 1
                ann["segmentation"] = _uncompressed_rle(m)
            if keypoints:
                ann["keypoints"] = [x0 + 0.5, y0 + 0.5, 2, x1 - 0.5, y1 - 0.5, 2]
                ann["num_keypoints"] = 2
            anns.append(ann)
        if i == 0:
            anns.append({"id": len(anns) + 1, "image_id": 100, "category_id": 1, "iscrowd": 1,
                         "bbox": [0, 0, 5, 5], "area": 25, "segmentation": [[0, 0, 5, 0, 5, 5, 0, 5]]})
        name = f"{i:04d}.{'png' if fmt == 'PNG' else 'jpg'}"
        Image.fromarray(img).save(root / "images" / name, fmt)
        images.append({"id": 100 + i, "file_name": f"images/{name}", "height": h, "width": w, "objects": objects})
    data = {"images": images, "annotations": anns,
            "categories": [{"id": k, "name": v} for k, v in COCO_CATEGORIES.items()]}
    path = root / "instances.json"
    path.write_text(json.dumps(data))
    return path


# ----------------------------------------------------------------------------- volumes
def make_volume(d: int, h: int, w: int, seed: int = 0, dtype: torch.dtype = torch.int16) -> torch.Tensor:
    """[D, H, W] smooth waves plus a little noise in CT-like units (-1000..1000): every voxel
    differs from its neighbours, so a geometric error shows."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*(np.arange(s, dtype=np.float64) for s in (d, h, w)), indexing="ij")
    f = rng.uniform(0.15, 0.5, 3)
    vol = 600 * np.sin(f[0] * z + 1) * np.cos(f[1] * y - 0.5) + 300 * np.sin(f[2] * x) + 200 * (z / max(d - 1, 1))
    vol = vol + rng.normal(0, 5, vol.shape)
    return torch.from_numpy(np.clip(vol, -1000, 1000).round()).to(dtype)


def make_cube(d: int, h: int, w: int, lo: tuple[int, int, int], hi: tuple[int, int, int],
              value: int = 800, label: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(int16 volume, uint8 label map) [D, H, W]: background -1000, the box lo..hi-1 `value`
    in the volume and `label` in the label map: a shape whose position is known."""
    vol = torch.full((d, h, w), -1000, dtype=torch.int16)
    lab = torch.zeros(d, h, w, dtype=torch.uint8)
    box = tuple(slice(a, b) for a, b in zip(lo, hi))
    vol[box] = value
    lab[box] = label
    return vol, lab


def triton_device() -> tuple[str, bool]:
    """(device, interpreted) for the tests of a Triton kernel: "cuda" where CUDA and Triton
    are there, "cpu" under PIXELPIPE_TRITON_INTERPRET=1 (Triton's interpreter, small inputs);
    otherwise the calling test module is skipped."""
    import os

    from pixelpipe.kernels import gpu_kernels_available

    if os.environ.get("PIXELPIPE_TRITON_INTERPRET") == "1":
        os.environ["TRITON_INTERPRET"] = "1"
        pytest.importorskip("triton")
        return "cpu", True
    if gpu_kernels_available():
        return "cuda", False
    pytest.skip("needs CUDA and Triton (or PIXELPIPE_TRITON_INTERPRET=1)", allow_module_level=True)


def gradient_images(n: int, seed: int, small: bool = False) -> list[torch.Tensor]:
    """n HWC uint8 images of 12..39 (small) or 12..299 pixels a side: a horizontal ramp with
    noise, every fourth one grey (1 channel)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        h = int(torch.randint(12, 40 if small else 300, (1,), generator=g))
        w = int(torch.randint(12, 40 if small else 300, (1,), generator=g))
        c = 1 if i % 4 == 0 else 3
        base = torch.linspace(0, 255, w).view(1, w, 1).expand(h, w, c)
        noise = torch.randint(0, 60, (h, w, c), generator=g)
        out.append((base * 0.7 + noise).clamp(0, 255).to(torch.uint8))
    return out


def count_pixel_forms(monkeypatch) -> list[tuple[str, int]]:
    """Make the engine record each pixel-op fast form it runs: the list fills with (the op's
    type name, the rows of x) per form taken (kernels.pixel_forms.pixel_form and finishing_form,
    patched in engine.pixels; a finishing form is recorded as the name with " finishing")."""
    import pixelpipe.engine.pixels as pixels
    from pixelpipe.kernels.pixel_forms import finishing_form, pixel_form

    calls: list[tuple[str, int]] = []

    def counting(find, suffix):
        def found(op, x):
            form = find(op, x)
            if form is not None:
                calls.append((type(op).__name__ + suffix, x.shape[0]))
            return form
        return found

    monkeypatch.setattr(pixels, "pixel_form", counting(pixel_form, ""))
    monkeypatch.setattr(pixels, "finishing_form", counting(finishing_form, " finishing"))
    return calls


def no_pixel_forms(monkeypatch) -> None:
    """Make the engine run every pixel op's apply(), the twins of the fast forms (finishing
    forms included)."""
    import pixelpipe.engine.pixels as pixels

    monkeypatch.setattr(pixels, "pixel_form", lambda op, x: None)
    monkeypatch.setattr(pixels, "finishing_form", lambda op, x: None)


# the policies the policy forms' tests run (tests/test_policy_kernel.py, test_policy_cpu.py)
POLICIES = {
    "randaugment": lambda: pp.RandAugment(2, 9),
    "randaugment-3-15": lambda: pp.RandAugment(3, 15),
    "trivialaugment": lambda: pp.TrivialAugmentWide(),
    "autoaugment-imagenet": lambda: pp.AutoAugment("imagenet"),
    "autoaugment-cifar10": lambda: pp.AutoAugment("cifar10"),
    "autoaugment-svhn": lambda: pp.AutoAugment("svhn"),
    "timm-deit": lambda: pp.TimmRandAugment.from_config("rand-m9-mstd0.5-inc1"),
    "timm-plain-3": lambda: pp.TimmRandAugment(3, 7, 1.0, increasing=False),
}


def pixel_part(policy):
    """A policy's one pixel part (ops.policies.PolicySteps of pixel kind)."""
    parts = [p for p in policy.parts() if p.kind == "pixel"]
    assert len(parts) == 1
    return parts[0]
