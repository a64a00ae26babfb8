"""The reference volume warp against MONAI's `Affine` given the same matrix (skipped without
MONAI).

MONAI's convention (monai.transforms.Affine with `affine=A`, normalized=False, the default):
the output grid holds, for output index j along each array axis, the centred coordinate
g = j - (S_out - 1) / 2 (monai.transforms.utils.create_grid); A maps g to a centred input
coordinate A @ g, which Resample reads at input index i = A @ g + (S_in - 1) / 2
(grid_sample with align_corners=False, after scaling by 2 / S_in). A is thus the backward map
(output -> input), in array axis order (0, 1, 2), about the two volumes' centres.

pixelpipe's inverse maps continuous output coordinates p = j + 0.5 to continuous input
coordinates q = i + 0.5 (kernels.spec3d). Substituting: q = A (p - S_out / 2) + S_in / 2, so
inverse = T(S_in / 2) @ A @ T(-S_out / 2), T(v) the translation by v.

Measured with MONAI 1.6.1 (values -1000..1000, range 2000; seeds 0..5, output sizes equal to
and different from the input's): trilinear mean |difference| 3e-8 to 5e-8 of the range, max
under 2e-6 (both float32 grid_sample, grids built in different orders); the target is 0.5%, the
test holds 1e-6 (mean) and 1e-5 (max). Nearest: identical on every voxel there; the test allows
0.2% of the voxels to differ, each on a label boundary (a float32 rounding tie). A half-voxel
slip in the mapping would give a mean difference of several percent.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_volume

from pixelpipe.data.volumes import VolumeBatch
from pixelpipe.kernels.reference.warp3d import warp3d_reference
from pixelpipe.kernels.spec3d import Warp3DSpec

monai_transforms = pytest.importorskip("monai.transforms")

RANGE = 2000.0
IN_SIZE = (22, 26, 24)


def translation(v: np.ndarray) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = v
    return m


def random_affine(seed: int) -> np.ndarray:
    """A MONAI-style backward matrix about the centre: rotation, anisotropic scale, shear and a
    shift of a few voxels (stretches below 1.25, so pixelpipe would not antialias either)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    a = np.eye(4)
    a[:3, :3] = q @ np.diag(rng.uniform(0.85, 1.15, 3)) + rng.uniform(-0.08, 0.08, (3, 3))
    a[:3, 3] = rng.uniform(-3, 3, 3)
    return a


def pixelpipe_inverse(affine: np.ndarray, in_size: tuple[int, ...], out_size: tuple[int, ...]) -> np.ndarray:
    """MONAI's backward matrix about the centres as pixelpipe's inverse (module docstring)."""
    return translation(np.array(in_size) / 2) @ affine @ translation(-np.array(out_size) / 2)


def labels_of(vol: torch.Tensor) -> torch.Tensor:
    """A label map with several values and boundaries everywhere: bands of the volume's values."""
    return torch.bucketize(vol.float(), torch.tensor([-500.0, 0.0, 500.0])).to(torch.uint8)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("out_size", [IN_SIZE, (18, 20, 27)])
def test_reference_warp_matches_monai_affine(seed: int, out_size: tuple[int, int, int]) -> None:
    vol = make_volume(*IN_SIZE, seed=seed)
    lab = labels_of(vol)
    a = random_affine(seed)
    common = dict(affine=torch.from_numpy(a), spatial_size=out_size, padding_mode="zeros", image_only=True)
    want = monai_transforms.Affine(mode="bilinear", **common)(vol[None].float())
    want_lab = monai_transforms.Affine(mode="nearest", **common)(lab[None].float())
    want = torch.as_tensor(want)[0].float()
    want_lab = torch.as_tensor(want_lab)[0].round().long()

    spec = Warp3DSpec(pixelpipe_inverse(a, IN_SIZE, out_size), out_size, border="constant")
    got, got_lab = warp3d_reference(VolumeBatch.from_list([vol], [lab]), spec)
    assert got.shape == (1, 1, *out_size) and got_lab is not None
    diff = (got[0, 0] - want).abs()
    assert diff.mean().item() / RANGE < 1e-6, f"mean |difference| {diff.mean().item() / RANGE:.2e} of the range"
    assert diff.max().item() / RANGE < 1e-5

    differ = got_lab[0, 0] != want_lab
    assert differ.float().mean().item() < 2e-3
    # where they differ the voxel lies on a label boundary of MONAI's output (a rounding tie)
    padded = torch.nn.functional.pad(want_lab[None, None].float(), (1, 1) * 3, mode="replicate")[0, 0]
    lo = -torch.nn.functional.max_pool3d(-padded[None, None], 3, 1)[0, 0]
    hi = torch.nn.functional.max_pool3d(padded[None, None], 3, 1)[0, 0]
    assert bool((lo[differ] != hi[differ]).all())


def test_identity_affine_is_the_identity_in_both() -> None:
    """The mapping's anchor: MONAI's identity about the centres is pixelpipe's identity when the
    sizes agree, and a centred crop/pad when they do not."""
    vol = make_volume(*IN_SIZE, seed=5)
    out_size = (20, 26, 20)
    inverse = pixelpipe_inverse(np.eye(4), IN_SIZE, out_size)
    assert np.allclose(inverse, translation((np.array(IN_SIZE) - np.array(out_size)) / 2))
    want = monai_transforms.Affine(affine=torch.eye(4), spatial_size=out_size, padding_mode="zeros",
                                   mode="bilinear", image_only=True)(vol[None].float())
    assert torch.allclose(torch.as_tensor(want)[0].float(), vol[1:21, :, 2:22].float(), atol=0.01)  # float32 grid
    got, _ = warp3d_reference(VolumeBatch.from_list([vol]), Warp3DSpec(inverse, out_size))
    assert torch.allclose(got[0, 0], vol[1:21, :, 2:22].float(), atol=0.01)
