"""ops.policy_geometry: a policy's geometric part (torchvision's three, timm's) sampled in one pass over every (sample, step)
against the pair form (structure._Structure._geometry, a sampling per (step, operation)): the
same matrices and sizes, to the bit, for torchvision's three policies, several bin counts and
step counts, images of different sizes and per-sample epochs; a part it does not cover keeps
the pair form."""

from __future__ import annotations

import numpy as np
import pytest

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.ops.policies import PolicySteps
from pixelpipe.ops.policy_geometry import GeometryProgram
from pixelpipe.ops.structure import _Structure


def geometry_part(policy) -> PolicySteps:
    parts = [p for p in policy.parts() if p.kind == "geometry"]
    assert len(parts) == 1
    return parts[0]


def both_forms(part: PolicySteps, draws: Draws, sizes: np.ndarray):
    steps = part.steps(draws, len(sizes))
    fast = part._geometry(draws, sizes, steps)
    slow = _Structure._geometry(part, draws, sizes, steps)
    return steps, fast, slow


POLICIES = [pp.RandAugment(2, 9), pp.RandAugment(4, 5, num_magnitude_bins=11), pp.RandAugment(1, 30),
            pp.TrivialAugmentWide(), pp.TrivialAugmentWide(num_magnitude_bins=7),
            pp.AutoAugment("imagenet"), pp.AutoAugment("cifar10"), pp.AutoAugment("svhn"),
            pp.TimmRandAugment.from_config("rand-m9-mstd0.5-inc1"), pp.TimmRandAugment.from_config("rand-m7-n3"),
            pp.TimmRandAugment.from_config("rand-m9-mstd0-inc0")]


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_one_pass_is_the_pair_form(policy):
    part = geometry_part(policy)
    program = GeometryProgram.of(part.ops)
    assert program is not None
    # torchvision's operations in one pass of their own (Primitives); timm's by operation
    covered = program.primitives is not None and program.primitives.covers.all()
    assert covered == (not isinstance(policy, pp.TimmRandAugment))
    rng = np.random.default_rng(3)
    n = 500
    sizes = rng.integers(20, 600, (n, 2)).astype(np.float64)
    for seed, epoch in ((0, 0), (7, 3), (1, rng.integers(0, 5, n))):  # the last: per-sample epochs
        draws = Draws(seed, epoch, rng.permutation(10 * n)[:n], 4)
        steps, (m, out), (m_slow, out_slow) = both_forms(part, draws, sizes)
        assert (steps >= 0).any()
        np.testing.assert_array_equal(m, m_slow)
        np.testing.assert_array_equal(out, out_slow)
        np.testing.assert_array_equal(out, sizes)
        untouched = (steps < 0).all(1)
        assert np.array_equal(m[untouched], np.tile(np.eye(3), (int(untouched.sum()), 1, 1)))
        assert not np.allclose(m[~untouched], np.eye(3))


def test_no_step_taken_and_empty_batches():
    part = geometry_part(pp.RandAugment(2, 9))
    for n in (0, 3):
        draws = Draws(0, 0, np.arange(n), 4)
        sizes = np.tile([30.0, 40.0], (n, 1))
        steps = np.full((n, 2), -1, dtype=np.int64)
        m, out = part._geometry(draws, sizes, steps)
        assert m.shape == (n, 3, 3) and np.array_equal(m, np.tile(np.eye(3), (n, 1, 1)))
        assert np.array_equal(out, sizes)


def test_other_parts_keep_the_pair_form():
    """Operations without a rowwise_key (any other GeometryOp: one may draw beyond
    its leading draws or change the size) are sampled per pair."""
    assert GeometryProgram.of([]) is None
    assert GeometryProgram.of([pp.RandomRotate(10), pp.RandomFlip(0.5)]) is None
    part = geometry_part(pp.RandAugment(2, 9))
    assert GeometryProgram.of(part.ops + [pp.RandomRotate(10)]) is None
