"""kernels/reference/masks.py: the axis-aligned form of the mask warp (source columns and rows
once per sample) against its general form (every output pixel's source point), on the same
label images: equal labels for every border rule, flips, enlargements, shrinks, shifts past the
edges, several channels; and the general form still taken when one map of the batch rotates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.kernels.reference import masks as M


def label_images(rng: np.random.Generator, n: int, c: int) -> tuple[list[torch.Tensor], np.ndarray]:
    sizes = rng.integers(5, 60, size=(n, 2))
    items = [torch.from_numpy(rng.integers(0, 250, size=(int(h), int(w), c)).astype(np.uint8)) for h, w in sizes]
    return items, sizes.astype(np.float64)


def axis_aligned_maps(rng: np.random.Generator, n: int) -> np.ndarray:
    inv = np.zeros((n, 3, 3))
    inv[:, 0, 0] = rng.uniform(0.1, 4.0, n) * rng.choice([-1, 1], n)  # shrinks, enlargements, flips
    inv[:, 1, 1] = rng.uniform(0.1, 4.0, n) * rng.choice([-1, 1], n)
    inv[:, 0, 2] = rng.uniform(-40, 80, n)  # shifts past every edge
    inv[:, 1, 2] = rng.uniform(-40, 80, n)
    inv[:, 2, 2] = 1.0
    inv[0, 0, 2] = 3.0  # an integer shift: source points on pixel edges
    return inv


def general(items, inverse, sizes, out, border, fill):
    c = items[0].shape[2]
    flat = torch.cat([m.reshape(-1) for m in items])
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum([m.numel() for m in items])[:-1]]).astype(np.int64))
    hw = torch.from_numpy(np.round(sizes).astype(np.int64))
    first, outside = M._general_index(inverse, hw, offsets, c, out[0], out[1], border, torch.device("cpu"), None)
    got = flat[(first.unsqueeze(-1) + torch.arange(c)).clamp_(0, flat.numel() - 1)]
    if border == "constant":
        got = torch.where(outside.unsqueeze(-1), torch.tensor(fill, dtype=got.dtype), got)
    return got


@pytest.mark.parametrize("border", ["constant", "reflect", "replicate", "wrap"])
@pytest.mark.parametrize("c", [1, 3])
def test_the_axis_aligned_form_gives_the_general_forms_labels(border: str, c: int):
    rng = np.random.default_rng(len(border) * 10 + c)
    items, sizes = label_images(rng, 6, c)
    inverse = axis_aligned_maps(rng, 6)
    assert M._axis_aligned(inverse)
    out = (37, 53)
    got = M.warp_masks(items, inverse, sizes, out, border, 255, "cpu")
    want = general(items, inverse, sizes, out, border, 255)
    assert got.shape == (6, 37, 53, c) and got.dtype == torch.uint8
    assert torch.equal(got, want)
    if border == "constant":
        assert (got == 255).any() and (got != 255).any()  # both sides of the border were read


def test_one_rotating_map_sends_the_batch_to_the_general_form(monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(5)
    items, sizes = label_images(rng, 3, 1)
    inverse = axis_aligned_maps(rng, 3)
    a = np.deg2rad(10)
    inverse[1, :2, :2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    assert not M._axis_aligned(inverse)
    called = []
    monkeypatch.setattr(M, "_separable_index", lambda *a, **k: called.append(1))
    got = M.warp_masks(items, inverse, sizes, (20, 30), "constant", 0, "cpu")
    assert called == [] and torch.equal(got, general(items, inverse, sizes, (20, 30), "constant", 0))
    perspective = axis_aligned_maps(rng, 2)
    perspective[0, 2, 0] = 1e-4
    assert not M._axis_aligned(perspective)


def test_the_general_form_in_chunks_of_samples_gives_the_same_labels(monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(11)
    items, sizes = label_images(rng, 5, 2)
    inverse = axis_aligned_maps(rng, 5)
    inverse[:, 0, 1] = 0.2  # a shear: the general form
    whole = M.warp_masks(items, inverse, sizes, (21, 19), "reflect", 0, "cpu")
    monkeypatch.setattr(M, "CHUNK_PIXELS", 2 * 21 * 19)  # two samples a pass, the last alone
    assert torch.equal(M.warp_masks(items, inverse, sizes, (21, 19), "reflect", 0, "cpu"), whole)
    assert torch.equal(whole, general(items, inverse, sizes, (21, 19), "reflect", 0))
