"""per_frame=True: an op whose draws are keyed by (clip, frame) instead of by clip, so that its
parameters change from frame to frame of a clip, reproducibly and whatever the batch, while the
other ops of the same Compose still give every frame of a clip one draw."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.engine.clips import augment_clips

T = 4  # frames per clip


def plan(ops: list, ids: list[int], frames: np.ndarray | None = None, epoch: int = 0):
    """Stage 0 of a Compose planned for the frames of clips `ids` (T frames each, or the
    given frame numbers, one per row)."""
    stage = pp.Compose(ops).program.stages[0]
    idx = np.repeat(np.asarray(ids, dtype=np.int64), T) if frames is None else np.asarray(ids, dtype=np.int64)
    frames = np.tile(np.arange(T), len(ids)) if frames is None else frames
    return stage.sample(3, epoch, idx, np.full((len(idx), 2), [60.0, 80.0]), frames=frames)


def per_clip(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, T, *a.shape[1:])


def colour(p, key: str = "brightness") -> np.ndarray:
    return per_clip(p.color_params[0][1][key])


@pytest.fixture(params=["native", "numpy"])
def planner(request):
    """Both planners: planner.c where it is built, and the numpy reference."""
    if request.param == "numpy":
        with native.disabled():
            yield request.param
    else:
        yield request.param


def test_a_per_frame_colour_op_flickers_while_the_crop_is_shared(planner: str) -> None:
    p = plan([pp.RandomResizedCrop(32), pp.ColorJitter(0.4, 0.4, 0.4, per_frame=True)], [0, 1, 2])
    m = per_clip(p.matrix)
    assert (m == m[:, :1]).all()  # one crop per clip
    assert not np.allclose(m[0], m[1])  # clips differ
    for key in ("brightness", "contrast", "saturation"):
        c = colour(p, key)
        assert all(len(np.unique(c[i])) == T for i in range(3)), key  # a draw per frame


def test_a_per_frame_crop_beside_a_shared_colour_op(planner: str) -> None:
    p = plan([pp.RandomResizedCrop(32, per_frame=True), pp.ColorJitter(0.4, 0.4)], [5, 6])
    m = per_clip(p.matrix)
    assert all(len({a.tobytes() for a in m[i]}) == T for i in range(2))
    c = colour(p)
    assert (c == c[:, :1]).all() and c[0, 0] != c[1, 0]


def test_per_frame_off_shares_every_draw(planner: str) -> None:
    p = plan([pp.RandomResizedCrop(32), pp.ColorJitter(0.4, 0.4)], [0, 1])
    assert (per_clip(p.matrix) == per_clip(p.matrix)[:, :1]).all()
    assert (colour(p) == colour(p)[:, :1]).all()


def test_per_frame_draws_are_reproducible_and_do_not_depend_on_the_batch(planner: str) -> None:
    ops = [pp.RandomResizedCrop(32, per_frame=True), pp.ColorJitter(0.4, 0.4, per_frame=True)]
    whole = plan(ops, [0, 1, 2, 3])
    again = plan(ops, [0, 1, 2, 3])
    np.testing.assert_array_equal(whole.matrix, again.matrix)
    np.testing.assert_array_equal(whole.color_params[0][1]["brightness"], again.color_params[0][1]["brightness"])
    # frame 2 of clip 1 and frame 0 of clip 3, alone in a batch of two
    part = plan(ops, [1, 3], frames=np.array([2, 0]))
    rows = [1 * T + 2, 3 * T + 0]
    np.testing.assert_array_equal(part.matrix, whole.matrix[rows])
    np.testing.assert_array_equal(part.color_params[0][1]["brightness"], whole.color_params[0][1]["brightness"][rows])
    other_epoch = plan(ops, [0, 1, 2, 3], epoch=1)
    assert not np.allclose(other_epoch.matrix, whole.matrix)


def test_both_planners_draw_the_same_per_frame_numbers() -> None:
    ops = [pp.RandomResizedCrop(32, per_frame=True), pp.RandomFlip(per_frame=True), pp.ColorJitter(0.4, 0.4, 0.4, 0.1)]
    fast = plan(ops, [0, 7, 9])
    with native.disabled():
        ref = plan(ops, [0, 7, 9])
    np.testing.assert_allclose(fast.matrix, ref.matrix, atol=1e-9)
    for key, v in ref.color_params[0][1].items():
        np.testing.assert_allclose(fast.color_params[0][1][key], v, atol=1e-6)


def constant_clips(n: int = 3) -> torch.Tensor:
    """n clips whose T frames are one picture: any difference between frames is the ops'."""
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (n, 1, 40, 48, 3), dtype=torch.uint8, generator=g).repeat(1, T, 1, 1, 1)


def test_pixel_ops_per_frame_through_augment_clips() -> None:
    clips = constant_clips()
    shared = pp.Compose([pp.RandomResizedCrop(24), pp.RandomErasing(p=1.0)], dtype=torch.uint8)
    framed = pp.Compose([pp.RandomResizedCrop(24), pp.RandomErasing(p=1.0, per_frame=True)], dtype=torch.uint8)
    a, b = augment_clips(shared, clips, [0, 1, 2]), augment_clips(framed, clips, [0, 1, 2])
    assert all(torch.equal(a[i, t], a[i, 0]) for i in range(3) for t in range(T))
    assert all(not torch.equal(b[i, t], b[i, 0]) for i in range(3) for t in range(1, T))
    # outside the erased rectangles the frames agree: the crop is the clip's
    same = (b == b[:, :1]).all(dim=2)  # [N, T, H, W]
    assert same.float().mean() > 0.3
    alone = augment_clips(framed, clips[1:2], [1])
    assert torch.equal(alone[0], b[1])


def test_a_per_frame_structure_chooses_per_frame() -> None:
    clips = constant_clips(2)
    t = pp.Compose([pp.Resize((24, 24)), pp.OneOf([pp.RandomFlip(1.0), pp.RandomRotate(30)], per_frame=True)],
                   dtype=torch.uint8)
    out = augment_clips(t, clips, [0, 1])
    assert any(not torch.equal(out[i, t_], out[i, 0]) for i in range(2) for t_ in range(T))


def test_images_ignore_per_frame() -> None:
    images = [torch.randint(0, 256, (30, 40, 3), dtype=torch.uint8) for _ in range(3)]
    a = pp.Compose([pp.RandomResizedCrop(16), pp.ColorJitter(0.5)])(images)
    b = pp.Compose([pp.RandomResizedCrop(16, per_frame=True), pp.ColorJitter(0.5, per_frame=True)])(images)
    assert torch.equal(a, b)


def test_the_keyword_on_every_op_and_where_it_is_refused() -> None:
    op = pp.ColorJitter(0.4, per_frame=True)
    assert op.per_frame and repr(op).endswith("per_frame=True)") and "per_frame" not in repr(pp.ColorJitter(0.4))
    assert inspect.signature(pp.RandomErasing).parameters["per_frame"].default is False
    assert pp.GaussianBlur(3, per_frame=True).per_frame
    with pytest.raises(ValueError, match="per_frame must be True or False"):
        pp.RandomFlip(per_frame="yes")
    with pytest.raises(ValueError, match="MixUp is a batch op"):
        pp.MixUp(per_frame=True)
    with pytest.raises(ValueError, match="give per_frame=True to the OneOf itself"):
        pp.OneOf([pp.RandomFlip(per_frame=True)])


def test_ops_without_an_init_of_their_own_take_it_too() -> None:
    class Plain(pp.PixelOp):
        def apply(self, x, params, draws):
            return x

    assert Plain(per_frame=True).per_frame and not Plain().per_frame
    ops = [getattr(pp, name) for name in pp.__all__]
    kinds = [op for op in ops if isinstance(op, type) and issubclass(op, pp.Op) and op is not pp.Op]
    assert len(kinds) > 40
    assert all("per_frame" in inspect.signature(op).parameters for op in kinds)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_per_frame_on_cuda_matches_the_cpu() -> None:
    clips = constant_clips()
    t = pp.Compose([pp.RandomResizedCrop(24), pp.ColorJitter(0.4, 0.4, 0.4, per_frame=True),
                    pp.RandomErasing(p=1.0, per_frame=True)])
    cpu = augment_clips(t, clips, [0, 1, 2])
    gpu = augment_clips(t, clips.cuda(), [0, 1, 2])
    assert gpu.is_cuda and gpu.shape == cpu.shape
    assert (gpu.cpu() - cpu).abs().mean() < 1 / 255  # the same draws; float order aside
    assert not torch.equal(gpu[0, 1], gpu[0, 0])
