"""Reading many files at once: `read_files(paths)`, for the readers of files (Folder, FileList).

Why in C (native/files.c): a Pipeline over files read them on the producer thread at about 30 us
each, and on Python reader threads it got slower still (rn50 on an H100, 128-image batches of
150 ImageNet JPEGs: 9.9k images/s read on the producer thread, 7.4k on 4 reader threads, 16.9k
from memory): each file's open, read and close released and took back the GIL, and every take
waited for the planning, decoding and launching threads that hold it. Here a chunk of files is
one C call that releases the GIL throughout (ctypes' CDLL); the interpreter only makes the
paths and the buffers. Each buffer is a fresh bytes object that nothing else has seen yet,
made without zeroing (`PyBytes_FromStringAndSize(NULL, size)`) and written whole by the C call
before it is handed out; a buffer whose read failed is dropped unseen. Why not `bytes(size)`:
zeroing a JPEG's 110 KB under the GIL was the readers' largest hold of it, about 16 us per
image while a training loop waited for the GIL (`py-spy record --gil` of
benchmarks/train_throughput.py, ResNet-18 fed by a Pipeline over files, on an H200).

The tables of pointers the C call takes (each path's bytes, each buffer) are made by numpy
(native/pointers.py): two ctypes arrays built from 32 objects each took about 30 us of the GIL
a chunk (the 2-core development VM), the numpy tables a tenth of it.

Without the C helper (no compiler at install) the files are read in Python, one by one: the
same bytes, the same errors.
"""

from __future__ import annotations

import ctypes as C
import errno
import os
import stat
from collections.abc import Sequence
from itertools import repeat
from typing import Any, BinaryIO

import numpy as np

from .. import native
from ..native.pointers import bytes_pointers

__all__ = ["open_regular", "read_files", "read_one"]

_SIGNATURES = {
    "pp_file_sizes": (C.c_int64, [C.c_void_p, C.c_int64, C.c_void_p, C.c_int64, C.c_int64]),
    "pp_read_files": (C.c_int64, [C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p, C.c_void_p]),
}
SMALLEST = 64  # smaller files are read in Python (tiny bytes objects may be shared singletons)
_NEW_BYTES = C.pythonapi.PyBytes_FromStringAndSize  # (NULL, size): a bytes object, not zeroed
_NEW_BYTES.restype = C.py_object
_NEW_BYTES.argtypes = [C.c_void_p, C.c_ssize_t]


def _library() -> C.CDLL | None:
    return native.shared("files.c", "reading files one by one in Python", C.CDLL, _SIGNATURES)


def read_files(paths: Sequence[str | bytes], max_bytes: int | None = None) -> list[bytes | OSError]:
    """Each file's bytes, or the OSError reading it raised (naming the path as str). Only regular
    files are read: anything else is an OSError (EINVAL), never a blocking open. A file of more
    than max_bytes is an OSError (EFBIG) saying both sizes, and is not read."""
    lib = _library()
    if lib is None or not paths:
        return [_read_python(os.fsdecode(p), max_bytes) for p in paths]
    n = len(paths)
    encoded = paths if set(map(type, paths)) == {bytes} else [p if type(p) is bytes else os.fsencode(p) for p in paths]
    names, _names = bytes_pointers(encoded)
    sizes = np.empty(n, dtype=np.int64)
    limit = max_bytes if max_bytes is not None else 1 << 62
    outside = lib.pp_file_sizes(names, n, native.address(sizes), SMALLEST, limit)
    listed = sizes.tolist()
    # not zeroed: written whole below, or dropped
    if not outside:  # the usual chunk: every file readable, of a size to read here
        bufs: list[Any] = list(map(_NEW_BYTES, repeat(None, n), listed))
        read = sizes
    else:
        bufs = [_NEW_BYTES(None, s) if SMALLEST <= s <= limit else None for s in listed]
        read = np.array([s if b is not None else -22 for s, b in zip(listed, bufs)], dtype=np.int64)  # -EINVAL: skip
    status = np.empty(n, dtype=np.int64)
    outs, _outs = bytes_pointers(bufs)
    failed = lib.pp_read_files(names, n, outs, native.address(read), native.address(status))
    if not failed and not outside:  # every file read: the usual batch
        return bufs
    out: list[bytes | OSError] = []
    for path, buf, size, err in zip(map(os.fsdecode, paths), bufs, listed, status.tolist()):
        if size > limit:
            out.append(_too_big(path, size, limit))
        elif buf is None:  # small, or the stat failed: Python reads it and says what is wrong
            out.append(_read_python(path, max_bytes) if size >= 0 or size == -22 else _error(-size, path))
        else:
            out.append(buf if err == 0 else _error(err, path))
    return out


def _error(err: int, path: str) -> OSError:
    if err == 22:  # EINVAL from the C code: not a regular file
        return OSError(err, "not a regular file", path)
    if err == 27:  # EFBIG from the C code: the size changed between the stat and the read
        return OSError(err, "the file changed while it was read", path)
    return OSError(err, os.strerror(err), path)


def _too_big(path: str, size: int, max_bytes: int) -> OSError:
    return OSError(errno.EFBIG, f"the file holds {size:,} bytes, more than max_bytes={max_bytes:,}", path)


def _read_python(path: str, max_bytes: int | None = None) -> bytes | OSError:
    """One file read in Python: opened without blocking (a FIFO cannot hang it), refused unless
    it is a regular file of at most max_bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return OSError(errno.EINVAL, "not a regular file", path)
        if max_bytes is not None and st.st_size > max_bytes:
            return _too_big(path, st.st_size, max_bytes)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
        if max_bytes is not None and len(data) > max_bytes:  # it grew since the stat
            return _too_big(path, len(data), max_bytes)
        return data
    except OSError as e:
        return OSError(e.errno, e.strerror, path)
    finally:
        os.close(fd)


def open_regular(path: str, buffering: int = -1) -> BinaryIO:
    """path opened for reading, if it is a regular file (symlinks followed); else an OSError
    (EINVAL, "not a regular file"). Opened without blocking first: a plain open of a FIFO
    waits for a writer that may never come."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def read_one(reader: Any, i: int) -> Any:
    """A reader's read(i) through its read_many: the sample, or the OSError reading it raised."""
    (got,) = reader.read_many([i])
    if isinstance(got, OSError):
        raise got
    return got
