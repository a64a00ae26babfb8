"""Resampling against independent references: Pillow, numpy slicing and rot90, and the plain-torch
reference warp against the CPU fast paths (STYLE.md, idea 7).

Tolerances (grey levels on uint8 unless said otherwise), measured on this machine:
- antialiased Resize vs PIL.Image.resize: mean abs error <= 0.5, max <= 2. Both use the same
  filters (triangle, Keys a=-0.5) stretched by the scale; they differ only by rounding (Pillow
  rounds fixed-point weights and, between its two passes, stores uint8): measured mean <= 0.27,
  max 2 (bicubic overshoot clamped between Pillow's passes).
- rotation / affine vs Pillow's rotate / transform (BILINEAR, no antialiasing on either side),
  on the central half of the image (no edge pixels: Pillow and pixelpipe treat taps past the
  image differently): Pillow *truncates* the interpolated value where pixelpipe rounds, so on
  float output 0 <= ours*255 - pillow < 1 (+1e-3 float noise), and on uint8 the mean error is
  ~0.5 (measured 0.48..0.51) with max 1; we assert mean <= 0.6 and max <= 1.
- rotations by multiples of 90 degrees, crops and flips: exact, every pixel (no border excluded).
- CPU "window" fast path vs the reference (bilinear): max 2, mean <= 0.25 after rounding the
  reference to uint8 as the pointwise pass does (torch's uint8 kernel uses fixed-point weights
  and a uint8 intermediate between its two passes): measured max 1, mean <= 0.15, on smooth
  images, black/white blocks and photos.
- CPU "separable" path vs the reference: float32 rounding, 1e-3.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from helpers import SAMPLE_DIR, SAMPLE_MISSING, hwc, make_image, run, varied_images
from PIL import Image

import pixelpipe as pp
from pixelpipe import Compose, ImageBatch
from pixelpipe.kernels.cpu.stage import _post, finish_sample, output_tensor
from pixelpipe.kernels.cpu.warp import REFERENCE, SEPARABLE, WINDOW, classify, warp_cpu
from pixelpipe.kernels.reference.pointwise import pointwise_reference
from pixelpipe.kernels.reference.warp import warp_reference
from pixelpipe.kernels.spec import PointwiseSpec

U8 = torch.uint8
PIL_FILTER = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


@functools.cache
def _photos(n: int, reduce: int) -> tuple[np.ndarray, ...]:
    files = sorted(p for p in SAMPLE_DIR.iterdir() if p.suffix.lower() in (".jpeg", ".jpg", ".png"))[:n]
    return tuple(np.array(Image.open(f).convert("RGB").reduce(reduce)) for f in files)


def photos(n: int = 3, reduce: int = 2) -> list[np.ndarray]:
    """n real photos, reduced (halved by default) so that the reference warp stays fast."""
    if not SAMPLE_DIR.is_dir():
        pytest.skip(f"no real photos to compare with: {SAMPLE_MISSING}")
    imgs = _photos(n, reduce)
    if len(imgs) < n:
        pytest.skip(f"{SAMPLE_DIR} holds fewer than {n} images")
    return [a.copy() for a in imgs]


def synthetic() -> list[np.ndarray]:
    return [make_image(90, 120, seed=1), make_image(71, 103, seed=2), make_image(64, 64, seed=3, noise=12)]


def spec_for(ops, batch: ImageBatch, seed: int = 0, antialias: bool = True, indices=None):
    """The first stage's WarpSpec for a batch, as Compose builds it."""
    idx = torch.arange(len(batch)) if indices is None else torch.as_tensor(indices)
    plan = Compose(ops).stages[0].sample(seed, 0, idx, batch.sizes.to(torch.float64))
    return plan, plan.warp_spec(plan.uniform_size(), plan.regions(), antialias=antialias)


def reference_u8(ops, img: np.ndarray, antialias: bool = True) -> np.ndarray:
    """The reference warp of one image, rounded to uint8 as the pointwise pass does."""
    b = ImageBatch.from_list([img])
    _, spec = spec_for(ops, b, antialias=antialias)
    return warp_reference(b.data, b.table, spec)[0].clamp(0, 255).round().numpy()


def errors(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return float(d.mean()), float(d.max())


# ----------------------------------------------------------------------------- Resize vs Pillow
def resize_sizes(h: int, w: int) -> list[tuple[int, int]]:
    return [(h // 3, w // 4), (h * 3 // 2 + 1, w + 13), (h // 2, w * 3 // 2)]  # down, up, mixed


def pillow_float(img: np.ndarray, size: tuple[int, int], interp: str) -> np.ndarray:
    """Pillow's resize of each channel as a float ("F") image, rounded to uint8 at the end:
    Pillow's own filter without the uint8 path's rounding and clipping between its two passes."""
    planes = [np.asarray(Image.fromarray(img[..., c].astype(np.float32), "F").resize((size[1], size[0]),
                                                                                     PIL_FILTER[interp]))
              for c in range(img.shape[2])]
    return np.clip(np.round(np.stack(planes, -1)), 0, 255)


def check_against_pillow(ours: np.ndarray, img: np.ndarray, size: tuple[int, int], interp: str, *why: object) -> None:
    """Within half a grey level on average of Pillow's uint8 resize, and within one level everywhere
    of Pillow's float resize. Pillow's uint8 path rounds and clips to 0..255 between its two 1-D
    passes: where bicubic's negative lobes overshoot at a saturated edge that moves single pixels
    by up to about 11 levels on real photos (bilinear cannot overshoot), so the pixel-wise bound
    is against the float form, which runs the same filter."""
    pil = np.asarray(Image.fromarray(img).resize((size[1], size[0]), PIL_FILTER[interp]))
    mae, _ = errors(ours, pil)
    _, mx = errors(ours, pillow_float(img, size, interp))
    assert mae <= 0.5 and mx <= 1, (*why, img.shape, size, interp, mae, mx)


@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
@pytest.mark.parametrize("source", ["photos", "synthetic"])
def test_resize_matches_pillow(interp, source):
    imgs = photos() if source == "photos" else synthetic()
    for img in imgs:
        h, w = img.shape[:2]
        for size in resize_sizes(h, w):
            ours = hwc(run([pp.Resize(size, interpolation=interp)], [img], dtype=U8)[0])
            check_against_pillow(ours, img, size, interp, source)


@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
def test_reference_resize_matches_pillow(interp):
    # the plain-torch twin on its own, on photos reduced 4x and synthetic images
    imgs = [make_image(60, 80, seed=4), make_image(47, 70, seed=5)]
    if SAMPLE_DIR.is_dir():
        imgs += photos(3, reduce=4)
    for img in imgs:
        h, w = img.shape[:2]
        for size in resize_sizes(h, w):
            check_against_pillow(reference_u8([pp.Resize(size, interpolation=interp)], img), img, size, interp)


# ----------------------------------------------------------------------------- exact geometry
@pytest.mark.parametrize("antialias", [True, False], ids=["fast", "reference"])
def test_crop_is_slicing(antialias):
    imgs = varied_images(6, 30, 60)
    for img in imgs:
        img = img.numpy()
        for size, anchor in (((10, 12), (3, 5)), ((17, 9), (0, 0)), ((img.shape[0], 7), (0, 20))):
            out = run([pp.Crop(size, anchor=anchor)], [img], dtype=U8, antialias=antialias)
            t, left = anchor
            expect = img[t:t + size[0], left:left + size[1]]
            expect = np.repeat(expect, 3, -1) if expect.shape[-1] == 1 else expect
            np.testing.assert_array_equal(hwc(out[0]), expect)


@pytest.mark.parametrize("antialias", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("interp", ["nearest", "bilinear", "bicubic"])
def test_flips_are_exact(antialias, interp):
    img = make_image(23, 37)
    for h, v, expect in ((1.0, 0.0, img[:, ::-1]), (0.0, 1.0, img[::-1]), (1.0, 1.0, img[::-1, ::-1])):
        out = run([pp.RandomFlip(h, v), pp.Resize((23, 37), interpolation=interp)], [img], dtype=U8,
                  antialias=antialias)
        np.testing.assert_array_equal(hwc(out[0]), expect)


@pytest.mark.parametrize("interp", ["nearest", "bilinear"])
@pytest.mark.parametrize("angle, k", [(90, 1), (180, 2), (270, 3), (-90, 3)])
@pytest.mark.parametrize("shape", [(24, 24), (21, 33), (20, 31)])
def test_quarter_turns_are_rot90(interp, angle, k, shape):
    # counter-clockwise for positive angles, like numpy.rot90; exact on every pixel, borders
    # included (the turned grid lands on the pixel centres; expand=True keeps every pixel)
    img = make_image(*shape)
    out = run([pp.RandomRotate((angle, angle), expand=True, interpolation=interp)], [img], dtype=U8)
    np.testing.assert_array_equal(hwc(out[0]), np.rot90(img, k))
    if shape[0] == shape[1]:  # without expand a square keeps its size: the same result
        same = run([pp.RandomRotate((angle, angle), interpolation=interp)], [img], dtype=U8)
        np.testing.assert_array_equal(hwc(same[0]), np.rot90(img, k))


# ----------------------------------------------------------------------------- rotation / affine vs Pillow
def centre(a: np.ndarray) -> np.ndarray:
    h, w = a.shape[:2]
    return a[h // 4: 3 * h // 4, w // 4: 3 * w // 4]


def compare_truncating(ours_float: np.ndarray, ours_u8: np.ndarray, pil: np.ndarray, what) -> None:
    diff = centre(ours_float) * 255 - centre(pil).astype(np.float64)
    assert diff.min() >= -1e-3 and diff.max() < 1 + 1e-3, (what, diff.min(), diff.max())
    mae, mx = errors(centre(ours_u8), centre(pil))
    assert mae <= 0.6 and mx <= 1, (what, mae, mx)


def rotation_images() -> list[np.ndarray]:
    imgs = [make_image(90, 120, seed=7), make_image(71, 103, seed=8)]
    if SAMPLE_DIR.is_dir():
        imgs += [np.ascontiguousarray(a[:100, :130]) for a in photos(3, reduce=2)]
    return imgs


@pytest.mark.parametrize("angle", [3.0, 7.5, -12.0, 30.0])
def test_small_rotation_matches_pillow(angle):
    for img in rotation_images():
        ops = [pp.RandomRotate((angle, angle))]
        f = hwc(run(ops, [img], layout="NCHW", antialias=False)[0])
        u = hwc(run(ops, [img], dtype=U8, antialias=False)[0])
        pil = np.asarray(Image.fromarray(img).rotate(angle, resample=Image.BILINEAR))
        compare_truncating(f, u, pil, (img.shape, angle))


def test_affine_matches_pillow_transform():
    op = pp.RandomAffine(20, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=(-8, 8, -5, 5))
    for img in rotation_images():
        h, w = img.shape[:2]
        for idx in range(2):
            plan = Compose([op]).stages[0].sample(0, 0, torch.tensor([idx]), torch.tensor([[h, w]], dtype=torch.float64))
            inv = np.linalg.inv(plan.matrix[0])  # Pillow takes output -> input coefficients
            data = tuple(inv[:2].reshape(-1).tolist())
            pil = np.asarray(Image.fromarray(img).transform((w, h), Image.AFFINE, data=data, resample=Image.BILINEAR))
            f = hwc(run([op], [img], indices=[idx], antialias=False)[0])
            u = hwc(run([op], [img], dtype=U8, indices=[idx], antialias=False)[0])
            compare_truncating(f, u, pil, (img.shape, idx))


# ----------------------------------------------------------------------------- antialiasing
@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
def test_antialiasing_flattens_a_checkerboard(interp):
    board = ((np.indices((96, 96)).sum(0) % 2) * 255).astype(np.uint8)
    ops = [pp.RandomRotate((30, 30), interpolation=interp), pp.Resize((24, 24))]
    smooth = run(ops, [board], antialias=True)[0, 0, 6:18, 6:18] * 255  # centre: no corners
    aliased = run(ops, [board], antialias=False)[0, 0, 6:18, 6:18] * 255
    assert abs(float(smooth.mean()) - 127.5) < 1 and float(smooth.std()) < 1, float(smooth.std())
    assert float(aliased.std()) > 20, float(aliased.std())


# ----------------------------------------------------------------------------- fast paths vs reference
def fast_batch(n: int = 24) -> ImageBatch:
    return ImageBatch.from_list(varied_images(n, 30, 110, seed=5))


def blocks(h: int, w: int, seed: int) -> np.ndarray:
    """Random black/white 4x4 blocks: the hardest case for interpolation overshoot."""
    small = np.random.default_rng(seed).integers(0, 2, (h // 4 + 1, w // 4 + 1, 3)) * 255
    return np.ascontiguousarray(np.repeat(np.repeat(small, 4, 0), 4, 1)[:h, :w].astype(np.uint8))


def window_batches(interp: str) -> list[ImageBatch]:
    out = [fast_batch(16), ImageBatch.from_list([blocks(40 + 7 * i, 50 + 5 * i, i) for i in range(8)])]
    if SAMPLE_DIR.is_dir():
        out.append(ImageBatch.from_list(photos(8, reduce=4)))
    return out


def check_window_path(interp: str) -> None:
    for b in window_batches(interp):
        for seed in range(2):
            ops = [pp.RandomResizedCrop(24, interpolation=interp), pp.RandomFlip(0.5, 0.5)]
            _, spec = spec_for(ops, b, seed=seed)
            assert bool((classify(spec) == WINDOW).all())
            fast = warp_cpu(b.data, b.table, spec)
            ref = warp_reference(b.data, b.table, spec)
            assert fast.dtype == U8 and fast.shape == ref.shape == (len(b), 24, 24, 3)
            d = (fast.float() - ref.clamp(0, 255).round()).abs()
            assert float(d.max()) <= 2 and float(d.mean()) <= 0.25, (seed, float(d.max()), float(d.mean()))


def test_window_path_matches_reference():
    check_window_path("bilinear")


def test_bicubic_takes_the_exact_separable_path():
    """torch's uint8 bicubic clamps overshoot between its two passes (up to 20 grey levels off
    on hard edges), so bicubic windows go through the float separable path, which matches the
    reference to float rounding even on black/white blocks."""
    for b in window_batches("bicubic"):
        _, spec = spec_for([pp.RandomResizedCrop(24, interpolation="bicubic"), pp.RandomFlip(0.5, 0.5)], b, seed=1)
        assert bool((classify(spec) == SEPARABLE).all())
        fast = warp_cpu(b.data, b.table, spec)
        ref = warp_reference(b.data, b.table, spec)
        torch.testing.assert_close(fast, ref, atol=1e-3, rtol=0)


def test_separable_path_matches_reference():
    # zooming in about the centre: axis-aligned, fractional window inside the image
    b = fast_batch(8)
    _, spec = spec_for([pp.RandomAffine(scale=(1.1, 1.6)), pp.RandomFlip(), pp.Resize((20, 20))], b, seed=3)
    assert bool((classify(spec) == SEPARABLE).all())
    fast = warp_cpu(b.data, b.table, spec)
    ref = warp_reference(b.data, b.table, spec)
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, ref, atol=1e-3, rtol=0)


def test_general_warps_take_the_reference():
    b = fast_batch(6)
    for ops in ([pp.RandomRotate((5, 40)), pp.Resize((16, 16))],
                [pp.RandomPerspective(0.3, p=1.0), pp.Resize((16, 16))],
                [pp.RandomAffine(shear=(5, 10)), pp.Resize((16, 16))]):
        _, spec = spec_for(ops, b)
        assert bool((classify(spec) == REFERENCE).all()), ops
        assert torch.equal(warp_cpu(b.data, b.table, spec), warp_reference(b.data, b.table, spec))
    # nearest and non-antialiased warps always take the reference
    _, spec = spec_for([pp.RandomResizedCrop(16, interpolation="nearest")], b)
    assert bool((classify(spec) == REFERENCE).all())
    _, spec = spec_for([pp.RandomResizedCrop(16)], b, antialias=False)
    assert bool((classify(spec) == REFERENCE).all())


def test_mixed_batch_rows_match_single_runs():
    # rotated and plain samples in one batch: each row as if warped alone
    b = fast_batch(8)
    ops = [pp.RandomRotate(30, p=0.5), pp.Resize((16, 16))]
    _, spec = spec_for(ops, b)
    kind = classify(spec)
    assert bool((kind == REFERENCE).any()) and bool((kind != REFERENCE).any())
    out = warp_cpu(b.data, b.table, spec)
    for i in (int((kind == REFERENCE).nonzero()[0]), int((kind != REFERENCE).nonzero()[0])):
        one = ImageBatch.from_list([b[i]])
        _, s1 = spec_for(ops, one, indices=[i])
        torch.testing.assert_close(out[i].float(), warp_cpu(one.data, one.table, s1)[0].float(), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("norm", [None, ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), ((0.5,), (0.25,))])
@pytest.mark.parametrize("source", ["uint8", "float32"])
def test_pointwise_fast_matches_reference(dtype, layout, norm, source):
    """The CPU's per-sample pointwise pass (lookup tables for uint8) against the reference."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, 5, 7, 3), generator=g, dtype=U8)
    if source == "float32":  # a reference warp's output: float, a little past [0, 255]
        x = x.float() * 1.02 - 2.5
    spec = PointwiseSpec(None, norm[0] if norm else None, norm[1] if norm else None, dtype, layout, 3)
    fast = output_tensor(3, (5, 7), spec)
    post = _post(spec)
    for i in range(3):
        finish_sample(x[i], spec, i, fast[i], post)
    ref = pointwise_reference(x, spec)
    assert fast.dtype == ref.dtype == dtype and fast.shape == ref.shape
    # float32 rounding of the folded multiply-add, then one rounding to the output dtype
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(fast.float(), ref.float(), atol=tol, rtol=tol)
