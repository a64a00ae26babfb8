"""flip_pairs: a mirrored sample's left/right keypoints change names (data.keypoint_pairs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pixelpipe as pp

W, H = 60, 40
IMG = np.zeros((H, W, 3), np.uint8)
# one person: left eye, right eye, nose, left ear, right ear
FACE = np.array([[[22, 10, 2], [38, 10, 2], [28, 18, 2], [15, 12, 1], [45, 12, 1]]], np.float64)
PAIRS = [(0, 1), (3, 4)]


def run(ops, n=1, **kw):
    t = pp.Compose(ops, dtype=torch.uint8, flip_pairs=PAIRS, **kw)
    return t([IMG] * n, keypoints=[FACE] * n, seed=5)["keypoints"]


def test_a_horizontal_flip_keeps_left_on_the_left_of_the_person():
    out = run([pp.RandomFlip(horizontal=1.0)])[0][0].numpy()
    # joint 0 (left eye) is now the mirror image of the right eye: x = W - 38
    np.testing.assert_allclose(out[:, :2], [[W - 38, 10], [W - 22, 10], [W - 28, 18], [W - 45, 12], [W - 15, 12]])
    np.testing.assert_array_equal(out[:, 2], [2, 2, 2, 1, 1])  # visibility travels with its joint


def test_no_mirror_no_swap():
    for ops in ([pp.RandomFlip(horizontal=0.0)], [pp.RandomRotate(20)], [pp.RandomFlip(horizontal=1.0, vertical=1.0)]):
        t = pp.Compose(ops, dtype=torch.uint8)  # the same without pairs
        plain = t([IMG], keypoints=[FACE], seed=5)["keypoints"][0]
        assert torch.equal(run(ops)[0], plain), ops


def test_a_vertical_flip_alone_mirrors_too():
    out = run([pp.RandomFlip(horizontal=0.0, vertical=1.0)])[0][0].numpy()
    np.testing.assert_allclose(out[0, :2], [38, H - 10])


def test_each_sample_by_its_own_flip():
    n = 32
    out = run([pp.RandomFlip(horizontal=0.5)], n)
    flipped = 0
    for k in out:
        k = k[0].numpy()
        mirrored = k[2, 0] == W - 28  # the nose moved
        flipped += mirrored
        left = FACE[0, 1, 0] if mirrored else FACE[0, 0, 0]  # the left eye is the mirror of the right one
        assert k[0, 0] == (W - left if mirrored else left)
    assert 0 < flipped < n


def test_two_stages_mirror_back():
    ops = [pp.RandomFlip(horizontal=1.0), pp.Lambda(lambda x: x), pp.RandomFlip(horizontal=1.0)]
    out = run(ops)[0][0].numpy()
    np.testing.assert_allclose(out, FACE[0])


def test_padded_targets_swap_too():
    out = run([pp.RandomFlip(horizontal=1.0)], 2, targets="padded")
    assert out.shape == (2, 1, 5, 3) and float(out[1, 0, 0, 0]) == W - 38


@pytest.mark.parametrize("pairs, what", [([(0, 0)], "two different"), ([(0, 1), (1, 2)], "another pair"),
                                         ([(0,)], "two joint indices"), ([(-1, 2)], ">= 0"),
                                         ([(0.5, 1)], "two joint indices")])
def test_bad_pairs_fail_at_construction(pairs, what):
    with pytest.raises(ValueError, match=what):
        pp.Compose([pp.RandomFlip()], flip_pairs=pairs)


def test_pairs_need_grouped_keypoints_with_enough_joints():
    t = pp.Compose([pp.RandomFlip(horizontal=1.0)], dtype=torch.uint8, flip_pairs=[(0, 1)])
    with pytest.raises(ValueError, match=r"\[K, J, 2 or 3\]"):
        t([IMG], keypoints=[np.array([[1.0, 2.0], [3.0, 4.0]])])
    t = pp.Compose([pp.RandomFlip(horizontal=1.0)], dtype=torch.uint8, flip_pairs=[(0, 7)])
    with pytest.raises(ValueError, match="joint 7"):
        t([IMG], keypoints=[FACE])


def test_like_and_eval_keep_the_pairs():
    t = pp.Compose([pp.RandomFlip()], flip_pairs=PAIRS)
    assert t.like([pp.Resize(8)]).targets.flip_pairs == ((0, 1), (3, 4))
