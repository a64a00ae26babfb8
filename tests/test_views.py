"""DeviceViews and strided_view: the address arithmetic of views of HWC images (box,
transpose, flips) against torch's own slicing, transposing and flipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.data.views import DeviceViews, strided_view


def _read(flat: torch.Tensor, origin: int, row: tuple[int, ...]) -> torch.Tensor:
    """Gather a view given by a row (address, h, w, c, rs, cs) pixel by pixel from `flat`."""
    address, h, w, c, rs, cs = row
    i = torch.arange(h).view(h, 1, 1)
    j = torch.arange(w).view(1, w, 1)
    k = torch.arange(c).view(1, 1, c)
    return flat[(address - origin) + i * rs + j * cs + k]


@pytest.mark.parametrize("box", [None, (3, 2, 9, 13)])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("flip", [(), (0,), (1,), (0, 1)])
@pytest.mark.parametrize("channels", [1, 3])
def test_strided_view_matches_torch(box, transpose, flip, channels):
    g = torch.Generator().manual_seed(len(flip) + 3 * transpose + channels)
    h, w, pitch = 11, 17, 17 * channels + 5  # padded rows, as decoders allocate them
    flat = torch.randint(0, 256, (h * pitch + 64,), generator=g, dtype=torch.uint8)
    origin = 1000
    start = origin + 32
    image = torch.as_strided(flat, (h, w, channels), (pitch, channels, 1), 32)
    expect = image
    if box is not None:
        expect = expect[box[0]:box[2], box[1]:box[3]]
    if transpose:
        expect = expect.transpose(0, 1)
    if flip:
        expect = expect.flip(flip)
    row = strided_view(start, h, w, channels, pitch, channels, box=box, transpose=transpose, flip=flip)
    assert row[1:4] == tuple(expect.shape)
    assert torch.equal(_read(flat, origin, row), expect)


def test_device_views_table_and_contiguous():
    images = [torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8), torch.randint(0, 256, (4, 2, 1), dtype=torch.uint8)]
    views = [images[0].flip(1), images[1]]
    rows = [strided_view(images[0].data_ptr(), 5, 7, 3, 21, 3, flip=(1,)), strided_view(images[1].data_ptr(), 4, 2, 1, 2, 1)]
    dv = DeviceViews(torch.device("cpu"), rows, images, lambda: views)
    assert dv.table.shape == (2, 6) and len(dv) == 2
    assert dv.sizes.tolist() == [[5, 7], [4, 2]]
    assert dv.table[0, 4:].tolist() == [21, -3]  # a mirrored image reads its columns backwards
    batch = dv.contiguous()
    assert [t.tolist() for t in batch.tolist()] == [v.tolist() for v in views]


def test_device_views_reject_other_channel_counts():
    with pytest.raises(ValueError, match="1- or 3-channel"):
        DeviceViews(torch.device("cpu"), [(0, 2, 2, 4, 8, 4)], [], list)


def test_as_views_uploads_cpu_samples_into_one_buffer():
    """GpuDecoder's CPU-decoded samples (arrays, contiguous or not) copied into one device
    buffer by CpuUpload once the last is decoded: every sample's pixels as given, the table's
    rows pointing into that buffer in sample order (on the CPU here, without a stream; the GPU
    tests cover the pinned copy on a side stream)."""
    from concurrent.futures import Future

    from pixelpipe.decode.gpu_fallback import CpuUpload
    from pixelpipe.decode.gpu_views import as_views

    rng = np.random.default_rng(5)
    samples = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(5, 7), (3, 4), (9, 2)]]
    given = {2: samples[2][:, ::-1], 0: samples[0], 1: samples[1]}
    futures = {i: Future() for i in given}
    upload = CpuUpload(futures, torch.device("cpu"), None)
    for i in (2, 0):
        futures[i].set_result(given[i])
    assert upload.data is None  # not before the last sample is decoded
    futures[1].set_result(given[1])
    assert upload.wait(1)
    views = as_views(3, {}, [upload, CpuUpload({}, torch.device("cpu"), None)], torch.device("cpu"))
    got = views.contiguous()
    for i in range(3):
        np.testing.assert_array_equal(got[i].numpy(), given[i])
    buffer = views._owners[-1]  # one buffer, the samples back to back in sample order
    assert buffer.numel() == sum(s.size for s in samples)
    first = int(views.table[0, 0])  # the table's addresses are relative; sample 0 starts the buffer
    for i in range(3):  # what the kernel reads through the table
        row = tuple(int(v) for v in views.table[i])
        np.testing.assert_array_equal(_read(buffer, first, row).numpy(), got[i].numpy())


def test_cpu_upload_copies_nothing_when_a_sample_failed_and_raises_the_lowest():
    """A failed sample: no copy (wait() is False), into() raises the lowest sample's error."""
    from concurrent.futures import Future

    from pixelpipe.decode.gpu_fallback import CpuUpload

    futures = {i: Future() for i in (4, 7, 9)}
    upload = CpuUpload(futures, torch.device("cpu"), None)
    futures[9].set_exception(ValueError("sample 9: bad"))
    futures[4].set_result(np.zeros((2, 2, 3), np.uint8))
    futures[7].set_exception(ValueError("sample 7: bad"))
    assert not upload.wait(1) and upload.data is None and upload.error is None
    with pytest.raises(ValueError, match="sample 7"):
        upload.into(None)
