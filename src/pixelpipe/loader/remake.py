"""Rows of a batch made already (`MadeRows`), kept while the batch is made again around the
samples that failed in it (Pipeline._next_batch): only the stand-ins, or the samples read to
fill the batch, are decoded, and the kept rows are copied into place.

The rows are found by the identity of the item they were made for. The table holds each item
itself, not only its id(): the padding items of a batch are made anew each time the batch is
padded again, and an item that is no longer referenced frees its id() for the next object
made, so a table of bare ids could hand a freed item's row to another sample.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["MadeRows"]


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
