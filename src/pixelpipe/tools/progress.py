"""A small progress bar for long commands: rate and time left, quiet when not on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``with Progress(total, "decode") as p: p.update(k)``. Draws on stderr only when it is a
    terminal and quiet is False; redraws at most 10 times a second."""

    def __init__(self, total: int | None, label: str = "", unit: str = "img", quiet: bool = False,
                 stream: TextIO | None = None) -> None:
        self.total, self.label, self.unit = total, label, unit
        self.stream = stream or sys.stderr
        self.enabled = not quiet and getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self.start = time.perf_counter()
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if self.enabled and (now - self._last > 0.1 or (self.total and self.done >= self.total)):
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            left = (self.total - self.done) / rate if rate > 0 else 0.0
            text = f"\r{self.label} [{bar:<30}] {self.done}/{self.total} {rate:,.0f} {self.unit}/s, {left:.0f}s left"
        else:
            text = f"\r{self.label} {self.done} {rate:,.0f} {self.unit}/s"
        self.stream.write(text)
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
