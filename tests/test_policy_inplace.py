"""A policy's brightness, colour, contrast and invert written into the batch itself
(augment_space.apply_into, used by PolicySteps.apply_owned on the CPU): the same bits as their
apply(), on RGB and one-channel images (whose grey is the image itself), and the operations
without an in-place form leave the batch untouched and say so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.ops import augment_space as S


@pytest.mark.parametrize("name", ["Brightness", "Color", "Contrast", "Invert"])
@pytest.mark.parametrize("channels", [3, 1])
def test_in_place_forms_give_the_same_bits(name: str, channels: int):
    g = torch.Generator().manual_seed(len(name) + channels)
    x = torch.rand(5, channels, 17, 23, generator=g)
    m = np.array([-0.9, -0.3, 0.0, 0.4, 0.9])
    want = S._apply(name, x.clone(), m)
    got = x.clone()
    assert S.apply_into(name, got, m) is True
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"])
def test_operations_without_an_in_place_form_leave_x_alone(name: str):
    x = torch.rand(2, 3, 8, 8)
    before = x.clone()
    assert S.apply_into(name, x, np.array([4.0, 6.0])) is False
    assert torch.equal(x, before)
