"""open_reader: pick a reader from what the user has (a path, a pattern, a list, a reader)."""

from __future__ import annotations

import os
import re
from collections import abc
from typing import Any

from ._base import IndexableReader, ReaderError, StreamingReader
from ._filelist import FileList
from ._folder import Folder
from ._iterable import Iterable
from ._memory import Memory
from ._tar import TarShards

__all__ = ["open_reader"]

_LIST_SUFFIXES = (".txt", ".csv", ".lst")
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
_PATTERN = re.compile(r"[*?[]|\{\d+\.\.\d+\}")


def open_reader(spec: Any) -> IndexableReader | StreamingReader:
    """Return a reader for spec.

    * a reader (anything with `indexable` and `read` or `iter_shard`): returned as is;
    * a path (str or os.PathLike): a folder -> `Folder` (class subfolders, or a flat folder
      of unlabeled images); a .txt/.csv/.lst file -> `FileList`;
      a tar file (.tar, .tar.gz, .tgz, ...), or a glob / brace pattern of them -> `TarShards`;
    * a list or tuple of tar paths -> `TarShards`; any other list or tuple -> `Memory`;
    * an object with `__getitem__` and `__len__` (a map-style Dataset) -> indexable
      `Iterable`; any other iterable or generator -> streaming `Iterable`.

    A function of the index needs a length, so it is refused here: use
    `Iterable(fn, length=N)`.

    Raises:
        ReaderError: the path does not exist or its kind cannot be told from its name.

    Example:
        >>> open_reader("/data/imagenet/train")        # doctest: +SKIP
        Folder('/data/imagenet/train', samples=1281167, classes=1000)
    """
    if hasattr(spec, "indexable") and (hasattr(spec, "read") or hasattr(spec, "iter_shard")):
        return spec  # type: ignore[no-any-return]
    if isinstance(spec, (str, os.PathLike)):
        return _open_path(os.fspath(spec))
    if isinstance(spec, (bytes, bytearray, memoryview)):
        raise ReaderError("open_reader: got bytes; wrap one encoded image in a list "
                          "(Memory([data])) or pass a path as str")
    if isinstance(spec, (list, tuple)):
        if spec and all(isinstance(p, (str, os.PathLike)) for p in spec):
            if all(_is_tar(os.fspath(p)) for p in spec):
                return TarShards(spec)
            raise ReaderError("open_reader: a list of paths is only understood when they are "
                              "all tar shards; use FileList for lists of images")
        return Memory(spec)
    if callable(spec) and not isinstance(spec, abc.Iterable):
        raise ReaderError("open_reader: a function needs a length; use Iterable(fn, length=N)")
    return Iterable(spec)  # datasets with __getitem__ and __len__, iterables; refuses the rest


def _is_tar(path: str) -> bool:
    return path.lower().endswith(_TAR_SUFFIXES)


def _open_path(path: str) -> Folder | FileList | TarShards:
    if os.path.isdir(path):
        return Folder(path)
    lower = path.lower()
    if _is_tar(lower):
        return TarShards(path)  # also expands globs and brace ranges
    if lower.endswith(_LIST_SUFFIXES):
        return FileList(path)
    if not os.path.exists(path) and not _PATTERN.search(path):
        raise ReaderError(f"open_reader: {path!r} does not exist")
    raise ReaderError(f"open_reader: cannot tell which reader reads {path!r}; expected a folder, "
                      f"a list file ({', '.join(_LIST_SUFFIXES)}) or tar shards "
                      f"({', '.join(_TAR_SUFFIXES)}), or build a reader yourself")
