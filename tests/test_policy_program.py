"""PolicySteps.program: a policy's pixel part as per-step operation indices and numbers, the input
of the policy kernel (kernels.triton.policy); checked here without the kernel (CPU)."""

from __future__ import annotations

import numpy as np
from helpers import pixel_part

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.ops.policies import PolicySteps


def sampled(part: PolicySteps, n: int, seed: int) -> tuple[dict, Draws]:
    draws = Draws(seed, 2, np.arange(n), 5)
    return part.sample(draws, np.tile([20.0, 20.0], (n, 1))), draws


def test_program_states_each_steps_operation_and_number():
    """PolicySteps.program: the steps' operations as drawn, and each operation's number as
    augment_space.operands makes it from the magnitude apply() draws (CPU only; no kernel)."""
    from pixelpipe.ops.augment_space import operands

    part = pixel_part(pp.RandAugment(2, 9))
    n = 400
    params, draws = sampled(part, n, 1)
    which, values = part.program(params, draws, (20, 20))
    assert which.shape == values.shape == (2, n)
    np.testing.assert_array_equal(which, params["steps"].T)
    names = part.operation_names()
    seen = set()
    for j, k, rows, sub in part.steps_and_pairs(params, draws):
        op = part.ops[k]
        numbers = operands(op.name, np.asarray(op.sample(sub, np.tile([20.0, 20.0], (len(rows), 1)))["magnitude"]))
        want = next(iter(numbers.values())) if numbers else np.zeros(len(rows))
        np.testing.assert_array_equal(values[j, rows], want)
        assert (which[j, rows] == k).all()
        seen.add(names[k])
    assert {"Brightness", "Posterize", "Solarize", "Equalize", "Sharpness"} <= seen
    assert (values[which < 0] == 0).all()


def test_factor_numbers_are_one_plus_the_magnitude():
    part = pixel_part(pp.TrivialAugmentWide())
    params, draws = sampled(part, 300, 4)
    which, values = part.program(params, draws, (20, 20))
    names = np.array(part.operation_names() + ["none"])
    factors = np.isin(names[which], ["Brightness", "Color", "Contrast", "Sharpness"])
    assert factors.any()
    assert ((values[factors] >= 0.01 - 1e-12) & (values[factors] <= 1.99 + 1e-12)).all()


def test_timm_program_names_its_operations_by_what_they_compute():
    """TimmRandAugment's pixel part: operation names without "Increasing" (what the kernels'
    codes name), numbers as TimmPixels.operands makes them from the args apply() draws, and
    every operation of the increasing set met over 600 samples."""
    part = pixel_part(pp.TimmRandAugment.from_config("rand-m9-mstd0.5-inc1"))
    names = part.operation_names()
    assert set(names) == {"AutoContrast", "Equalize", "Invert", "Posterize", "Solarize", "SolarizeAdd", "Color",
                          "Contrast", "Brightness", "Sharpness"}
    params, draws = sampled(part, 600, 3)
    which, values = part.program(params, draws, (20, 20))
    seen = set()
    for j, k, rows, sub in part.steps_and_pairs(params, draws):
        op = part.ops[k]
        numbers = op.operands(op.sample(sub, np.tile([20.0, 20.0], (len(rows), 1))))
        want = next(iter(numbers.values())) if numbers else np.zeros(len(rows))
        np.testing.assert_array_equal(values[j, rows], want)
        seen.add(names[k])
    assert seen == set(names)
    adds = values[np.array(names + ["none"])[which] == "SolarizeAdd"]
    assert len(adds) and (adds == np.floor(adds)).all() and adds.min() >= 0 and adds.max() <= 128


def test_every_sample_at_once_is_the_pair_form(monkeypatch):
    """The program of torchvision's policies computed for every (sample, step) at once
    (ops.policy_program) against the pair form (a sampling per (step, operation) pair), bit for
    bit: fixed bins (AutoAugment), drawn bins (RandAugment, TrivialAugmentWide; another bin
    count), four steps, timm's levels (a normal's spread, none, both operation sets),
    per-sample epochs, and a batch where no sample does anything."""
    cases = [pp.RandAugment(2, 9), pp.RandAugment(4, 7, num_magnitude_bins=11), pp.TrivialAugmentWide(),
             pp.AutoAugment("imagenet"), pp.AutoAugment("cifar10"), pp.AutoAugment("svhn"),
             pp.TimmRandAugment.from_config("rand-m9-mstd0.5-inc1"), pp.TimmRandAugment(3, 7, 1.0, increasing=False),
             pp.TimmRandAugment(2, 10, 0.0, prob=1.0)]
    for policy in cases:
        part = pixel_part(policy)
        for seed, epoch in ((1, 3), (2, np.array([0, 1, 2, 3] * 50))):
            draws = Draws(seed, epoch, np.arange(200) * 3, 5)
            params = part.sample(draws, np.tile([31.0, 47.0], (200, 1)))
            fast = part.program(params, draws, (31, 47))
            assert part._program  # the one-pass form ran
            with monkeypatch.context() as m:
                m.setattr(part, "_program", False)  # the pair form
                slow = part.program(params, draws, (31, 47))
            np.testing.assert_array_equal(fast[0], slow[0])
            np.testing.assert_array_equal(fast[1], slow[1])
            assert (fast[1] != 0).any()
    part = pixel_part(pp.RandAugment(2, 9))
    none = {"steps": np.full((5, 2), -1)}
    which, values = part.program(none, Draws(0, 0, np.arange(5), 5), (8, 8))
    assert (which == -1).all() and (values == 0).all()
