"""pixelpipe.native: the C planner gives the numbers the numpy planner gives (its slow twin).

Tolerance: none. Every comparison below is exact (the same bits), over random inputs chosen to
reach every branch: per-sample epochs, negative and 64-bit indices, crops that fall back to the
centred window, tiny and extreme images, perspective matrices (left to numpy), singular ones.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.data.random import Draws, hash32, op_blocks, prefix
from pixelpipe.plan import fast as planner

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler: the planner runs in numpy only")


def both(fn):
    """fn() with the C planner, then with numpy's (plan.fast gives the op's own numpy code when
    native.library() is None)."""
    fast = fn()
    with native.disabled():
        assert native.library() is None
        slow = fn()
    return fast, slow


def test_prefix_equal_and_equal_to_the_torch_hash():
    rng = np.random.default_rng(0)
    idx = np.concatenate([rng.integers(-(2**62), 2**62, 500), [0, -1, 2**63 - 1, -(2**63)]]).astype(np.int64)
    per = rng.integers(0, 2**40, len(idx)).astype(np.int64)
    for epoch in (0, 7, 2**35, per):
        fast, slow = both(lambda epoch=epoch: prefix(11, epoch, torch.from_numpy(idx)))
        assert fast.dtype == slow.dtype == np.uint32 and np.array_equal(fast, slow)
    # the prefix then op and draw is the whole hash (an independent path: torch int64 arithmetic)
    d = Draws(11, 3, torch.from_numpy(idx[:50]), 4, prefix(11, 3, idx[:50]))
    assert np.array_equal(d._hash_np(2).astype(np.int64), hash32(11, 3, torch.from_numpy(idx[:50]), 4, 2).numpy())


def test_draws_hashed_in_c_equal_numpy():
    """Draws' hashes of draw arrays and of single draws (hashed 8 at a time) from planner.c
    equal numpy's fold, with and without a prefix given, for several ops and draws past the
    first block; the prefix too."""
    rng = np.random.default_rng(2)
    idx = rng.integers(-(2**40), 2**40, 200).astype(np.int64)
    draws = np.array([0, 3, 7, 8, 21, 2**33, -5], dtype=np.int64)
    for op in (0, 5, 2**35):
        for given in (False, True):
            def hashed(op=op, given=given):
                d = Draws(11, 4, torch.from_numpy(idx), op, prefix(11, 4, idx) if given else None)
                return d._hash_np(draws), [d._hash_np(k) for k in (0, 9, 17)], d.uniforms_np(12)
            fast, slow = both(hashed)
            assert np.array_equal(fast[0], slow[0]) and fast[0].dtype == np.uint32 and fast[0].shape == (200, 7)
            assert all(np.array_equal(f, s) for f, s in zip(fast[1], slow[1]))
            assert np.array_equal(fast[2], slow[2])
    # draw 3 of op 5 is hash32's (an independent path: torch int64 arithmetic)
    d = Draws(11, 4, torch.from_numpy(idx), 5)
    assert np.array_equal(d._hash_np(np.array([3]))[:, 0].astype(np.int64), hash32(11, 4, torch.from_numpy(idx), 5, 3).numpy())


def test_op_blocks_equal():
    rng = np.random.default_rng(1)
    pre = rng.integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32)
    for ops, widths in (([0, 1], [22, 2]), ([3, 2**33, 5, 9], [0, 7, 1, 9]), ([], [])):
        fast, slow = both(lambda ops=ops, widths=widths: op_blocks(pre, ops, widths))
        assert len(fast) == len(slow) == len(ops)
        for f, s, w in zip(fast, slow, widths):
            assert f.shape == s.shape == (300, w) and np.array_equal(f, s)


@pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.9, 1.0), (0.2, 5.0)), ((0.0, 0.01), (1.0, 1.0))])
def test_random_resized_crop_windows_equal(scale, ratio):
    """120,000 windows, a third of them on images too narrow or too flat for most tries (the
    centred fallback, with the ratio clamped either way), and 1-pixel images."""
    rng = np.random.default_rng(2)
    n = 120_000
    sizes = rng.integers(1, 800, (n, 2)).astype(np.float64)
    sizes[: n // 6, 0] = rng.integers(1, 8, n // 6)  # flat
    sizes[n // 6 : n // 3, 1] = rng.integers(1, 8, n // 6)  # narrow
    sizes[-10:] = 1.0
    op = pp.RandomResizedCrop(224, scale=scale, ratio=ratio)
    draws = lambda: Draws(5, 2, np.arange(n), 0)
    fast, slow = both(lambda: planner.sample(op, draws(), sizes))
    assert np.array_equal(slow["top"], op.sample(draws(), sizes)["top"])  # numpy's path is the op's own
    assert fast.keys() == slow.keys()
    for k in fast:
        assert np.array_equal(fast[k], slow[k]), k
    H, W = sizes[:, 0], sizes[:, 1]
    centred = (fast["top"] == np.floor((H - fast["height"]) / 2)) & (fast["left"] == np.floor((W - fast["width"]) / 2))
    whole_side = (fast["height"] == H) | (fast["width"] == W)
    assert (centred & whole_side).sum() > 100  # the fallback branch was reached


def _stage(ops):
    return pp.Compose(ops).stages[0]


@pytest.mark.parametrize("border", ["constant", "reflect", "wrap", "replicate"])
def test_regions_and_inverse_equal(border):
    rng = np.random.default_rng(3)
    n = 2000
    sizes = rng.integers(1, 900, (n, 2)).astype(np.float64)
    stage = _stage([pp.RandomResizedCrop(224, scale=(0.02, 1.0)), pp.RandomFlip(0.5, 0.5),
                    pp.RandomAffine(30, translate=(0.3, 0.3), scale=(0.5, 1.5), shear=20, border=border)])
    for epoch in range(3):
        plan = stage.sample(1, epoch, np.arange(n), sizes)
        fast, slow = both(lambda plan=plan: (plan.regions(), plan.__dict__.pop("_inverse")))
        assert fast[0].dtype == slow[0].dtype == np.int64
        assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])
        wide = border in ("reflect", "wrap")
        whole = (fast[0][:, 2:] - fast[0][:, :2] == sizes).any()
        assert whole or not wide  # wide borders take whole axes somewhere in 2000 samples


def test_perspective_plans_go_to_numpy():
    n = 300
    sizes = np.full((n, 2), 300.0)
    stage = _stage([pp.RandomPerspective(0.4, p=1.0), pp.Resize((100, 120))])
    plan = stage.sample(0, 0, np.arange(n), sizes)
    fast, slow = both(lambda: (plan.regions(), plan.__dict__.pop("_inverse")))
    assert not (plan.matrix[:, 2, :2] == 0).all()  # perspective rows: the C path must decline
    assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])


def test_singular_matrix_named_the_same_way():
    stage = _stage([pp.Warp(lambda sizes, draws: torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1)
                            * torch.tensor([1.0, 1.0, 1.0]).where(torch.arange(len(sizes))[:, None, None] != 2,
                                                                  torch.tensor([0.0, 1.0, 1.0]))),
                    pp.Resize((10, 10))])
    plan = stage.sample(0, 0, np.arange(4), np.full((4, 2), 50.0))
    messages = []
    for ctx in (native.disabled(), contextlib.nullcontext()):
        plan.__dict__.pop("_inverse", None)
        with ctx, pytest.raises(ValueError, match="sample 2") as err:
            plan.regions()
        messages.append(str(err.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [True, False])
def test_warp_rows_equal(interpolation, antialias):
    """The kernel's rows, with and without DCT scales, for a spec alone and for one sliced from
    a window whose max scale was computed before (the numbers it carries are kept)."""
    rng = np.random.default_rng(5)
    n = 1500
    sizes = rng.integers(1, 900, (n, 2)).astype(np.float64)
    stage = _stage([pp.RandomResizedCrop(224, scale=(0.02, 1.0), interpolation=interpolation),
                    pp.RandomAffine(30, scale=(0.2, 1.5), shear=20)])
    plan = stage.sample(2, 0, np.arange(n), sizes)
    regions = plan.regions()
    scale = rng.choice([1.0, 0.5, 0.25, 0.125], n)
    for kwargs in ({}, {"scale": scale}):
        make = lambda kwargs=kwargs: plan.warp_spec((224, 224), regions, origin=regions[:, :2], antialias=antialias,
                                                    **kwargs)
        fast, slow = both(lambda make=make: make().packed_np())
        assert np.array_equal(fast, slow)
        window = make()
        window.max_scale()
        fast, slow = both(lambda window=window: window[100:700].packed_np())
        assert np.array_equal(fast, slow)
        assert (fast[:, 19:21] > 1).any() == (interpolation != "nearest")


def test_warp_rows_of_perspective_specs_come_from_numpy():
    n = 200
    stage = _stage([pp.RandomPerspective(0.4, p=1.0), pp.Resize((100, 120))])
    plan = stage.sample(0, 0, np.arange(n), np.full((n, 2), 300.0))
    regions = plan.regions()
    fast, slow = both(lambda: plan.warp_spec((100, 120), regions, origin=regions[:, :2]).packed_np())
    assert np.array_equal(fast, slow) and not np.all(fast[:, 17:19] == fast[:1, 17:19])


@pytest.mark.parametrize("ops", [
    [pp.RandomFlip(0.5, 0.3), pp.RandomAffine(7, shear=(-5.7, 5.7))],
    [pp.RandomAffine((-30, 45), translate=(0.2, 0.1), scale=(0.5, 1.5), shear=(-10, 10, -3, 8), p=0.6),
     pp.RandomFlip(0.0, 1.0)],
    [pp.RandomResizedCrop(64), pp.RandomAffine(0, scale=(0.9, 1.1))],
])
def test_flip_and_affine_matrices_equal(ops):
    rng = np.random.default_rng(6)
    n = 3000
    sizes = rng.integers(1, 900, (n, 2)).astype(np.float64)
    stage = _stage(ops)
    for epoch in range(2):
        fast, slow = both(lambda epoch=epoch: stage.sample(4, epoch, np.arange(n), sizes))
        assert np.array_equal(fast.matrix, slow.matrix) and np.array_equal(fast.out_sizes, slow.out_sizes)
    op = next(o for o in ops if isinstance(o, pp.RandomAffine))
    fast, slow = both(lambda: planner.sample(op, Draws(4, 0, np.arange(n), 1), sizes))
    assert fast.keys() == slow.keys() and all(np.array_equal(fast[k], slow[k]) for k in fast)
    drawn = fast["angle"] if op.degrees[1] > op.degrees[0] else fast["scale"] - 1.0
    assert (drawn != 0).mean() > 0.5 * op.p  # drawn, not left at the identity


@pytest.mark.parametrize("jitter", [pp.ColorJitter(0.2, 0.2, 0.2, 0.05), pp.ColorJitter(0, (0.5, 1.5), 0, (-0.5, 0.2), p=0.7),
                                    pp.ColorJitter(0.4, 0, 0.9, 0)])
def test_color_jitter_numbers_equal(jitter):
    """Parameters, and the colour maps at one mean colour per sample and at four (the GPU
    path's probes), from planner.c and from numpy."""
    rng = np.random.default_rng(7)
    n = 2000
    draws = lambda: Draws(9, 3, np.arange(n), 2)
    fast, slow = both(lambda: planner.sample(jitter, draws(), np.ones((n, 2))))
    assert fast.keys() == slow.keys() and all(np.array_equal(fast[k], slow[k]) for k in fast)
    for means in (None, rng.uniform(0, 255, (n, 3)), rng.uniform(0, 255, (4, n, 3))):
        f, s_ = both(lambda means=means: planner.color(jitter, fast, means))
        assert f.shape == s_.shape and np.array_equal(f, s_)


@pytest.mark.parametrize("pipeline", ["rn50", "rich", "val"])
def test_compose_outputs_equal(pipeline):
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    rng = np.random.default_rng(4)
    images = pp.ImageBatch.from_list([torch.from_numpy(rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8))
                                      for h, w in rng.integers(40, 300, (24, 2))])
    t = pp.Compose(pipeline_ops(pipeline), dtype=torch.float32)
    fast, slow = both(lambda: t(images, seed=3, epoch=1, indices=torch.arange(100, 124)))
    assert torch.equal(fast, slow)


def test_not_built_numpy_plans_and_says_why_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(native, "_DIR", tmp_path)  # a package installed without a C compiler
    monkeypatch.setattr(native, "_TOLD", set())
    assert native._load() is None and native._load() is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pixelpipe: planning in numpy, not with the C planner (")
    assert "not built when pixelpipe was installed" in err[0] and "build_ext --inplace" in err[0]


def test_found_beside_the_module_and_never_compiled():
    lib = native.library()
    assert lib is not None and Path(lib._name).parent == Path(native.__file__).parent
    assert Path(lib._name).name.startswith("_planner.")
    code = "from pixelpipe import native; print(native.library() is not None, native.shared('queue.c', 'x') is not None)"
    env = {**os.environ, "CC": "/nonexistent/cc", "PATH": "", "HOME": "/nonexistent"}  # nothing to compile with
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"] and "pixelpipe:" not in out.stderr


def test_every_c_file_is_built():
    for source in sorted(Path(native.__file__).parent.glob("*.c")):  # setup.py builds them all
        assert native.find(source, "test") is not None, source.name


def test_private_loads_have_their_own_globals():
    a, b = (native.load("planner.c", "test", private=True) for _ in range(2))
    assert a is not None and b is not None and a._handle != b._handle
    assert native.load("planner.c", "test")._handle == native.library()._handle  # one mapping per path
    assert native.signed(a, native._SIGNATURES).pp_prefix.restype is None


def test_environment_switch_turns_it_off():
    code = "from pixelpipe import native; print(native.library() is None)"
    env = {**os.environ, "PIXELPIPE_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_address_refuses_strided_arrays():
    a = np.zeros((4, 6))
    assert native.address(a) == a.__array_interface__["data"][0]
    with pytest.raises(ValueError, match="C-contiguous"):
        native.address(a[:, 1])
