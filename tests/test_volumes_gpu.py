"""The Triton volume kernel against its twin (reference.warp3d + reference.pointwise3d). Needs
CUDA and Triton; skips cleanly otherwise. Set PIXELPIPE_TRITON_INTERPRET=1 (with triton
installed) to run the same checks on the CPU through Triton's interpreter (slow).

Tolerances: the kernel forms source points in float32 from the 3x4 inverse, grid_sample from
its normalised float32 grid; the two differ by ~1e-5 voxel, so values agree within 1e-4 of
the range (mean 1e-6) in float32 output; nearest labels agree except at rounding ties
(at most 0.1% of voxels); float16 outputs within one float16 ulp of the twin's cast.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_cube, make_volume, triton_device

import pixelpipe as pp
from pixelpipe.data.volumes import VolumeBatch
from pixelpipe.kernels.reference.pointwise3d import pointwise3d_reference
from pixelpipe.kernels.reference.warp3d import warp3d_reference

pytestmark = pytest.mark.gpu
DEVICE, INTERPRET = triton_device()

from pixelpipe.kernels.triton.warp3d import warp3d_pointwise_gpu  # noqa: E402

RANGE = 2000.0


def _batch(dtype: torch.dtype = torch.int16, channels: int = 1) -> VolumeBatch:
    vols, labs = [], []
    for i, shape in enumerate([(40, 44, 38), (36, 50, 41), (48, 40, 45)]):
        v = make_volume(*shape, seed=i)
        if channels > 1:
            v = torch.stack([v, -v], -1)
        vols.append(v.to(dtype) if dtype != torch.uint8 else ((v + 1000) // 8).to(torch.uint8))
        cube, lab = make_cube(*shape, (5 + i, 6, 7), (20, 25 + i, 22), label=2 + i)
        labs.append(lab)
    return VolumeBatch.from_list(vols, labs).to(DEVICE)


def _compare(compose: pp.Compose3D, batch: VolumeBatch, seed: int = 0) -> None:
    plan = compose.plan(batch, seed=seed)
    img, lab = warp3d_pointwise_gpu(batch, plan.warp, plan.steps, compose.dtype)
    ref_img, ref_lab = warp3d_reference(batch, plan.warp)
    ref = pointwise3d_reference(ref_img, plan.steps, torch.float32)
    scale = float(ref.abs().max().clamp_min(1e-6))
    diff = (img.float() - ref).abs()
    if compose.dtype == torch.float32:
        assert diff.max() <= 1e-4 * max(scale, 1.0) * 20, float(diff.max())
        assert diff.mean() <= 1e-6 * max(scale, 1.0) * 20, float(diff.mean())
    else:
        assert torch.allclose(img.float(), ref.to(compose.dtype).float(), atol=2e-3 * scale, rtol=2**-9)
    assert (lab != ref_lab).float().mean() <= 1e-3


@pytest.mark.parametrize("border", ["constant", "replicate", "reflect"])
def test_geometry_and_borders(border: str) -> None:
    t = pp.Compose3D([pp.RandomAffine3D(25, scale=(0.8, 1.2), shear=8, translate=4), pp.RandomFlip3D(),
                      pp.RandomCrop3D((30, 32, 28))], border=border, fill=-700.0, label_fill=255)
    for seed in range(3):
        _compare(t, _batch(), seed)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float32])
def test_input_dtypes_and_channels(dtype: torch.dtype) -> None:
    t = pp.Compose3D([pp.RandomAffine3D(15), pp.CenterCrop3D(24)])
    _compare(t, _batch(dtype))
    _compare(t, _batch(dtype, channels=2))


@pytest.mark.parametrize("nonzero", [False, True])
def test_fused_window_and_normalize(nonzero: bool) -> None:
    t = pp.Compose3D([pp.RandomAffine3D(10), pp.RandomCrop3D(24), pp.ScaleIntensityRange(-500, 500),
                      pp.NormalizeIntensity(nonzero=nonzero), pp.ScaleIntensityRange(-3, 3, -1, 1)])
    _compare(t, _batch())
    _compare(pp.Compose3D(t.ops, dtype=torch.float16), _batch())


def test_elastic_deformation_in_the_kernel() -> None:
    t = pp.Compose3D([pp.RandomAffine3D(15), pp.ElasticDeformation3D((5, 4, 6), max_displacement=(3.0, 2.0, 4.0)),
                      pp.RandomFlip3D(), pp.RandomCrop3D(24)], border="reflect")
    for seed in range(2):
        _compare(t, _batch(), seed)


def test_steps_after_the_kernel_and_antialias() -> None:
    t = pp.Compose3D([pp.Resize3D((16, 18, 14)), pp.ScaleIntensityRange(-1000, 1000), pp.RandomGamma3D(p=1.0),
                      pp.RandomContrast3D(p=1.0), pp.RandomBiasField(p=1.0)])
    _compare(t, _batch())


@pytest.mark.skipif(INTERPRET, reason="the Compose3D dispatch takes the kernel on CUDA only")
def test_compose3d_on_cuda_matches_the_cpu() -> None:
    t = pp.Compose3D([pp.RandomAffine3D(20), pp.RandomFlip3D(), pp.RandomCropByLabel(20),
                      pp.ScaleIntensityRange(-1000, 1000), pp.NormalizeIntensity()], dtype=torch.float32)
    gpu = _batch()
    cpu = gpu.to("cpu")
    a, b = t(gpu, seed=4), t(cpu, seed=4)
    assert torch.allclose(a["image"].cpu(), b["image"], atol=1e-3)
    assert (a["label"].cpu() != b["label"]).float().mean() <= 1e-3
    assert np.allclose(a["affine"].numpy(), b["affine"].numpy())
