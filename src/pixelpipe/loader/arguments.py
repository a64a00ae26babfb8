"""A Pipeline's arguments and saved states, checked before anything runs: a bad value fails at
construction (or at load_state_dict), naming the argument and what it may be, never as a
quietly different behaviour (a seed taken modulo 2**64, "no" read as a true shuffle) or an
error at the 10,000th batch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["POLICIES", "SEEDS", "check_arguments", "check_state", "flag", "whole"]

POLICIES = ("raise", "skip", "replace")
SEEDS = 2**64  # seeds are ints in [0, 2**64): every draw hashes the seed's two 32-bit words


def whole(name: str, value: Any, lo: int | None = None, hi: int | None = None, optional: bool = False) -> Any:
    """value as an int (a Python or numpy integer, not a bool and not a float) within [lo, hi)."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an int, got the bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})") from None
    if (lo is not None and v < lo) or (hi is not None and v >= hi):
        span = f">= {lo}" if hi is None else f"in [{lo}, {hi})" if lo is not None else f"< {hi}"
        raise ValueError(f"{name} must be an int {span}, got {v}")
    return v


def flag(name: str, value: Any, optional: bool = False) -> Any:
    """value as a bool: only True or False (numpy's too), never a truthy string or number."""
    if value is None and optional:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_arguments(batch_size: Any, seed: Any, shuffle: Any, drop_last: Any, prefetch: Any, on_error: Any,
                    shuffle_buffer: Any, cache: Any, cache_max_side: Any, cache_budget: Any, decode_thread: Any,
                    fixed_shards: Any) -> dict[str, Any]:
    """The Pipeline's own arguments, normalised (ints, bools), or a ValueError naming the bad one.
    (num_threads and max_pixels are the Engine's to check; shard is collate.shard_of's.)"""
    out = {
        "batch_size": whole("batch_size", batch_size, 1),
        "seed": whole("seed", seed, 0, SEEDS),
        "shuffle": flag("shuffle", shuffle),
        "drop_last": flag("drop_last", drop_last),
        "prefetch": whole("prefetch", prefetch, 1),
        "shuffle_buffer": whole("shuffle_buffer", shuffle_buffer, 1),
        "cache_max_side": whole("cache_max_side", cache_max_side, 1, optional=True),
        "cache_budget": whole("cache_budget", cache_budget, 1, optional=True),
        "decode_thread": flag("decode_thread", decode_thread),
        "fixed_shards": flag("fixed_shards", fixed_shards, optional=True),
    }
    if on_error not in POLICIES:
        raise ValueError(f"on_error must be one of {POLICIES}, got {on_error!r}")
    if cache not in (None, "gpu", "device"):
        raise ValueError(f"cache must be None, 'gpu' or 'device', got {cache!r}")
    if cache is None and (cache_budget is not None or cache_max_side is not None):
        raise ValueError("cache_budget and cache_max_side need a cache: pass cache='gpu' (or 'device')")
    return out


STATE_KEYS = ("epoch", "cursor", "batches", "seed", "batch_size", "shard")


def check_state(state: Any, settings: dict[str, Any], sizes: Callable[[int], tuple[int | None, int | None]]) -> dict[str, Any]:
    """A saved state's position, checked against this pipeline: the keys a state has, the same
    seed, batch size, shard and fixed_shards, and a position inside the epoch (0 <= batches <=
    the epoch's batches, 0 <= cursor <= its slots). settings: the pipeline's seed, batch_size,
    shard, world and fixed_shards; sizes(epoch): (batches, slots) of that epoch on this rank
    (None where unknown). Returns epoch, cursor, batches and finished as ints and a bool."""
    if not isinstance(state, dict):
        raise ValueError(f"a state must be the dict state_dict() returned, got {type(state).__name__}")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"not a Pipeline state: it lacks {', '.join(map(repr, missing))} (a state holds "
                         f"{', '.join(STATE_KEYS)}, as state_dict() returns it)")
    for key in ("seed", "batch_size"):
        if state[key] != settings[key]:
            raise ValueError(f"state was saved with {key}={state[key]}, this pipeline has {settings[key]}")
    shard = tuple(state["shard"]) if isinstance(state["shard"], (tuple, list)) else state["shard"]
    if shard != settings["shard"]:
        raise ValueError(f"state was saved on shard {shard}, this pipeline is {settings['shard']}")
    fixed = state.get("fixed_shards", settings["fixed_shards"])
    if fixed != settings["fixed_shards"] and settings["shard"][1] > 1:  # another order
        raise ValueError(f"state was saved with fixed_shards={fixed}, this pipeline has "
                         f"{settings['fixed_shards']} (a cache turns it on by default)")
    epoch = whole("state['epoch']", state["epoch"], -1)
    cursor = whole("state['cursor']", state["cursor"], 0)
    batches = whole("state['batches']", state["batches"], 0)
    finished = flag("state['finished']", state.get("finished", False))
    if epoch < 0 and (cursor or batches):
        raise ValueError(f"state has cursor={cursor}, batches={batches} before its first epoch (epoch -1)")
    if epoch >= 0:
        total, slots = sizes(epoch)
        if total is not None and batches > total:
            raise ValueError(f"state['batches']={batches} is past the end of epoch {epoch} ({total} batches)")
        if slots is not None and cursor > slots:
            raise ValueError(f"state['cursor']={cursor} is past the end of epoch {epoch} ({slots} slots on this rank)")
    return {"epoch": epoch, "cursor": cursor, "batches": batches, "finished": finished}
