"""SampleError: samples of a batch could not be read, decoded or taken as they are."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SampleError"]


class SampleError(ValueError):
    """A sample of a batch could not be read or decoded. `position` is its place in the
    batch and `reason` why; the message names it and the reason.

    Where the samples of a batch are read or decoded together, every failing one is reported
    at once: `failures` lists (position, reason) of each, lowest position first (`position`
    and `reason` are that first one's), so that a pipeline skipping or replacing them makes
    the batch again once, not once per failing sample.

    `batch`: where the engine finished the batch's other samples all the same (the CPU path of
    a batch without targets), the output dict with the failing samples' rows unset; None
    otherwise. A Pipeline then makes only stand-ins for the failing samples and keeps the rest.
    """

    batch: dict | None = None
    partial: object = None  # a stage's output tensor with the failing rows unset (engine internal)

    def __init__(self, position: int, reason: str, more: Sequence[tuple[int, str]] = ()) -> None:
        more = sorted((int(p), str(r)) for p, r in more if int(p) != position)
        tail = ""
        if more:
            shown = ", ".join(str(p) for p, _ in more[:8])
            tail = f" (and {len(more)} more failing: sample{'s' if len(more) > 1 else ''} {shown}" \
                   f"{' ...' if len(more) > 8 else ''})"
        super().__init__(f"sample {position}: {reason}{tail}")
        self.position = position
        self.reason = reason
        self.failures: list[tuple[int, str]] = [(position, reason), *more]

    @classmethod
    def of(cls, failures: Sequence[tuple[int, str]]) -> SampleError:
        """One error for several failing samples: (position, reason) each, any order."""
        if not failures:
            raise ValueError("no failures to report")
        first, *more = sorted(failures)
        return cls(first[0], first[1], more)
