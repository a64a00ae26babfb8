"""How samples were decoded: per batch (`BatchDecode`, made by Compose) and summed over what a
Pipeline delivered (`DecodeStats`, `pipe.stats`).

A GPU pipeline decodes most JPEGs with nvImageCodec; files it cannot take (PNG, WebP, BMP,
CMYK or 12-bit or lossless JPEGs, ...) or that it fails on are decoded on the CPU inside the
same batch. Those fallbacks cost CPU time the GPU path does not (on an H100 host, a PNG of
ImageNet size takes about 8 ms and a JPEG region about 1), so a dataset with many of them runs
at the CPU decoders' rate: the counts and the reasons say when that happens.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["BatchDecode", "DecodeStats"]

EXAMPLES = 20  # fallback samples kept by name in DecodeStats.fallback_examples


@dataclass
class BatchDecode:
    """How the samples of one batch were decoded: gpu by nvImageCodec, cpu by a CPU batch,
    cached not at all; fallbacks: (sample index, reason) of the samples of a GPU-decoded batch
    that went to the CPU decoder instead (not counted in gpu)."""

    gpu: int = 0
    cpu: int = 0
    cached: int = 0
    fallbacks: list[tuple[int, str]] = field(default_factory=list)


class DecodeStats:
    """Decode counts, summed over batches (thread-safe).

    Attributes:
        gpu: samples decoded by nvImageCodec.
        cpu_fallback: samples of GPU-decoded batches decoded on the CPU instead (not a JPEG
            nvImageCodec takes, or nvImageCodec failed); see fallback_reasons.
        cpu: samples of batches decoded on the CPU (a CPU pipeline, no nvImageCodec, or the
            first reading of a sample into a pipeline's cache).
        cached: samples read from a pipeline's cache, not decoded.
        fallback_reasons: Counter of the fallbacks' reasons ("png: no GPU decoder for this
            format", "4-component (CMYK/YCCK) JPEG: ...").
        fallback_examples: the first 20 fallbacks as (sample index, reason).

    Example: ``print(pipe.stats)`` after an epoch, or ``pipe.stats.as_dict()`` for a logger.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start counting again from zero."""
        with self._lock:
            self.gpu = self.cpu_fallback = self.cpu = self.cached = 0
            self.fallback_reasons: Counter[str] = Counter()
            self.fallback_examples: list[tuple[int, str]] = []

    def add(self, record: BatchDecode) -> None:
        """Add one batch's record (every sample it decoded, the padding of a short last batch
        too)."""
        fallbacks = record.fallbacks
        with self._lock:
            self.gpu += record.gpu
            self.cpu_fallback += len(fallbacks)
            self.cpu += record.cpu
            self.cached += record.cached
            self.fallback_reasons.update(reason for _, reason in fallbacks)
            room = EXAMPLES - len(self.fallback_examples)
            if room > 0:
                self.fallback_examples.extend(fallbacks[:room])

    @property
    def total(self) -> int:
        """Every sample counted."""
        return self.gpu + self.cpu_fallback + self.cpu + self.cached

    def as_dict(self) -> dict[str, object]:
        """The counts and reasons as plain Python values (for logging, JSON)."""
        with self._lock:
            return {"gpu": self.gpu, "cpu_fallback": self.cpu_fallback, "cpu": self.cpu, "cached": self.cached,
                    "fallback_reasons": dict(self.fallback_reasons),
                    "fallback_examples": [list(e) for e in self.fallback_examples]}

    def __repr__(self) -> str:
        text = (f"DecodeStats(gpu={self.gpu}, cpu_fallback={self.cpu_fallback}, cpu={self.cpu}, "
                f"cached={self.cached})")
        if self.fallback_reasons:
            top = "; ".join(f"{n} x {reason}" for reason, n in self.fallback_reasons.most_common(5))
            text += f"\n  fallbacks: {top}"
        return text
