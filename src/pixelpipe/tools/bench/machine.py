"""What machine a bench ran on, for its header: the CPU's model name (two machines of the same
GPU kind differed 1.8x in one morning, docs/benchmarks.md, and their CPUs are one suspect)."""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_model"]


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name: Linux's /proc/cpuinfo "model name" (or "Model"), else
    platform.processor(), else platform.machine(), else "unknown CPU"."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Model") and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown CPU"
