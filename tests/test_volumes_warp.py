"""The reference volume warp against scipy.ndimage.affine_transform with the same matrix, its
border rules, antialiasing, and the label map following its volume.

Tolerances (measured on these volumes, values in -1000..1000, range 2000):
- trilinear (order 1): mean |difference| below 0.5% of the range is the target; measured
  ~5e-8 of the range, max ~2e-6 (float32 grid coordinates against scipy's float64); the test
  holds it to 1e-6 (mean) and 1e-5 (max);
- nearest (order 0): identical except voxels whose source point lies within 1e-3 voxel of a
  rounding boundary (at most 0.1% of the voxels).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_cube, make_volume

from pixelpipe.data.volumes import VolumeBatch
from pixelpipe.kernels.reference.warp3d import warp3d_reference
from pixelpipe.kernels.spec3d import Warp3DSpec

ndimage = pytest.importorskip("scipy.ndimage")

RANGE = 2000.0


def _random_inverse(seed: int, size: np.ndarray) -> np.ndarray:
    """A rotation + anisotropic scale + shear + shift about the centre, as an inverse matrix."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    lin = q @ np.diag(rng.uniform(0.8, 1.2, 3)) + rng.uniform(-0.1, 0.1, (3, 3))
    m = np.eye(4)
    m[:3, :3] = lin
    m[:3, 3] = size / 2 - lin @ (size / 2) + rng.uniform(-2, 2, 3)
    return m


def _scipy(vol: np.ndarray, inverse: np.ndarray, out: tuple[int, int, int], order: int, mode: str,
           cval: float = 0.0) -> np.ndarray:
    """scipy with our convention: index c = inverse_lin @ (o + 0.5) + t - 0.5."""
    lin, t = inverse[:3, :3], inverse[:3, 3]
    offset = lin @ np.full(3, 0.5) + t - 0.5
    return ndimage.affine_transform(vol.astype(np.float64), lin, offset, output_shape=out, order=order, mode=mode,
                                    cval=cval)


SCIPY_MODE = {"constant": "grid-constant", "replicate": "nearest", "reflect": "reflect"}


@pytest.mark.parametrize("border", ["constant", "replicate", "reflect"])
def test_trilinear_matches_scipy_order1(border: str) -> None:
    vol = make_volume(20, 26, 23, seed=1)
    inv = _random_inverse(3, np.array(vol.shape, dtype=np.float64))
    out = (18, 22, 25)
    fill = -300.0 if border == "constant" else 0.0
    spec = Warp3DSpec(inv[None], out, border, fill)
    got, _ = warp3d_reference(VolumeBatch.from_list([vol]), spec)
    want = _scipy(vol.numpy(), inv, out, 1, SCIPY_MODE[border], fill)
    diff = np.abs(got[0, 0].numpy() - want)
    assert diff.mean() < 1e-6 * RANGE, diff.mean()  # the target is 0.5%; measured ~5e-8
    assert diff.max() < 1e-5 * RANGE


def test_nearest_label_matches_scipy_order0() -> None:
    vol, lab = make_cube(24, 20, 22, (5, 4, 6), (15, 14, 13), label=3)
    lab[8:12, 6:9, 7:10] = 7
    inv = _random_inverse(5, np.array(vol.shape, dtype=np.float64))
    out = (24, 20, 22)
    _, got = warp3d_reference(VolumeBatch.from_list([vol], [lab]), Warp3DSpec(inv[None], out, "constant", 0.0, 0))
    want = _scipy(lab.numpy(), inv, out, 0, "grid-constant", 0.0)
    mismatch = (got[0, 0].numpy() != want).mean()
    assert got.dtype == torch.int64
    assert mismatch <= 1e-3, mismatch
    assert set(np.unique(got.numpy())) <= {0, 3, 7}


def test_identity_keeps_values_and_labels() -> None:
    """grid_sample's float32 grid puts the identity's source points within ~1e-5 voxel of the
    centres: values within 0.01 (of a 2000 range), labels exact."""
    vol, lab = make_cube(9, 10, 11, (2, 3, 4), (6, 7, 8), label=5)
    spec = Warp3DSpec(np.eye(4)[None], (9, 10, 11))
    img, got = warp3d_reference(VolumeBatch.from_list([vol], [lab]), spec)
    assert torch.allclose(img[0, 0], vol.float(), atol=0.01, rtol=0)
    assert torch.equal(got[0, 0], lab.long())


def test_label_fill_marks_voxels_from_outside() -> None:
    vol, lab = make_cube(8, 8, 8, (0, 0, 0), (8, 8, 8))
    shift = np.eye(4)
    shift[:3, 3] = [4, 0, 0]  # output voxel d reads input d + 4: the last 4 slices come from outside
    _, got = warp3d_reference(VolumeBatch.from_list([vol], [lab]), Warp3DSpec(shift[None], (8, 8, 8), label_fill=255))
    assert (got[0, 0, :4] == 1).all() and (got[0, 0, 4:] == 255).all()


def test_ragged_batch_matches_one_by_one() -> None:
    vols = [make_volume(12, 14, 10, seed=s) for s in range(3)] + [make_volume(20, 9, 15, seed=7)]
    invs = np.stack([_random_inverse(s, np.array(v.shape, dtype=np.float64)) for s, v in enumerate(vols)])
    batch, _ = warp3d_reference(VolumeBatch.from_list(vols), Warp3DSpec(invs, (10, 10, 10), "reflect"))
    for i, v in enumerate(vols):
        alone, _ = warp3d_reference(VolumeBatch.from_list([v]), Warp3DSpec(invs[i : i + 1], (10, 10, 10), "reflect"))
        assert torch.equal(batch[i], alone[0])


def test_antialias_blurs_only_a_shrinking_warp() -> None:
    """A 1-voxel checkerboard shrunk 4x along every axis: without the pre-filter the output
    aliases to whole voxels of one phase; with it every output is near the mean."""
    idx = np.indices((32, 32, 32)).sum(0) % 2
    vol = torch.from_numpy(np.where(idx, 1000, -1000).astype(np.int16))
    shrink = np.diag([4.0, 4.0, 4.0, 1.0])
    shrink[:3, 3] = -1.5  # output voxel j reads input voxel 4 j exactly (one phase)
    shrink = shrink[None]
    from pixelpipe.kernels.spec3d import antialias_sigmas

    sig = antialias_sigmas(shrink)
    assert np.allclose(sig, 1.5)
    assert (antialias_sigmas(np.eye(4)[None]) == 0).all()
    batch = VolumeBatch.from_list([vol])
    plain, _ = warp3d_reference(batch, Warp3DSpec(shrink, (8, 8, 8), "replicate"))
    smooth, _ = warp3d_reference(batch, Warp3DSpec(shrink, (8, 8, 8), "replicate", sigmas=sig))
    assert plain.abs().mean() > 900
    assert smooth.abs().mean() < 50


def test_channels_last_volumes_warp_per_channel() -> None:
    a, b = make_volume(10, 11, 12, seed=1), make_volume(10, 11, 12, seed=2)
    vol = torch.stack([a, b], -1)
    inv = _random_inverse(2, np.array([10.0, 11.0, 12.0]))[None]
    both, _ = warp3d_reference(VolumeBatch.from_list([vol]), Warp3DSpec(inv, (9, 9, 9)))
    one, _ = warp3d_reference(VolumeBatch.from_list([b]), Warp3DSpec(inv, (9, 9, 9)))
    assert both.shape == (1, 2, 9, 9, 9)
    assert torch.equal(both[0, 1], one[0, 0])


@pytest.mark.parametrize("border", ["constant", "reflect"])
def test_inner_crop_reads_a_box_and_matches_scipy(border: str) -> None:
    """A rotated crop deep inside (the reference reads only the box its taps reach) and one
    hanging over a face (the box clipped there, the border rule applied by grid_sample)."""
    vol = make_volume(30, 32, 28, seed=2)
    from pixelpipe.kernels.reference.warp3d import source_box

    for shift in ([10.0, 11.0, 9.0], [22.0, -3.0, 18.0]):
        inv = _random_inverse(8, np.array([10.0, 10.0, 10.0]))
        inv[:3, 3] += shift
        lo, hi = source_box(inv, np.array(vol.shape), (10, 10, 10))
        if shift[0] == 10.0:
            assert (hi - lo).prod() < 0.3 * vol.numel()
        got, _ = warp3d_reference(VolumeBatch.from_list([vol]), Warp3DSpec(inv[None], (10, 10, 10), border, 5.0))
        want = _scipy(vol.numpy(), inv, (10, 10, 10), 1, SCIPY_MODE[border], 5.0)
        assert np.abs(got[0, 0].numpy() - want).max() < 1e-5 * RANGE


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_samples_on_worker_threads_give_the_same_voxels(threads: int) -> None:
    """The CPU path runs the samples on a pool (kernels.cpu.volumes): bit for bit the serial
    loop's output, with antialiasing, constant fills and every torch thread count."""
    import threading

    from pixelpipe.data.threads import torch_threads_here
    from pixelpipe.kernels.cpu.volumes import sample_map

    vols = [make_volume(14 + i, 16, 15 - i, seed=i) for i in range(5)]
    labs = [(v > 0).to(torch.uint8) for v in vols]
    batch = VolumeBatch.from_list(vols, labs)
    inverse = np.stack([_random_inverse(i, np.array(v.shape, dtype=np.float64)) for i, v in enumerate(vols)])
    inverse[0, :3, :3] *= 1.6  # shrinks: this sample is blurred first
    spec = Warp3DSpec(inverse, (10, 12, 11), "constant", fill=-1000.0, label_fill=255,
                      sigmas=np.where(np.arange(5)[:, None] == 0, 0.3, 0.0) * np.ones((5, 3)))
    want = warp3d_reference(batch, spec)
    got: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    def run() -> None:  # on a thread of its own with its own torch thread count; the default stays
        torch_threads_here(threads)
        got.append(warp3d_reference(batch, spec, sample_map(len(spec))))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert torch.equal(got[0][0], want[0]) and got[0][1] is not None and want[1] is not None
    assert torch.equal(got[0][1], want[1])
