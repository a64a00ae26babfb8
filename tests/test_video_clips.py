"""Clip sampling (starts, strides, fps resampling, padding) and the clip augmentation contract:
every frame of a clip gets the same draws of every op, clips differ, results do not depend on
the batch, batch ops mix whole clips."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe.data.clips import Clip, ClipSampler, clip_ids, to_layout
from pixelpipe.engine.clips import augment_clips


def fake_info(frames: int, fps: float = 30.0) -> SimpleNamespace:
    """What ClipSampler reads of a probe: the frame count, times and rate."""
    return SimpleNamespace(frames=frames, fps=fps, times=np.arange(frames) / fps)


class TestClipSampler:
    def test_random_starts_fit_and_repeat(self):
        s = ClipSampler(8, stride=3, clips_per_video=4)
        info = fake_info(50)
        for video in range(20):
            clips = s.sample(info, seed=1, epoch=0, video=video)
            assert [c.clip for c in clips] == [0, 1, 2, 3]
            for c in clips:
                assert isinstance(c, Clip) and c.video == video
                np.testing.assert_array_equal(c.frames, c.start + 3 * np.arange(8))
                assert 0 <= c.start and c.frames[-1] <= 49
                np.testing.assert_allclose(c.timestamps, c.frames / 30.0)
            again = s.sample(info, seed=1, epoch=0, video=video)
            assert [c.start for c in again] == [c.start for c in clips]

    def test_random_starts_vary_with_epoch_seed_and_video(self):
        s, info = ClipSampler(4, clips_per_video=2), fake_info(200)
        starts = lambda seed, epoch, video: [c.start for c in s.sample(info, seed, epoch, video)]
        base = [starts(0, 0, v) for v in range(10)]
        assert base != [starts(0, 1, v) for v in range(10)]
        assert base != [starts(1, 0, v) for v in range(10)]
        assert len({tuple(b) for b in base}) > 5
        every = {st for e in range(30) for st in starts(0, e, 0)}  # starts reach both ends over epochs
        assert min(every) < 20 and max(every) > 176

    def test_uniform_starts_spread(self):
        s = ClipSampler(5, stride=2, clips_per_video=3, start="uniform")
        clips = s.sample(fake_info(41), 0, 0, 0)
        assert [c.start for c in clips] == [0, 16, 32]  # last start: 41 - 9
        assert [c.start for c in ClipSampler(5, start="uniform").sample(fake_info(41), 0, 7, 3)] == [18]
        assert [c.start for c in s.sample(fake_info(41), 5, 9, 2)] == [0, 16, 32]  # no draw involved

    def test_fps_resampling(self):
        info = fake_info(120, fps=60.0)
        c = ClipSampler(6, fps=30.0, start="uniform").sample(info, 0, 0, 0)[0]
        assert np.diff(c.frames).tolist() == [2] * 5  # 60 fps at 30: every other frame
        slow = fake_info(60, fps=15.0)
        c = ClipSampler(6, fps=30.0, start="uniform").sample(slow, 0, 0, 0)[0]
        assert np.diff(c.frames).tolist() in ([0, 1, 0, 1, 0], [1, 0, 1, 0, 1])  # 15 fps at 30: repeats
        c = ClipSampler(4, stride=2, fps=10.0).sample(fake_info(300), 3, 0, 0)[0]
        np.testing.assert_allclose(np.diff(c.timestamps), 0.2, atol=1 / 30)

    def test_padding_and_dropping_short_videos(self):
        c = ClipSampler(6, stride=2).sample(fake_info(7), 0, 0, 0)[0]
        assert c.frames.tolist() == [0, 2, 4, 6, 6, 6]
        with pytest.raises(ValueError, match="7 frames, a clip spans 11 frames"):
            ClipSampler(6, stride=2, pad_last=False).sample(fake_info(7), 0, 0, 0)
        with pytest.raises(ValueError, match="shorter than one clip"):
            ClipSampler(20, fps=10.0, pad_last=False).sample(fake_info(30), 0, 0, 0)
        c = ClipSampler(20, fps=10.0).sample(fake_info(30), 0, 0, 0)[0]
        assert c.frames[0] == 0 and c.frames[-1] == 29

    @pytest.mark.parametrize("kwargs", [dict(frames_per_clip=0), dict(stride=1.5), dict(clips_per_video=-1),
                                        dict(start="middle"), dict(fps=0), dict(pad_last="yes")])
    def test_bad_arguments(self, kwargs):
        with pytest.raises(ValueError):
            ClipSampler(**kwargs)


def clips_of(n: int, t: int, h: int = 40, w: int = 48, seed: int = 0) -> torch.Tensor:
    """n clips of t identical random frames [n, t, h, w, 3] (clips differ from each other)."""
    g = torch.Generator().manual_seed(seed)
    one = torch.randint(0, 256, (n, 1, h, w, 3), generator=g, dtype=torch.uint8)
    return one.expand(n, t, h, w, 3).contiguous()


OPS = {
    "geometry": [pp.RandomResizedCrop(24), pp.RandomFlip(), pp.RandomRotate(30), pp.RandomPerspective(0.3)],
    "colour": [pp.Resize((24, 24)), pp.ColorJitter(0.4, 0.4, 0.4, 0.1), pp.RandomGrayscale(0.5), pp.RGBShift(20)],
    "pixel": [pp.Resize((24, 24)), pp.GaussianNoise(sigma=0.1), pp.GaussianBlur(5), pp.RandomErasing(p=1.0),
              pp.GridMask(d=(6, 12)), pp.RandomSolarize(0.5, p=0.5)],
}


@pytest.mark.parametrize("kind", list(OPS))
def test_frames_of_a_clip_share_every_draw(kind):
    t = pp.Compose(OPS[kind], dtype=torch.float32)
    x = clips_of(6, 4)
    out = augment_clips(t, x, np.arange(6) * 7 + 3, seed=5, epoch=2)
    assert out.shape == (6, 4, 3, 24, 24)
    for i in range(6):
        for f in range(1, 4):
            torch.testing.assert_close(out[i, f], out[i, 0], atol=0, rtol=0)
    # the same content under two ids: different draws
    same = clips_of(1, 4).expand(2, 4, 40, 48, 3)
    pair = augment_clips(t, same, [0, 1], seed=5)
    assert not torch.equal(pair[0], pair[1])


def test_offset_between_frames_survives_geometry():
    # frame f = base + 20 f: resampling is linear with weights summing to one, so every output
    # frame is the first one + 20 f (up to rounding), whatever crop and flip the clip got
    g = torch.Generator().manual_seed(1)
    base = torch.randint(0, 150, (5, 1, 36, 44, 3), generator=g, dtype=torch.int32)
    x = (base + 20 * torch.arange(5).view(1, 5, 1, 1, 1)).to(torch.uint8)
    t = pp.Compose([pp.RandomResizedCrop(20, scale=(0.3, 1.0)), pp.RandomFlip()], dtype=torch.float32)
    out = augment_clips(t, x, [4, 9, 13, 20, 21]) * 255
    for f in range(5):
        torch.testing.assert_close(out[:, f] - out[:, 0], torch.full_like(out[:, 0], 20.0 * f), atol=1.01, rtol=0)


def test_same_seed_same_output_and_batch_independence():
    t = pp.Compose(OPS["geometry"][:2] + OPS["colour"][1:2] + [pp.GaussianNoise(sigma=0.05)])
    x = clips_of(5, 3, seed=2)
    ids = clip_ids([0, 0, 1, 2, 2], [0, 1, 0, 0, 1], 2)
    assert ids.tolist() == [0, 1, 2, 4, 5]
    a = augment_clips(t, x, ids, seed=3, epoch=1)
    torch.testing.assert_close(a, augment_clips(t, x, ids, seed=3, epoch=1), atol=0, rtol=0)
    for k in range(5):  # each clip alone, and in another order
        torch.testing.assert_close(augment_clips(t, x[k:k + 1], ids[k:k + 1], seed=3, epoch=1)[0], a[k])
    torch.testing.assert_close(augment_clips(t, x.flip(0), ids[::-1].copy(), seed=3, epoch=1), a.flip(0))
    assert not torch.equal(a, augment_clips(t, x, ids, seed=3, epoch=2))


def test_layouts():
    t = pp.Compose([pp.RandomResizedCrop(16)])
    x, ids = clips_of(2, 3), [0, 1]
    base = augment_clips(t, x, ids)
    assert torch.equal(augment_clips(t, x, ids, layout="NCTHW"), base.permute(0, 2, 1, 3, 4))
    assert torch.equal(augment_clips(t, x, ids, layout="NTHWC"), base.permute(0, 1, 3, 4, 2))
    assert torch.equal(to_layout(base, "NTCHW"), base)
    with pytest.raises(ValueError, match="layout"):
        augment_clips(t, x, ids, layout="TNCHW")
    with pytest.raises(ValueError, match="'NCHW'"):
        augment_clips(pp.Compose([pp.Resize(8)], layout="NHWC"), x, ids)
    with pytest.raises(ValueError, match="same T"):
        augment_clips(t, [x[0], x[1, :2]], ids)


def test_ragged_clip_sizes():
    t = pp.Compose([pp.RandomResizedCrop(16)])
    out = augment_clips(t, [clips_of(1, 3, 30, 40)[0], clips_of(1, 3, 50, 20)[0]], [0, 1])
    assert out.shape == (2, 3, 3, 16, 16)


@pytest.mark.parametrize("mix", [pp.MixUp(0.8, num_classes=4), pp.CutMix(1.0, num_classes=4)])
def test_batch_ops_mix_whole_clips(mix):
    t = pp.Compose([pp.RandomResizedCrop(16), mix])
    x = clips_of(4, 3, seed=4)
    out = augment_clips(t, x, [0, 1, 2, 3], label=torch.tensor([0, 1, 2, 3]))
    video, soft = out["video"], out["label"]
    assert video.shape == (4, 3, 3, 16, 16) and soft.shape == (4, 4)
    torch.testing.assert_close(soft.sum(1), torch.ones(4))
    for i in range(4):  # a frame's partner is the same frame of another clip: frames stay equal
        for f in range(1, 3):
            assert torch.equal(video[i, f], video[i, 0])
    assert (soft.max(1).values < 1).any()  # something was mixed


def test_clips_go_in_as_one_buffer_with_the_frame_by_frame_numbers():
    """engine.clips.clip_batch: a contiguous uint8 tensor [N, T, H, W, 3] is the frames' buffer
    itself and contiguous clips of several sizes are joined once; augment_clips gives the same
    numbers as frame by frame (numpy clips take that path), leaves its input as it was, and
    strided or numpy clips still go frame by frame."""
    from pixelpipe.data.batch import ImageBatch
    from pixelpipe.engine.clips import clip_batch

    g = torch.Generator().manual_seed(5)
    t = pp.Compose([pp.RandomResizedCrop(12), pp.RandomFlip(), pp.RandomRotate(15), pp.ColorJitter(0.3, 0.3)])
    whole = torch.randint(0, 256, (3, 4, 20, 26, 3), dtype=torch.uint8, generator=g)
    ragged = [torch.randint(0, 256, (4, h, w, 3), dtype=torch.uint8, generator=g) for h, w in ((20, 26), (31, 17))]
    for clips in (whole, ragged):
        kept = [c.clone() for c in clips]
        batch = clip_batch(clips, 4)
        assert isinstance(batch, ImageBatch) and len(batch) == 4 * len(clips)
        for k, c in enumerate(clips):
            for f in range(4):
                assert torch.equal(batch[4 * k + f], c[f])
        ids = np.arange(len(clips)) + 7
        got = augment_clips(t, clips, ids, seed=3, epoch=1)
        want = augment_clips(t, [c.numpy() for c in clips], ids, seed=3, epoch=1)
        assert torch.equal(got, want)
        assert all(torch.equal(c, k) for c, k in zip(clips, kept))
    assert clip_batch(whole, 4).data.data_ptr() == whole.data_ptr()  # a view: no copy
    strided = whole.transpose(2, 3)  # [N, T, W, H, 3]: not contiguous
    assert clip_batch(strided, 4) is None and clip_batch([c.numpy() for c in whole], 4) is None
    assert clip_batch(whole.to(torch.int16), 4) is None
    out = augment_clips(t, strided, [0, 1, 2])
    assert torch.equal(out, augment_clips(t, strided.contiguous(), [0, 1, 2]))
