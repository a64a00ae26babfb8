"""ImageBatch: ragged uint8 images in one flat buffer plus an (offset, h, w, c) table."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_image

from pixelpipe import ImageBatch


def images():
    return [make_image(5, 7, 3, seed=1), make_image(3, 2, 0, seed=2), make_image(4, 9, 3, seed=3)]


def test_round_trip():
    imgs = images()
    b = ImageBatch.from_list(imgs)
    assert len(b) == 3
    out = b.tolist()
    np.testing.assert_array_equal(out[0].numpy(), imgs[0])
    np.testing.assert_array_equal(out[1].numpy(), imgs[1][..., None])
    np.testing.assert_array_equal(out[2].numpy(), imgs[2])
    np.testing.assert_array_equal(b[-1].numpy(), imgs[2])
    with pytest.raises(IndexError):
        b[3]


def test_torch_and_numpy_inputs_agree():
    imgs = images()
    a = ImageBatch.from_list(imgs)
    b = ImageBatch.from_list([torch.from_numpy(x) for x in imgs])
    assert torch.equal(a.data, b.data) and torch.equal(a.table, b.table)


def test_one_flat_buffer():
    imgs = images()
    b = ImageBatch.from_list(imgs)
    assert b.data.dim() == 1 and b.data.dtype == torch.uint8
    assert b.data.numel() == sum(x.size for x in imgs)
    # every image back to back, HWC row-major, in order
    expect = np.concatenate([x.reshape(-1) for x in imgs])
    np.testing.assert_array_equal(b.data.numpy(), expect)
    assert b.table[:, 0].tolist() == [0, 5 * 7 * 3, 5 * 7 * 3 + 3 * 2]
    # items are views into the buffer, not copies
    assert b[1].data_ptr() == b.data.data_ptr() + 5 * 7 * 3


def test_sizes_and_channels():
    b = ImageBatch.from_list(images())
    assert b.sizes.tolist() == [[5, 7], [3, 2], [4, 9]]
    assert b.channels.tolist() == [3, 1, 3]
    assert b.table.dtype == torch.int64 and b.table.shape == (3, 4)
    # the properties are copies: writing to them does not corrupt the table
    s = b.sizes
    s[0, 0] = 99
    assert b.sizes[0, 0] == 5


@pytest.mark.parametrize("shape", [(6, 4), (6, 4, 1)])
def test_grey_kept_one_channel(shape):
    img = np.arange(24, dtype=np.uint8).reshape(shape)
    b = ImageBatch.from_list([img])
    assert b.channels.tolist() == [1]
    assert b[0].shape == (6, 4, 1)
    np.testing.assert_array_equal(b[0].numpy()[..., 0], img.reshape(6, 4))


def test_two_channels_keep_grey():
    img = make_image(4, 5, 2)
    b = ImageBatch.from_list([img])
    assert b[0].shape == (4, 5, 1)
    np.testing.assert_array_equal(b[0].numpy()[..., 0], img[..., 0])


def test_four_channels_keep_rgb():
    img = make_image(4, 5, 4)
    b = ImageBatch.from_list([img])
    assert b[0].shape == (4, 5, 3)
    np.testing.assert_array_equal(b[0].numpy(), img[..., :3])


def test_uint16_keeps_high_byte():
    img = np.array([[0, 255, 256, 0x1234], [0xFF00, 0xFFFF, 0x8000, 0x7FFF]], np.uint16)
    expect = np.array([[0, 0, 1, 0x12], [0xFF, 0xFF, 0x80, 0x7F]], np.uint8)
    b = ImageBatch.from_list([img])
    np.testing.assert_array_equal(b[0].numpy()[..., 0], expect)
    t = torch.from_numpy(img.astype(np.int32)).to(torch.uint16)
    np.testing.assert_array_equal(ImageBatch.from_list([t])[0].numpy()[..., 0], expect)


@pytest.mark.parametrize("shape", [(0, 5, 3), (5, 0, 3), (0, 0)])
def test_zero_size_names_the_sample(shape):
    imgs = [make_image(4, 4), make_image(4, 4), np.zeros(shape, np.uint8)]
    with pytest.raises(ValueError, match="sample 2"):
        ImageBatch.from_list(imgs)


@pytest.mark.parametrize("bad, match", [
    (np.zeros((4, 4, 5), np.uint8), "channels"),
    (np.zeros((4, 4, 3), np.float32), "uint8"),
    (np.zeros((2, 4, 4, 3), np.uint8), "shape"),
])
def test_bad_images_name_the_sample(bad, match):
    with pytest.raises(ValueError, match=rf"sample 1\b.*{match}"):
        ImageBatch.from_list([make_image(4, 4), bad])


def test_empty():
    for b in (ImageBatch.from_list([]), ImageBatch.empty()):
        assert len(b) == 0 and b.data.numel() == 0
        assert b.sizes.shape == (0, 2) and b.tolist() == []


def test_to_same_device_returns_self():
    b = ImageBatch.from_list(images())
    assert b.to("cpu") is b
    assert b.to(torch.device("cpu")) is b
    assert b.device == torch.device("cpu")
    assert b.kernel_table() is b.kernel_table()  # cached


def test_kernel_table_has_the_contiguous_strides():
    b = ImageBatch.from_list(images())
    k = b.kernel_table()
    assert torch.equal(k[:, :4], b.table)
    # row stride w * c and column stride c: pixel (y, x) of sample i starts at o + y*rs + x*cs
    for i, img in enumerate(b.tolist()):
        o, h, w, c, rs, cs = k[i].tolist()
        y, x = h - 1, w // 2
        assert torch.equal(b.data[o + y * rs + x * cs : o + y * rs + x * cs + c], img[y, x])


def test_constructor_validates_the_table():
    data = torch.zeros(10, dtype=torch.uint8)
    with pytest.raises(ValueError, match="outside"):
        ImageBatch(data, torch.tensor([[0, 2, 2, 3]]))  # needs 12 bytes
    with pytest.raises(ValueError, match="channels"):
        ImageBatch(data, torch.tensor([[0, 1, 1, 2]]))
    with pytest.raises(ValueError, match="1-D uint8"):
        ImageBatch(data.float(), torch.tensor([[0, 1, 1, 3]]))
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        ImageBatch(data, torch.tensor([[0, 1, 1]]))


def test_trusted_is_the_checked_batch_without_the_checks():
    data = torch.arange(20, dtype=torch.uint8)
    table = torch.tensor([[0, 2, 2, 3], [12, 2, 4, 1]])
    a, b = ImageBatch(data, table), ImageBatch.trusted(data, table)
    assert len(a) == len(b) == 2 and all(torch.equal(x, y) for x, y in zip(a.tolist(), b.tolist()))
    assert torch.equal(a.kernel_table(), b.kernel_table())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_round_trip():
    imgs = images()
    b = ImageBatch.from_list(imgs, device="cuda")
    assert b.data.is_cuda and b.device.type == "cuda"
    assert not b.table.is_cuda and b.kernel_table().is_cuda
    assert torch.equal(b.kernel_table().cpu()[:, :4], b.table)
    assert b.to("cuda") is b  # "cuda" is the current device: the same batch, its table kept
    assert b.kernel_table() is b.kernel_table()
    back = b.to("cpu")
    assert not back.data.is_cuda
    for got, want in zip(back.tolist(), ImageBatch.from_list(imgs).tolist()):
        assert torch.equal(got, want)
    again = ImageBatch.from_list(imgs).to("cuda")
    assert torch.equal(again.data.cpu(), b.data.cpu())


@pytest.mark.parametrize("channels, dtype", [(3, np.uint8), (1, np.uint8), (4, np.uint8), (3, np.uint16)])
def test_a_dense_nhwc_batch_packs_as_its_images_do(channels, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0, np.iinfo(dtype).max, (3, 5, 6, channels)).astype(dtype)
    for dense in (x, torch.from_numpy(x)):
        b, ref = ImageBatch.from_dense(dense), ImageBatch.from_list(list(x))
        assert torch.equal(b.data, ref.data) and torch.equal(b.table, ref.table)


def test_a_dense_batch_that_looks_nchw_says_how_to_make_it_nhwc():
    with pytest.raises(TypeError, match=r"looks NCHW: pass x.permute\(0, 2, 3, 1\)"):
        ImageBatch.from_dense(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\[N, H, W, C\]"):
        ImageBatch.from_dense(torch.zeros(8, 8, 3, dtype=torch.uint8))


def test_compose_takes_an_nhwc_batch_as_the_list_of_its_images():
    import pixelpipe as pp

    x = torch.from_numpy(np.random.default_rng(1).integers(0, 255, (4, 20, 24, 3), dtype=np.uint8))
    ops = pp.Compose([pp.RandomResizedCrop(12), pp.RandomFlip()])
    assert torch.equal(ops(x, seed=3), ops(list(x), seed=3))
    with pytest.raises(TypeError, match="not a single image"):
        ops(x[0], seed=3)
