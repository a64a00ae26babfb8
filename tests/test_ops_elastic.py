"""ElasticTransform: the op contract, the warp through a displacement field against torch's
grid_sample on a field built in torchvision's convention (and torchvision itself when it is
installed), the field's statistics against torchvision's recipe, and the targets following
the pixels.

Expected values come from grid_sample, torchvision, formulas written out here or a second run
that must agree by the op contract, never from the code under test alone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import check_op, run

import pixelpipe as pp
from pixelpipe import Compose, ImageBatch
from pixelpipe.kernels.cpu.warp import GENERAL, general_library, general_sample, sample_rows
from pixelpipe.kernels.deform import Deformation, displaced, field_at, move_points
from pixelpipe.kernels.reference.warp import warp_reference
from pixelpipe.kernels.spec import WarpSpec

U8 = torch.uint8
# |ours - grid_sample| on a field given in torchvision's convention, grey levels 0..255 (float64
# coordinates against grid_sample's float32 grid); measured 2.1e-4 here and against
# torchvision 0.28's F.elastic
GRID_SAMPLE_TOL = 0.01


def _plan(ops, sizes, seed=0, epoch=0, indices=None):
    sizes = torch.as_tensor(sizes, dtype=torch.float64).view(-1, 2)
    idx = torch.arange(len(sizes)) if indices is None else torch.as_tensor(indices)
    return Compose(ops).stages[0].sample(seed, epoch, idx, sizes)


def _smooth_image(h: int, w: int, seed: int = 0) -> torch.Tensor:
    """uint8 [h, w, 3]: smooth colour ramps plus a little texture (bilinear's linear parts)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, h).view(h, 1, 1)
    x = torch.linspace(0, 1, w).view(1, w, 1)
    x, y = x.expand(h, w, 1), y.expand(h, w, 1)
    base = torch.cat([x * 200 + 20, y * 180 + 30, (x + y) * 100 + 10], 2)
    return (base + torch.rand(h, w, 3, generator=g) * 40).clamp(0, 255).to(U8)


def _coarse_field(h: int, w: int, rows: int, cols: int, amp: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A field [1, 2, rows, cols] of displacements up to amp pixels with its grid (nodes on the
    image's edges)."""
    rng = np.random.default_rng(seed)
    field = (rng.uniform(-amp, amp, (1, 2, rows, cols))).astype(np.float32)
    grid = np.array([[h / (rows - 1), w / (cols - 1), rows, cols]], dtype=np.float64)
    return field, grid


def _torchvision_displacement(field: np.ndarray, grid: np.ndarray, h: int, w: int) -> torch.Tensor:
    """float32 [1, h, w, 2]: the field at every pixel centre in torchvision's convention for
    F.elastic: grid_sample units (align_corners=False), i.e. pixels times 2 / size, x first."""
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5, torch.arange(w, dtype=torch.float64) + 0.5,
                          indexing="ij")
    dx, dy = field_at(torch.from_numpy(field), torch.from_numpy(grid), x[None], y[None])
    return torch.stack([dx[0] * 2 / w, dy[0] * 2 / h], -1)[None].to(torch.float32)


def _identity_grid(h: int, w: int) -> torch.Tensor:
    """torchvision's _create_identity_grid: pixel centres in grid_sample units, [1, h, w, 2]."""
    xs = torch.linspace((-w + 1) / w, (w - 1) / w, w)
    ys = torch.linspace((-h + 1) / h, (h - 1) / h, h)
    return torch.stack([xs.view(1, w).expand(h, w), ys.view(h, 1).expand(h, w)], -1)[None]


def _ours(img: torch.Tensor, field: np.ndarray, grid: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(the reference warp through the field, float32 [H, W, 3]; the interior mask: source
    points at least half a pixel inside, where no tap reaches beyond the image)."""
    h, w = img.shape[:2]
    batch = ImageBatch.from_list([img])
    eye = np.eye(3)[None]
    deform = Deformation(eye, eye, field, grid)
    spec = WarpSpec(eye, np.array([[h, w]]), np.zeros((1, 2)), np.array([[0, 0, h, w]]), (h, w),
                    "bilinear", "constant", (0.0, 0.0, 0.0), False, deform)
    out = warp_reference(batch.data, batch.table, spec)[0]
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5, torch.arange(w, dtype=torch.float64) + 0.5,
                          indexing="ij")
    u, v = displaced(deform, x[None], y[None])
    inside = (u[0] >= 0.5) & (u[0] <= w - 0.5) & (v[0] >= 0.5) & (v[0] <= h - 0.5)
    return out, inside


class TestElasticTransform:
    def test_contract(self):
        check_op(pp.ElasticTransform(alpha=60.0, sigma=4.0, p=0.7), tail=[pp.Resize((16, 16))],
                 p_zero=pp.ElasticTransform(alpha=60.0, sigma=4.0, p=0.0))

    def test_contract_control_points(self):
        check_op(pp.ElasticTransform(control_points=(4, 5), max_displacement=3.0), head=[pp.Resize((20, 20))])

    @pytest.mark.parametrize("h,w,rows,cols", [(37, 53, 5, 6), (64, 48, 9, 3), (30, 30, 2, 2)])
    def test_matches_grid_sample_in_torchvision_convention(self, h, w, rows, cols):
        """The warp through a field equals grid_sample on torchvision's identity grid plus the
        same field sampled at the pixel centres (what F.elastic computes), wherever no tap
        leaves the image (there the constant border differs: Pillow's edge rule)."""
        img = _smooth_image(h, w, seed=h)
        field, grid = _coarse_field(h, w, rows, cols, 3.0, seed=w)
        ours, inside = _ours(img, field, grid)
        disp = _torchvision_displacement(field, grid, h, w)
        x = img.permute(2, 0, 1)[None].to(torch.float32)
        theirs = F.grid_sample(x, _identity_grid(h, w) + disp, mode="bilinear", padding_mode="zeros",
                               align_corners=False)[0].permute(1, 2, 0)
        assert inside.float().mean() > 0.7
        diff = (ours - theirs).abs()[inside]
        assert float(diff.max()) <= GRID_SAMPLE_TOL, float(diff.max())

    def test_matches_torchvision_elastic(self):
        """torchvision.transforms.v2.functional.elastic given the same displacement (skipped
        without torchvision)."""
        tv = pytest.importorskip("torchvision.transforms.v2.functional")
        h, w = 45, 61
        img = _smooth_image(h, w, seed=3)
        field, grid = _coarse_field(h, w, 6, 7, 4.0, seed=5)
        ours, inside = _ours(img, field, grid)
        x = img.permute(2, 0, 1).to(torch.float32)
        theirs = tv.elastic(x, _torchvision_displacement(field, grid, h, w)).permute(1, 2, 0)
        diff = (ours - theirs).abs()[inside]
        assert float(diff.max()) <= GRID_SAMPLE_TOL, float(diff.max())

    def test_field_statistics_match_torchvision_recipe(self):
        """Over many samples, the displacement's standard deviation is torchvision's: alpha / 2
        times uniform (-1, 1) noise blurred by its kernel at sigma (emulated here in plain
        torch on full-size noise), within 6%; its correlation at a lag of sigma pixels is that
        of Gaussian-blurred noise, exp(-1/4), within 0.06."""
        alpha, sigma, size = 40.0, 4.0, 96
        plan = _plan([pp.ElasticTransform(alpha=alpha, sigma=sigma)], [(size, size)] * 200)
        f = plan.elastic.field[:, :, 2:-2, 2:-2].astype(np.float64)  # interior nodes: sigma pixels apart
        ours = f.std()
        k = int(8 * sigma + 1) | 1
        t = torch.arange(k, dtype=torch.float64) - (k - 1) / 2
        g = torch.exp(-0.5 * (t / sigma) ** 2)
        g = g / g.sum()
        noise = torch.rand(40, 1, size + k, size + k, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        blurred = F.conv2d(F.conv2d(noise * 2 - 1, g.view(1, 1, 1, -1)), g.view(1, 1, -1, 1))
        theirs = float(blurred.std()) * alpha / 2
        assert abs(ours / theirs - 1) < 0.06, (ours, theirs)
        lag = np.mean(f[:, :, :, 1:] * f[:, :, :, :-1]) / f.var()
        assert abs(lag - math.exp(-0.25)) < 0.06, lag

    @pytest.mark.parametrize("alpha,sigma,size", [(50.0, 5.0, 96), (100.0, 8.0, 160)])
    def test_field_statistics_match_torchvision(self, alpha, sigma, size):
        """torchvision's own ElasticTransform draws (skipped without torchvision): the standard
        deviation of the displacement in pixels within 6% of ours, the correlation at a lag of
        sigma pixels within 0.05 (measured with torchvision 0.28: 2.5% and 0.006)."""
        v2 = pytest.importorskip("torchvision.transforms.v2")
        t = v2.ElasticTransform(alpha=alpha, sigma=sigma)
        params = getattr(t, "make_params", None) or t._get_params
        torch.manual_seed(0)
        disp = torch.cat([params([torch.zeros(3, size, size)])["displacement"] for _ in range(40)])
        px = (disp[..., 0] * size / 2)[:, 10:-10, 10:-10].double()  # x in pixels (a square image)
        lag = int(sigma)
        theirs_corr = float((px[:, :, lag:] * px[:, :, :-lag]).mean() / px.var())
        f = _plan([pp.ElasticTransform(alpha=alpha, sigma=sigma)], [(size, size)] * 200).elastic.field
        f = f[:, :, 2:-2, 2:-2].astype(np.float64)
        ours_corr = np.mean(f[:, :, :, 1:] * f[:, :, :, :-1]) / f.var()
        assert abs(f.std() / float(px.std()) - 1) < 0.06, (f.std(), float(px.std()))
        assert abs(ours_corr - theirs_corr) < 0.05, (ours_corr, theirs_corr)

    def test_control_points_bounded_and_on_the_edges(self):
        plan = _plan([pp.ElasticTransform(control_points=(3, 4), max_displacement=(2.0, 5.0))], [(30, 40)] * 50)
        f = plan.elastic.field
        assert f.shape[1:] == (2, 3, 4)
        assert np.abs(f[:, 0]).max() <= 2.0 and np.abs(f[:, 1]).max() <= 5.0
        assert np.abs(f[:, 1]).max() > 4.0  # the range is used
        assert np.allclose(plan.elastic.grid, [[15.0, 40.0 / 3, 3, 4]])

    def test_p_zero_field_is_zero_and_matrices_unchanged(self):
        ops = [pp.RandomRotate(20), pp.ElasticTransform(p=0.0), pp.Resize((12, 14))]
        plan = _plan(ops, [(20, 30)] * 6)
        plain = _plan([pp.RandomRotate(20), pp.Resize((12, 14))], [(20, 30)] * 6)
        assert not plan.elastic.field.any()
        assert np.array_equal(plan.matrix, plain.matrix)
        assert np.array_equal(plan.regions(), plain.regions())

    def test_no_field_without_the_op(self):
        plan = _plan([pp.RandomRotate(20), pp.Resize((12, 14))], [(20, 30)] * 3)
        assert plan.elastic is None
        assert plan.warp_spec((12, 14), plan.regions()).deform is None

    def test_two_fields_two_stages(self):
        t = Compose([pp.ElasticTransform(), pp.RandomFlip(), pp.ElasticTransform(), pp.Resize((8, 8))])
        assert len(t.stages) == 2
        out = t([torch.zeros(10, 12, 3, dtype=U8)])
        assert out.shape == (1, 3, 8, 8)

    def test_regions_hold_every_tap(self):
        """Each sample's region contains every pixel its bilinear taps read (the source points
        through the field, one pixel either side), clipped to the image."""
        ops = [pp.RandomResizedCrop(24, scale=(0.2, 0.5)), pp.ElasticTransform(alpha=300.0, sigma=3.0),
               pp.RandomRotate(15)]
        sizes = [(60, 80), (90, 50), (40, 40), (120, 100)] * 3
        plan = _plan(ops, sizes, seed=4)
        regions = plan.regions()
        d = plan.deformation()
        y, x = torch.meshgrid(torch.arange(24, dtype=torch.float64) + 0.5, torch.arange(24, dtype=torch.float64) + 0.5,
                              indexing="ij")
        u, v = displaced(d, x.expand(len(sizes), 24, 24), y.expand(len(sizes), 24, 24))
        assert d.active().all()
        for i, (h, w) in enumerate(sizes):
            lo_x = max(int(math.floor(float(u[i].min()) - 0.5)), 0)
            hi_x = min(int(math.floor(float(u[i].max()) + 0.5)) + 1, w)
            lo_y = max(int(math.floor(float(v[i].min()) - 0.5)), 0)
            hi_y = min(int(math.floor(float(v[i].max()) + 0.5)) + 1, h)
            y0, x0, y1, x1 = regions[i].tolist()
            assert y0 <= lo_y and x0 <= lo_x and y1 >= hi_y and x1 >= hi_x, (i, regions[i], (lo_y, lo_x, hi_y, hi_x))

    def test_encoded_images_match_decoded(self):
        """Encoded images (decoded as regions, at a DCT scale where allowed) give what the same
        images given decoded give, within JPEG's own decoder differences."""
        PIL = pytest.importorskip("PIL.Image")
        import io

        imgs, blobs = [], []
        for i in range(4):
            a = _smooth_image(120 + 8 * i, 160 - 8 * i, seed=i).numpy()
            buf = io.BytesIO()
            PIL.fromarray(a).save(buf, format="PNG")
            blobs.append(buf.getvalue())
            imgs.append(torch.from_numpy(a))
        ops = [pp.RandomResizedCrop(32, scale=(0.3, 0.6)), pp.ElasticTransform(alpha=200.0, sigma=4.0)]
        a = run(ops, imgs, dtype=U8)
        b = Compose(ops, dtype=U8)(blobs)
        assert torch.equal(a, b)

    def test_keypoints_boxes_masks_follow_the_pixels(self):
        """A bright square with a keypoint at its centre, a box around it and a mask of it: after
        the warp the keypoint lies at the centroid of the bright pixels (within a pixel: nearest
        picks whole pixels), the box
        encloses them (within a pixel) and the mask is where they are."""
        h, w = 64, 72
        img = torch.zeros(h, w, 3, dtype=U8)
        mask = torch.zeros(h, w, dtype=U8)
        img[28:36, 30:38] = 255
        mask[28:36, 30:38] = 1
        ops = [pp.ElasticTransform(control_points=5, max_displacement=5.0, interpolation="nearest"),
               pp.RandomRotate(10), pp.Resize((48, 54), interpolation="nearest")]
        for index in range(6):
            out = Compose(ops, dtype=U8)([img], indices=[index], keypoints=[[[34.0, 32.0]]],
                                         boxes=[[[30.0, 28.0, 38.0, 36.0]]], masks=[mask])
            bright = out["image"][0, 0] > 127
            assert torch.equal(bright, out["masks"][0].bool()), index  # the same field, the same picks
            ys, xs = torch.nonzero(bright, as_tuple=True)
            cx, cy = float(xs.double().mean()) + 0.5, float(ys.double().mean()) + 0.5
            kx, ky = out["keypoints"][0][0, :2].tolist()
            assert abs(kx - cx) < 1.0 and abs(ky - cy) < 1.0, (index, (kx, ky), (cx, cy))
            x0, y0, x1, y1 = out["boxes"][0][0].tolist()
            assert x0 <= float(xs.min()) + 1 and y0 <= float(ys.min()) + 1
            assert x1 >= float(xs.max()) and y1 >= float(ys.max())
            assert x1 - x0 <= float(xs.max() - xs.min()) + 3 and y1 - y0 <= float(ys.max() - ys.min()) + 3

    def test_points_invert_the_field(self):
        """move_points (fixed-point steps) is the inverse of the warp's map: the warp takes the
        moved points back to where they were, within 1e-4 px, for fields reaching 2.7 px (slope
        bound 0.6)."""
        plan = _plan([pp.RandomAffine(20, scale=(0.8, 1.2)), pp.ElasticTransform(alpha=60.0, sigma=6.0),
                      pp.Resize((40, 50))], [(60, 70)] * 8, seed=2)
        assert plan.elastic.reach().max() > 2.5 and plan.elastic.slope().max() < 0.7
        rng = np.random.default_rng(0)
        pts = rng.uniform([5, 5], [65, 55], (80, 2))
        sample = np.repeat(np.arange(8), 10)
        after = plan.matrix @ np.linalg.inv(plan.elastic.before)
        moved = move_points(plan.elastic.before, after, plan.elastic.field, plan.elastic.grid, pts, sample)
        d = plan.deformation()
        u, v = displaced(d, torch.from_numpy(moved[:, 0]).view(8, 10), torch.from_numpy(moved[:, 1]).view(8, 10))
        back = torch.stack([u.reshape(-1), v.reshape(-1)], 1).numpy()
        assert np.abs(back - pts).max() < 1e-4

    @pytest.mark.parametrize("kw,match", [
        (dict(sigma=0.0), "sigma"), (dict(alpha=-1.0), "alpha"), (dict(p=1.5), "p"),
        (dict(control_points=1, max_displacement=2.0), "control_points"),
        (dict(control_points=4), "max_displacement"), (dict(max_displacement=3.0), "control_points"),
        (dict(border="edge"), "border"), (dict(alpha=(1.0, 2.0, 3.0)), "alpha"),
    ])
    def test_bad_arguments(self, kw, match):
        with pytest.raises(ValueError, match=match):
            pp.ElasticTransform(**kw)

    def test_refused_inside_a_choice(self):
        with pytest.raises(ValueError, match="ElasticTransform"):
            pp.OneOf([pp.ElasticTransform(), pp.RandomRotate(10)])

    def test_dropped_in_eval(self):
        t = Compose([pp.ElasticTransform(), pp.Resize((8, 8))])
        assert [type(op).__name__ for op in t.eval().ops] == ["Resize"]


@pytest.mark.skipif(general_library() is None, reason="warp.c was not built")
@pytest.mark.parametrize("interp,border", [("bilinear", "constant"), ("bicubic", "reflect"), ("nearest", "wrap")])
def test_c_warp_through_the_field_matches_the_reference(interp, border):
    """warp.c through the field (pp_warp_deformed) computes the reference's numbers after a
    perspective and a shrink: within test_warp_cpu's bounds for the general warp (its vector
    blocks round the weights to float32; 0.01 grey levels at most, 1e-4 on average; measured
    9e-5 and 1.3e-5 over 320 random cases); its exact path (no AVX2) gives the reference's bits."""
    g = torch.Generator().manual_seed(1)
    imgs = [torch.randint(0, 255, (h, w, 3), generator=g, dtype=U8) for h, w in [(80, 90), (120, 70), (60, 60), (200, 150)]]
    ops = [pp.RandomPerspective(0.4, p=1.0, interpolation=interp, border=border),
           pp.ElasticTransform(alpha=150.0, sigma=4.0), pp.Resize((40, 36))]
    batch = ImageBatch.from_list(imgs)
    plan = _plan(ops, batch.sizes.double(), seed=1)
    spec = plan.warp_spec(plan.uniform_size(), plan.regions())
    rows = sample_rows(spec, torch.full((4,), GENERAL))
    ref = warp_reference(batch.data, batch.table, spec)
    for i in range(4):
        diff = (general_sample(imgs[i], spec, rows, i) - ref[i]).abs()
        assert float(diff.max()) <= 0.01 and float(diff.mean()) <= 1e-4, (i, float(diff.max()), float(diff.mean()))


def test_planned_together_equals_planned_alone():
    """Batches planned together and split (Engine.prepare_split, a Pipeline's cached epochs)
    give what each batch gives alone: the field is sliced with the plan."""
    g = torch.Generator().manual_seed(2)
    imgs = [torch.randint(0, 255, (40, 48, 3), generator=g, dtype=U8) for _ in range(6)]
    t = Compose([pp.ElasticTransform(alpha=120.0, sigma=4.0, p=0.7), pp.RandomRotate(10)], dtype=U8)
    with pp.Engine(num_threads=1) as engine:
        parts = engine.prepare_split(t.program, ImageBatch.from_list(imgs), 3, 1, np.arange(6) + 10, 2)
        split = torch.cat([engine.finish(p)["image"] for p in parts])
    alone = torch.cat([t(imgs[k : k + 3], seed=3, epoch=1, indices=np.arange(k, k + 3) + 10) for k in (0, 3)])
    assert torch.equal(split, alone)


class _Seer(pp.GeometryOp):
    """A geometric op that draws from the boxes (as RandomIoUCrop does): it keeps what it saw."""

    needs_targets = True

    def sample(self, draws, sizes, targets=None):
        self.seen = targets
        return {}

    def transform(self, params, sizes):
        return np.tile(np.eye(3), (len(sizes), 1, 1)), sizes


def test_box_dependent_op_sees_the_boxes_moved_through_the_field():
    """An op drawing from the boxes after the field in its stage is handed the boxes moved
    through it (plan.deform's way), not through the matrices alone."""
    from pixelpipe.data.targets import Targets

    seer = _Seer()
    t = Compose([pp.ElasticTransform(control_points=3, max_displacement=6.0), pp.RandomRotate(5), seer])
    targets = Targets.from_args(4, boxes=[[[20.0, 20.0, 40.0, 40.0]]] * 4)
    plan = t.stages[0].sample(0, 0, np.arange(4), np.full((4, 2), 64.0), targets)
    expect = plan.elastic.move(targets, plan.matrix, plan.out_sizes).boxes.data
    plain = targets.moved(plan.matrix, plan.out_sizes).boxes.data
    assert np.allclose(seer.seen.boxes.data, expect)
    assert np.abs(expect - plain).max() > 0.5
