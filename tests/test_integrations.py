"""A Pipeline as a training loader and through each adapter: torch DataLoader, torch.compile
and autocast, checkpoint positions through the adapters, fastai, JAX and TensorFlow (the last three skip, saying why,
where the framework cannot be imported)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from helpers import varied_images
from torch import nn
from torch.utils.data import DataLoader

import pixelpipe as pp
from pixelpipe.eval import eval_form
from pixelpipe.integrations import as_dataset

N, BS = 22, 4  # 6 batches per epoch, the last one half padding
OPS = [pp.RandomResizedCrop(16), pp.RandomFlip(), pp.Normalize([0.5] * 3, [0.25] * 3)]


def samples(n: int = N) -> list[tuple[torch.Tensor, int]]:
    return [(img, i % 3) for i, img in enumerate(varied_images(n, seed=3))]


def pipeline(n: int = N, dtype: torch.dtype = torch.float32, **kwargs: Any) -> pp.Pipeline:
    kwargs.setdefault("seed", 1)
    return pp.Pipeline(samples(n), pp.Compose(OPS, dtype=dtype), batch_size=BS, num_threads=2, **kwargs)


def tiny_model(classes: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, classes))


def masked_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    w = batch["valid"].to(torch.float32)
    return (F.cross_entropy(logits.float(), batch["label"], reduction="none") * w).sum() / w.sum()


def assert_same_batches(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


def need(module: str, how: str) -> Any:
    """Import an optional framework, or skip saying why (a missing or a broken install)."""
    try:
        return importlib.import_module(module)
    except (ImportError, RuntimeError, OSError) as e:  # absent, or an install that fails on import
        pytest.skip(f"{module} cannot be imported here ({type(e).__name__}: {str(e)[:120]}); {how}")


def test_import_is_light():
    code = (
        "import sys, pixelpipe, pixelpipe.torch, pixelpipe.eval, pixelpipe.integrations\n"
        "import pixelpipe.integrations.fastai, pixelpipe.integrations.jax, pixelpipe.integrations.tensorflow\n"
        "heavy = ('fastai', 'jax', 'tensorflow', 'lightning', 'torchvision')\n"
        "print(','.join(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"importing pixelpipe's adapters imported {res.stdout.strip()}"


# ----------------------------------------------------------------------------- a plain training loop
class TestTrainingLoop:
    def test_epochs_start_by_themselves_and_cover_every_sample_once(self):
        pipe = pipeline()
        assert len(pipe) == 6
        orders = []
        for epoch in range(3):
            seen = []
            for k, batch in enumerate(pipe):
                assert batch["image"].shape == (BS, 3, 16, 16)
                seen += batch["index"][batch["valid"]].tolist()
            assert k + 1 == len(pipe) and pipe.epoch == epoch
            assert sorted(seen) == list(range(N))
            orders.append(seen)
        assert orders[0] != orders[1] != orders[2]

    def test_torch_compile_and_autocast(self):
        # backend "aot_eager" traces the model and its backward as inductor does, without the
        # C++ compile (about 40 s cold on a small CPU); batches are ordinary tensors for any
        # backend. Every batch has one shape (the last is padded), so nothing recompiles.
        torch._dynamo.reset()
        pipe = pipeline(dtype=torch.bfloat16)
        model = tiny_model()
        compiled = torch.compile(model, backend="aot_eager", dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        before = [p.detach().clone() for p in model.parameters()]
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(2):
                for batch in pipe:
                    assert batch["image"].dtype == torch.bfloat16
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        logits = compiled(batch["image"])
                    assert logits.dtype == torch.bfloat16
                    loss = masked_loss(logits, batch)
                    assert torch.isfinite(loss)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            x = next(iter(pipe))["image"]
            torch.testing.assert_close(compiled(x), model(x), atol=0.05, rtol=0.05)
        pipe.close()


# ----------------------------------------------------------------------------- torch DataLoader
class TestAsDataset:
    def test_dataloader_hands_over_the_pipelines_batches(self):
        pipe, twin = pipeline(), pipeline()
        loader = DataLoader(as_dataset(pipe), batch_size=None, num_workers=0)
        assert len(loader) == len(pipe) == 6
        for _ in range(2):  # each pass is the next epoch
            assert_same_batches(list(loader), list(twin))
        assert pipe.epoch == 1

    def test_keys_give_tuples(self):
        pipe, twin = pipeline(), pipeline()
        got = list(DataLoader(as_dataset(pipe, keys=("image", "label")), batch_size=None))
        for (x, y), b in zip(got, twin):
            assert torch.equal(x, b["image"]) and torch.equal(y, b["label"])

    def test_pixelpipe_torch_is_the_same_function(self):
        import pixelpipe.torch

        assert pixelpipe.torch.as_dataset is as_dataset

    def test_worker_processes_are_refused(self):
        batches = iter(DataLoader(as_dataset(pipeline(n=8)), batch_size=None, num_workers=1))
        try:
            with pytest.raises(RuntimeError, match="num_workers=0"):
                next(batches)
        finally:
            batches._shutdown_workers()

    def test_bad_arguments(self):
        with pytest.raises(TypeError, match="Pipeline"):
            as_dataset(samples())
        with pytest.raises(ValueError, match="keys"):
            as_dataset(pipeline(n=8), keys=("image", "target"))


# ----------------------------------------------------------------------------- checkpoints
class TestCheckpoint:
    """The adapters save and load the pipeline's position (the pipeline's own resume rules are
    tested in test_pipeline.py)."""

    def uninterrupted(self) -> list[list[dict[str, torch.Tensor]]]:
        pipe = pipeline()
        return [list(pipe) for _ in range(2)]

    def test_dataset_mid_epoch(self):
        full = self.uninterrupted()
        first = as_dataset(pipeline())
        it = iter(DataLoader(first, batch_size=None))
        head = [next(it), next(it)]
        state = first.state_dict()
        first.pipe.close()
        again = as_dataset(pipeline())
        again.load_state_dict(state)
        loader = DataLoader(again, batch_size=None)
        assert_same_batches(head + list(loader), full[0])
        assert_same_batches(list(loader), full[1])

    def test_dataset_end_of_epoch(self):
        full = self.uninterrupted()
        first = as_dataset(pipeline())
        list(first)
        again = as_dataset(pipeline())
        again.load_state_dict(first.state_dict())
        assert_same_batches(list(again), full[1])

    def test_fastai_loader(self):
        from pixelpipe.integrations.fastai import PipelineLoader

        full = self.uninterrupted()
        first = PipelineLoader(pipeline())
        it = iter(first)
        next(it)
        state = first.state_dict()
        first.pipe.close()
        again = PipelineLoader(pipeline())
        again.load_state_dict(state)
        rest = list(again)
        assert len(rest) == len(full[0]) - 1
        for (x, y), b in zip(rest, full[0][1:]):
            assert torch.equal(x, b["image"]) and torch.equal(y, b["label"])


# ----------------------------------------------------------------------------- fastai
class TestFastai:
    def test_fit_one_cycle(self):
        need("fastai.learner", "pip install fastai (pin your torch: pip install fastai torch==<version>)")
        from fastai.callback.schedule import fit_one_cycle  # noqa: F401  (adds Learner.fit_one_cycle)
        from fastai.learner import Learner
        from fastai.metrics import accuracy

        from pixelpipe.integrations.fastai import dataloaders

        train = pp.Compose(OPS)
        tpipe = pp.Pipeline(samples(), train, batch_size=BS, seed=1, num_threads=2)
        vpipe = pp.Pipeline(samples(10), eval_form(train), batch_size=BS, shuffle=False, num_threads=2)
        dls = dataloaders(tpipe, vpipe)
        assert (len(dls.train), dls.train.n, dls.train.bs) == (6, N, BS)
        assert (len(dls.valid), dls.valid.n) == (3, 10)
        assert dls.device == torch.device("cpu")
        model = tiny_model()
        before = [p.detach().clone() for p in model.parameters()]
        learn = Learner(dls, model, loss_func=nn.CrossEntropyLoss(), metrics=accuracy)
        with learn.no_bar(), learn.no_logging():
            learn.fit_one_cycle(2, 1e-2)
        assert (tpipe.epoch, vpipe.epoch) == (1, 1)  # no reset needed between epochs
        assert len(learn.recorder.lrs) == 2 * len(tpipe)  # the schedule saw every batch, none past 1.0
        assert len(learn.recorder.values) == 2
        assert all(torch.isfinite(torch.tensor(v)).all() for v in learn.recorder.values)
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        preds, targets = learn.get_preds()  # padding rows dropped: each sample once, in order
        assert preds.shape == (10, 3)
        assert targets.tolist() == [i % 3 for i in range(10)]

    def test_loader_needs_a_length(self):
        from pixelpipe.integrations.fastai import PipelineLoader

        stream = pp.Pipeline(iter(samples(8)), OPS, batch_size=BS)
        with pytest.raises(TypeError, match="fastai needs len"):
            PipelineLoader(stream)


# ----------------------------------------------------------------------------- JAX
class TestJax:
    def test_iterate_shares_memory(self):
        jax = need("jax", "pip install jax")
        import numpy as np

        from pixelpipe.integrations.jax import iterate, to_jax

        pipe, twin = pipeline(), pipeline()
        for got, want in zip(iterate(pipe), twin):
            assert set(got) == {"image", "label", "index", "valid"}
            for k in got:
                assert isinstance(got[k], jax.Array)
                np.testing.assert_array_equal(np.asarray(got[k]), want[k].numpy())
        batch = next(iter(pipe))
        image = to_jax(batch["image"])
        assert image.unsafe_buffer_pointer() == batch["image"].data_ptr()  # no copy
        assert to_jax(batch["valid"]).unsafe_buffer_pointer() == batch["valid"].data_ptr()
        pipe.close()


# ----------------------------------------------------------------------------- TensorFlow
class TestTensorflow:
    def test_dataset(self):
        tf = need("tensorflow", "pip install tensorflow")
        from pixelpipe.integrations.tensorflow import dataset

        pipe, twin = pipeline(), pipeline()
        ds = dataset(pipe)
        assert len(ds) == len(pipe)
        for _ in range(2):  # each pass is the next epoch
            for got, want in zip(ds, twin):
                assert isinstance(got["image"], tf.Tensor)
                for k in want:
                    assert (got[k].numpy() == want[k].numpy()).all(), k
        assert pipe.epoch == 1
