"""TarShards: webdataset-style tar files, streamed member by member.

A shard is read as a chain of small iterator stages, each mapping an iterator to an iterator:

    _tar_members(path)  ->  (member name, loader)        one tar header at a time
    _group_by_key(...)  ->  (key, {extension: bytes})    consecutive members sharing a key
    _to_samples(...)    ->  Sample                       image + label picked from a group

The tar is opened in stream mode ("r|*"), so it is read strictly forwards (local disk, a pipe
or a network file behave the same) and nothing is extracted to disk. A member's bytes are
read only when a stage asks for them; members of skipped samples and members that are neither
an image nor a label are passed over without building their bytes.

At construction every shard's headers are scanned once to count samples (`_tar_index`, which
seeks over member data instead of reading it); pass `count=False` to skip that scan for shards
on slow storage.
"""

from __future__ import annotations

import glob
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator

from ._base import IMAGE_EXTENSIONS, ReaderError, Sample, check_skip, normalize_label
from ._tar_index import member_names, member_table

__all__ = ["TarShards"]

_IMAGE_EXTS = IMAGE_EXTENSIONS  # priority order: the first one present is the image
_LABEL_EXTS = ("cls", "txt", "json")  # priority order for the label
_WANTED = frozenset(_IMAGE_EXTS + _LABEL_EXTS)
_GLOB_CHARS = re.compile(r"[*?[]")
_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")

# (key, {extension: bytes, or None when not read}, {extension: member name as stored})
Group = tuple[str, dict[str, bytes | None], dict[str, str]]


class TarShards:
    """Samples stored in tar shards, webdataset layout.

    Args:
        paths: a tar path, a list of tar paths (kept in the given order), or a pattern: a glob
            ("train-*.tar", expanded and sorted) or a webdataset brace range
            ("train-{0000..0099}.tar"). Compressed tars (.tar.gz, ...) work too.
        count: scan the tar headers at construction to count the samples of each shard
            (`counts`, `len()`, running indices). Reads headers only, never image bytes.

    Layout: members are grouped by key, the member path up to the first dot of its file name
    ("a/b/0001.seg.png" has key "a/b/0001" and extension "seg.png"); members of one sample
    must be consecutive. The image is the first of jpg, jpeg, png, webp, bmp present (matched
    case-insensitively). The label comes from the first of: "cls" (an int as text; several
    whitespace-separated ints make a multi-label), "txt" when it holds an int (a caption is
    ignored), "json" holding an int, a list of ints, or an object with "label" or "cls".
    Samples without a label get None; groups without an image (e.g. "__meta__.json") are not
    samples and are skipped.

    Indices: with `count=True` (default) a sample's `index` is a running global index:
    the samples of all earlier shards plus its position in its shard. With `count=False` the
    shard sizes are unknown and `index` is `(shard_id << 32) | position`; `len()` then raises
    a TypeError.

    Raises:
        ReaderError: no paths, a pattern matching nothing, a missing file, a file that is not a
            tar, or (when counting) two members with the same key and extension.

    Example:
        >>> reader = TarShards("/data/train-{0000..0146}.tar")  # doctest: +SKIP
        >>> next(reader.iter_shard(0, skip=10)).source            # doctest: +SKIP
        '/data/train-0000.tar:n01440764_10026.JPEG'
    """

    indexable = False
    classes: list[str] | None = None

    def __init__(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                 count: bool = True):
        self.shards: list[str] = _expand(paths)
        if not self.shards:
            raise ReaderError(f"TarShards: no shard paths given ({paths!r})")
        missing = [p for p in self.shards if not os.path.isfile(p)]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise ReaderError(f"TarShards: shard {missing[0]!r} does not exist{more}")
        self.counts: list[int] | None = None
        self._offsets: list[int] | None = None
        if count:
            self.counts = [_count_samples(p) for p in self.shards]
            self._offsets = [0]
            for c in self.counts[:-1]:
                self._offsets.append(self._offsets[-1] + c)

    def __len__(self) -> int:
        if self.counts is None:
            raise TypeError("TarShards(count=False) does not know its length; build it with "
                            "count=True to scan the tar headers")
        return sum(self.counts)

    def iter_shard(self, shard_id: int, skip: int = 0) -> Iterator[Sample]:
        """Yield the samples of shard `shard_id` in stored order, after the first `skip`.

        The skipped samples' members are passed over without reading their bytes into
        Python objects; the stream still has to be read through to reach the rest.
        """
        shard_id, skip = check_skip(shard_id, skip, len(self.shards))
        path = self.shards[shard_id]
        if self._offsets is not None and self.counts is not None:
            base = self._offsets[shard_id]
            stop: int | None = base + self.counts[shard_id]
        else:
            base, stop = shard_id << 32, None
        groups = _group_by_key(_tar_members(path), path, skip)
        return _to_samples(groups, path, base + skip, stop)

    def __repr__(self) -> str:
        n = len(self) if self.counts is not None else "?"
        return f"TarShards(shards={len(self.shards)}, samples={n})"


# ------------------------------------------------------------------------------------ stages
def _tar_members(path: str) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """Stage 1: yield (member name, loader) for each regular file of the tar, in order.

    The loader returns the member's bytes; it is valid only until the next member is taken
    (stream mode cannot go back). Tar format errors become OSErrors naming the shard.

    An uncompressed tar whose headers `member_table` understands is read directly: one seek and
    one read per wanted member, nothing for the others (tarfile costs ~50 us per member in
    Python; measured on the 2-core machine, it made tar shards ~10% slower than a folder).
    Anything else streams through tarfile, which also reports what is wrong with a bad shard.
    """
    table = member_table(path)
    if table is not None:
        yield from _direct_members(path, table)
        return
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|*") as tar:
            for info in tar:
                if info.isfile():
                    yield info.name, _loader(tar, info, path)
    except (tarfile.TarError, EOFError) as e:
        raise OSError(f"{path}: corrupt or truncated tar: {e}") from e


def _direct_members(path: str, table: list[tuple[str, int, int]]) -> Iterator[tuple[str, Callable[[], bytes]]]:
    with open(path, "rb") as f:
        for name, offset, size in table:

            def load(offset: int = offset, size: int = size, name: str = name) -> bytes:
                f.seek(offset)
                data = f.read(size)
                if len(data) != size:
                    raise OSError(f"{path}:{name}: corrupt or truncated tar: {len(data)} of {size} bytes")
                return data

            yield name, load


def _loader(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str) -> Callable[[], bytes]:
    def load() -> bytes:
        try:
            f = tar.extractfile(info)
            assert f is not None  # regular files always have a file object
            return f.read()
        except (tarfile.TarError, EOFError) as e:
            raise OSError(f"{path}:{info.name}: corrupt or truncated tar: {e}") from e

    return load


def _split_name(name: str) -> tuple[str, str] | None:
    """("dir/0001", "seg.png") for "dir/0001.seg.png"; None for a name without an extension."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:  # no dot, or a dot file such as "dir/.hidden"
        return None
    return name[:dot], name[dot + 1 :].lower()


def _group_by_key(members: Iterable[tuple[str, Callable[[], bytes] | None]], path: str,
                  skip: int = 0) -> Iterator[Group]:
    """Stage 2: merge consecutive members with the same key into one group.

    Only groups holding an image are yielded (they are the samples), and the first `skip` of
    them are dropped without loading any member. In a yielded group, image and label members
    map to their bytes; other members map to None (present but not read).
    """
    done = 0  # samples (groups with an image) completed so far
    key: str | None = None
    group: dict[str, bytes | None] = {}
    names: dict[str, str] = {}
    for name, load in members:
        parts = _split_name(name)
        if parts is None:
            continue
        k, ext = parts
        if k != key:
            if key is not None and _has_image(group):
                if done >= skip:
                    yield key, group, names
                done += 1
            key, group, names = k, {}, {}
        if ext in group:
            raise ValueError(f"{path}:{name}: a second '.{ext}' member for key {k!r}; members "
                             "of one sample must have distinct extensions")
        group[ext] = load() if load is not None and done >= skip and ext in _WANTED else None
        names[ext] = name
    if key is not None and _has_image(group) and done >= skip:
        yield key, group, names


def _has_image(group: dict[str, bytes | None]) -> bool:
    return any(ext in group for ext in _IMAGE_EXTS)


def _to_samples(groups: Iterable[Group], path: str, first_index: int,
                stop: int | None) -> Iterator[Sample]:
    """Stage 3: pick the image and the label of each group; number the samples.

    `stop` is the first index past the shard when it was counted: a shard that grew since
    would give indices belonging to the next shard, so that is an error.
    """
    index = first_index
    for _, group, names in groups:
        ext = next(e for e in _IMAGE_EXTS if e in group)
        source = f"{path}:{names[ext]}"
        if stop is not None and index >= stop:
            raise ValueError(f"{source}: the shard holds more samples than were counted when "
                             "the reader was built; it changed since")
        yield Sample(group[ext], _label(group, source), source, index)
        index += 1


def _label(group: dict[str, bytes | None], source: str) -> int | tuple[int, ...] | None:
    """The label of a group from its cls, txt or json member (see TarShards)."""
    if (raw := group.get("cls")) is not None:
        try:
            values = [int(v) for v in raw.split()]
        except ValueError:
            values = []
        if not values:
            raise ValueError(f"{source}: .cls member {raw[:40]!r} is not an integer")
        return values[0] if len(values) == 1 else tuple(values)
    if (raw := group.get("txt")) is not None:
        try:
            return int(raw)
        except ValueError:
            pass  # a caption, not a label
    if (raw := group.get("json")) is not None:
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{source}: .json member is not valid JSON: {e}") from e
        if isinstance(value, dict):
            value = value.get("label", value.get("cls"))
        if isinstance(value, (int, list)):
            return normalize_label(value, source)
    return None


# ---------------------------------------------------------------------------- construction
def _expand(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """Turn the user's paths argument into a list of shard paths (see TarShards)."""
    if isinstance(paths, (str, os.PathLike)):
        spec = os.fspath(paths)
        if not isinstance(spec, str):
            raise ReaderError(f"TarShards: paths must be text, got {spec!r}")
        expanded = _expand_braces(spec)
        if len(expanded) > 1 or not _GLOB_CHARS.search(spec):
            return expanded
        found = sorted(glob.glob(spec))
        if not found:
            raise ReaderError(f"TarShards: no file matches {spec!r}")
        return found
    if isinstance(paths, (bytes, bytearray)):
        raise ReaderError("TarShards: paths must be str or os.PathLike, got bytes")
    return [os.fspath(p) for p in paths]


def _expand_braces(spec: str) -> list[str]:
    """Expand webdataset ranges: "s-{08..10}.tar" -> ["s-08.tar", "s-09.tar", "s-10.tar"]."""
    m = _BRACES.search(spec)
    if m is None:
        return [spec]
    lo, hi = m.group(1), m.group(2)
    width = len(lo) if lo.startswith("0") else 0
    step = 1 if int(hi) >= int(lo) else -1
    out = []
    for n in range(int(lo), int(hi) + step, step):
        out += _expand_braces(spec[: m.start()] + str(n).zfill(width) + spec[m.end() :])
    return out


def _count_samples(path: str) -> int:
    """Count the samples of one shard from its headers; member data is seeked over.

    Uncompressed tars are scanned by `member_names`; anything it does not handle (compressed
    shards, unusual headers) goes through tarfile in random-access mode.
    """
    names = member_names(path)
    if names is None:
        try:
            with tarfile.open(path, mode="r:*") as tar:
                names = [info.name for info in tar if info.isfile()]
        except (tarfile.TarError, EOFError) as e:
            raise ReaderError(f"TarShards: {path!r} is not a readable tar file: {e}") from e
    try:
        return sum(1 for _ in _group_by_key(((name, None) for name in names), path))
    except ValueError as e:
        raise ReaderError(f"TarShards: {e}") from e
