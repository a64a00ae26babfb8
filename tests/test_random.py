"""pixelpipe.data.random: counter-based draws, a pure function of (seed, epoch, index, op, draw)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.data.random import Draws, hash32, normal_keyed, uniform

N = 100_000


def idx(n: int = N, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int64)


def corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.double(), b.double()]))[0, 1])


def test_same_inputs_same_bits():
    a = hash32(3, 1, idx(1000), 2, 5)
    b = hash32(3, 1, idx(1000), 2, 5)
    assert torch.equal(a, b)
    assert torch.equal(uniform(7, 2, idx(1000), 1, 0), uniform(7, 2, idx(1000), 1, 0))
    d1, d2 = Draws(7, 2, idx(1000), 1), Draws(7, 2, idx(1000), 1)
    assert torch.equal(d1.normal(3), d2.normal(3))
    assert torch.equal(d1.integers(4, 0, 10), d2.integers(4, 0, 10))


def test_hash_is_32_bits():
    h = hash32(0, 0, idx(), 0, 0)
    assert h.dtype == torch.int64
    assert int(h.min()) >= 0 and int(h.max()) < 2**32
    assert int(h.max()) > 2**32 - 2**20 and int(h.min()) < 2**20  # the whole range is used


def test_uniform_in_unit_interval():
    u = uniform(0, 0, idx(), 0, 0)
    assert u.dtype == torch.float32 and u.shape == (N,)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.005  # 5.5 standard errors of the mean (0.0009)
    assert abs(float(u.var()) - 1 / 12) < 0.002


def test_uniform_chi_square():
    bins = 100
    u = uniform(123, 4, idx(), 7, 2)
    counts = torch.bincount((u * bins).long(), minlength=bins).double()
    expected = N / bins
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 99 degrees of freedom: mean 99, sd 14; a loose bound far in the tail
    assert chi2 < 200, chi2


def test_uniform_24_bits_distinct():
    u = uniform(0, 0, idx(), 0, 0)
    # 100k draws among 2**24 values: ~300 birthday collisions expected, not thousands
    assert torch.unique(u).numel() > N - 1000


@pytest.mark.parametrize("coord", ["seed", "epoch", "index", "op", "draw"])
def test_neighbouring_coordinates_uncorrelated(coord):
    base = {"seed": 11, "epoch": 3, "op": 2, "draw": 1}
    a = uniform(base["seed"], base["epoch"], idx(), base["op"], base["draw"])
    if coord == "index":
        b = uniform(base["seed"], base["epoch"], idx(start=1), base["op"], base["draw"])
    else:
        base[coord] += 1
        b = uniform(base["seed"], base["epoch"], idx(), base["op"], base["draw"])
    assert (a != b).double().mean() > 0.999, f"changing {coord} leaves draws unchanged"
    # standard error of a correlation over 100k pairs is 0.003
    assert abs(corr(a, b)) < 0.02, coord


def test_swapped_coordinates_differ():
    n = 10_000
    k = idx(n)
    assert (hash32(k, 0, 0, 0, 0) != hash32(0, k, 0, 0, 0))[1:].all()
    assert (hash32(1, 2, k, 3, 4) != hash32(2, 1, k, 3, 4)).all()
    assert (hash32(1, 2, k, 3, 4) != hash32(1, 2, k, 4, 3)).all()
    # keys beyond 32 bits are not truncated
    assert (hash32(k) != hash32(k + 2**32)).all()
    assert (hash32(k) != hash32(k + 2**40)).all()


def test_many_coordinate_tuples_give_distinct_hashes():
    g = torch.Generator().manual_seed(0)
    keys = [torch.randint(0, 1000, (N,), generator=g) for _ in range(5)]
    h = hash32(*keys)
    tuples = torch.stack(keys, 1)
    n_tuples = torch.unique(tuples, dim=0).shape[0]
    # a 32-bit hash of ~100k distinct tuples: about 1 birthday collision expected
    assert torch.unique(h).numel() >= n_tuples - 10


def test_index_does_not_depend_on_other_indices():
    full = uniform(5, 1, idx(1000), 3, 0)
    perm = torch.randperm(1000, generator=torch.Generator().manual_seed(1))
    assert torch.equal(uniform(5, 1, perm, 3, 0), full[perm])
    assert torch.equal(uniform(5, 1, idx(1000)[700:703], 3, 0), full[700:703])
    assert torch.equal(uniform(5, 1, torch.tensor([42]), 3, 0), full[42:43])
    d = Draws(5, 1, torch.tensor([42, 42, 7]), 3)
    u = d.uniform(0)
    assert float(u[0]) == float(u[1]) == float(full[42]) and float(u[2]) == float(full[7])


def test_draws_helpers():
    n = 50_000
    d = Draws(9, 0, idx(n), 4)
    assert d.indices.dtype == torch.int64 and len(d) == n
    u = d.uniform(0, -3.0, 5.0)
    assert float(u.min()) >= -3.0 and float(u.max()) < 5.0
    assert abs(float(u.mean()) - 1.0) < 0.05
    b = d.bernoulli(1, 0.3)
    assert b.dtype == torch.bool and abs(float(b.double().mean()) - 0.3) < 0.01
    assert not bool(d.bernoulli(1, 0.0).any()) and bool(d.bernoulli(1, 1.0).all())
    k = d.integers(2, 3, 10)
    assert int(k.min()) == 3 and int(k.max()) == 9
    counts = torch.bincount(k - 3).double()
    assert float((counts / n - 1 / 7).abs().max()) < 0.01
    z = d.normal(3)
    assert z.dtype == torch.float32 and torch.isfinite(z).all()
    assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1.0) < 0.02
    # about 4.6% of a standard normal lies beyond 2 sigma
    assert abs(float((z.abs() > 2).double().mean()) - 0.0455) < 0.005
    # different draw numbers are independent streams
    assert abs(corr(d.uniform(0), d.uniform(1))) < 0.03


def test_empty_indices():
    assert uniform(0, 0, torch.zeros(0, dtype=torch.int64), 0, 0).shape == (0,)
    assert Draws(0, 0, torch.zeros(0, dtype=torch.int64), 0).normal(0).shape == (0,)


def test_negative_and_large_seeds():
    a = uniform(-1, 0, idx(1000), 0, 0)
    b = uniform(2**63 - 1, 0, idx(1000), 0, 0)
    c = uniform(0, 0, idx(1000), 0, 0)
    for x in (a, b):
        assert float(x.min()) >= 0 and float(x.max()) < 1
        assert (x != c).double().mean() > 0.99


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bits_equal_cpu():
    k = idx()
    cpu = hash32(17, 3, k, 5, 2)
    gpu = hash32(17, 3, k.cuda(), 5, 2)
    assert gpu.is_cuda
    assert torch.equal(gpu.cpu(), cpu)
    assert torch.equal(uniform(17, 3, k.cuda(), 5, 2).cpu(), uniform(17, 3, k, 5, 2))
    d_cpu, d_gpu = Draws(1, 2, k, 3), Draws(1, 2, k.cuda(), 3)
    assert torch.equal(d_gpu.integers(0, 0, 1000).cpu(), d_cpu.integers(0, 0, 1000))


@pytest.mark.parametrize("keys", [
    lambda idx: (0, 0, idx, 3, 5),
    lambda idx: (7, -3, idx, 2**40, 1),
    lambda idx: (idx,),
    lambda idx: (5,),
    lambda idx: (1, torch.tensor(2), 3),
    lambda idx: (0, idx, idx * 3, 4),
    lambda idx: (2**62, idx.view(10, 100), -(2**62)),
])
def test_cpu_fast_hash_equals_the_torch_twin(keys):
    """On the CPU hash32 runs in Python ints and numpy; the torch arithmetic (also what runs
    on the GPU) must give exactly the same bits, for negative and 63-bit keys too."""
    from pixelpipe.data.random import _hash32_torch

    g = torch.Generator().manual_seed(3)
    args = keys(torch.randint(-(2**62), 2**62, (1000,), generator=g))
    fast, twin = hash32(*args), _hash32_torch(args)
    assert fast.dtype == twin.dtype == torch.int64 and fast.shape == twin.shape
    assert torch.equal(fast, twin)


def test_draws_from_a_shared_prefix_equal_the_full_hash():
    """A stage folds (seed, epoch, indices) once per batch and every op's draws continue from
    that state: the numbers are exactly those of hashing all five keys each time."""
    from pixelpipe.data.random import prefix

    idx = torch.tensor([0, 5, -3, 2**40, 77, 123456789])
    for op in (0, 3):
        full = Draws(9, 2, idx, op)
        fast = Draws(9, 2, idx, op, prefix(9, 2, idx))
        assert torch.equal(full.uniform(4, -2.0, 3.0), fast.uniform(4, -2.0, 3.0))
        assert torch.equal(full.uniforms(range(5, 9)), fast.uniforms(range(5, 9)))
        assert torch.equal(full.bernoulli(1, 0.3), fast.bernoulli(1, 0.3))
        assert torch.equal(full.integers(2, -4, 11), fast.integers(2, -4, 11))
        assert torch.equal(full.normal(6), fast.normal(6))
        assert torch.equal(fast.uniform(4), uniform(9, 2, idx, op, 4))


def test_per_sample_epochs_equal_one_epoch_at_a_time():
    """Batches of consecutive epochs are planned together with an epoch per sample: each
    sample gets exactly the bits of its own epoch given as one number."""
    from pixelpipe.data.random import epochs, prefix

    idx = np.array([4, 9, 4, 0, 2**33, 7], dtype=np.int64)
    ep = np.array([3, 3, 4, 4, 4, 11], dtype=np.int64)
    joint = prefix(5, ep, idx)
    alone = np.array([prefix(5, int(e), idx[i : i + 1])[0] for i, e in enumerate(ep)])
    assert np.array_equal(joint, alone)
    assert joint[0] != joint[2]  # the same index in two epochs: different draws
    together = Draws(5, ep, idx, 2, joint)
    for i, e in enumerate(ep):
        one = Draws(5, int(e), idx[i : i + 1], 2)
        assert together.uniforms_np(12)[i].tolist() == one.uniforms_np(12)[0].tolist()
        assert together.uniform(30)[i] == one.uniform(30)[0]
    assert together.epoch.tolist() == ep.tolist() and Draws(5, np.int64(3), idx, 2).epoch == 3
    with pytest.raises(ValueError, match="integers"):
        epochs(np.array([1.0, 2.0]))


def test_numpy_twins_equal_the_tensor_draws():
    """The built-in ops draw through the numpy methods: the same numbers as the tensor API,
    with a shared prefix and without, for draws inside and beyond the first block of 8."""
    from pixelpipe.data.random import prefix

    idx = torch.tensor([3, 0, 2**33 + 1, -7, 41])
    for pre in (None, prefix(4, 1, idx)):
        d = Draws(4, 1, idx, 2, pre)
        for draw in (0, 5, 9, 17):
            assert torch.equal(torch.from_numpy(d.uniform_np(draw, -1.5, 2.0)), Draws(4, 1, idx, 2).uniform(draw, -1.5, 2.0))
            assert torch.equal(torch.from_numpy(d.bernoulli_np(draw, 0.4)), Draws(4, 1, idx, 2).bernoulli(draw, 0.4))
        assert torch.equal(torch.from_numpy(d.uniforms_np(range(3, 14), 2.0, 5.0)), Draws(4, 1, idx, 2).uniforms(range(3, 14), 2.0, 5.0))
        # and each column of uniforms is the single draw
        cols = d.uniforms_np(12)
        for k in range(12):
            assert np.array_equal(cols[:, k], uniform(4, 1, idx, 2, k).numpy())


def test_numpy_mixer_wraps_like_the_masked_int64_form():
    """uint32 numpy products wrap modulo 2**32; the int64 form masks split products: the same
    bits, for values across the whole 32-bit range."""
    from pixelpipe.data.random import _mix, _mix_u32

    x = np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 0x9E3779B9, 123456789], dtype=np.uint32)
    assert _mix_u32(x.copy()).tolist() == [_mix(int(v)) for v in x]


def test_op_blocks_by_prefix_hash_each_op_with_its_own_prefix():
    """Ops of one stage whose prefixes differ (per-frame ops of clips: another array) get the
    blocks op_blocks gives with their own prefix, in the ops' order."""
    from pixelpipe.data.random import op_blocks, op_blocks_by_prefix, prefix

    idx = torch.tensor([3, 1, 4, 1, 5])
    shared, other = prefix(2, 0, idx), prefix(2, 1, idx)
    ops, widths = [0, 1, 4, 6], [2, 5, 0, 1]
    got = op_blocks_by_prefix([shared, other, shared, other], ops, widths)
    for k, pre in enumerate([shared, other, shared, other]):
        want = op_blocks(pre, [ops[k]], [widths[k]])[0]
        assert got[k].shape == (5, widths[k]) and np.array_equal(got[k], want), k
    assert not np.array_equal(got[1], op_blocks(shared, [1], [5])[0])  # its own prefix, not the first
    assert op_blocks_by_prefix([], [], []) == []


def test_op_blocks_equal_each_op_and_draw_hashed_alone():
    """A stage hashes the leading draws of all its ops in one evaluation, as many per op as it
    states: every entry must be the full hash of its five keys, and Draws handed its op's
    block must give the numbers it gives without it, inside the block and beyond it."""
    from pixelpipe.data.random import op_blocks, prefix

    idx = torch.tensor([0, 9, -4, 2**41 + 3, 500])
    ops = [0, 2, 7, 2**33]
    widths = [6, 1, 0, 3]
    blocks = op_blocks(prefix(5, 3, idx), ops, widths)
    assert [b.shape for b in blocks] == [(5, w) for w in widths] and all(b.dtype == np.uint32 for b in blocks)
    assert op_blocks(prefix(5, 3, idx), [], []) == [] or all(b.size == 0 for b in op_blocks(prefix(5, 3, idx), [], []))
    for k, op in enumerate(ops):
        for d in range(widths[k]):
            assert np.array_equal(blocks[k][:, d].astype(np.int64), hash32(5, 3, idx, op, d).numpy()), (op, d)
        given = Draws(5, 3, idx, op, prefix(5, 3, idx), blocks[k])
        alone = Draws(5, 3, idx, op)
        for draw in (0, 5, 6, 11):
            assert np.array_equal(given.uniform_np(draw), alone.uniform_np(draw)), (op, draw)
        assert np.array_equal(given.uniforms_np(range(3, 9)), alone.uniforms_np(range(3, 9)))


def test_per_pixel_field_equals_its_numpy_twin():
    """Draws.field (int32 torch arithmetic, on any device) gives exactly field_np's uint32
    reference, and a sample's field does not depend on its batch."""
    idx = torch.tensor([5, 0, 2**33 + 1, -7])
    d = Draws(11, 2, idx, 7)
    f = d.field(3, (2, 5, 6))
    assert f.shape == (4, 2, 5, 6) and f.dtype == torch.float32
    assert torch.equal(f, torch.from_numpy(d.field_np(3, (2, 5, 6))))
    assert float(f.min()) >= 0.0 and float(f.max()) < 1.0
    assert torch.equal(Draws(11, 2, idx[2:3], 7).field(3, (2, 5, 6))[0], f[2])
    assert not torch.equal(d.field(4, (2, 5, 6)), f)


def test_field_elements_equal_field_at():
    """Draws.field_elements_np (numpy, every sample at the same element numbers) gives exactly
    field_at's numbers, and field()'s where the element numbers are a field's own."""
    idx = torch.tensor([5, 0, 2**33 + 1, -7])
    d = Draws(11, 2, idx, 7)
    elements = np.array([0, 1, 59, 4096 * 3 + 7, 2**31 - 1])
    got = d.field_elements_np(3, elements)
    at = d.field_at(3, np.repeat(np.arange(4), 5), np.tile(elements, 4)).numpy().reshape(4, 5)
    assert got.dtype == np.float32 and np.array_equal(got, at)
    assert np.array_equal(d.field_elements_np(3, np.arange(60)), d.field_np(3, (2, 5, 6)).reshape(4, 60))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_normal_keyed_is_normal_field_at(dtype):
    """normal_keyed (a device's form: the states and element positions as tensors, the key
    mixed once for both uniform fields) gives normal_field_at's bits, for elements anywhere in
    a field (up to the counter's top bit) and rows in any order, repeated or not."""
    idx = np.array([3, 70, 12, 5, 1 << 33])
    d = Draws(7, np.array([0, 1, 2, 0, 5]), idx, 4)
    rng = np.random.default_rng(1)
    samples = rng.integers(0, 5, 3000)
    elements = np.concatenate([rng.integers(0, 3 * 224 * 224, 2996), [0, 1, (1 << 31) - 1, 12345]])
    for draw in (0, 23):
        state = torch.from_numpy(d.hashes_np(draw).view(np.int32)[samples])
        other = torch.from_numpy(d.hashes_np(draw + 1000003).view(np.int32)[samples])
        got = normal_keyed(state, other, torch.from_numpy(elements).to(dtype))
        assert got.dtype == torch.float32 and torch.equal(got, d.normal_field_at(draw, samples, elements))


def test_field_units_in_c_are_numpys():
    """data.field_units (native/noise.c) against the numpy form of Draws.normal_field_at_np's
    uniforms: the same bits for runs of one sample and for rows in any order, elements past
    2**32 (the counter wraps), and the noise made with native code on and off is the same."""
    from pixelpipe import native
    from pixelpipe.data.field_units import field_units
    from pixelpipe.data.random import _mix_u32

    draws = Draws(5, 3, np.arange(9) * 11, 7)
    s1, s2 = draws.hashes_np(40), draws.hashes_np(40 + 1000003)
    rng = np.random.default_rng(2)
    elements = rng.integers(0, 2**34, 5000)
    for rows in (np.sort(rng.integers(0, 9, 5000)), rng.integers(0, 9, 5000)):
        made = field_units(s1, s2, rows, elements)
        if made is None:
            pytest.skip("native/noise.c was not built")
        key = elements.astype(np.uint32) + np.uint32(0x9E3779B9)
        _mix_u32(key)
        for s, got in zip((s1, s2), made):
            h = s[rows] ^ key
            _mix_u32(h)
            want = (h >> 8).astype(np.float32) * np.float32(1.0 / (1 << 24))
            np.testing.assert_array_equal(got, want)
        fast = draws.normal_field_at_np(40, rows, elements)
        with native.disabled():
            slow = Draws(5, 3, np.arange(9) * 11, 7).normal_field_at_np(40, rows, elements)
        assert torch.equal(fast, slow)
    with pytest.raises(ValueError, match="rows within"):
        field_units(s1, s2, np.array([9]), np.array([0]))
    assert field_units(s1, s2, np.zeros(0, np.int64), np.zeros(0, np.int64))[0].shape == (0,)


def test_rectangle_noise_is_the_per_value_form():
    """Draws.normal_rectangles_np (native/noise.c's pp_rect_units from five numbers a rectangle)
    against normal_field_at_np given each value's sample and element: the same bits, for
    rectangles of several samples and sizes (a 1x1, a whole image, one touching the far
    corner), one and three channels; rectangles outside the fields are refused."""
    from pixelpipe.data.field_units import rectangle_units

    draws = Draws(3, 2, np.arange(6) * 7, 5)
    for c, h, w in ((3, 40, 57), (1, 23, 9)):
        rects = np.array([[0, 3, 4, min(10, h - 3), min(20, w - 4)], [2, 0, 0, 1, 1], [5, 0, 0, h, w], [1, h - 5, w - 7, 5, 7],
                          [2, 11, 2, 3, 4]])
        got = draws.normal_rectangles_np(17, rects, (c, h, w))
        if got is None:
            pytest.skip("native/noise.c was not built")
        rows, elements = [], []
        for s, t, lf, rh, rw in rects:
            e = (np.arange(c).reshape(c, 1, 1) * h * w + ((t + np.arange(rh)) * w).reshape(1, -1, 1)
                 + (lf + np.arange(rw)).reshape(1, 1, -1)).reshape(-1)
            elements.append(e)
            rows.append(np.full(len(e), s))
        want = draws.normal_field_at_np(17, np.concatenate(rows), np.concatenate(elements))
        assert got.shape == want.shape and torch.equal(got, want)
    s1, s2 = draws.hashes_np(17), draws.hashes_np(17 + 1000003)
    for bad in ([6, 0, 0, 1, 1], [0, 20, 0, 4, 1], [0, 0, 8, 1, 2], [0, -1, 0, 1, 1]):
        with pytest.raises(ValueError, match="outside"):
            rectangle_units(s1, s2, np.array([bad]), (1, 23, 9))
    assert rectangle_units(s1, s2, np.zeros((0, 5), np.int64), (3, 4, 4))[0].shape == (0,)
