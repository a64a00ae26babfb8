"""Video readers: a folder of class sub-folders of videos, and a list file of videos and labels.

They are the image readers (`Folder`, `FileList`) with video file extensions: the same listing,
labels, symlink rules, `ignored` list and errors. A sample is one video; `sources(i)` is its
path, which a VideoPipeline hands to the decoder (a video is opened and seeked in place, never
read whole); `read(i)` still gives its bytes for other uses.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ._base import MAX_BYTES
from ._filelist import FileList
from ._folder import Folder

__all__ = ["VIDEO_EXTENSIONS", "VideoFileList", "VideoFolder"]

# File name extensions (lower case, no dot) that VideoFolder treats as videos by default.
VIDEO_EXTENSIONS: tuple[str, ...] = ("mp4", "m4v", "mov", "mkv", "webm", "avi")


class VideoFolder(Folder):
    """Videos under `root/<class name>/...`, labelled by class (or a flat folder, unlabeled).

    Args:
        root: the dataset folder; each subfolder is a class, its label the index of its name in
            sorted order (`classes`).
        extensions: file name extensions counted as videos (default VIDEO_EXTENSIONS).
        follow_symlinks, max_bytes: as Folder's (max_bytes only bounds `read(i)`).

    Everything else is Folder's: files sorted by path, hidden files skipped, what is not a
    video listed in `ignored` with the reason.

    Example:
        >>> reader = VideoFolder("/data/kinetics/train")   # doctest: +SKIP
        >>> reader.classes[:2], reader.sources(0)          # doctest: +SKIP
        (['abseiling', 'air drumming'], '/data/kinetics/train/abseiling/0001.mp4')
    """

    video = True

    def __init__(self, root: str | os.PathLike[str], extensions: Iterable[str] = VIDEO_EXTENSIONS,
                 follow_symlinks: str = "inside", max_bytes: int = 16 * MAX_BYTES) -> None:
        super().__init__(root, extensions, follow_symlinks, max_bytes)

    def __repr__(self) -> str:
        return "Video" + super().__repr__()


class VideoFileList(FileList):
    """Videos listed in a text or CSV file, a path and integer labels per line (FileList's
    format: `clips/a.mp4 3`), paths relative to `root` (default: the list file's folder).

    Example:
        >>> reader = VideoFileList("/data/ssv2/train.txt", root="/data/ssv2/videos")  # doctest: +SKIP
    """

    video = True

    def __init__(self, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None,
                 max_bytes: int = 16 * MAX_BYTES) -> None:
        super().__init__(path, root, max_bytes)

    def __repr__(self) -> str:
        return "Video" + super().__repr__()
