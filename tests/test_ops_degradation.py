"""Degradations: SaltAndPepper (checked against its definition on the per-pixel field, written
out here in numpy from `Draws.field_np`) and JpegQuality (exactly Pillow's JPEG round trip of
the same uint8 image at the drawn quality)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from helpers import check_op, make_image, run, varied_images
from PIL import Image

import pixelpipe as pp
from pixelpipe.data.random import Draws, prefix

SIZE = [pp.Resize((16, 16))]
U8 = torch.uint8


def draws_at(n: int, pos: int, seed: int = 0, epoch: int = 0) -> Draws:
    idx = np.arange(n)
    return Draws(seed, epoch, idx, pos, prefix(seed, epoch, idx))


def params_of(op: pp.Op, n: int, pos: int = 0, shape=(16, 16), seed: int = 0):
    return op.sample(draws_at(n, pos, seed), np.tile(np.array(shape, dtype=np.float64), (n, 1)))


class TestSaltAndPepper:
    def test_contract(self):
        check_op(pp.SaltAndPepper((0.05, 0.2), p=0.8), head=SIZE, p_zero=pp.SaltAndPepper(0.1, p=0.0))

    def test_is_the_definition_on_the_field(self):
        imgs = [make_image(20, 24, seed=k) for k in range(6)]
        op = pp.SaltAndPepper((0.05, 0.3), (0.2, 0.8), p=0.7)
        out = run([op], imgs)
        base = run([], imgs)
        p = params_of(op, 6, shape=(20, 24))
        u = draws_at(6, 0).field_np(op.draws, (20, 24))  # [N, H, W]
        for k in range(6):
            expect = base[k].numpy().copy()
            expect[:, u[k] < p["amount"][k]] = 0.0
            expect[:, u[k] < p["salt"][k]] = 1.0
            np.testing.assert_array_equal(out[k].numpy(), expect)

    def test_shares_in_expectation(self):
        img = np.full((200, 200, 3), 128, np.uint8)
        out = run([pp.SaltAndPepper(0.1, 0.3, p=1.0)], [img] * 4, dtype=U8)
        salt = (out == 255).all(1).float().mean()
        pepper = (out == 0).all(1).float().mean()
        mixed = ((out == 255) | (out == 0)).any(1) & ~((out == 255).all(1) | (out == 0).all(1))
        assert abs(float(salt) - 0.03) < 0.003 and abs(float(pepper) - 0.07) < 0.004, (salt, pepper)
        assert not bool(mixed.any()), "a pixel's channels got different noise"

    @pytest.mark.parametrize(("kwargs", "name"), [({"amount": 1.5}, "amount"), ({"salt_vs_pepper": (0.8, 0.2)},
                                                                                 "salt_vs_pepper"), ({"p": -1}, "p")])
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=name):
            pp.SaltAndPepper(**kwargs)


def pillow_jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """Pillow's round trip, written out: save as JPEG at `quality`, open again."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())))


class TestJpegQuality:
    def test_contract(self):
        check_op(pp.JpegQuality((10, 90), p=0.8), head=SIZE, p_zero=pp.JpegQuality(50, p=0.0))

    def test_exactly_pillow_at_the_drawn_quality(self):
        """uint8 images that are not resampled: 0 grey levels from Pillow's round trip."""
        imgs = [make_image(24, 32, seed=k) for k in range(8)]
        op = pp.JpegQuality((5, 95), p=0.6)
        out = run([op], imgs, dtype=U8)
        p = params_of(op, 8, shape=(24, 32))
        assert 0 < p["on"].sum() < 8
        for k, img in enumerate(imgs):
            expect = pillow_jpeg(img, int(p["quality"][k])) if p["on"][k] else img
            np.testing.assert_array_equal(out[k].permute(1, 2, 0).numpy(), expect)

    def test_low_quality_loses_more(self):
        img = [make_image(64, 64, seed=3)]
        err = {q: float((run([pp.JpegQuality(q, p=1.0)], img) - run([], img)).abs().mean()) for q in (5, 50, 95)}
        assert err[5] > err[50] > err[95] > 0, err

    def test_grey_output_channel(self):
        imgs = varied_images(4)
        out = run([*SIZE, pp.JpegQuality(20, p=1.0)], imgs, channels=1, dtype=U8)
        base = run(SIZE, imgs, channels=1, dtype=U8)
        for k in range(4):
            np.testing.assert_array_equal(out[k, 0].numpy(), pillow_jpeg(base[k, 0].numpy(), 20))

    def test_quality_drawn_inclusive(self):
        q = params_of(pp.JpegQuality((10, 13), p=1.0), 4000)["quality"]
        assert set(np.unique(q)) == {10, 11, 12, 13} and np.bincount(q)[10:].min() > 900

    @pytest.mark.parametrize("quality", [0, 101, (50, 40), 7.5])
    def test_bad_quality(self, quality):
        with pytest.raises(ValueError, match="quality"):
            pp.JpegQuality(quality)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", [pp.SaltAndPepper((0.05, 0.2), p=0.8), pp.JpegQuality((10, 90), p=0.6)],
                         ids=lambda op: type(op).__name__)
def test_agree_on_the_gpu(op):
    """The op alone on the same float input and parameters on both devices: the same values
    (the field's hash is exact on every device; the JPEG round trip runs on the host)."""
    x = run(SIZE, varied_images(8))
    params = params_of(op, 8)
    draws = draws_at(8, 0)
    cpu = op.apply(x, params, draws)
    gpu = op.apply(x.cuda(), params, draws)
    assert gpu.is_cuda
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-6, rtol=0)
