"""Volume ops through Compose3D on the CPU: the invariants (p=0 changes nothing, two flips give
the input back, batch-size independence, label maps follow their volumes), the world
conventions (Orientation and Spacing against nibabel's affines) and argument errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_cube, make_volume

import pixelpipe as pp
from pixelpipe.data.volumes import VolumeBatch

ATOL = 0.02  # grid_sample's float32 grid: whole-voxel moves land within ~1e-5 voxel


def _vols(n: int = 3) -> list[torch.Tensor]:
    return [make_volume(14 + 2 * i, 16 - i, 15 + i, seed=i) for i in range(n)]





def test_p0_changes_nothing() -> None:
    vols = _vols()
    labs = [(v > 0).to(torch.uint8) for v in vols]
    base = pp.Compose3D([])(vols[:1], labels=labs[:1])
    ops = [pp.RandomAffine3D(30, scale=(0.7, 1.3), shear=10, translate=3, p=0.0), pp.RandomFlip3D(0.0),
           pp.RandomRotate90_3D(p=0.0), pp.RandomGamma3D(p=0.0), pp.RandomContrast3D(p=0.0),
           pp.GaussianNoise3D(sigma=50.0, p=0.0), pp.RandomBiasField(p=0.0)]
    out = pp.Compose3D(ops)(vols[:1], labels=labs[:1])
    assert torch.equal(out["image"], base["image"])
    assert torch.equal(out["label"], base["label"])
    assert torch.allclose(base["image"][0, 0], vols[0].float(), atol=ATOL, rtol=0)


def test_two_flips_give_the_input_back_and_one_flips() -> None:
    vol, lab = make_cube(12, 10, 9, (1, 2, 3), (5, 7, 6))
    once = pp.Compose3D([pp.RandomFlip3D((1.0, 0.0, 1.0))])([vol], labels=[lab])
    twice = pp.Compose3D([pp.RandomFlip3D(1.0), pp.RandomFlip3D(1.0)])([vol], labels=[lab])
    assert torch.equal(once["label"][0, 0], lab.flip(0, 2).long())
    assert torch.allclose(once["image"][0, 0], vol.flip(0, 2).float(), atol=ATOL, rtol=0)
    assert torch.equal(twice["label"][0, 0], lab.long())
    assert torch.allclose(twice["image"][0, 0], vol.float(), atol=ATOL, rtol=0)


def test_quarter_turns() -> None:
    vol, lab = make_cube(8, 12, 10, (1, 2, 3), (5, 9, 6))
    one = pp.Compose3D([pp.RandomRotate90_3D((1, 2), max_k=1, p=1.0)])([vol], labels=[lab])
    assert one["label"].shape[2:] == (8, 10, 12)
    assert torch.equal(one["label"][0, 0], torch.rot90(lab, 1, (1, 2)).long())
    four = pp.Compose3D([pp.RandomRotate90_3D((0, 2), max_k=1, p=1.0)] * 4)([vol], labels=[lab])
    assert torch.equal(four["label"][0, 0], lab.long())


def test_batch_size_independence_and_determinism() -> None:
    vols = [make_volume(20, 22, 18, seed=s) for s in range(4)]
    labs = [(v > 200).to(torch.uint8) for v in vols]
    t = pp.Compose3D([pp.RandomAffine3D(20, scale=(0.8, 1.2), translate=2), pp.RandomFlip3D(),
                      pp.ElasticDeformation3D(4, max_displacement=2.0, p=0.5), pp.RandomCropByLabel(12), pp.ScaleIntensityRange(-1000, 1000), pp.NormalizeIntensity(),
                      pp.GaussianNoise3D(sigma=0.1, p=0.7), pp.RandomBiasField(p=0.5)])
    batch = t(vols, labels=labs, seed=5, epoch=2, indices=[10, 11, 12, 13])
    for i in (0, 3):
        alone = t([vols[i]], labels=[labs[i]], seed=5, epoch=2, indices=[10 + i])
        assert torch.allclose(alone["image"][0], batch["image"][i], atol=1e-5, rtol=0)
        assert torch.equal(alone["label"][0], batch["label"][i])
    again = t(vols, labels=labs, seed=5, epoch=2, indices=[10, 11, 12, 13])
    assert torch.equal(again["image"], batch["image"])
    other = t(vols, labels=labs, seed=5, epoch=3, indices=[10, 11, 12, 13])
    assert not torch.equal(other["image"], batch["image"])
    rows = batch["image"].reshape(4, -1)
    assert not torch.equal(rows[0], rows[1])  # per-sample randomness


def _centroid(x: torch.Tensor) -> torch.Tensor:
    idx = torch.stack(torch.meshgrid(*(torch.arange(s, dtype=torch.float64) for s in x.shape), indexing="ij"))
    w = x.to(torch.float64)
    return (idx * w).flatten(1).sum(1) / w.sum()


def test_label_map_follows_its_volume() -> None:
    vol, lab = make_cube(30, 28, 26, (8, 6, 9), (18, 15, 20), value=1000)
    t = pp.Compose3D([pp.RandomAffine3D(25, scale=(0.85, 1.15), shear=8, translate=3), pp.RandomFlip3D(),
                      pp.CenterCrop3D((28, 28, 28))], fill=-1000)
    for seed in range(3):
        out = t([vol], labels=[lab], seed=seed)
        img = out["image"][0, 0] + 1000  # background 0, the cube 2000
        got_lab = _centroid(out["label"][0, 0])
        assert torch.allclose(got_lab, _centroid(img), atol=0.25), (seed, got_lab, _centroid(img))
        assert abs(out["label"][0, 0].sum().item() - lab.sum().item()) / lab.sum().item() < 0.2


def test_world_points_follow_orientation_and_spacing() -> None:
    nib = pytest.importorskip("nibabel")
    vol, lab = make_cube(12, 14, 10, (3, 4, 2), (5, 6, 4))
    # an LPS-ish affine with the array axes permuted: axis 0 runs along -y, axis 1 along +z, axis 2 along -x
    affine = np.array([[0, 0, -0.8, 40], [-1.2, 0, 0, 30], [0, 2.0, 0, -20], [0, 0, 0, 1.0]])
    centre_in = (affine @ np.array([3.5, 4.5, 2.5, 1.0]))[:3]  # the cube's centre in mm
    out = pp.Compose3D([pp.Orientation("RAS")])([vol], labels=[lab], affine=[affine])
    a_out = out["affine"][0].numpy()
    assert np.allclose(np.abs(a_out[:3, :3]), np.diag([0.8, 1.2, 2.0]))
    assert (np.diag(a_out[:3, :3]) > 0).all()
    canon = nib.as_closest_canonical(nib.Nifti1Image(lab.numpy(), affine))
    assert np.allclose(canon.affine, a_out)
    assert np.array_equal(np.asarray(canon.dataobj), out["label"][0, 0].numpy())
    got = _centroid(out["label"][0, 0]).numpy()
    assert np.allclose((a_out @ np.append(got, 1.0))[:3], centre_in, atol=1e-6)

    sp = pp.Compose3D([pp.Orientation("RAS"), pp.Spacing((0.4, 0.6, 1.0))])([vol], labels=[lab], affine=[affine])
    a_sp = sp["affine"][0].numpy()
    assert np.allclose(sp["spacing"][0].numpy(), [0.4, 0.6, 1.0])
    assert np.allclose(a_sp[:3, 3], a_out[:3, 3])  # voxel 0's centre stays in place
    got = _centroid(sp["label"][0, 0]).numpy()
    assert np.allclose((a_sp @ np.append(got, 1.0))[:3], centre_in, atol=0.5)  # within half a coarse voxel


def test_crop_by_label_centres_on_foreground() -> None:
    vols, labs = zip(*(make_cube(40, 36, 38, (4 + s, 25, 3), (9 + s, 30, 8)) for s in range(4)))
    pos = pp.Compose3D([pp.RandomCropByLabel(10, pos=1.0, neg=0.0)])(list(vols), labels=list(labs))
    assert (pos["label"].flatten(1).sum(1) > 0).all()
    neg = pp.Compose3D([pp.RandomCropByLabel(6, pos=0.0, neg=1.0)])(list(vols), labels=list(labs), seed=3)
    centre = neg["label"][:, 0, 3, 3, 3]
    assert (centre == 0).all()
    with pytest.raises(ValueError, match="label maps"):
        pp.Compose3D([pp.RandomCropByLabel(6)])(list(vols))


def test_random_crop_stays_inside_and_varies() -> None:
    vol = torch.arange(20 * 21 * 22, dtype=torch.float32).view(20, 21, 22)
    t = pp.Compose3D([pp.RandomCrop3D((5, 6, 7))])
    firsts = set()
    for s in range(6):
        out = t([vol], seed=s)["image"][0, 0]
        v = float(out[0, 0, 0])
        d, rest = divmod(round(v), 21 * 22)
        h, w = divmod(rest, 22)
        assert d + 5 <= 20 and h + 6 <= 21 and w + 7 <= 22
        assert torch.allclose(out, vol[d : d + 5, h : h + 6, w : w + 7], atol=0.5)
        firsts.add(v)
    assert len(firsts) > 3


def test_intensity_ops() -> None:
    vol = make_volume(10, 12, 11, seed=4)
    win = pp.Compose3D([pp.ScaleIntensityRange(-500, 500, 0.0, 1.0)])([vol])["image"][0, 0]
    want = ((vol.float() + 500) / 1000).clamp(0, 1)
    assert torch.allclose(win, want, atol=1e-4)
    norm = pp.Compose3D([pp.NormalizeIntensity()])([vol])["image"]
    assert abs(norm.mean().item()) < 1e-4 and abs(norm.std(unbiased=False).item() - 1) < 1e-4
    sparse = vol.clone()
    sparse[:5] = 0
    nz = pp.Compose3D([pp.NormalizeIntensity(nonzero=True)])([sparse])["image"][0, 0]
    assert (nz[:5].abs() < 1e-3).all()
    vals = nz[sparse != 0]
    assert abs(vals.mean().item()) < 1e-3 and abs(vals.std(unbiased=False).item() - 1) < 1e-3
    gam = pp.Compose3D([pp.ScaleIntensityRange(-1000, 1000), pp.RandomGamma3D(2.0, p=1.0)])([vol])["image"][0, 0]
    lo, hi = win.min(), win.max()
    w2 = pp.Compose3D([pp.ScaleIntensityRange(-1000, 1000)])([vol])["image"][0, 0]
    lo, hi = w2.min(), w2.max()
    assert torch.allclose(gam, ((w2 - lo) / (hi - lo)) ** 2 * (hi - lo) + lo, atol=1e-4)
    con = pp.Compose3D([pp.RandomContrast3D((2.0, 2.0), p=1.0)])([vol])["image"][0, 0]
    assert torch.allclose(con - con.mean(), 2 * (vol.float() - vol.float().mean()), atol=0.1)
    noisy = pp.Compose3D([pp.GaussianNoise3D(sigma=10.0, p=1.0)])([vol])["image"][0, 0] - vol.float()
    assert abs(noisy.std().item() - 10) < 0.8 and abs(noisy.mean().item()) < 1.0
    bias = pp.Compose3D([pp.ScaleIntensityRange(-1000, 1000, 1.0, 2.0), pp.RandomBiasField(0.3, p=1.0)])([vol])
    ratio = bias["image"][0, 0] / pp.Compose3D([pp.ScaleIntensityRange(-1000, 1000, 1.0, 2.0)])([vol])["image"][0, 0]
    assert ratio.std() > 0.005 and (ratio > 0).all()  # a smooth positive field, not constant


def test_outputs_keep_dtype_and_shape() -> None:
    vols = _vols(2)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        out = pp.Compose3D([pp.Resize3D((8, 9, 10))], dtype=dtype)(vols)
        assert out["image"].dtype == dtype and out["image"].shape == (2, 1, 8, 9, 10)
    assert pp.Compose3D([pp.Resize3D(4)])(VolumeBatch.from_list([]))["image"].shape == (0, 1, 4, 4, 4)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: pp.RandomAffine3D(degrees="x"), "degrees"),
    (lambda: pp.RandomAffine3D(scale=(0.0, 2.0)), "scale"),
    (lambda: pp.RandomAffine3D(shear=(10, 5)), "shear"),
    (lambda: pp.RandomAffine3D(p=1.5), "p must be a probability"),
    (lambda: pp.RandomFlip3D((0.5, 2.0, 0.1)), "p must lie within"),
    (lambda: pp.RandomRotate90_3D(axes=(1, 1)), "axes"),
    (lambda: pp.RandomRotate90_3D(max_k=4), "max_k"),
    (lambda: pp.Resize3D((4, 0, 4)), "size"),
    (lambda: pp.Spacing(-1.0), "pixdim"),
    (lambda: pp.Orientation("RAX"), "axcodes"),
    (lambda: pp.Orientation("RRS"), "axcodes"),
    (lambda: pp.RandomCrop3D((4, 4)), "size"),
    (lambda: pp.RandomCropByLabel(8, pos=0, neg=0), "pos and neg"),
    (lambda: pp.ScaleIntensityRange(1, 1), "a_max"),
    (lambda: pp.NormalizeIntensity(divisor=0), "divisor"),
    (lambda: pp.RandomGamma3D((0.0, 2.0)), "gamma"),
    (lambda: pp.GaussianNoise3D(sigma=-1.0), "sigma"),
    (lambda: pp.RandomBiasField(order=9), "order"),
    (lambda: pp.Compose3D([], dtype=torch.int8), "dtype"),
    (lambda: pp.Compose3D([], border="wrap"), "border"),
])
def test_bad_arguments_fail_at_construction(make, match) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_compose3d_refuses_what_it_cannot_run() -> None:
    with pytest.raises(TypeError, match="not a volume op"):
        pp.Compose3D([pp.RandomFlip()])
    with pytest.raises(TypeError, match="not a pixelpipe op"):
        pp.Compose([pp.RandomFlip3D()])
    with pytest.raises(ValueError, match="crop"):
        pp.Compose3D([pp.RandomFlip3D()])(_vols(2))


def test_num_samples_gives_independent_patches_per_volume() -> None:
    vols, labs = zip(*(make_cube(30, 32, 28, (5 + s, 6, 7), (15 + s, 20, 18)) for s in range(2)))
    t = pp.Compose3D([pp.RandomFlip3D(), pp.RandomCropByLabel(8, pos=1, neg=0)], num_samples=3)
    out = t(list(vols), labels=list(labs), seed=1, indices=[4, 9])
    assert out["image"].shape == (6, 1, 8, 8, 8)
    assert out["index"].tolist() == [4, 4, 4, 9, 9, 9] and out["patch"].tolist() == [0, 1, 2] * 2
    assert (out["label"].flatten(1).sum(1) > 0).all()
    rows = out["image"].flatten(1)
    assert not torch.equal(rows[0], rows[1]) or not torch.equal(rows[1], rows[2])
    alone = t([vols[1]], labels=[labs[1]], seed=1, indices=[9])
    assert torch.equal(alone["image"], out["image"][3:])
    with pytest.raises(ValueError, match="num_samples"):
        pp.Compose3D([], num_samples=0)


def test_elastic_deformation() -> None:
    vol, lab = make_cube(30, 28, 26, (8, 6, 9), (18, 15, 20), value=1000)
    plain = pp.Compose3D([pp.RandomAffine3D(10, p=1.0), pp.CenterCrop3D(24)])
    base = plain([vol], labels=[lab], seed=2)
    still = pp.Compose3D([pp.RandomAffine3D(10, p=1.0), pp.ElasticDeformation3D(max_displacement=0.0),
                          pp.CenterCrop3D(24)])([vol], labels=[lab], seed=2)
    assert torch.allclose(still["image"], base["image"], atol=ATOL)
    assert torch.equal(still["label"], base["label"])
    bent = pp.Compose3D([pp.RandomAffine3D(10, p=1.0), pp.ElasticDeformation3D(5, max_displacement=3.0),
                         pp.CenterCrop3D(24)], fill=-1000)([vol], labels=[lab], seed=2)
    assert (bent["label"] != base["label"]).any()
    img = bent["image"][0, 0] + 1000
    assert torch.allclose(_centroid(bent["label"][0, 0]), _centroid(img), atol=0.3)
    with pytest.raises(ValueError, match="one ElasticDeformation3D"):
        pp.Compose3D([pp.ElasticDeformation3D(), pp.ElasticDeformation3D()])([vol])
    with pytest.raises(ValueError, match="control_points"):
        pp.ElasticDeformation3D(control_points=1)


def test_elastic_field_of_one_value_is_a_shift() -> None:
    """A field equal everywhere moves every voxel by it: the same as a translation matrix."""
    from pixelpipe.kernels.reference.warp3d import warp3d_reference
    from pixelpipe.kernels.spec3d import Deformation, Warp3DSpec

    vol = make_volume(12, 14, 13, seed=6)
    batch = VolumeBatch.from_list([vol])
    field = np.zeros((1, 3, 4, 4, 4), np.float32)
    field[0, 0], field[0, 1], field[0, 2] = 1.5, -0.75, 2.25
    eye = np.eye(4)[None]
    deform = Deformation(eye, eye, field, np.array([[12.0, 14.0, 13.0]]))
    got, _ = warp3d_reference(batch, Warp3DSpec(eye, (12, 14, 13), "reflect", deform=deform))
    shift = np.eye(4)
    shift[:3, 3] = [1.5, -0.75, 2.25]
    want, _ = warp3d_reference(batch, Warp3DSpec(shift[None], (12, 14, 13), "reflect"))
    assert torch.allclose(got, want, atol=0.05)


ALL_OPS = [
    pp.RandomAffine3D(20, scale=(0.8, 1.2), shear=5, translate=2, p=0.7), pp.RandomFlip3D(),
    pp.RandomRotate90_3D(axes=(0, 1), max_k=2, p=1.0), pp.Resize3D((9, 10, 11)), pp.Spacing((1.2, 0.9, 1.0)),
    pp.Orientation("LPI"), pp.RandomCrop3D(7), pp.CenterCrop3D(7), pp.RandomCropByLabel(7),
    pp.ElasticDeformation3D(4, max_displacement=1.5), pp.ScaleIntensityRange(-1000, 1000),
    pp.NormalizeIntensity(nonzero=True), pp.RandomGamma3D(p=1.0), pp.RandomContrast3D(p=1.0),
    pp.GaussianNoise3D(sigma=20.0, p=1.0), pp.RandomBiasField(p=1.0),
]


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda op: type(op).__name__)
def test_every_op_keeps_the_contract(op) -> None:
    """Inputs untouched, outputs finite of the asked dtype, one row per sample, the same seed the
    same output, an empty batch an empty output, float16 the float32 result rounded."""
    vols = [make_volume(12, 13, 11, seed=1), make_volume(14, 12, 12, seed=2)]
    labs = [(v > 100).to(torch.uint8) for v in vols]
    before = [v.clone() for v in vols], [lab.clone() for lab in labs]
    tail = [] if isinstance(op, (pp.Resize3D, pp.RandomCrop3D, pp.CenterCrop3D, pp.RandomCropByLabel)) \
        else [pp.Resize3D((8, 8, 8))]
    t32 = pp.Compose3D([op, *tail])
    a = t32(vols, labels=labs, seed=3)
    assert all(torch.equal(v, w) for v, w in zip(vols, before[0]))
    assert all(torch.equal(v, w) for v, w in zip(labs, before[1]))
    assert a["image"].shape[0] == 2 and torch.isfinite(a["image"]).all()
    assert a["label"].dtype == torch.int64
    assert torch.equal(t32(vols, labels=labs, seed=3)["image"], a["image"])
    h = pp.Compose3D([op, *tail], dtype=torch.float16)(vols, labels=labs, seed=3)["image"]
    assert torch.allclose(h.float(), a["image"].to(torch.float16).float(), atol=1e-2, rtol=2**-9)
    empty = t32(VolumeBatch.from_list([], labels=[]))
    assert empty["image"].shape[0] == 0


def test_show_volumes_draws_three_slices_with_the_label(tmp_path) -> None:
    vol, lab = make_cube(20, 22, 24, (5, 6, 7), (15, 16, 17), label=1)
    out = pp.Compose3D([pp.RandomFlip3D(0.0)])([vol, vol], labels=[lab, lab])
    pic = pp.show_volumes(out, tmp_path / "s.png", tile=40)
    assert pic.size == (120, 80) and (tmp_path / "s.png").stat().st_size > 0
    px = np.asarray(pic)
    centre = px[20, 20]  # the first tile's centre lies inside the cube: red over grey
    corner = px[2, 20]  # outside the volume's cut but inside the tile: grey, no overlay
    assert centre[0] > centre[1] + 50
    assert abs(int(corner[0]) - int(corner[1])) < 5
    with pytest.raises(ValueError, match="N, C, D, H, W"):
        pp.show_volumes(torch.zeros(2, 3, 4))


def test_volume_batch_checks_what_it_is_given() -> None:
    vol = make_volume(4, 5, 6)
    b = VolumeBatch.from_list([vol], spacing=[(2.0, 1.0, 0.5)])
    assert np.allclose(b.affine[0], np.diag([2.0, 1.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="disagrees"):
        VolumeBatch.from_list([vol], spacing=[(2.0, 1.0, 0.5)], affine=[np.eye(4)])
    with pytest.raises(ValueError, match="label map 0"):
        VolumeBatch.from_list([vol], labels=[torch.zeros(4, 5, 7, dtype=torch.uint8)])
    with pytest.raises(ValueError, match="dtype"):
        VolumeBatch.from_list([vol.to(torch.int32)])
    with pytest.raises(ValueError, match="D, H, W"):
        VolumeBatch.from_list([torch.zeros(4, 5)])
    mixed = VolumeBatch.from_list([vol, vol.to(torch.uint8)])
    assert mixed.data.dtype == torch.float32
    assert torch.equal(mixed.volume(1)[..., 0], vol.to(torch.uint8).float())
