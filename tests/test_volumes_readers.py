"""Volume readers round trip (NIfTI, .npy, .npz, MONAI-style dicts, folders of pairs) and the
VolumePipeline: order, sharding, exact resume and the error policy. Data made in tmp_path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_cube, make_volume

import pixelpipe as pp
from pixelpipe.readers import ReaderError, Volumes, load_volume

nib = pytest.importorskip("nibabel")

AFFINE = np.array([[-0.9, 0, 0, 90.0], [0, 1.1, 0, -120.0], [0, 0, 2.5, -60.0], [0, 0, 0, 1]])


def _save(path, arr: np.ndarray, affine: np.ndarray = AFFINE) -> str:
    nib.save(nib.Nifti1Image(arr, affine), str(path))
    return str(path)


def _dataset(tmp_path, n: int = 5, gz: bool = True) -> list[dict[str, str]]:
    ext = ".nii.gz" if gz else ".nii"
    (tmp_path / "imagesTr").mkdir()
    (tmp_path / "labelsTr").mkdir()
    items = []
    for i in range(n):
        vol, lab = make_cube(12 + i, 14, 13, (2 + i, 3, 4), (7 + i, 9, 8), label=1 + i % 2)
        img = _save(tmp_path / "imagesTr" / f"case{i}{ext}", vol.numpy())
        seg = _save(tmp_path / "labelsTr" / f"case{i}{ext}", lab.numpy())
        items.append({"image": img, "label": seg})
    return items


@pytest.mark.parametrize("gz", [True, False])
def test_nifti_round_trip(tmp_path, gz: bool) -> None:
    vol = make_volume(9, 10, 11, seed=3).numpy()
    path = _save(tmp_path / ("v.nii.gz" if gz else "v.nii"), vol)
    got, affine = load_volume(path)
    assert got.dtype == np.int16 and np.array_equal(got, vol)
    assert np.allclose(affine, AFFINE)
    assert isinstance(got, np.memmap) == (not gz)  # uncompressed files are memory-mapped


def test_numpy_files(tmp_path) -> None:
    vol = make_volume(5, 6, 7).numpy()
    np.save(tmp_path / "v.npy", vol)
    got, affine = load_volume(tmp_path / "v.npy")
    assert isinstance(got, np.memmap) and np.array_equal(got, vol) and np.allclose(affine, np.eye(4))
    np.savez(tmp_path / "v.npz", image=vol, spacing=np.array([2.0, 1.0, 0.5]))
    got, affine = load_volume(tmp_path / "v.npz")
    assert np.array_equal(got, vol) and np.allclose(np.diag(affine)[:3], [2.0, 1.0, 0.5])
    np.savez(tmp_path / "bad.npz", a=vol, b=vol)
    with pytest.raises(ValueError, match="'image'"):
        load_volume(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="not a volume file"):
        (tmp_path / "x.txt").write_text("x")
        load_volume(tmp_path / "x.txt")


def test_lists_dicts_and_folders_agree(tmp_path) -> None:
    items = _dataset(tmp_path, 3)
    from_dicts = Volumes(items)
    from_pairs = Volumes([(d["image"], d["label"]) for d in items])
    from_folder = Volumes.folder(tmp_path)
    for r in (from_pairs, from_folder):
        assert len(r) == 3
        for i in range(3):
            a, b = from_dicts.read(i), r.read(i)
            assert np.array_equal(a.image, b.image) and np.array_equal(a.label, b.label)
            assert np.allclose(a.affine, AFFINE)
    s = from_dicts.read(1)
    assert s.image.shape == (13, 14, 13) and s.label.max() == 2 and s.source.endswith("case1.nii.gz")


def test_reader_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(ReaderError, match="nope.nii"):
        Volumes([{"image": str(tmp_path / "nope.nii")}])
    with pytest.raises(ReaderError, match="'image'"):
        Volumes([{"label": "x"}])
    a = _save(tmp_path / "a.nii", np.zeros((4, 5, 6), np.int16))
    b = _save(tmp_path / "b.nii", np.zeros((4, 5, 7), np.uint8))
    with pytest.raises(ValueError, match="b.nii"):
        Volumes([(a, b)]).read(0)
    with pytest.raises(ReaderError, match="no folder"):
        Volumes.folder(tmp_path / "missing")


def test_missing_nibabel_names_the_extra(tmp_path, monkeypatch) -> None:
    import sys

    path = _save(tmp_path / "a.nii", np.zeros((2, 2, 2), np.int16))
    monkeypatch.setitem(sys.modules, "nibabel", None)
    with pytest.raises(ImportError, match=r"pixelpipe\[volumes\]"):
        load_volume(path)


def _pipe(items, **kw) -> pp.VolumePipeline:
    ops = [pp.RandomFlip3D(), pp.CenterCrop3D(10), pp.ScaleIntensityRange(-1000, 1000)]
    return pp.VolumePipeline(items, ops, batch_size=kw.pop("batch_size", 2), seed=7, **kw)


def test_pipeline_batches_world_points_and_labels(tmp_path) -> None:
    items = _dataset(tmp_path, 5)
    pipe = _pipe(items)
    batches = list(pipe)
    assert len(pipe) == 3 and len(batches) == 3
    b = batches[0]
    assert b["image"].shape == (2, 1, 10, 10, 10) and b["label"].shape == (2, 1, 10, 10, 10)
    idx = torch.cat([x["index"] for x in batches])[torch.cat([x["valid"] for x in batches])]
    assert sorted(idx.tolist()) == list(range(5))
    assert batches[-1]["valid"].tolist() == [True, False]
    assert b["affine"].shape == (2, 4, 4)
    pipe.close()


def test_pipeline_resumes_exactly_and_shards(tmp_path) -> None:
    items = _dataset(tmp_path, 6)
    full = _pipe(items)
    list(full)  # epoch 0
    want = list(full)  # epoch 1
    again = _pipe(items)
    list(again)
    it = iter(again)
    next(it)
    state = again.state_dict()
    resumed = _pipe(items)
    resumed.load_state_dict(state)
    got = list(resumed)
    assert len(got) == len(want) - 1
    for a, b in zip(got, want[1:]):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["index"], b["index"])
    ranks = []
    for r in range(2):
        batches = list(_pipe(items, shard=(r, 2)))
        ranks.append(torch.cat([x["index"][x["valid"]] for x in batches]).tolist())
    assert sorted(ranks[0] + ranks[1]) == list(range(6))
    for p in (full, again, resumed):
        p.close()


def test_pipeline_error_policies(tmp_path) -> None:
    items = _dataset(tmp_path, 4)
    (tmp_path / "labelsTr" / "case2.nii.gz").write_bytes(b"not a nifti file")
    with pytest.raises(pp.SampleError, match="case2"):
        list(_pipe(items, shuffle=False))
    skip = _pipe(items, shuffle=False, on_error="skip")
    got = torch.cat([b["index"] for b in skip]).tolist()
    assert got == [0, 1, 3] and skip.errors[0][0] == 2 and "case2" in skip.errors[0][1]
    rep = _pipe(items, shuffle=False, on_error="replace")
    got = torch.cat([b["index"] for b in rep]).tolist()
    assert len(got) == 4 and 2 not in got
    with pytest.raises(ValueError, match="on_error"):
        _pipe(items, on_error="ignore")
    for p in (skip, rep):
        p.close()


def test_pipeline_reads_only_the_boxes_and_matches_the_compose(tmp_path) -> None:
    items = _dataset(tmp_path, 4, gz=False)
    ops = [pp.RandomAffine3D(15), pp.RandomFlip3D(), pp.RandomCropByLabel(6, pos=1, neg=1),
           pp.ScaleIntensityRange(-1000, 1000), pp.NormalizeIntensity()]
    pipe = pp.VolumePipeline(items, ops, batch_size=4, seed=3, shuffle=False)
    got = next(iter(pipe))
    assert pipe.voxels_read < 0.6 * pipe.voxels_total
    reader = Volumes(items)
    samples = [reader.read(i) for i in range(4)]
    whole = pp.Compose3D(ops)([torch.from_numpy(np.asarray(s.image)) for s in samples],
                              labels=[torch.from_numpy(np.asarray(s.label)) for s in samples],
                              affine=[s.affine for s in samples], seed=3, epoch=0, indices=[0, 1, 2, 3])
    assert torch.allclose(got["image"], whole["image"], atol=1e-3)
    assert (got["label"] != whole["label"]).float().mean() <= 1e-3
    assert torch.allclose(got["affine"], whole["affine"])
    pipe.close()


def test_bench_cli_runs_the_volume_pipeline(capsys) -> None:
    from pixelpipe.tools.cli import main

    assert main(["bench", "--pipeline", "volume", "--device", "cpu", "--size", "20", "--crop", "12",
                 "--batch", "2", "--rounds", "1", "--peers", "none"]) == 0
    out = capsys.readouterr().out
    assert "pixelpipe" in out and "crop 12^3" in out
    with pytest.raises(SystemExit):
        main(["bench", "--pipeline", "volume", "--size", "8", "--crop", "12"])


def test_tar_shards_read_like_files(tmp_path) -> None:
    import tarfile

    want = []
    files = []
    for i, ext in enumerate(["nii", "nii.gz", "npy"]):
        vol, lab = make_cube(10 + i, 12, 11, (2, 3, 4), (6, 8, 7), label=1 + i)
        img_path, lab_path = tmp_path / f"c{i}.image.{ext}", tmp_path / f"c{i}.label.{ext}"
        if ext == "npy":
            np.save(img_path, vol.numpy())
            np.save(lab_path, lab.numpy())
        else:
            _save(img_path, vol.numpy())
            _save(lab_path, lab.numpy())
        files += [img_path, lab_path]
        want.append((vol.numpy(), lab.numpy()))
    shard = tmp_path / "shard-0.tar"
    with tarfile.open(shard, "w") as tar:
        for f in files:
            tar.add(f, arcname=f"cases/{f.name}")
        tar.add(files[0], arcname="cases/README.txt")  # not a volume name: ignored
    reader = Volumes.tar(str(shard))
    assert len(reader) == 3
    for i, (vol, lab) in enumerate(want):
        s = reader.read(i)
        assert np.array_equal(s.image, vol) and np.array_equal(s.label, lab)
        assert s.source.endswith(f"cases/c{i}.image.{['nii', 'nii.gz', 'npy'][i]}")
    assert isinstance(reader.read(0).image, np.memmap)  # .nii member mapped in place
    assert isinstance(reader.read(2).image, np.memmap)  # so is .npy
    assert np.allclose(reader.read(1).affine, AFFINE)
    pipe = pp.VolumePipeline(reader, [pp.RandomCropByLabel(6), pp.ScaleIntensityRange(-1000, 1000)],
                             batch_size=3, seed=1)
    batch = next(iter(pipe))
    assert (batch["label"].flatten(1).max(1).values > 0).sum() >= 1
    pipe.close()
    with tarfile.open(tmp_path / "gz.tar.gz", "w:gz") as tar:
        tar.add(files[0], arcname="a.image.nii")
    with pytest.raises(ReaderError, match="compressed tar"):
        Volumes.tar(tmp_path / "gz.tar.gz")
