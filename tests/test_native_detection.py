"""pixelpipe.native's detection.c gives the numbers of the numpy code it stands in for (its slow
twin): RandomIoUCrop's windows (ops/detection.py) and boxes moved through per-sample matrices
(Boxes.moved, data/targets.py).

Tolerance: none. Every comparison is of the same bits (a NaN equal to a NaN), over random seeds
and inputs chosen to reach every branch: samples without boxes, batches without any, degenerate
boxes (no width, no height, a point), boxes outside the image, minimum IoUs that no window
reaches, below 0 and at or above 1, windows of no pixels, perspective matrices (NaN and inf
corners), signed zeros that clipping keeps.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.data.random import Draws
from pixelpipe.data.targets import Boxes, Keypoints, Targets
from pixelpipe.plan import fast

pytestmark = pytest.mark.skipif(native.detection() is None, reason="no C compiler: detection plans in numpy only")


def both(fn):
    """fn() with detection.c, then with numpy (plan.fast's numpy path)."""
    quick = fn()
    with native.disabled():
        assert native.detection() is None
        slow = fn()
    return quick, slow


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same shape and bits, any NaN equal to any NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool((nan == np.isnan(b)).all() and (a[~nan].view(np.uint64) == b[~nan].view(np.uint64)).all())


def ragged_boxes(rng: np.random.Generator, sizes: np.ndarray, most: int = 12) -> Boxes:
    """Per sample 0..most boxes: ordinary ones, some degenerate (no width, no height, a point),
    some reaching out of the image, a few the whole image; a tenth of the samples have none."""
    n = len(sizes)
    counts = rng.integers(0, most + 1, n)
    counts[rng.random(n) < 0.1] = 0
    sample = np.repeat(np.arange(n), counts)
    h, w = sizes[sample, 0], sizes[sample, 1]
    k = len(sample)
    x0, y0 = rng.uniform(-0.2, 1.0, k) * w, rng.uniform(-0.2, 1.0, k) * h
    bw, bh = rng.uniform(0, 0.8, k) * w, rng.uniform(0, 0.8, k) * h
    kind = rng.integers(0, 10, k)
    bw[kind == 0] = 0.0
    bh[kind == 1] = 0.0
    bw[kind == 2], bh[kind == 2] = 0.0, 0.0
    whole = kind == 3
    x0[whole], y0[whole], bw[whole], bh[whole] = 0.0, 0.0, w[whole], h[whole]
    x0[kind == 4] = np.round(x0[kind == 4])  # whole-pixel edges: ties with the windows' edges
    data = np.stack([x0, y0, x0 + bw, y0 + bh], 1)
    return Boxes(data, counts, rng.integers(1, 80, k), rng.uniform(0.2, 1.0, k))


def windows(op: pp.RandomIoUCrop, draws, sizes: np.ndarray, targets: Targets | None):
    """(params, matrix, output sizes) from fast.plan_seeing and the parameters it drew."""
    lib = native.detection()
    params = op.sample(draws(), sizes, targets) if lib is None else fast._iou_crop_sample(lib, op, draws(), sizes,
                                                                                       targets)
    m, out = fast.plan_seeing(op, draws(), sizes, targets)
    return params, m, out


@pytest.mark.parametrize("op", [
    pp.RandomIoUCrop(),
    pp.RandomIoUCrop(0.1, 0.9, 0.3, 3.0, sampler_options=(0.5, 0.7, 0.9), trials=5, rounds=3),
    pp.RandomIoUCrop(sampler_options=(-0.5, 0.0, 0.95, 1.0, 2.0), trials=3, rounds=20),
    pp.RandomIoUCrop(0.0, 0.05, sampler_options=(0.0,), trials=2, rounds=1),  # windows of no pixels
    pp.RandomIoUCrop(sampler_options=(0.99,), trials=40, rounds=2),  # almost never reached
])
def test_iou_crop_windows_equal(op):
    rng = np.random.default_rng(10)
    n = 4000
    sizes = rng.integers(1, 700, (n, 2)).astype(np.float64)
    sizes[:20] = 1.0
    boxes = ragged_boxes(rng, sizes)
    targets = Targets(boxes)
    for seed, epoch in ((0, 0), (7, 3), (2**40, np.arange(n) % 5)):
        draws = lambda seed=seed, epoch=epoch: Draws(seed, epoch, np.arange(1000, 1000 + n), 3)
        quick, slow = both(lambda draws=draws: windows(op, draws, sizes, targets))
        assert quick[0].keys() == slow[0].keys() and all(same(quick[0][k], slow[0][k]) for k in quick[0])
        assert same(quick[1], slow[1]) and same(quick[2], slow[2])
    p = quick[0]
    cropped = (p["height"] != sizes[:, 0]) | (p["width"] != sizes[:, 1])
    if op.sampler_options != (0.99,):
        assert cropped.any() and not cropped.all()  # both kinds of outcome
    assert not cropped[boxes.counts == 0].any() or min(op.sampler_options) < -1  # no box: no window, unless < -1


def test_iou_crop_without_boxes_keeps_every_image():
    n = 300
    sizes = np.random.default_rng(11).integers(10, 500, (n, 2)).astype(np.float64)
    op = pp.RandomIoUCrop(sampler_options=(-1.0, 0.0))
    empty = Targets(Boxes(np.zeros((0, 4)), np.zeros(n, np.int64)))
    draws = lambda: Draws(1, 0, np.arange(n), 0)
    for targets in (None, empty, Targets()):
        quick, slow = both(lambda targets=targets: windows(op, draws, sizes, targets))
        assert same(quick[1], slow[1]) and same(quick[2], slow[2]) and same(quick[2], sizes)


def test_iou_crop_minimum_below_minus_one_takes_any_window_even_without_boxes():
    """The numpy code's best IoU of a window without a box centre is -1, so a minimum IoU
    below it takes the first window that fits, also for a sample without boxes (in a batch
    that has some)."""
    n = 200
    sizes = np.full((n, 2), 100.0)
    counts = np.zeros(n, np.int64)
    counts[0] = 1
    targets = Targets(Boxes(np.array([[10.0, 10, 20, 20]]), counts))
    op = pp.RandomIoUCrop(sampler_options=(-2.0,), trials=5)
    draws = lambda: Draws(0, 0, np.arange(n), 0)
    quick, slow = both(lambda: windows(op, draws, sizes, targets))
    assert same(quick[1], slow[1]) and (quick[2] != 100.0).any(1).mean() > 0.9


def matrices(rng: np.random.Generator, n: int) -> np.ndarray:
    """Per sample: an affine map (scale, shear, flips, translation), a pure flip about 0 (-0.0
    corners, which numpy's minimum tells from 0.0), or a perspective one (some corners at
    infinity or NaN)."""
    m = np.tile(np.eye(3), (n, 1, 1))
    m[:, :2, :2] = rng.normal(0, 1.5, (n, 2, 2))
    m[:, :2, 2] = rng.normal(0, 100, (n, 2))
    kind = rng.integers(0, 6, n)
    flip = kind == 0
    m[flip] = np.diag([-1.0, 1.0, 1.0])
    m[flip, 0, 1] = m[flip, 0, 2] = -0.0
    scale = kind == 1  # crops and resizes, as a detection stage makes them
    m[scale] = 0.0
    m[scale, 0, 0], m[scale, 1, 1] = rng.uniform(0.2, 3, scale.sum()), rng.uniform(0.2, 3, scale.sum())
    m[scale, :2, 2] = -np.floor(rng.uniform(0, 200, (scale.sum(), 2)))
    m[scale, 2, 2] = 1.0
    persp = kind == 2
    m[persp, 2, :2] = rng.normal(0, 0.01, (persp.sum(), 2))
    m[np.flatnonzero(persp)[:3]] = 0.0  # every corner at 0 / 0
    m[np.flatnonzero(persp)[3:6], 2] = 0.0  # every corner at infinity
    return m


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # numpy's, at the NaN corners
def test_moved_boxes_equal():
    rng = np.random.default_rng(12)
    n = 5000
    sizes = rng.integers(1, 700, (n, 2)).astype(np.float64)
    boxes = ragged_boxes(rng, sizes)
    m = matrices(rng, n)
    out_sizes = rng.integers(1, 500, (n, 2)).astype(np.float64)
    points = Keypoints(rng.uniform(-10, 600, (30, 3)), np.r_[np.full(10, 3), np.zeros(n - 10, np.int64)])
    targets = Targets(boxes, points)
    quick, slow = both(lambda: fast.move_targets(targets, m, out_sizes))
    for a, b in ((quick.boxes.data, slow.boxes.data), (quick.boxes.visible, slow.boxes.visible),
                 (quick.keypoints.data, slow.keypoints.data)):
        assert same(a, b)
    assert quick.boxes.labels is boxes.labels and np.array_equal(quick.boxes.counts, boxes.counts)
    data = quick.boxes.data
    assert np.isnan(data).any() and np.isnan(slow.boxes.data).any()  # the edge cases were reached
    v = quick.boxes.visible
    assert ((v > 0) & (v < boxes.visible)).any() and (v == 0).any()  # clipped in part and wholly


def test_moved_boxes_through_a_stage_equal():
    """The ssd stage's matrices (zoom-out, IoU crop, flip, resize) and its boxes: the targets
    seen by the crop and moved by the engine are the same."""
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    rng = np.random.default_rng(13)
    n = 512
    sizes = rng.integers(100, 640, (n, 2)).astype(np.float64)
    targets = Targets(ragged_boxes(rng, sizes, 8))
    stage = pp.Compose(pipeline_ops("ssd")).stages[0]

    def plan():
        p = stage.sample(5, 1, np.arange(n), sizes, targets)
        moved = fast.move_targets(targets, p.matrix, p.out_sizes)
        return p.matrix, p.out_sizes, moved.boxes.data, moved.boxes.visible

    quick, slow = both(plan)
    assert all(same(a, b) for a, b in zip(quick, slow))


def test_no_boxes_and_no_targets_move_alike():
    m, out = np.tile(np.eye(3), (4, 1, 1)), np.full((4, 2), 10.0)
    for targets in (Targets(Boxes(np.zeros((0, 4)), np.zeros(4, np.int64))), Targets()):
        quick, slow = both(lambda targets=targets: fast.move_targets(targets, m, out))
        assert (quick.boxes is None) == (slow.boxes is None)
        if quick.boxes is not None:
            assert quick.boxes.data.shape == slow.boxes.data.shape == (0, 4)


def test_ssd_compose_outputs_equal():
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    rng = np.random.default_rng(14)
    n = 12
    hw = rng.integers(40, 200, (n, 2))
    images = [torch.from_numpy(rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)) for h, w in hw]
    boxes = ragged_boxes(rng, hw.astype(np.float64), 6)
    ends = np.cumsum(np.r_[0, boxes.counts])
    per = [boxes.data[a:b] for a, b in zip(ends[:-1], ends[1:])]
    labels = [boxes.labels[a:b] for a, b in zip(ends[:-1], ends[1:])]
    t = pp.Compose(pipeline_ops("ssd", 64), dtype=torch.float32)
    quick, slow = both(lambda: t(images, seed=3, epoch=1, indices=torch.arange(n), boxes=per, labels=labels))
    assert quick.keys() == slow.keys() and torch.equal(quick["image"], slow["image"])
    for key in ("boxes", "labels", "kept"):
        assert all(torch.equal(a, b) for a, b in zip(quick[key], slow[key])), key


SSD_RUN = """
import numpy as np, torch, pixelpipe as pp
from pixelpipe import native
from pixelpipe.tools.bench.pipelines import pipeline_ops
rng = np.random.default_rng(15)
images = [torch.zeros((int(h), int(w), 3), dtype=torch.uint8) for h, w in rng.integers(50, 300, (40, 2))]
boxes = [np.sort(rng.uniform(0, 50, (4, 2, 2)), 1).reshape(4, 4) for _ in images]
out = pp.Compose(pipeline_ops("ssd", 32))(images, seed=1, boxes=boxes)
print(native.detection() is None, [b.tolist() for b in out["boxes"]])
"""


def test_environment_switch_turns_it_off_and_numpy_plans_the_same():
    env = {**os.environ, "PIXELPIPE_NATIVE": "0"}
    off = subprocess.run([sys.executable, "-c", SSD_RUN], env=env, capture_output=True, text=True, check=True)
    on = subprocess.run([sys.executable, "-c", SSD_RUN], capture_output=True, text=True, check=True)
    assert off.stdout.startswith("True [") and on.stdout.startswith("False [")
    assert off.stdout.split(" ", 1)[1] == on.stdout.split(" ", 1)[1]
