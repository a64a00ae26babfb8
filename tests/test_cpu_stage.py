"""The CPU stage's fast paths against their general twins (STYLE.md, idea 7).

- finish_uint8 (plain pointwise pass on uint8, mirrored views read in place) against
  finish_sample's general float branch: equal, every value of every channel, every output dtype
  and layout (both compute float32 v * k, then + b, and round once to the output dtype).
- run_cpu_stage's fused "window" path (resize unmirrored, then mirror + pointwise in one pass)
  against warp_sample (mirrored by copies) + the general pointwise branch: equal, on decoded
  batches and on JPEG regions decoded by the workers (whose "separable" samples, with warp.c,
  take its two 1-D passes: within float16's two ulps).
- run_cpu_stage on batches mixing the per-sample paths and the batched reference (whose
  samples the workers decode before the batch's set-up is known): equal to each sample through
  its own path, on a pool and on the builtin (lazy) map; errors in loading or in the set-up
  reach the caller. With warp.c, the samples the reference took go through the "general" path
  (warp + pointwise in one C call): those rows agree with the reference + pointwise_reference
  within float16's two ulps, the others stay equal.
- the two-phase stage (colour ops that need the warped images' means): per-sample means and
  pointwise pass by warp.c against the batched reference means and pass (warp.c off), within
  float rounding, on batches mixing "window", "separable" and "general" samples.
- for_each: every item once, on any map; the first failing item's error (in the list's order).
- longest_first: the batch's order, largest estimated decode first.
"""

from __future__ import annotations

import io
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from helpers import SAMPLE_DIR, varied_images
from PIL import Image

import pixelpipe as pp
from pixelpipe import Compose, ImageBatch
from pixelpipe.kernels.cpu import warp as cpu_warp
from pixelpipe.kernels.cpu.stage import (
    _post,
    finish_sample,
    finish_uint8,
    for_each,
    longest_first,
    output_tensor,
    run_cpu_stage,
)
from pixelpipe.kernels.cpu.warp import REFERENCE, SEPARABLE, WINDOW, classify, sample_rows, warp_sample
from pixelpipe.kernels.reference.pointwise import pointwise_reference
from pixelpipe.kernels.reference.warp import warp_reference
from pixelpipe.kernels.spec import PointwiseSpec, WarpSpec

NORM = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
F16_TOL = {"atol": 2 * 2**-9, "rtol": 2**-9}  # two float16 ulps at magnitude 2 (helpers.FLOAT_TOL)


def _without_warp_c(monkeypatch) -> None:
    """The CPU stage as where warp.c was not built: the reference warps what "general" would."""
    monkeypatch.setattr(cpu_warp, "general_library", lambda: None)
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.uint8]


def _spec(dtype: torch.dtype, layout: str, norm=NORM) -> PointwiseSpec:
    if dtype == torch.uint8:
        norm = None
    return PointwiseSpec(None, norm[0] if norm else None, norm[1] if norm else None, dtype, layout, 3)


def _general(x: torch.Tensor, spec: PointwiseSpec) -> torch.Tensor:
    """The twin: finish_sample's general branch (a float32 input takes it)."""
    h, w = x.shape[:2]
    out = output_tensor(1, (h, w), spec)
    finish_sample(x.to(torch.float32), spec, 0, out[0], _post(spec))
    return out[0]


def _all_values(seed: int) -> np.ndarray:
    """[16, 48, 3] uint8 holding every value in every channel, in a different order per channel."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(np.tile(np.arange(256, dtype=np.uint8), 3)).reshape(16, 48)
                     for _ in range(3)], axis=2)


@pytest.mark.parametrize("c_form", [True, False], ids=["warp.c", "numpy-torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("norm", [NORM, ((0.5,), (0.25,)), None])
def test_finish_uint8_equals_the_general_branch(dtype, layout, norm, c_form, monkeypatch):
    """finish_uint8 in both its forms (warp.c's pointwise pass, one call; and the numpy and
    torch form where warp.c was not built), mirrored and grey views, widths with and without a
    remainder after the 8-pixel blocks."""
    if c_form and cpu_warp.general_library() is None:
        pytest.skip("warp.c was not built")
    if not c_form:
        _without_warp_c(monkeypatch)
    spec = _spec(dtype, layout, norm)
    for x in (_all_values(0), _all_values(1)[:, :21], _all_values(2)[:5, :7]):
        for view in (x, x[:, ::-1], x[::-1], x[::-1, ::-1], x[:, :, :1], x[::-1, ::-1, :1]):  # mirrored, grey
            out = output_tensor(1, view.shape[:2], spec)
            finish_uint8(view, spec, out[0], _post(spec))
            twin = _general(torch.from_numpy(view.copy()).expand(*view.shape[:2], 3), spec)
            assert out.dtype == dtype and torch.equal(out[0], twin)


def test_finish_uint8_reuses_its_buffers_across_sizes(monkeypatch):
    _without_warp_c(monkeypatch)  # the numpy and torch form keeps work planes per thread
    spec = _spec(torch.float16, "NCHW")
    for h, w in ((16, 48), (7, 5), (16, 48)):
        x = _all_values(h)[:h, :w]
        out = output_tensor(1, (h, w), spec)
        finish_uint8(x, spec, out[0], _post(spec))
        assert torch.equal(out[0], _general(torch.from_numpy(x.copy()), spec))


def _twin(load, spec: WarpSpec, pspec: PointwiseSpec) -> torch.Tensor:
    """Each sample through warp_sample (mirroring by copies) and the general pointwise branch."""
    rows = sample_rows(spec, classify(spec))
    assert REFERENCE not in rows.kinds
    out = output_tensor(len(spec), spec.out_size, pspec)
    for i in range(len(spec)):
        finish_sample(warp_sample(load(i), spec, rows, i).to(torch.float32), pspec, i, out[i], _post(pspec))
    return out


OPS = [pp.RandomResizedCrop((20, 24)), pp.RandomFlip(0.5, 0.5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fused_window_path_equals_its_twin(dtype, layout):
    b = ImageBatch.from_list(varied_images(16, 30, 90, seed=3))  # every fifth one grey
    pspec = _spec(dtype, layout)
    with ThreadPoolExecutor(2) as pool:
        for seed in range(3):
            plan = Compose(OPS).stages[0].sample(seed, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
            spec = plan.warp_spec(plan.uniform_size(), plan.regions())
            assert bool((classify(spec) == WINDOW).all())
            fast = run_cpu_stage(b.__getitem__, spec, lambda means: pspec, False, pool.map)
            assert torch.equal(fast, _twin(b.__getitem__, spec, pspec))


def _jpegs() -> list[bytes]:
    if SAMPLE_DIR.is_dir():
        return [p.read_bytes() for p in sorted(SAMPLE_DIR.glob("*.JPEG"))[:12]]
    rng = np.random.default_rng(1)
    out = []
    for i in range(8):
        arr = (rng.random((90 + 7 * i, 120, 3)) * 80 + np.linspace(0, 170, 120)[None, :, None]).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def test_fused_path_on_decoded_jpeg_regions_equals_its_twin():
    """Regions decoded on the workers (TurboJPEG or Pillow, at a DCT scale where allowed: the
    samples decoded at a reduced scale are "separable", the others "window"). With warp.c the
    separable ones go through its two 1-D passes: float rounding, then float16's."""
    t = Compose([pp.RandomResizedCrop(160), pp.RandomFlip(0.5, 0.5), pp.Normalize(*NORM)], dtype=torch.float16)
    blobs = _jpegs()
    with pp.Engine(num_threads=2) as engine:
        for epoch in range(2):
            work = engine.prepare(t.program, blobs, seed=0, epoch=epoch).first
            kinds = classify(work.spec)
            assert WINDOW in kinds.tolist()
            pspec = work.plan.pointwise(None, t.program.form(0))
            fast = engine.finish(engine.prepare(t.program, blobs, seed=0, epoch=epoch))["image"]
            twin = _twin(work.source, work.spec, pspec)
            rounded = (kinds == SEPARABLE) & (cpu_warp.general_library() is not None)
            assert torch.equal(fast[~rounded], twin[~rounded])
            torch.testing.assert_close(fast[rounded].float(), twin[rounded].float(), **F16_TOL)


def _mixed_twin(b: ImageBatch, spec: WarpSpec, pspec: PointwiseSpec) -> torch.Tensor:
    """Per-sample paths one by one; the reference samples through warp_reference, batched."""
    rows = sample_rows(spec, classify(spec))
    out = output_tensor(len(spec), spec.out_size, pspec)
    rest = [i for i in range(len(spec)) if rows.kinds[i] == REFERENCE]
    for i in range(len(spec)):
        if i not in rest:
            finish_sample(warp_sample(b[i], spec, rows, i).to(torch.float32), pspec, i, out[i], _post(pspec))
    sub = ImageBatch.from_list([b[i] for i in rest])
    r = torch.tensor(rest)
    sub_spec = WarpSpec(spec.inverse[r], spec.image_size[r], spec.origin[r], spec.clip[r], spec.out_size,
                        spec.interpolation, spec.border, spec.fill, spec.antialias)
    out[r] = pointwise_reference(warp_reference(sub.data, sub.table, sub_spec), pspec)
    return out


MIXED = [pp.RandomResizedCrop((20, 24)), pp.RandomFlip(0.5, 0.5), pp.RandomRotate(25, p=0.4)]


@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("general", [False, True])
def test_mixed_batch_equals_each_path(threads, general, monkeypatch):
    if not general:
        _without_warp_c(monkeypatch)
    elif cpu_warp.general_library() is None:
        pytest.skip("warp.c was not built")
    b = ImageBatch.from_list(varied_images(20, 30, 90, seed=5))
    pspec = _spec(torch.float16, "NCHW")
    pool = ThreadPoolExecutor(threads) if threads else None
    kinds, loads = set(), []

    def load(i: int) -> torch.Tensor:
        loads.append(i)
        return b[i]

    for seed in range(3):
        plan = Compose(MIXED).stages[0].sample(seed, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
        spec = plan.warp_spec(plan.uniform_size(), plan.regions())
        kind = classify(spec)
        kinds.update(kind.tolist())
        loads.clear()
        got = run_cpu_stage(load, spec, lambda means: pspec, False, pool.map if pool else map)
        assert sorted(loads) == list(range(len(b)))  # each sample decoded once, reference ones too
        twin = _mixed_twin(b, spec, pspec)
        ref = kind == REFERENCE
        assert torch.equal(got[~ref], twin[~ref])
        if general:  # warp.c's rows: float rounding, then float16's
            torch.testing.assert_close(got[ref].float(), twin[ref].float(), **F16_TOL)
        else:
            assert torch.equal(got[ref], twin[ref])
    assert REFERENCE in kinds and WINDOW in kinds
    if pool:
        pool.shutdown()


def _contrast(n: int, dtype: torch.dtype = torch.float16, layout: str = "NCHW"):
    """make_pointwise of a contrast-like chain: 0.7 x + 0.3 * mean colour, then a small channel
    mix; the pointwise spec depends on the warped images' means."""
    def make(means):
        assert means is not None and means.shape == (n, 3) and means.dtype == torch.float64
        a = torch.zeros(n, 3, 4, dtype=torch.float64)
        a[:, :, :3] = torch.tensor([[0.7, 0.05, 0.0], [0.0, 0.7, 0.05], [0.05, 0.0, 0.7]], dtype=torch.float64)
        a[:, :, 3] = 0.3 * means + 4.0
        norm = None if dtype == torch.uint8 else NORM
        return PointwiseSpec(a, norm[0] if norm else None, norm[1] if norm else None, dtype, layout, 3)
    return make


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_two_phases_with_warp_c_agree_with_the_reference_means(dtype, layout, monkeypatch):
    """The stage that needs the means: warp.c's per-sample sums and pointwise pass (on the
    workers) against the batched channel_means + pointwise_reference (warp.c off)."""
    if cpu_warp.general_library() is None:
        pytest.skip("warp.c was not built")
    b = ImageBatch.from_list(varied_images(20, 30, 90, seed=7))
    with ThreadPoolExecutor(2) as pool:
        for ops in (OPS, MIXED):
            plan = Compose(ops).stages[0].sample(1, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
            spec = plan.warp_spec(plan.uniform_size(), plan.regions())
            fast = run_cpu_stage(b.__getitem__, spec, _contrast(len(b), dtype, layout), True, pool.map)
            with monkeypatch.context() as m:
                _without_warp_c(m)
                ref = run_cpu_stage(b.__getitem__, spec, _contrast(len(b), dtype, layout), True, pool.map)
            assert fast.dtype == ref.dtype == dtype and fast.shape == ref.shape
            if dtype == torch.uint8:  # float rounding can cross a rounding boundary
                assert float((fast.float() - ref.float()).abs().max()) <= 1
            else:
                tol = {torch.float32: 1e-4, torch.float16: 2 * 2**-9, torch.bfloat16: 2 * 2**-6}[dtype]
                torch.testing.assert_close(fast.float(), ref.float(), atol=tol, rtol=tol)


def test_stage_errors_reach_the_caller():
    b = ImageBatch.from_list(varied_images(12, 30, 60, seed=2))
    plan = Compose(MIXED).stages[0].sample(0, 0, torch.arange(len(b)), b.sizes.to(torch.float64))
    spec = plan.warp_spec(plan.uniform_size(), plan.regions())
    pspec = _spec(torch.float16, "NCHW")

    def bad_load(i: int) -> torch.Tensor:
        if i in (9, 4):
            raise ValueError(f"sample {i}")
        return b[i]

    def bad_pointwise(means):
        raise RuntimeError("no pointwise spec")

    first = next(i for i in longest_first(spec) if i in (4, 9))  # the order the workers take
    with ThreadPoolExecutor(2) as pool:
        for map_fn in (pool.map, map):
            with pytest.raises(ValueError, match=f"sample {first}"):
                run_cpu_stage(bad_load, spec, lambda means: pspec, False, map_fn)
            with pytest.raises(RuntimeError, match="no pointwise spec"):
                run_cpu_stage(b.__getitem__, spec, bad_pointwise, False, map_fn)


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_for_each_runs_every_item_once(threads):
    seen, lock = [], threading.Lock()

    def fn(i: int) -> None:
        with lock:
            seen.append(i)

    items = list(range(50))
    if threads:
        with ThreadPoolExecutor(threads) as pool:
            for_each(fn, items, pool.map)
    else:
        for_each(fn, items, map)
    assert sorted(seen) == items
    for_each(fn, [], map)  # nothing to do
    ran = []
    for_each(fn, [], map, meanwhile=lambda: ran.append(1))
    assert ran == [1]  # meanwhile runs even when there is nothing else to do


def test_for_each_raises_the_lowest_failing_item():
    def fn(i: int) -> None:
        if i in (13, 7, 31):
            raise ValueError(f"item {i}")

    for _ in range(20):
        with ThreadPoolExecutor(3) as pool, pytest.raises(ValueError, match="item 7"):
            for_each(fn, list(range(40)), pool.map)
    with pytest.raises(ValueError, match="item 7"):
        for_each(fn, list(range(40)), map)
    for _ in range(20):  # unsorted: the first failing item in the list's order
        with ThreadPoolExecutor(3) as pool, pytest.raises(ValueError, match="item 31"):
            for_each(fn, [40, 31, 2, 13, 7, 5], pool.map)


def test_longest_first_puts_the_largest_decodes_first():
    """A permutation of the batch; the region reaching lowest in the widest image first, small
    regions near the top last, equal estimates in index order."""
    regions = [(0, 0, 10, 10), (50, 0, 300, 200), (0, 0, 40, 40), (0, 0, 10, 10), (200, 100, 400, 400)]
    sizes = [(100, 100), (300, 200), (400, 400), (100, 100), (400, 500)]
    n = len(regions)
    spec = WarpSpec(torch.eye(3, dtype=torch.float64).repeat(n, 1, 1), torch.tensor(sizes),
                    torch.zeros(n, 2, dtype=torch.int64), torch.tensor(regions), (8, 8))
    assert longest_first(spec) == [4, 1, 2, 0, 3]
