"""kernels/_device.to_device: host data (numpy or a CPU tensor) to a device with the same
values, shape and dtype, whatever its layout; on CUDA through pinned memory (checked when a
GPU is present)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.data.transfer import to_device

DEVICES = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_numpy_and_tensors_arrive_equal(device):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 21))
    got = to_device(a, device)
    assert got.device.type == device.type and got.dtype == torch.float64
    assert np.array_equal(got.cpu().numpy(), a)
    strided = a[::2, 3:17:3]  # not contiguous
    assert np.array_equal(to_device(strided, device).cpu().numpy(), strided)
    t = torch.arange(24, dtype=torch.int64).view(4, 6).t()  # a transposed tensor
    got = to_device(t, device)
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), t)
    cast = to_device(a, device, torch.float32)
    assert cast.dtype == torch.float32 and torch.equal(cast.cpu(), torch.from_numpy(a).float())
    bf = torch.linspace(0, 1, 9, dtype=torch.bfloat16)  # no numpy twin: torch's own copy
    assert torch.equal(to_device(bf, device).cpu(), bf)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_copy_survives_reuse_of_the_host_array():
    """The copy is asynchronous: overwriting the caller's array at once must not change what
    arrives (the data went to pinned memory first)."""
    a = np.full((256, 42), 3.0)
    got = to_device(a, torch.device("cuda"))
    a[:] = -1.0
    torch.cuda.synchronize()
    assert bool((got == 3.0).all())


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_placed_arrays_arrive_equal_and_aligned(device):
    """A Pipeline batch's label, index and valid go to the device together (one copy on CUDA,
    as views of one buffer): each must arrive with its values, dtype and shape, 64-byte
    aligned, for any lengths (odd byte counts included) and for none."""
    from pixelpipe.loader.collate import placed

    for n in (0, 1, 5, 256):
        labels = np.arange(3 * n, dtype=np.int64).reshape(n, 3) - 7
        index = np.arange(n, dtype=np.int64) * 1000 + 2**40
        valid = (np.arange(n) % 3) != 1
        got = placed([labels, index, valid], device)
        for g, a in zip(got, (labels, index, valid)):
            assert g.device.type == device.type and g.shape == a.shape and g.is_contiguous()
            assert np.array_equal(g.cpu().numpy(), a) and g.cpu().numpy().dtype == a.dtype
            assert g.data_ptr() % 64 == 0


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_joined_parts_arrive_as_their_concatenation(device):
    """joined_to_device: host tensors of any shape and layout, flattened and joined as
    torch.cat would, for bool and integer labels, empty parts, mixed dtypes (promoted as
    torch.cat promotes) and a part given as a transposed view."""
    from pixelpipe.data.transfer import joined_to_device

    g = torch.Generator().manual_seed(1)
    for dtype in (torch.uint8, torch.bool, torch.int16, torch.int64):
        parts = [torch.randint(0, 2 if dtype == torch.bool else 100, (h, w, 1), generator=g).to(dtype)
                 for h, w in ((5, 7), (0, 3), (11, 2), (1, 1))]
        parts.append(torch.randint(0, 2, (4, 6), generator=g).to(dtype).t())  # not contiguous
        got = joined_to_device(parts, device)
        want = torch.cat([p.reshape(-1) for p in parts])
        assert got.device.type == device.type and got.dtype == dtype and torch.equal(got.cpu(), want)
    mixed = [torch.ones(3, dtype=torch.uint8), torch.full((2,), 300, dtype=torch.int32)]
    assert torch.equal(joined_to_device(mixed, device).cpu(), torch.cat(mixed))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_an_upload_of_empty_arrays_gives_empty_tensors(device):
    """Upload.send when every array is empty (a batch without boxes): empty tensors of the
    asked dtypes, with or without a non-empty array beside them."""
    from pixelpipe.data.transfer import Upload

    for extra in (False, True):
        up = Upload()
        up.add(np.zeros(0, np.int64), torch.int64)
        up.add(np.zeros((0, 4), np.float32), torch.float32)
        if extra:
            up.add(np.arange(3), torch.int32)
        got = up.send(device)
        assert [t.dtype for t in got[:2]] == [torch.int64, torch.float32] and all(t.numel() == 0 for t in got[:2])
        assert all(t.device.type == device.type for t in got)
        if extra:
            assert got[2].tolist() == [0, 1, 2]
        assert [tuple(t.shape) for t in got[:2]] == [(0,), (0, 4)]  # each array's shape kept


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_an_upload_gives_each_array_its_shape(device):
    """Upload.send gives each tensor the shape its array had (a table [R, K], a grid [S, N]),
    whatever the strides given, so callers need not view them back."""
    from pixelpipe.data.transfer import Upload

    table = np.arange(12, dtype=np.float64).reshape(3, 4)
    grid = np.arange(10, dtype=np.int64).reshape(5, 2).T  # not contiguous
    up = Upload()
    up.add(table, torch.float32)
    up.add(grid, torch.int32)
    t, g = up.send(device)
    assert t.shape == (3, 4) and torch.equal(t.cpu(), torch.from_numpy(table).float())
    assert g.shape == (2, 5) and torch.equal(g.cpu(), torch.from_numpy(grid.copy()).int())


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_an_upload_of_every_dtype_and_odd_lengths(device):
    """Upload.send with parts of every dtype it takes, lengths that leave padding before the
    next part, a part of one byte and bfloat16 (cast on the device): each tensor
    has its array's values, dtype and shape."""
    from pixelpipe.data.transfer import Upload

    rng = np.random.default_rng(3)
    parts = [(rng.random((3, 5)), torch.float32), (rng.integers(-9, 9, 7), torch.int64),
             (rng.random(3) < 0.5, torch.bool), (rng.integers(0, 255, 1), torch.uint8),
             (rng.integers(-9, 9, (2, 3)), torch.int16), (rng.integers(-9, 9, 5), torch.int8),
             (np.array([2.5]), torch.float64), (rng.random(11), torch.float16), (rng.random((2, 2)), torch.bfloat16),
             (rng.integers(0, 9, 9), torch.int32)]
    up = Upload()
    for a, dtype in parts:
        up.add(a, dtype)
    got = up.send(device)
    for (a, dtype), t in zip(parts, got):
        assert t.dtype == dtype and tuple(t.shape) == a.shape and t.device.type == device.type
        assert torch.equal(t.cpu(), torch.from_numpy(np.asarray(a)).to(dtype))


def test_cuda_staging_branches_with_pinned_allocation_stubbed(monkeypatch):
    """to_device, joined_to_device and Upload.send take their CUDA branch (numpy writes into
    the pinned buffer, one asynchronous copy) for a device whose type is "cuda"; here, without a
    GPU, the pinned allocation is an ordinary one and the copy lands on the CPU: the values,
    dtypes and shapes are what the CPU branch gives. A GPU runs the real thing in the tests above."""
    import types

    from pixelpipe.data import transfer

    real_empty, real_staging = torch.empty, transfer._through_pinned
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    monkeypatch.setattr(transfer, "_through_pinned",
                        lambda shape, dtype, fill, device: real_staging(shape, dtype, fill, torch.device("cpu")))
    fake = types.SimpleNamespace(type="cuda")
    values = [(np.arange(5), torch.int32), (np.array([True, False, True]), torch.bool),
              (np.linspace(0, 1, 7), torch.float32), (np.zeros(0), torch.int64),
              (np.array([3, 250]), torch.uint8), (np.arange(4.0), torch.bfloat16)]
    up = transfer.Upload()
    for v, dtype in values:
        up.add(v, dtype)
    for (v, dtype), got in zip(values, up.send(fake)):
        assert got.dtype == dtype and torch.equal(got, torch.as_tensor(v).to(dtype))
    a = np.random.default_rng(0).random((3, 4)).astype(np.float32)[:, ::2]
    assert torch.equal(transfer.to_device(a, fake), torch.from_numpy(a.copy()))
    parts = [torch.arange(6, dtype=torch.int16).view(2, 3), torch.arange(4, dtype=torch.int16).view(2, 2).t()]
    assert torch.equal(transfer.joined_to_device(parts, fake), torch.cat([p.reshape(-1) for p in parts]))
