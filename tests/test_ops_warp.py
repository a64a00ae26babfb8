"""The Warp op (a user's matrix per sample) and the geometric ops' argument checks: each error
names the argument. The other geometric ops' classes are in test_ops_geometry.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import check_op, hwc, make_image, run

import pixelpipe as pp
from pixelpipe.data.random import Draws

U8 = torch.uint8


# ============================================================================ Warp
def random_shear(sizes, draws):
    m = torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1)
    m[:, 0, 1] = draws.uniform(0, -0.3, 0.3)
    m[:, 0, 2] = -m[:, 0, 1] * sizes[:, 0] / 2
    return m


def identity_fn(sizes, draws):
    return torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1)


class TestWarp:
    def test_contract(self):
        check_op(pp.Warp(random_shear), tail=[pp.Resize((16, 16))])

    def test_contract_fixed(self):
        check_op(pp.Warp(identity_fn, size=(15, 17)), random=False)

    @pytest.mark.parametrize("interp", ["nearest", "bilinear", "bicubic"])
    @pytest.mark.parametrize("antialias", [True, False])
    def test_identity_gives_back_the_input(self, interp, antialias):
        imgs = [make_image(23, 31, 3), make_image(23, 31, 0, seed=1)]
        out = run([pp.Warp(identity_fn, interpolation=interp)], imgs, dtype=U8, antialias=antialias)
        np.testing.assert_array_equal(hwc(out[0]), imgs[0])
        np.testing.assert_array_equal(hwc(out[1]), np.repeat(imgs[1][..., None], 3, -1))

    def test_integer_translation(self):
        img = make_image(20, 30)

        def shift(sizes, draws):
            m = identity_fn(sizes, draws)
            m[:, 0, 2], m[:, 1, 2] = 4.0, -3.0
            return m

        out = hwc(run([pp.Warp(shift, fill=(1, 2, 3))], [img], dtype=U8)[0])
        np.testing.assert_array_equal(out[:17, 4:], img[3:, :26])
        assert (out[17:] == [1, 2, 3]).all() and (out[:, :4] == [1, 2, 3]).all()

    def test_matrix_fn_gets_sizes_and_per_sample_draws(self):
        seen = {}

        def fn(sizes, draws):
            seen["sizes"] = sizes.clone()
            seen["u"] = draws.uniform(0)
            seen["indices"] = draws.indices.clone()
            return identity_fn(sizes, draws)

        imgs = [make_image(20, 30), make_image(25, 30), make_image(20, 30)]
        run([pp.Warp(fn), pp.Resize((8, 8))], imgs, seed=3, indices=[4, 9, 4])
        assert seen["sizes"].tolist() == [[20, 30], [25, 30], [20, 30]]
        assert seen["indices"].tolist() == [4, 9, 4]
        u = seen["u"]
        assert float(u[0]) == float(u[2]) and float(u[0]) != float(u[1])
        assert torch.equal(u, Draws(3, 0, torch.tensor([4, 9, 4]), 0).uniform(0))

    @pytest.mark.parametrize("bad", [torch.eye(3), torch.zeros(2, 2, 3, 3), torch.zeros(2, 2, 3)])
    def test_wrong_shape_is_a_value_error(self, bad):
        op = pp.Warp(lambda sizes, draws: bad)
        with pytest.raises(ValueError, match=r"matrix_fn returned shape"):
            run([op], [make_image(10, 10), make_image(10, 10)])

    def test_non_finite_names_the_sample(self):
        def fn(sizes, draws):
            m = identity_fn(sizes, draws)
            m[1, 0, 0] = float("nan")
            return m

        with pytest.raises(ValueError, match="sample 12"):
            run([pp.Warp(fn)], [make_image(10, 10)] * 2, indices=[11, 12])


# ============================================================================ invalid arguments
@pytest.mark.parametrize("make, name", [
    (lambda: pp.Resize(0), "size"),
    (lambda: pp.Resize(-5), "size"),
    (lambda: pp.Resize((10, 0)), "size"),
    (lambda: pp.Resize((10, 2.5)), "size"),
    (lambda: pp.Resize(10, max_size=5), "max_size"),
    (lambda: pp.Resize(10, max_size=-1), "max_size"),
    (lambda: pp.Resize((10, 10), max_size=20), "max_size"),
    (lambda: pp.Resize(10, interpolation="lanczos"), "interpolation"),
    (lambda: pp.Resize(10, border="mirror"), "border"),
    (lambda: pp.Crop(0), "size"),
    (lambda: pp.Crop((5, -2)), "size"),
    (lambda: pp.Crop(1.5), "size"),
    (lambda: pp.Crop(5, anchor=(-1, 2)), "anchor"),
    (lambda: pp.Crop(5, anchor=(0.5, 1.5)), "anchor"),
    (lambda: pp.Crop(5, anchor=(1, 0.5)), "anchor"),
    (lambda: pp.Crop(5, border="mirror"), "border"),
    (lambda: pp.Crop(5, fill=300), "fill"),
    (lambda: pp.CenterCrop(-3), "size"),
    (lambda: pp.RandomResizedCrop(0), "size"),
    (lambda: pp.RandomResizedCrop(10, scale=(1.0, 0.5)), "scale"),
    (lambda: pp.RandomResizedCrop(10, scale=(0.5, 1.5)), "scale"),
    (lambda: pp.RandomResizedCrop(10, scale=(0.0, 0.0)), "scale"),
    (lambda: pp.RandomResizedCrop(10, ratio=(2.0, 1.0)), "ratio"),
    (lambda: pp.RandomResizedCrop(10, ratio=(0.0, 1.0)), "ratio"),
    (lambda: pp.RandomResizedCrop(10, interpolation="area"), "interpolation"),
    (lambda: pp.RandomFlip(horizontal=1.5), "horizontal"),
    (lambda: pp.RandomFlip(vertical=-0.1), "vertical"),
    (lambda: pp.RandomFlip(horizontal=float("nan")), "horizontal"),
    (lambda: pp.RandomRotate(10, p=2.0), "p"),
    (lambda: pp.RandomRotate((30, 10)), "degrees"),
    (lambda: pp.RandomRotate(-10), "degrees"),
    (lambda: pp.RandomRotate(10, border="mirror"), "border"),
    (lambda: pp.RandomRotate(10, interpolation="cubic"), "interpolation"),
    (lambda: pp.RandomRotate(10, fill=(1, 2)), "fill"),
    (lambda: pp.RandomAffine(p=-0.5), "p"),
    (lambda: pp.RandomAffine(scale=(1.2, 0.8)), "scale"),
    (lambda: pp.RandomAffine(scale=(0.0, 1.0)), "scale"),
    (lambda: pp.RandomAffine(translate=(0.5, 1.5)), "translate"),
    (lambda: pp.RandomAffine(shear=(10, -10)), "shear"),
    (lambda: pp.RandomAffine(shear=(1, 2, 3)), "shear"),
    (lambda: pp.RandomAffine(degrees=(5, -5)), "degrees"),
    (lambda: pp.RandomPerspective(1.5), "distortion"),
    (lambda: pp.RandomPerspective(0.5, p=1.01), "p"),
    (lambda: pp.RandomPerspective(0.5, border="edge"), "border"),
    (lambda: pp.Pad(-1), "padding"),
    (lambda: pp.Pad((1, 2, 3)), "padding"),
    (lambda: pp.Pad(2, mode="symmetric"), "mode"),
    (lambda: pp.Warp(3), "matrix_fn"),
    (lambda: pp.Warp(identity_fn, size=0), "size"),
    (lambda: pp.Warp(identity_fn, border="mirror"), "border"),
])
def test_invalid_geometry_arguments(make, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        make()
