"""Readers: the sources of encoded samples, the first stage of a pipeline.

Indexable readers (random access; `read(i)`, `labels`): `Folder`, `FileList`, `Memory`, and
`Iterable` over a sequence or a function of the index. Streaming readers (`iter_shard`):
`TarShards`, and `Iterable` over a generator. `open_reader` picks one from a path or object.
"""

from ._base import IndexableReader, ReaderError, Sample, StreamingReader, Unreadable
from ._filelist import FileList
from ._folder import Folder
from ._iterable import Iterable
from ._memory import Memory
from ._open import open_reader
from ._tar import TarShards

__all__ = [
    "FileList",
    "Folder",
    "IndexableReader",
    "Iterable",
    "Memory",
    "ReaderError",
    "Sample",
    "StreamingReader",
    "TarShards",
    "Unreadable",
    "open_reader",
]
