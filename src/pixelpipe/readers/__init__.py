"""Readers: the sources of encoded samples, the first stage of a pipeline.

Indexable readers (random access; `read(i)`, `labels`): `Folder`, `FileList`, `Memory`, and
`Iterable` over a sequence or a function of the index. Streaming readers (`iter_shard`):
`TarShards`, and `Iterable` over a generator. `open_reader` picks one from a path or object.
Detection datasets, indexable, with boxes and labels in each sample's targets: `Coco`, `Voc`,
`Yolo`. Videos, indexable, one sample per video (a VideoPipeline cuts clips from them):
`VideoFolder`, `VideoFileList`, `VideoTar` (uncompressed tar shards of videos).
`Yolo`. Volumes (NIfTI, NumPy, files or tar shards; with label maps): `Volumes`, and
`load_volume` for one file.
"""

from ._base import IndexableReader, ReaderError, Sample, StreamingReader, Unreadable
from ._coco import Coco
from ._filelist import FileList
from ._folder import Folder
from ._iterable import Iterable
from ._memory import Memory
from ._nifti import Volumes, VolumeSample, load_volume
from ._open import open_reader
from ._tar import TarShards
from ._video import VIDEO_EXTENSIONS, VideoFileList, VideoFolder
from ._video_tar import VideoTar
from ._voc import Voc
from ._yolo import Yolo

__all__ = [
    "Coco",
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
    "VIDEO_EXTENSIONS",
    "VideoFileList",
    "VideoFolder",
    "VideoTar",
    "Voc",
    "VolumeSample",
    "Volumes",
    "Yolo",
    "load_volume",
    "open_reader",
]
