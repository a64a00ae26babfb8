"""pixelpipe.loader.cache.DeviceCache and Pipeline(cache=...): decoded images kept for later epochs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from corpus import images

import pixelpipe as pp
from pixelpipe.decode import decode_region
from pixelpipe.loader.cache import CacheFullError, DeviceCache
from pixelpipe.readers import Memory

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pictures(n: int = 5) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(30, 40, 3), (17, 9, 1), (64, 20, 3), (8, 8, 3), (25, 31, 1)]
    return [torch.randint(0, 256, shapes[i % 5], generator=g, dtype=torch.uint8) for i in range(n)]


@pytest.mark.parametrize("device", DEVICES)
def test_batches_are_the_stored_images_in_the_order_asked(device):
    cache = DeviceCache(device)
    imgs = pictures()
    for i, img in enumerate(imgs):
        cache.put(100 + i, img)
    assert len(cache) == 5 and 102 in cache and 7 not in cache
    order = [104, 100, 102, 102, 103]  # any order, repeats included
    batch = cache.batch(order)
    assert batch.data.data_ptr() == cache.buffer.data_ptr()  # a view of the cache: no copy
    for got, i in zip(batch.tolist(), order):
        assert torch.equal(got.cpu(), imgs[i - 100])


def test_a_batch_of_indices_beyond_the_array_map_and_missing_ones():
    cache = DeviceCache("cpu")
    imgs = pictures(3)
    far = (1 << 26) + 5  # beyond the array map: only in the dict
    for i, img in zip((3, far, 0), imgs):
        cache.put(i, img)
    batch = cache.batch(np.array([far, 0, 3, far]))
    assert [tuple(x.shape) for x in batch.tolist()] == [tuple(imgs[k].shape) for k in (1, 2, 0, 1)]
    assert all(torch.equal(x, imgs[k]) for x, k in zip(batch.tolist(), (1, 2, 0, 1)))
    assert len(cache.batch([])) == 0
    with pytest.raises(KeyError):
        cache.batch([0, 7])  # 7 is not cached


def test_the_table_grows_past_its_first_block():
    cache = DeviceCache("cpu", budget=1 << 20)
    imgs = [torch.full((2, 3, 1), i % 251, dtype=torch.uint8) for i in range(300)]
    for i, img in enumerate(imgs):
        cache.put(i, img)
    batch = cache.batch(list(range(299, -1, -7)))
    assert [int(x[0, 0, 0]) for x in batch.tolist()] == [i % 251 for i in range(299, -1, -7)]


def test_a_full_budget_raises_naming_the_numbers():
    cache = DeviceCache("cpu", budget=5000)
    cache.put(0, torch.zeros(40, 40, 3, dtype=torch.uint8))  # 4800 bytes
    with pytest.raises(CacheFullError, match=r"1 images use 4\.7 KiB of its 4\.9 KiB budget \(cache_budget\) "
                                             r"and sample 7 needs 0\.3 KiB more"):
        cache.put(7, torch.zeros(10, 10, 3, dtype=torch.uint8))
    assert 7 not in cache and len(cache) == 1  # nothing half-stored


@pytest.mark.parametrize("kwargs, match", [({"budget": 0}, "budget"), ({"max_side": 4}, "cache_max_side")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DeviceCache("cpu", **kwargs)


def test_max_side_shrinks_like_an_antialiased_resize():
    cache = DeviceCache("cpu", max_side=32)
    img = torch.from_numpy(np.asarray(decode_region(images(1)[0])[0])).contiguous()
    cache.put(0, img)
    got = cache.batch([0])[0]
    h, w, _ = img.shape
    s = 32 / max(h, w)
    assert max(got.shape[:2]) == 32 and got.shape[:2] == (round(h * s), round(w * s))
    want = F.interpolate(img.permute(2, 0, 1)[None].float(), size=got.shape[:2], mode="bilinear", antialias=True)
    diff = (got.permute(2, 0, 1).float() - want[0]).abs()
    assert float(diff.max()) <= 1.0 + 1e-4  # the same resize, rounded to uint8 (ties either way)


def test_clear_forgets_everything():
    cache = DeviceCache("cpu")
    cache.put(3, pictures(1)[0])
    cache.clear()
    assert len(cache) == 0 and 3 not in cache and cache.buffer is None
    cache.put(4, pictures(1)[0])  # usable again
    assert torch.equal(cache.batch([4])[0], pictures(1)[0])


def test_pipeline_cache_arguments_are_checked():
    with pytest.raises(ValueError, match="cache must be"):
        pp.Pipeline(Memory(images(2)), [pp.Resize((8, 8))], 2, cache="disk")
    with pytest.raises(ValueError, match="needs device='cuda'"):
        pp.Pipeline(Memory(images(2)), [pp.Resize((8, 8))], 2, cache="gpu")
    for kw in ({"cache_budget": 1 << 20}, {"cache_max_side": 64}):  # silently ignored before
        with pytest.raises(ValueError, match="need a cache"):
            pp.Pipeline(Memory(images(2)), [pp.Resize((8, 8))], 2, **kw)


def test_a_full_pipeline_cache_estimates_what_the_dataset_needs():
    """12 images of 40 x 40 x 3 (4800 bytes each) in 20,000 bytes: the error comes at the 5th
    and estimates the 12 (6 per rank of 2) at their mean size."""
    pictures = [(np.full((40, 40, 3), i, np.uint8), i) for i in range(12)]
    for world, expect in ((1, r"the 12 samples this cache would hold need about 56\.2 KiB"),
                          (2, r"the 6 samples this cache would hold need about 28\.1 KiB")):
        with pp.Pipeline(Memory(pictures), [pp.Resize((8, 8))], 2, num_threads=1, cache="device",
                         cache_budget=20_000, shard=(0, world)) as pipe:
            with pytest.raises(CacheFullError, match=r"4 images use 18\.8 KiB .* " + expect):
                for _ in range(3):
                    list(pipe)


def _epochs(pipe, n):
    out = []
    for _ in range(n):
        out.append({int(i): img for b in pipe for i, img, ok in zip(b["index"], b["image"], b["valid"]) if ok})
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_cached_epochs_equal_compose_on_the_whole_decoded_images(device):
    """Epochs 0 to 2 of a cached pipeline augment the whole decoded images: each sample's
    output equals Compose on that image with the pipeline's seed, epoch and index. Epoch 2's
    batches were planned with epoch 1's three (pixelpipe.loader.cached plans up to 8 at once)."""
    blobs = images(9)
    ops = [pp.RandomResizedCrop(24), pp.RandomFlip(), pp.ColorJitter(0.3, 0.3, 0.3, 0.05)]
    where = "gpu" if device == "cuda" else "device"
    with pp.Pipeline(Memory(blobs), ops, 4, device=device, seed=5, num_threads=2, cache=where) as pipe:
        first, second, third = _epochs(pipe, 3)
        # on CUDA nvImageCodec filled the cache (its pixels against decode_region's: in
        # test_pipeline_gpu); what matters here is that every epoch augments those images
        stored = [pipe._cache.cache.batch([i])[0].clone() for i in range(9)]
    assert sorted(first) == sorted(second) == sorted(third) == list(range(9))
    whole = [torch.from_numpy(decode_region(b, rgb=False)[0]) for b in blobs] if device == "cpu" else stored
    t = pp.Compose(ops)
    for epoch, outs in ((0, first), (1, second), (2, third)):
        want = t(whole, seed=5, epoch=epoch, indices=torch.arange(9), device=device)
        for i, got in outs.items():
            torch.testing.assert_close(got, want[i], atol=2e-5, rtol=0, msg=f"epoch {epoch} sample {i}")
    assert not torch.equal(first[0], second[0])  # a new epoch, new draws


def test_a_sample_that_cannot_be_cached_follows_the_error_policy():
    blobs = images(6)
    blobs[3] = blobs[3][:40]  # truncated inside the header: not decodable
    ops = [pp.Resize((8, 8))]
    with pp.Pipeline(Memory(blobs), ops, 3, num_threads=2, cache="device", on_error="skip") as pipe:
        seen = [int(i) for b in pipe for i, ok in zip(b["index"], b["valid"]) if ok]
    assert sorted(seen) == [0, 1, 2, 4, 5]
    assert [e[0] for e in pipe.errors] == [3]
    with pp.Pipeline(Memory(blobs), ops, 3, num_threads=2, cache="device") as pipe:
        with pytest.raises(pp.SampleError, match="sample 3"):
            list(pipe)


class _CountingMemory(Memory):
    """Memory that counts reads per sample."""

    def __init__(self, samples):
        super().__init__(samples)
        self.reads = {}

    def read(self, i):
        self.reads[i] = self.reads.get(i, 0) + 1
        return super().read(i)


def test_cached_samples_are_not_read_again_and_keep_their_labels():
    """Later epochs take the pixels from the cache and the label from the first read: the
    reader is asked for each sample once (a folder's files are not opened again), and every
    epoch delivers the same labels."""
    blobs = images(7)
    reader = _CountingMemory([(b, 10 + i) for i, b in enumerate(blobs)])
    with pp.Pipeline(reader, [pp.Resize((8, 8))], 3, num_threads=2, cache="device") as pipe:
        epochs = [{int(i): int(lab) for b in pipe for i, lab, ok in zip(b["index"], b["label"], b["valid"]) if ok}
                  for _ in range(3)]
    assert epochs[0] == epochs[1] == epochs[2] == {i: 10 + i for i in range(7)}
    assert reader.reads == {i: 1 for i in range(7)}


@pytest.mark.parametrize("device", DEVICES)
def test_cached_epochs_planned_ahead_equal_batches_made_one_by_one(device, monkeypatch):
    """Later epochs plan several cached batches at once (pixelpipe.loader.cached), past the end of
    an epoch into the next one too: the batches, labels, indices and valid flags must be those
    of planning each batch alone, the padded tail included, and the batches must have been
    planned ahead (not one by one), two epochs of 4 batches in one go."""
    import pixelpipe.loader.cached as cached
    from pixelpipe.engine import Engine

    blobs = images(11)
    data = [(b, 100 + i) for i, b in enumerate(blobs)]
    ops = [pp.RandomResizedCrop(20), pp.RandomFlip(), pp.ColorJitter(0.3, 0.3, 0.3, 0.05)]
    where = "gpu" if device == "cuda" else "device"
    splits: dict[int, list[int]] = {}
    real = Engine.prepare_split
    runs = {}
    for ahead in (1, 8):
        monkeypatch.setattr(cached, "PLAN_AHEAD", ahead)
        monkeypatch.setattr(Engine, "prepare_split",
                            lambda self, *a, ahead=ahead: splits.setdefault(ahead, []).append(a[5]) or real(self, *a))
        with pp.Pipeline(Memory(data), ops, 3, device=device, seed=2, num_threads=2, cache=where) as pipe:
            runs[ahead] = [[{k: v.cpu() for k, v in b.items()} for b in pipe] for _ in range(3)]
    # 2 later epochs of 4 batches, planned together (the producer may have begun a fourth
    # epoch ahead, and planned it with a fifth)
    assert set(splits[1]) == {1} and len(splits[1]) >= 8
    assert set(splits[8]) == {8}
    for one, many in zip(runs[1], runs[8]):
        assert len(one) == len(many) == 4
        for a, b in zip(one, many):
            for k in a:
                assert torch.equal(a[k], b[k]), k
    last = runs[8][2][-1]
    assert last["valid"].tolist() == [True, True, False]  # 11 samples: the tail is padded
    assert all(int(lab) == 100 + int(i) for b in runs[8][2] for lab, i in zip(b["label"], b["index"]))


def test_a_cached_epoch_resumes_where_its_state_was_saved():
    """state_dict in the middle of a cached epoch, then load_state_dict: the rest of that
    epoch comes again, batch for batch, from the planned-ahead path."""
    blobs = images(10)
    ops = [pp.RandomResizedCrop(16), pp.RandomFlip()]
    with pp.Pipeline(Memory(blobs), ops, 2, seed=4, num_threads=2, cache="device") as pipe:
        list(pipe)  # epoch 0 fills the cache
        it = iter(pipe)
        next(it)
        state = pipe.state_dict()
        rest = [b["image"].clone() for b in it]
        pipe.load_state_dict(state)
        again = [b["image"].clone() for b in pipe]
    assert len(rest) == len(again) == 4
    for a, b in zip(rest, again):
        assert torch.equal(a, b)


def test_a_planned_ahead_batch_pads_a_short_tail_with_its_own_samples():
    """A batch made on the planned-ahead path leaves, for padding a short tail, items with
    each sample's index, label, source and validity (what the general path leaves)."""
    blobs = images(6)
    data = [(b, 40 + i) for i, b in enumerate(blobs)]
    with pp.Pipeline(Memory(data), [pp.Resize((8, 8))], 3, num_threads=2, cache="device") as pipe:
        list(pipe)  # epoch 0 fills the cache
        items = pipe._cache.items(np.array([4, 1, 4]), np.array([True, True, False]))
        sources = {i: pipe._cache.records[i].source for i in range(6)}
    assert [(it.index, int(it.label), it.valid, it.data) for it in items] == [(4, 44, True, None), (1, 41, True, None),
                                                                            (4, 44, False, None)]
    assert [it.source for it in items] == [sources[4], sources[1], sources[4]] and all(isinstance(s, str) for s in sources.values())


@pytest.mark.parametrize("device", DEVICES)
def test_prepare_split_over_epochs_equals_each_batch_planned_alone(device):
    """prepare_split with an epoch per sample (batches of consecutive epochs planned in one
    go) gives each part exactly the plan of preparing its samples alone in its epoch, and the
    same output bits. On CUDA the parts carry their kernel inputs made ahead
    (kernels.pack_ahead: one colour fold, packing and upload for all parts), and the batch
    prepared alone makes them per batch: the fast path and its twin."""
    from pixelpipe.data.batch import ImageBatch
    from pixelpipe.kernels import gpu_kernels_available

    t = pp.Compose([pp.RandomResizedCrop(12), pp.RandomFlip(), pp.ColorJitter(0.3, 0.3, 0.3, 0.05)],
                   dtype=torch.float16)
    engine, program = pp.Engine(device), t.program
    pics = pictures(6)
    idx = np.array([3, 0, 5, 1, 3, 0], dtype=np.int64)
    ep = np.array([7, 7, 8, 8, 9, 9], dtype=np.int64)
    parts = engine.prepare_split(program, ImageBatch.from_list(pics).to(device), 1, ep, idx, 3)
    ahead = device == "cuda" and gpu_kernels_available()
    for j, part in enumerate(parts):
        assert (part.first.packed is not None) == ahead
        alone = engine.prepare(program, ImageBatch.from_list(pics[2 * j : 2 * j + 2]).to(device), 1,
                               int(ep[2 * j]), idx[2 * j : 2 * j + 2])
        assert alone.first.packed is None
        assert part.epoch == int(ep[2 * j]) and part.idx.tolist() == alone.idx.tolist()
        a, b = part.first.plan, alone.first.plan
        assert np.array_equal(a.matrix, b.matrix) and np.array_equal(a.out_sizes, b.out_sizes)
        for (_, pa), (_, pb) in zip(a.color_params, b.color_params):
            assert all(np.array_equal(pa[k], pb[k]) for k in pb)
        assert np.array_equal(part.first.spec.packed_np(), alone.first.spec.packed_np())
        assert torch.equal(engine.finish(part)["image"], engine.finish(alone)["image"])
    assert not np.array_equal(parts[0].first.plan.matrix[0], parts[2].first.plan.matrix[0])  # index 3, epochs 7 and 9
    with pytest.raises(ValueError, match="one epoch"):
        engine.prepare_split(program, ImageBatch.from_list(pics), 1, np.array([7, 7, 7, 8, 8, 8]), idx, 3)
    with pytest.raises(ValueError, match="one entry per image"):
        engine.prepare_split(program, ImageBatch.from_list(pics), 1, np.array([7, 8]), idx, 3)


def test_an_epoch_planned_by_the_one_before_resumes_and_matches_planning_alone(monkeypatch):
    """With two batches per epoch, the later epochs are planned two at a time (pixelpipe.loader.cached
    continues the window into the next epoch). A state saved in such an epoch resumes with the
    same batches, and they equal those of a pipeline planning every batch alone."""
    import pixelpipe.loader.cached as cached
    import pixelpipe.loader.pipeline as pipeline

    blobs = images(8)
    ops = [pp.RandomResizedCrop(16), pp.RandomFlip()]
    runs, opened = {}, {1: [], 4: []}
    for ahead in (1, 4):
        monkeypatch.setattr(cached, "PLAN_AHEAD", ahead)
        monkeypatch.setattr(pipeline, "planned_epoch", lambda *a, ahead=ahead: opened[ahead].append(
            cached.planned_epoch(*a)) or opened[ahead][-1])
        with pp.Pipeline(Memory(blobs), ops, 4, seed=4, num_threads=2, cache="device") as pipe:
            list(pipe)  # epoch 0 fills the cache
            list(pipe)  # epoch 1, planned with epoch 2
            it = iter(pipe)
            first = next(it)["image"].clone()
            state = pipe.state_dict()
            rest = [b["image"].clone() for b in it]
            pipe.load_state_dict(state)
            again = [b["image"].clone() for b in pipe]
            runs[ahead] = [first, *rest]
        assert len(rest) == len(again) == 1 and torch.equal(rest[0], again[0])
    assert all(torch.equal(a, b) for a, b in zip(runs[1], runs[4]))
    assert not any(p is not None and p.batches for p in opened[1])
    assert sum(len(p.batches) == 2 for p in opened[4] if p is not None) >= 1  # an epoch opened planned


class _Sample:
    def __init__(self, index, data):
        self.index, self.data = index, data


def _encode(array: np.ndarray, fmt: str) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array.squeeze(-1) if array.shape[-1] == 1 else array).save(buf, fmt)
    return buf.getvalue()


def test_a_batch_decoder_fills_the_cache_like_the_cpu_decoder():
    """batch_for with decode_many (a Pipeline's GPU decoder on CUDA; here decode_region behind
    the same interface, RGB like nvImageCodec's output): the cache holds what the CPU decoder
    stores (grey with one channel), the record says which went to its CPU fallback, and an
    undecodable sample raises SampleError at its place in the batch."""
    from pixelpipe import SampleError
    from pixelpipe.decode.gpu_fallback import SampleDecodeError

    rng = np.random.default_rng(3)
    colour = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, (18, 16, 1), dtype=np.uint8)
    blobs = [_encode(colour, "JPEG"), _encode(grey, "JPEG"), _encode(colour, "PNG"), _encode(grey, "PNG")]
    calls = []

    def decode_many(batch):
        calls.append(len(batch))
        out, fallback = [], []
        for i, b in enumerate(batch):
            if b[:2] != b"\xff\xd8":
                fallback.append(i)
            try:
                out.append(torch.from_numpy(decode_region(b, rgb=True)[0]))
            except pp.decode.DecodeError as e:
                raise SampleDecodeError(i, str(e)) from e
        return out, fallback, ["png: no GPU decoder"] * len(fallback)

    items = [_Sample(10 + k, b) for k, b in enumerate(blobs)] + [_Sample(20, colour)]  # one given decoded
    on_cpu, by_many = DeviceCache("cpu"), DeviceCache("cpu")
    want, cpu_record = on_cpu.batch_for(items, map, 10**8)
    got, record = by_many.batch_for(items, map, 10**8, decode_many)
    assert calls == [4]  # the encoded ones, in one call
    assert [got[k].shape[-1] for k in range(5)] == [3, 1, 3, 1, 3]
    for k in range(5):
        assert torch.equal(got[k], want[k]), k
    assert (record.gpu, record.cpu, record.cached) == (2, 0, 0)
    assert record.fallbacks == [(12, "png: no GPU decoder"), (13, "png: no GPU decoder")]
    assert (cpu_record.cpu, cpu_record.gpu) == (4, 0)
    again, record = by_many.batch_for(items, map, 10**8, decode_many)
    assert calls == [4] and record.cached == 5 and record.gpu == 0

    bad = [_Sample(30, blobs[0]), _Sample(31, b"\xff\xd8\xff" + b"\0" * 30)]
    with pytest.raises(SampleError) as e:
        DeviceCache("cpu").batch_for(bad, map, 10**8, decode_many)
    assert e.value.position == 1


def test_the_default_budget_grows_the_buffer_and_keeps_what_it_holds(monkeypatch):
    """Without a budget the buffer starts small and doubles (here from 10,000 bytes) up to the
    budget: every image keeps its pixels across growths, a batch taken before a growth stays
    valid, and past the budget it raises. An explicit budget is allocated at once."""
    import pixelpipe.loader.cache as cache_module

    monkeypatch.setattr(cache_module, "_FIRST", 10_000)
    cache = DeviceCache("cpu")
    cache.budget = 60_000  # what the default would be, made small
    rng = np.random.default_rng(0)
    images = [torch.from_numpy(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(13)]  # 4,800 B
    cache.put(0, images[0])
    assert cache.capacity == 10_000
    early = cache.batch([0])
    capacities = []
    for i in range(1, 12):
        cache.put(i, images[i])
        capacities.append(cache.capacity)
    assert capacities[:3] == [10_000, 20_000, 20_000] and capacities[-1] == 60_000  # 80,000 capped
    assert sorted(set(capacities)) == [10_000, 20_000, 40_000, 60_000]
    batch = cache.batch(list(range(12)))
    for i in range(12):
        assert torch.equal(batch[i], images[i]), i
    assert torch.equal(early[0], images[0])
    with pytest.raises(CacheFullError, match="12 images use 56.2 KiB of its 58.6 KiB budget"):
        cache.put(12, images[12])
    fixed = DeviceCache("cpu", budget=60_000)
    fixed.put(0, images[0])
    assert fixed.capacity == 60_000 and not fixed.growable
