"""A Pipeline over files reads them ahead on threads (loader.reading): the same batches, the
same errors and policy, as reading them one by one on the producer thread."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import pixelpipe as pp
import pixelpipe.loader.pipeline as pipeline_module


def _folder(tmp_path, n=23, broken=(5, 17)):
    rng = np.random.default_rng(0)
    for i in range(n):
        (tmp_path / f"c{i % 3}").mkdir(exist_ok=True)
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (20 + i, 30, 3), dtype=np.uint8)).save(buf, "JPEG")
        data = buf.getvalue()[:50] if i in broken else buf.getvalue()
        (tmp_path / f"c{i % 3}" / f"{i:03d}.jpg").write_bytes(data)
    return str(tmp_path)


def _epochs(root, policy, monkeypatch, threads):
    monkeypatch.setattr(pipeline_module, "READ_THREADS", threads)
    with pp.Pipeline(root, [pp.RandomResizedCrop(16)], 4, seed=3, on_error=policy, num_threads=2) as pipe:
        assert (pipe._reading._threads > 0) == (threads > 0)
        out = [[{k: v for k, v in b.items()} for b in pipe] for _ in range(2)]
        return out, list(pipe.errors)


@pytest.mark.parametrize("policy", ["skip", "replace"])
def test_reading_ahead_changes_nothing(tmp_path, monkeypatch, policy):
    root = _folder(tmp_path)
    ahead, errors_ahead = _epochs(root, policy, monkeypatch, 4)
    alone, errors_alone = _epochs(root, policy, monkeypatch, 0)
    assert errors_ahead == errors_alone
    assert sorted({e[1].rsplit("/", 1)[1] for e in errors_ahead}) == ["005.jpg", "017.jpg"]
    for ea, eb in zip(ahead, alone):
        assert len(ea) == len(eb)
        for a, b in zip(ea, eb):
            assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_file_gone_after_listing_is_an_error_where_it_is_read(tmp_path, monkeypatch):
    root = _folder(tmp_path, broken=())
    monkeypatch.setattr(pipeline_module, "READ_THREADS", 4)
    with pp.Pipeline(root, [pp.Resize((8, 8))], 4, shuffle=False, on_error="skip") as pipe:
        (tmp_path / "c1" / "007.jpg").unlink()
        n = sum(int(b["valid"].sum()) for b in pipe)
    assert n == 22 and len(pipe.errors) == 1
    assert pipe.errors[0][1].endswith("007.jpg") and "No such file" in pipe.errors[0][2]
