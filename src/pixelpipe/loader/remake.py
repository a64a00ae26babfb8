"""A batch made again around the samples that failed in it (Pipeline._next_batch): the failures
a failed finish names travel with the batch's items (`told`), so they go through the on_error
policy without the batch being decoded again to find them; the rows it made all the same (on
the CPU) are kept (`MadeRows`, `keep_rows`): only the stand-ins, or the samples read to fill
the batch, are decoded, and the kept rows are copied into place.

The rows are found by the identity of the item they were made for. The table holds each item
itself, not only its id(): the padding items of a batch are made anew each time the batch is
padded again, and an item that is no longer referenced frees its id() for the next object
made, so a table of bare ids could hand a freed item's row to another sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..engine import SampleError

__all__ = ["MadeRows", "keep_rows", "told"]


class MadeRows:
    """Made rows by item: item -> (the tensor a try made, the item's row in it)."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[Any, torch.Tensor, int]] = {}  # id(item) -> (item, tensor, row)

    def __bool__(self) -> bool:
        return bool(self._rows)

    def add(self, item: Any, tensor: torch.Tensor, row: int) -> None:
        self._rows[id(item)] = (item, tensor, row)

    def get(self, item: Any) -> tuple[torch.Tensor, int] | None:
        """(tensor, row) made for this very item, or None."""
        got = self._rows.get(id(item))
        if got is None or got[0] is not item:
            return None
        return got[1], got[2]

    def clear(self) -> None:
        self._rows.clear()

    def assemble(self, items: list[Any], fresh: list[int], made: torch.Tensor | None) -> torch.Tensor:
        """The batch's image tensor: the rows kept for `items`, and `made` (the rows of the items
        at positions `fresh`, made by this try) in their places; one copy per try that made
        rows, not one per row."""
        kept: dict[int, tuple[torch.Tensor, list[int], list[int]]] = {}  # by tensor: its rows, their places
        for j, it in enumerate(items):
            got = self.get(it)
            if got is not None:
                tensor, row = got
                _, rows, places = kept.setdefault(id(tensor), (tensor, [], []))
                rows.append(row)
                places.append(j)
        first = made if made is not None else next(iter(kept.values()))[0]
        image = first.new_empty((len(items), *first.shape[1:]))
        for tensor, rows, places in kept.values():
            image[torch.as_tensor(places, device=image.device)] = tensor[torch.as_tensor(rows, device=tensor.device)]
        if made is not None:
            image[torch.as_tensor(fresh, device=image.device)] = made
        return image


def told(finish: Callable[[], dict[str, Any]], items: list[Any]) -> Callable[[], dict[str, Any]]:
    """A batch's finish whose SampleError carries the batch's items (`items`), so that the
    producer applies the failures it names (Pipeline._keep_made) instead of decoding the
    whole batch again to find them."""
    def finished() -> dict[str, Any]:
        try:
            return finish()
        except SampleError as e:
            e.items = items  # type: ignore[attr-defined]
            raise

    return finished


def keep_rows(reuse: MadeRows, items: list[Any], failed: SampleError) -> None:
    """The rows of `items` that `failed.batch` made (all but the failures) into reuse."""
    bad = {position for position, _ in failed.failures}
    image = failed.batch["image"]  # type: ignore[index]
    for j, it in enumerate(items):
        if j not in bad:
            reuse.add(it, image, j)
