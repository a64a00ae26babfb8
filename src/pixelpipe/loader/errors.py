"""What a Pipeline tells its user about the samples that failed (`ErrorLog`): every failing
sample once, however many epochs meet it again and however often the run is resumed, and the
failures of the epoch being consumed.

Why not one entry per failure: a bad file fails again in every epoch (a Pipeline retries it,
since a file may be fixed or come back), so a list of every failure grows with the epochs
(70 bad files gave 701 entries after 10 epochs) and so does every saved state; and a run
restored from a state meets again the failures its producer had met ahead of the consumer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Error", "ErrorLog", "Reported"]

Error = tuple[int, str, str]  # (sample index, source, reason)


class ErrorLog:
    """The failed samples a consumer has been told of.

    `errors`: each failed sample once, as (index, source, reason) of its first failure, in the
    order they were met. `epoch_errors`: those that failed in the epoch being consumed (each
    once), reset when the next epoch starts. Both are saved in a state and restored with it.
    """

    def __init__(self) -> None:
        self._known: dict[int, Error] = {}
        self._epoch: dict[int, None] = {}  # indices failed this epoch, in order

    @property
    def errors(self) -> list[Error]:
        return list(self._known.values())

    @property
    def epoch_errors(self) -> list[Error]:
        return [self._known[i] for i in self._epoch]

    def add(self, errors: list[Any]) -> None:
        for index, source, reason in errors:
            index = int(index)
            self._known.setdefault(index, (index, str(source), str(reason)))
            self._epoch.setdefault(index, None)

    def new_epoch(self) -> None:
        self._epoch.clear()

    def state(self) -> dict[str, Any]:
        """The entries a state holds: errors as tuples, epoch_errors as their indices."""
        return {"errors": self.errors, "epoch_errors": list(self._epoch)}

    def load(self, state: dict[str, Any]) -> None:
        """Restore from a state (a state without errors clears them); ValueError for entries that
        are not (index, source, reason)."""
        known: dict[int, Error] = {}
        for entry in state.get("errors", []):
            try:
                index, source, reason = entry
                known.setdefault(int(index), (int(index), str(source), str(reason)))
            except (TypeError, ValueError):
                raise ValueError(f"state['errors'] holds {entry!r}; each entry is (index, source, reason)") from None
        epoch = [int(i) for i in state.get("epoch_errors", [])]
        unknown = [i for i in epoch if i not in known]
        if unknown:
            raise ValueError(f"state['epoch_errors'] names samples {unknown[:5]} missing from state['errors']")
        self._known, self._epoch = known, dict.fromkeys(epoch)


class Reported:
    """What a loader with an ErrorLog (`_log`) shows of it, and `with loader:` closing it:
    shared by Pipeline and VideoPipeline. The loader defines `close()`."""

    _log: ErrorLog

    @property
    def errors(self) -> list[Error]:
        """Every sample (a video, for a VideoPipeline) that failed, once: (index, source,
        reason) of its first failure."""
        return self._log.errors

    @property
    def epoch_errors(self) -> list[Error]:
        """The samples that failed in the epoch being iterated (or the last one), each once."""
        return self._log.epoch_errors

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

