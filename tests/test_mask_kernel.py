"""The mask warp's Triton kernel (kernels.triton.masks) against its twin, kernels.reference.masks,
and the dispatcher (kernels.masks) sending CUDA calls to it. Needs CUDA and Triton;
PIXELPIPE_TRITON_INTERPRET=1 runs the kernel through Triton's interpreter on the CPU (small
outputs, few samples).

Tolerance: none. The labels are identical (torch.equal, same dtype and shape): both compute the
source point in float64 with the same operations in the same order, floor it and apply the
same border rule, so each output pixel reads the same label. Cases: rotations, scales, shears,
translations, perspectives (points past the horizon, on the horizon, NaN from degenerate
matrices), axis-aligned maps (crop, resize, flip, LetterBox, identity), every border with
fills 0 and 255, integer and bool dtypes, 1 to 5 channels, samples of different sizes (1-pixel
sides among them), masks on the host and on the device, and empty batches.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import triton_device

from pixelpipe.kernels.filters import BORDER_CODE
from pixelpipe.kernels.reference import masks as reference

DEVICE, INTERPRET = triton_device()
OUT = (29, 37) if INTERPRET else (203, 317)
SAMPLES = 5 if INTERPRET else 24


def random_maps(rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
    """Output -> mask maps, one per (h, w): the output's centre to near the mask's through a
    rotation, scale (flips among them) and shear; every third then a perspective about the
    output's centre whose horizon (pz = 0) mostly crosses the output."""
    H, W = OUT
    maps = []
    for k, (h, w) in enumerate(sizes):
        a = rng.uniform(-np.pi, np.pi)
        s = rng.uniform(0.5, 2.0, 2) * rng.choice([-1, 1], 2) * max(h, w) / max(H, W)
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        shear = np.array([[1, rng.uniform(-0.4, 0.4)], [rng.uniform(-0.4, 0.4), 1]])
        m = np.eye(3)
        m[:2, :2] = rot @ shear @ np.diag(s)
        m[:2, 2] = np.array([w, h]) * rng.uniform(0.3, 0.7, 2) - m[:2, :2] @ [W / 2, H / 2]
        if k % 3 == 1:
            q = rng.uniform(1.0, 2.5, 2) * rng.choice([-1, 1], 2) / np.array([W, H])
            m = m @ np.array([[1, 0, 0], [0, 1, 0], [q[0], q[1], 1 - q @ [W / 2, H / 2]]])
        maps.append(m)
    return np.stack(maps)


def label_images(rng: np.random.Generator, sizes: np.ndarray, c: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Random labels in 1..199 (0 and 255 are the fills), or random bools."""
    top = 2 if dtype == torch.bool else 200
    low = 0 if dtype == torch.bool else 1
    return [torch.from_numpy(rng.integers(low, top, size=(int(h), int(w), c))).to(dtype) for h, w in sizes]


def mixed_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    sizes = rng.integers(1, 48, size=(n, 2))
    sizes[:3] = [(1, 1), (1, 17), (23, 1)]  # 1-pixel sides: reflect has nothing to mirror
    return sizes


def check(masks, inverse, sizes, border, fill, out_size=OUT, twin_device=DEVICE) -> torch.Tensor:
    """The kernel's labels equal the twin's; the twin's result."""
    from pixelpipe.kernels.triton.masks import warp_masks_gpu

    image_sizes = np.asarray(sizes, dtype=np.float64)
    got = warp_masks_gpu(masks, inverse, image_sizes, out_size, border, fill, DEVICE)
    if len(masks) and masks[0].dtype == torch.uint16:  # torch.where has no uint16 on some versions (2.11's CPU):
        wide = [m.to(torch.int32) for m in masks]  # the twin on the same labels widened (a gather: the same values)
        want = reference.warp_masks(wide, inverse, image_sizes, out_size, border, fill, twin_device).to(torch.uint16)
    else:
        want = reference.warp_masks(masks, inverse, image_sizes, out_size, border, fill, twin_device)
    assert got.device.type == torch.device(DEVICE).type
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want.cpu()), f"{border}, fill {fill}: {(got.cpu() != want.cpu()).sum()} labels differ"
    return want


@pytest.mark.parametrize("border", list(BORDER_CODE))
@pytest.mark.parametrize("dtype, c", [(torch.uint8, 1), (torch.uint8, 3), (torch.bool, 1), (torch.int16, 3),
                                      (torch.int32, 1), (torch.int64, 3), (torch.int32, 5)])
def test_random_affine_and_perspective_maps(border: str, dtype: torch.dtype, c: int):
    rng = np.random.default_rng([list(BORDER_CODE).index(border), c, len(str(dtype))])
    sizes = mixed_sizes(rng, SAMPLES)
    masks = label_images(rng, sizes, c, dtype)
    inverse = random_maps(rng, sizes)
    for fill in (0, 255):
        want = check(masks, inverse, sizes, border, fill)
        assert len(torch.unique(want)) > 1  # labels were read, not only fills
        if border == "constant" and dtype != torch.bool:
            assert (want == fill).any()  # and some pixels fell beyond the border


@pytest.mark.parametrize("border", list(BORDER_CODE))
def test_axis_aligned_maps(border: str):
    rng = np.random.default_rng(11)
    h, w = 21, 34
    H, W = OUT
    scale = min(H / h, W / w)  # a LetterBox: fit, centre, pad
    maps = [np.eye(3),  # identity
            [[1, 0, 5], [0, 1, -3], [0, 0, 1]],  # crop
            [[w / W, 0, 0], [0, h / H, 0], [0, 0, 1]],  # resize
            [[2.3, 0, 0], [0, 0.37, 0], [0, 0, 1]],  # shrink one way, enlarge the other
            [[-1, 0, w], [0, 1, 0], [0, 0, 1]],  # horizontal flip
            [[1, 0, 0], [0, -1, h], [0, 0, 1]],  # vertical flip
            [[1 / scale, 0, -(W - w * scale) / 2 / scale], [0, 1 / scale, -(H - h * scale) / 2 / scale], [0, 0, 1]]]
    inverse = np.array(maps, dtype=np.float64)
    assert reference._axis_aligned(inverse)  # the twin takes its separable form
    sizes = np.tile([h, w], (len(maps), 1))
    for dtype, c in [(torch.uint8, 1), (torch.int64, 3), (torch.bool, 1)]:
        masks = label_images(rng, sizes, c, dtype)
        for fill in (0, 255):
            check(masks, inverse, sizes, border, fill)


@pytest.mark.parametrize("border", list(BORDER_CODE))
def test_degenerate_matrices_and_far_points(border: str):
    rng = np.random.default_rng(5)
    sizes = np.array([[13, 17]] * 8)
    masks = label_images(rng, sizes, 2, torch.int32)
    inverse = np.array([
        np.zeros((3, 3)),  # 0 / 0 everywhere: NaN
        [[1, 0, 0], [0, 1, 0], [0, 0, 0]],  # pz = 0: +-inf and NaN
        [[0, 0, 0], [0, 1, 0], [0, 0, 1]],  # a zero row: every u is 0
        [[1, 0, 0], [0, 1, 0], [-0.25, 0, 2.625]],  # pz exactly 0 on column 10 (x = 10.5), negative beyond
        [[1e308, 1e308, 0], [-1e308, 3, 0], [0, 0, 1]],  # overflow: inf and inf - inf = NaN
        [[np.nan, 0, 0], [0, 1, 0], [0, 0, 1]],  # NaN in the matrix
        [[1, 0.2, 4], [0.1, 1, -2], [1e-3, -2e-3, 1e-9]],  # pz tiny: points near infinity
        [[3e9, 0, -1e9], [0, -5e9, 2e9], [0, 0, 1]],  # far beyond int32 before the clamp
    ], dtype=np.float64)
    with np.errstate(all="ignore"):
        for fill in (0, 255):
            check(masks, inverse, sizes, border, fill)


def test_masks_on_the_device_and_mixed():
    rng = np.random.default_rng(2)
    sizes = mixed_sizes(rng, 4)
    masks = label_images(rng, sizes, 3, torch.uint8)
    inverse = random_maps(rng, sizes)
    on_device = [m.to(DEVICE) for m in masks]
    mixed = [masks[0]] + on_device[1:]
    for border in BORDER_CODE:
        check(on_device, inverse, sizes, border, 255)
        check(mixed, inverse, sizes, border, 0)
    stacked = torch.stack([m.to(DEVICE) for m in label_images(rng, np.tile([9, 14], (3, 1)), 1, torch.bool)])
    check(stacked, random_maps(rng, np.tile([9, 14], (3, 1))), np.tile([9, 14], (3, 1)), "reflect", 0)


def test_other_integer_dtypes():
    rng = np.random.default_rng(4)
    sizes = mixed_sizes(rng, 4)
    inverse = random_maps(rng, sizes)
    for dtype, fills in [(torch.int8, (0, -1)), (torch.uint16, (0, 65535))]:
        masks = label_images(rng, sizes, 2, dtype)
        for border in BORDER_CODE:
            for fill in fills:  # the twin on the host: not every dtype has CUDA indexing
                check(masks, inverse, sizes, border, fill, twin_device="cpu")


def test_empty_batches_and_outputs():
    rng = np.random.default_rng(6)
    for out_size in [(0, 7), (5, 0), OUT]:
        check([], np.zeros((0, 3, 3)), np.zeros((0, 2)), "constant", 255, out_size)
    sizes = mixed_sizes(rng, 3)
    masks = label_images(rng, sizes, 3, torch.int64)
    for out_size in [(0, 7), (5, 0)]:
        check(masks, random_maps(rng, sizes), sizes, "reflect", 0, out_size)


def test_the_dispatcher_sends_cuda_calls_to_the_kernel(monkeypatch: pytest.MonkeyPatch):
    import pixelpipe.kernels as kernels
    from pixelpipe.kernels import masks as dispatch
    from pixelpipe.kernels.triton import masks as kernel

    calls = []
    real = kernel.warp_masks_gpu

    def spy(*args):
        calls.append(args[-1])
        return real(*args[:-1], DEVICE)  # through the interpreter: the host stands in for CUDA

    monkeypatch.setattr(kernel, "warp_masks_gpu", spy)
    if INTERPRET:
        monkeypatch.setattr(kernels, "gpu_kernels_available", lambda: True)
    rng = np.random.default_rng(9)
    sizes = mixed_sizes(rng, 3)
    masks = label_images(rng, sizes, 1, torch.uint8)
    inverse, image_sizes = random_maps(rng, sizes), sizes.astype(np.float64)
    for border in BORDER_CODE:
        got = dispatch.warp_masks(masks, inverse, image_sizes, OUT, border, 255, "cuda")
        want = reference.warp_masks(masks, inverse, image_sizes, OUT, border, 255, DEVICE)
        assert torch.equal(got.cpu(), want.cpu())
    assert calls == ["cuda"] * len(BORDER_CODE)
    dispatch.warp_masks(masks, inverse, image_sizes, OUT, "constant", 0, "cpu")  # the host keeps its forms
    assert len(calls) == len(BORDER_CODE)
