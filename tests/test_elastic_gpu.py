"""The Triton warp through an ElasticTransform's displacement field against its twin (the
reference warp), and a Compose on CUDA against the same Compose on the CPU, targets included.
Needs CUDA and Triton; skips cleanly otherwise. PIXELPIPE_TRITON_INTERPRET=1 (with triton
installed) runs the kernel checks on the CPU through Triton's interpreter (slow; small sizes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import gradient_images, triton_device

import pixelpipe as pp
from pixelpipe.kernels.reference.warp import warp_reference

DEVICE, INTERPRET = triton_device()

from pixelpipe.kernels.triton.warp import warp_gpu, warp_pointwise_gpu  # noqa: E402

SMALL = INTERPRET
# |kernel - reference| in grey levels: the existing warp's 0.02 (float32 weights) plus the
# field's float32 taps (source points within ~1e-5 px of the reference's float64 ones)
TOL = 0.03
# nearest: the fraction of pixels allowed to differ (a source point within ~1e-5 px of a pixel
# edge may round the other way)
NEAREST_FLIPS = 1e-3


def _images(n: int, seed: int) -> list[torch.Tensor]:
    return gradient_images(n, seed, SMALL)


PLANS = [
    ("elastic", lambda s: [pp.ElasticTransform(alpha=80.0, sigma=5.0), pp.Resize((s, s))], "bilinear"),
    ("rrc elastic flip", lambda s: [pp.RandomResizedCrop(s), pp.ElasticTransform(control_points=5, max_displacement=4.0),
                                    pp.RandomFlip()], "bilinear"),
    ("rotate elastic reflect bicubic", lambda s: [pp.RandomRotate(30, border="reflect", interpolation="bicubic"),
                                                  pp.ElasticTransform(alpha=120.0, sigma=4.0), pp.Resize((s, s + 3))],
     "bicubic"),
    ("perspective elastic half", lambda s: [pp.RandomPerspective(0.4, p=1.0), pp.ElasticTransform(100.0, 6.0, p=0.5),
                                            pp.Resize((s - 2, s))], "bilinear"),
    ("wrap fill", lambda s: [pp.Resize((s, s)), pp.ElasticTransform(control_points=(3, 6), max_displacement=(6.0, 2.0),
                                                                    border="wrap")], "bilinear"),
    ("nearest", lambda s: [pp.ElasticTransform(control_points=4, max_displacement=3.0, interpolation="nearest"),
                           pp.Resize((s, s), interpolation="nearest")], "nearest"),
]


def _spec(ops, imgs):
    batch = pp.ImageBatch.from_list(imgs)
    plan = pp.Compose(ops).stages[0].sample(3, 1, torch.arange(len(imgs)), batch.sizes.double())
    return batch, plan, plan.warp_spec(plan.uniform_size(), plan.regions())


@pytest.mark.parametrize("name,make,interp", PLANS, ids=[p[0] for p in PLANS])
def test_warp_matches_reference(name, make, interp):
    """Raw warp values through the field agree with the reference within TOL grey levels
    (nearest: all but NEAREST_FLIPS of the pixels exactly)."""
    imgs = _images(9, seed=len(name))
    size = 16 if SMALL else 96
    batch, plan, spec = _spec(make(size), imgs)
    assert spec.deform is not None and spec.deform.active().any()
    ref = warp_reference(batch.data, batch.table, spec)
    out, _ = warp_gpu(batch.data.to(DEVICE), batch.table, spec)
    diff = (out.cpu() - ref).abs()
    if interp == "nearest":
        assert float((diff > 0).any(-1).float().mean()) <= NEAREST_FLIPS, f"{name}: {float((diff > 0).float().mean())}"
    else:
        assert float(diff.max()) <= TOL, f"{name}: max diff {float(diff.max())}"


def test_fused_pointwise_matches_warp():
    """The fused launch (warp + colour + normalise + cast) reads the field as the warp-only
    launch does: float32 NCHW output equals the warp's values / 255 within float rounding."""
    imgs = _images(6, seed=11)
    batch, plan, spec = _spec([pp.ElasticTransform(alpha=90.0, sigma=5.0), pp.Resize((48, 40))], imgs)
    raw, _ = warp_gpu(batch.data.to(DEVICE), batch.table, spec)
    pspec = plan.pointwise(None, pp.Compose([pp.Resize((48, 40))]).program.form(0))
    out = warp_pointwise_gpu(batch.data.to(DEVICE), batch.table, spec, pspec)
    expect = (raw.clamp(0, 255) / 255).permute(0, 3, 1, 2)
    assert float((out.cpu() - expect.cpu()).abs().max()) <= 1e-5


@pytest.mark.skipif(SMALL, reason="a whole Compose on CUDA")
def test_compose_cuda_matches_cpu():
    """A Compose with an ElasticTransform on CUDA gives the CPU's images within TOL / 255,
    the same masks (all but NEAREST_FLIPS of the pixels), and the same boxes and keypoints
    (moved on the host in both cases)."""
    imgs = _images(8, seed=5)
    ops = [pp.RandomResizedCrop(64), pp.ElasticTransform(alpha=150.0, sigma=5.0), pp.RandomRotate(10)]
    masks = [(im[..., 0] > 120).to(torch.uint8) for im in imgs]
    boxes = [np.array([[2.0, 3.0, im.shape[1] - 4.0, im.shape[0] - 2.0]]) for im in imgs]
    kps = [np.array([[im.shape[1] / 2, im.shape[0] / 3]]) for im in imgs]
    t = pp.Compose(ops)
    cpu = t(imgs, seed=2, masks=masks, boxes=boxes, keypoints=kps)
    gpu = t([im.cuda() for im in imgs], seed=2, masks=masks, boxes=boxes, keypoints=kps)
    assert gpu["image"].is_cuda
    assert float((gpu["image"].cpu() - cpu["image"]).abs().max()) <= TOL / 255
    assert float((gpu["masks"].cpu() != cpu["masks"]).float().mean()) <= NEAREST_FLIPS
    for a, b in zip(gpu["boxes"], cpu["boxes"]):
        assert torch.allclose(a.cpu(), b, atol=1e-4)
    for a, b in zip(gpu["keypoints"], cpu["keypoints"]):
        assert torch.allclose(a.cpu(), b, atol=1e-4)
