"""Tables of the data pointers of bytes objects, for the C calls that take many at once (a
chunk's file paths and buffers: readers/_files.py; a batch's JPEGs: decode/headers_batch.py and
decode/nvimgcodec_open.py).

Why not a ctypes array (`(c_char_p * n)(*objects)`): ctypes converts each object on its own,
about 1 us each under the GIL; numpy makes the table from the objects' addresses plus the
offset of a bytes object's data in CPython, found once at import by asking ctypes where a
bytes object's data is (and checked on three objects): a tenth of the time for 32 objects on
the 2-core development VM. Where the offset cannot be confirmed, or an object is not `bytes`,
the ctypes array is made as before.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import address

__all__ = ["bytes_pointers"]


def _bytes_data_offset() -> int | None:
    """Where a bytes object's data starts, from its address (id), in this interpreter; None if
    ctypes does not confirm one offset for every probe."""
    probes = [b"pixelpipe", b"x" * 100, bytes(range(256)) * 20]
    try:
        offsets = {C.cast(C.c_char_p(b), C.c_void_p).value - id(b) for b in probes}  # type: ignore[operator]
    except (TypeError, ValueError):
        return None
    return offsets.pop() if len(offsets) == 1 else None


_DATA = _bytes_data_offset()
_BYTES_OR_NONE = {bytes, type(None)}


def bytes_pointers(objects: Sequence[Any]) -> tuple[int, Any]:
    """(address, owner) of a table of the data pointers of these bytes objects (None: a null
    pointer) for a C call; the caller keeps the owner and the objects alive until it returns.

    Example:
        >>> import ctypes
        >>> where, table = bytes_pointers([b"ab", None, b"cd"])
        >>> pointers = (ctypes.c_void_p * 3).from_address(where)
        >>> ctypes.string_at(pointers[0], 2), pointers[1], ctypes.string_at(pointers[2], 2)
        (b'ab', None, b'cd')
    """
    n = len(objects)
    if _DATA is None or not set(map(type, objects)) <= _BYTES_OR_NONE:
        array = (C.c_char_p * n)(*objects)
        return C.addressof(array), array
    table = np.fromiter(map(id, objects), np.uint64, n) + np.uint64(_DATA)
    if None in objects:
        table[[k for k, o in enumerate(objects) if o is None]] = 0
    return address(table), table
