"""open_videos: the video reader for a path that holds videos, for the commands (`pixelpipe
inspect`, `pixelpipe show`), which take images and videos under the same --data.

A path holds videos when its files (a folder's, a list file's entries, a tar shard's members)
carry the video readers' extensions (readers.VIDEO_EXTENSIONS) at least as often as image ones
among the first files found (LOOKED_AT: a large image folder is not walked twice):
a folder then opens as a VideoFolder, a list file as a VideoFileList, tar shards as a
VideoTar. Anything else is left to the image readers.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from typing import Any

from ..readers import VIDEO_EXTENSIONS, FileList, ReaderError, VideoFileList, VideoFolder, VideoTar
from ..readers._base import IMAGE_EXTENSIONS

__all__ = ["open_videos"]

_LIST_SUFFIXES = (".txt", ".csv", ".lst")
_TAR_SUFFIXES = (".tar",)  # a VideoTar needs random access: compressed shards are never videos here
LOOKED_AT = 10_000  # the files (entries, members) that decide


def _mostly_videos(names: Iterable[str]) -> bool:
    videos = images = 0
    for name in itertools.islice(names, LOOKED_AT):
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        videos += ext in VIDEO_EXTENSIONS
        images += ext in IMAGE_EXTENSIONS
    return videos > 0 and videos >= images


def _walk(root: str) -> Iterable[str]:
    for _, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        yield from (f for f in files if not f.startswith("."))


def open_videos(data: Any) -> Any:
    """A VideoFolder, VideoFileList or VideoTar for `data` when it holds videos (module
    docstring), else None. A video reader given is returned as it is.

    Raises:
        ReaderError: the path holds videos but the reader refuses it (a damaged shard, a key
            with two videos), naming the path and why.
    """
    if getattr(data, "video", False) and getattr(data, "indexable", False):
        return data
    if not isinstance(data, (str, os.PathLike)):
        return None
    path = os.fspath(data)
    if os.path.isdir(path):
        return VideoFolder(path) if _mostly_videos(_walk(path)) else None
    lower = path.lower()
    if lower.endswith(_LIST_SUFFIXES) and os.path.isfile(path):
        try:
            listed = FileList(path)
        except ReaderError:
            return None  # the image reader says what is wrong with it
        names = [listed.sources(i) for i in range(min(len(listed), LOOKED_AT))]
        return VideoFileList(path) if _mostly_videos(names) else None
    if lower.endswith(_TAR_SUFFIXES) or "{" in path or "*" in path or "?" in path:
        return _tar(path)
    return None


def _tar(path: str) -> Any:
    from ..readers._tar_index import random_access_members
    from ..readers._video_tar import shard_paths

    try:
        shards = shard_paths(path)
    except ReaderError:
        return None
    first = next((s for s in shards if os.path.isfile(s)), None)
    if first is None or not first.lower().endswith(_TAR_SUFFIXES):
        return None
    try:
        names = [name for name, _, _ in random_access_members(first, "use an uncompressed shard")]
    except (ReaderError, OSError, ValueError):
        return None  # compressed or damaged: the image reader reports it
    return VideoTar(shards) if _mostly_videos(names) else None
