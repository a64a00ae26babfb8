"""Bad API input fails at once, naming the argument: a Pipeline's arguments at construction, an
op's at construction, a saved state at load_state_dict. Never a quietly different behaviour (a
seed taken modulo 2**64, the string "no" read as a true shuffle, a NaN jitter giving NaN
images) or a failure at the first batch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from corpus import samples

import pixelpipe as pp

NAN = math.nan
DATA = [(it.data, it.label) for it in samples(20)]


def pipeline(**kw: Any) -> pp.Pipeline:
    args: dict[str, Any] = {"batch_size": 4, "num_threads": 1}
    args.update(kw)
    return pp.Pipeline(DATA, [pp.Resize((8, 8))], **args)


def state(**changes: Any) -> dict[str, Any]:
    """A good state of `pipeline()` after its first batch, with `changes`."""
    with pipeline() as pipe:
        it = iter(pipe)
        next(it)
        good = pipe.state_dict()
    return {**good, **changes}


def without(key: str) -> dict[str, Any]:
    s = state()
    del s[key]
    return s


PIPELINE = [
    ({"seed": 2**64 + 5}, "seed"), ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"seed": 3.0}, "seed"),
    ({"seed": True}, "seed"), ({"seed": "7"}, "seed"),
    ({"shuffle": "no"}, "shuffle"), ({"shuffle": 1}, "shuffle"), ({"shuffle": None}, "shuffle"),
    ({"shuffle_buffer": 0}, "shuffle_buffer"), ({"shuffle_buffer": -5}, "shuffle_buffer"),
    ({"shuffle_buffer": 2.5}, "shuffle_buffer"),
    ({"shard": (0.5, 2)}, "shard"), ({"shard": (0, 2.0)}, "shard"), ({"shard": (0,)}, "shard"),
    ({"shard": (True, 2)}, "shard"), ({"shard": (2, 2)}, "shard"), ({"shard": 3}, "shard"),
    ({"batch_size": 2.5}, "batch_size"), ({"batch_size": "4"}, "batch_size"), ({"batch_size": 0}, "batch_size"),
    ({"drop_last": "yes"}, "drop_last"), ({"drop_last": 0}, "drop_last"),
    ({"prefetch": 1.5}, "prefetch"), ({"prefetch": 0}, "prefetch"),
    ({"on_error": "ignore"}, "on_error"), ({"on_error": None}, "on_error"),
    ({"num_threads": 1.5}, "num_threads"), ({"max_pixels": 1e6}, "max_pixels"),
    ({"cache": "cpu"}, "cache"), ({"cache": "device", "cache_budget": -1}, "cache_budget"),
    ({"cache": "device", "cache_max_side": 0.5}, "cache_max_side"), ({"cache_budget": 10**6}, "cache"),
    ({"decode_thread": "no"}, "decode_thread"), ({"fixed_shards": "yes"}, "fixed_shards"),
    ({"batch_size": 30, "drop_last": True}, "drop_last"),  # an epoch without a batch
]

OPS = [
    (lambda: pp.ColorJitter(NAN), "brightness"), (lambda: pp.ColorJitter(contrast=NAN), "contrast"),
    (lambda: pp.ColorJitter(saturation=(NAN, 1.0)), "saturation"), (lambda: pp.ColorJitter(hue=NAN), "hue"),
    (lambda: pp.ColorJitter(brightness=math.inf), "brightness"),
    (lambda: pp.Normalize([NAN] * 3, [1.0] * 3), "mean"), (lambda: pp.Normalize([0.5] * 3, [NAN] * 3), "std"),
    (lambda: pp.Normalize([0.5] * 3, [math.inf] * 3), "std"), (lambda: pp.Normalize([0.5] * 3, [0.0] * 3), "std"),
    (lambda: pp.Resize((NAN, 8)), "size"), (lambda: pp.RandomResizedCrop(16, scale=(NAN, 1.0)), "scale"),
    (lambda: pp.RandomResizedCrop(16, ratio=(0.75, NAN)), "ratio"), (lambda: pp.Pad(2, fill=NAN), "fill"),
]

STATES = [
    (lambda: {}, "lacks 'epoch'"), (lambda: without("seed"), "lacks 'seed'"), (lambda: [1, 2], "dict"),
    (lambda: state(cursor=-1), "cursor"), (lambda: state(batches=-1), "batches"), (lambda: state(epoch=-2), "epoch"),
    (lambda: state(cursor=10**6), "cursor.*past the end"), (lambda: state(batches=6), "batches.*past the end"),
    (lambda: state(cursor=2.5), "cursor"), (lambda: state(seed=1), "seed"), (lambda: state(batch_size=8), "batch_size"),
    (lambda: state(shard=(1, 2)), "shard"), (lambda: state(finished="no"), "finished"),
    (lambda: state(errors=[(1, "x")]), "errors"), (lambda: state(epoch_errors=[3]), "epoch_errors"),
    (lambda: state(epoch=-1, cursor=4, batches=1), "before its first epoch"),
]


@pytest.mark.parametrize("case", [*[("pipeline", kw, name) for kw, name in PIPELINE],
                                  *[("op", make, name) for make, name in OPS],
                                  *[("state", make, name) for make, name in STATES]],
                         ids=lambda c: f"{c[0]}-{c[2]}")
def test_bad_input_fails_at_once_naming_the_argument(case: tuple[str, Any, str]) -> None:
    kind, what, name = case
    if kind == "pipeline":
        with pytest.raises(ValueError, match=name):
            pipeline(**what).close()
    elif kind == "op":
        with pytest.raises(ValueError, match=name):
            what()
    else:
        bad = what()
        with pipeline() as pipe, pytest.raises(ValueError, match=name):
            pipe.load_state_dict(bad)


@pytest.mark.parametrize("kw", [{"seed": 2**64 - 1}, {"seed": np.int64(5)}, {"shuffle": np.bool_(False)},
                                {"batch_size": np.int32(4)}, {"shard": (np.int64(1), 2)}, {"shuffle_buffer": 1}])
def test_good_input_of_other_int_and_bool_types_is_taken(kw: dict[str, Any]) -> None:
    with pipeline(**kw) as pipe:
        assert len(list(pipe)) == len(pipe) > 0


def test_the_state_of_a_fresh_pipeline_and_of_a_finished_epoch_load() -> None:
    with pipeline() as pipe:
        fresh = pipe.state_dict()
        ref = [b["index"].tolist() for b in pipe]
        end = pipe.state_dict()
    with pipeline() as pipe:
        pipe.load_state_dict(fresh)
        assert [b["index"].tolist() for b in pipe] == ref
        pipe.load_state_dict(end)
        assert pipe.epoch == 0 and len(list(pipe)) == len(pipe) and pipe.epoch == 1
