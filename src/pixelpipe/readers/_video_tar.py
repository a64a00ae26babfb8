"""Videos in tar shards (webdataset's layout): members `KEY.mp4` (any of VIDEO_EXTENSIONS) with,
optionally, `KEY.cls` (the label: an integer as text), `KEY.txt` or `KEY.json` beside them,
indexed once so that the shards are read like a folder: by video, in any order, shuffled,
sharded and resumed by a VideoPipeline.

A video is read with one seek and one read of its member and decoded from memory (the NVDEC
decoder reads files, so videos from shards decode on the CPU: `decode_stats` counts them).
The shards must be uncompressed: a compressed tar has no random access.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ._base import MAX_BYTES, ReaderError, Sample, check_index, labels_tensor
from ._tar import _expand, _label
from ._tar_index import random_access_members, split_name
from ._video import VIDEO_EXTENSIONS

__all__ = ["VideoTar", "shard_paths"]

_LABEL_EXTS = ("cls", "txt", "json")


def shard_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """The shards a VideoTar reads for `paths`: globs and brace ranges expanded, as TarShards
    expands them (ReaderError when a glob matches nothing)."""
    return _expand(paths)


@dataclass(frozen=True)
class _Member:
    shard: str
    name: str
    offset: int
    size: int

    def read(self) -> bytes:
        with open(self.shard, "rb") as f:
            f.seek(self.offset)
            data = f.read(self.size)
        if len(data) != self.size:
            raise OSError(f"{self.shard}:{self.name}: the shard ends {self.size - len(data)} bytes into the member")
        return data


class VideoTar:
    """Videos from uncompressed tar shards, one sample per `KEY.<video extension>` member.

    Args:
        paths: a shard, a list of shards, a glob ("train-*.tar") or a webdataset brace range
            ("train-{0000..0099}.tar"), as TarShards takes them.
        extensions: member extensions counted as videos (default VIDEO_EXTENSIONS).
        max_bytes: a video member larger than this is refused at construction (a damaged size
            field would otherwise ask for gigabytes).

    Labels come from each key's `.cls` member (or an integer `.txt`, or `.json` with "label"),
    read at construction; a dataset whose videos all lack one is unlabeled (`labels` None), one
    where only some have one is refused. A key with two video members, a damaged or compressed
    shard, and shards without any video are ReaderErrors naming the shard.

    Example:
        >>> reader = VideoTar("kinetics-train-{0000..0099}.tar")   # doctest: +SKIP
        >>> pipe = VideoPipeline(reader, [RandomResizedCrop(112)], batch_size=8)  # doctest: +SKIP
    """

    indexable = True
    video = True
    reads_files = False  # samples are bytes: a VideoPipeline decodes them from memory

    def __init__(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                 extensions: Iterable[str] = VIDEO_EXTENSIONS, max_bytes: int = 16 * MAX_BYTES) -> None:
        exts = tuple(e.lower().lstrip(".") for e in extensions)
        self.shards = shard_paths(paths)
        if not self.shards:
            raise ReaderError("VideoTar: no shards given")
        self._videos: list[_Member] = []
        found: list[int | tuple[int, ...] | None] = []
        for shard in self.shards:
            if not os.path.isfile(shard):
                raise ReaderError(f"VideoTar: no tar shard at {shard}")
            groups: dict[str, dict[str, _Member]] = {}
            for name, offset, size in random_access_members(shard, "use an uncompressed shard"):
                split = split_name(name)
                if split is None or (split[1] not in exts and split[1] not in _LABEL_EXTS):
                    continue
                slot = groups.setdefault(split[0], {})
                kind = "video" if split[1] in exts else split[1]
                if kind in slot:
                    raise ReaderError(f"{shard}: key {split[0]} has two {kind} members "
                                      f"({slot[kind].name}, {name})")
                slot[kind] = _Member(shard, name, offset, size)
            for key, slot in groups.items():
                if "video" not in slot:
                    continue  # a label without its video: nothing to read
                video = slot["video"]
                if video.size > max_bytes:
                    raise ReaderError(f"{shard}:{video.name}: {video.size} bytes, over max_bytes={max_bytes}")
                raw = {k: slot[k].read() for k in _LABEL_EXTS if k in slot}
                try:
                    found.append(_label(raw, f"{shard}:{key}"))
                except ValueError as e:
                    raise ReaderError(str(e)) from None
                self._videos.append(video)
        if not self._videos:
            raise ReaderError(f"VideoTar: the shards hold no video members ({', '.join(exts)})")
        missing = sum(label is None for label in found)
        if 0 < missing < len(found):
            first = next(v for v, label in zip(self._videos, found) if label is None)
            raise ReaderError(f"VideoTar: {missing} of {len(found)} videos have no label (.cls, .txt or .json), "
                              f"e.g. {first.shard}:{first.name}")
        self._found = found
        self._labels = None if missing else labels_tensor(found, "VideoTar")

    def __len__(self) -> int:
        return len(self._videos)

    @property
    def labels(self) -> torch.Tensor | None:
        """int64 [N] (one label per video), or None for an unlabeled dataset."""
        return self._labels

    def sources(self, i: int) -> str:
        m = self._videos[check_index(i, len(self), "VideoTar")]
        return f"{m.shard}:{m.name}"

    def read(self, i: int) -> Sample:
        m = self._videos[check_index(i, len(self), "VideoTar")]
        return Sample(m.read(), self._found[i], f"{m.shard}:{m.name}", i)

    def __repr__(self) -> str:
        return f"VideoTar({len(self.shards)} shard(s), {len(self)} videos)"
