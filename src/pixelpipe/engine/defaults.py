"""The engines `Compose.__call__` runs on when it is given none: one per device asked for, made
on first use and kept (their thread pool and GPU decoder are costly to make), closed at exit or
by `close_default_engines()`."""

from __future__ import annotations

import atexit
import threading

import torch

from .engine import Engine

__all__ = ["close_default_engines", "default_engine"]

_ENGINES: dict[str, Engine] = {}
_LOCK = threading.Lock()


def default_engine(device: str | torch.device | None = None) -> Engine:
    """The process's engine for `device` (None: the input batch's device)."""
    key = "" if device is None else str(torch.device(device))
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = Engine(device)
        return engine


@atexit.register
def close_default_engines() -> None:
    """Close the default engines (their threads stop, their GPU decoders are released); later
    calls make new ones."""
    with _LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    for engine in engines:
        engine.close()
