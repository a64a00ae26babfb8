"""SampleError: one sample of a batch could not be read, decoded or taken as it is."""

from __future__ import annotations

__all__ = ["SampleError"]


class SampleError(ValueError):
    """One sample of a batch could not be read or decoded. `position` is its place in the
    batch; the message names it and the reason."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"sample {position}: {reason}")
        self.position = position
        self.reason = reason
