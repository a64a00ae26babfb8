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
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ._base import IMAGE_EXTENSIONS, MAX_BYTES, ReaderError, Sample, Unreadable, check_skip, normalize_label
from ._files import open_regular
from ._tar_index import member_table, split_name
from ._tar_targets import MASK_EXTS, tar_targets

__all__ = ["TarShards"]

_IMAGE_EXTS = IMAGE_EXTENSIONS  # priority order: the first one present is the image
_LABEL_EXTS = ("cls", "txt", "json")  # priority order for the label
_WANTED = frozenset(_IMAGE_EXTS + _LABEL_EXTS + MASK_EXTS)
_GLOB_CHARS = re.compile(r"[*?[]")
_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")

# (key, {extension: bytes, None when not read, or _Oversized}, {extension: member name as stored})
Group = tuple[str, dict[str, Any], dict[str, str]]


class TarShards:
    """Samples stored in tar shards, webdataset layout.

    Args:
        paths: a tar path, a list of tar paths (kept in the given order), or a pattern: a glob
            ("train-*.tar", expanded and sorted) or a webdataset brace range
            ("train-{0000..0099}.tar"). Compressed tars (.tar.gz, ...) work too.
        count: scan the tar headers at construction to count the samples of each shard
            (`counts`, `len()`, running indices). Reads headers only, never image bytes.
        max_bytes: a member larger than this is not read: its sample is an `Unreadable`
            saying both sizes (256 MiB by default), never a read of gigabytes.

    Layout: members are grouped by key, the member path up to the first dot of its file name
    ("a/b/0001.seg.png" has key "a/b/0001" and extension "seg.png"); members of one sample
    must be consecutive. The image is the first of jpg, jpeg, png, webp, bmp present (matched
    case-insensitively). The label comes from the first of: "cls" (an int as text; several
    whitespace-separated ints make a multi-label), "txt" when it holds an int (a caption is
    ignored), "json" holding an int, a list of ints, or an object with "label" or "cls".
    Samples without a label get None; groups without an image (e.g. "__meta__.json", or a
    ".gif" and its ".cls") and members whose name has no extension are not samples: counting
    lists them in `ignored` as (shard:key, why), as Folder lists the files it ignores. Targets (readers._tar_targets): "boxes", "labels" and "keypoints"
    from a "json" object (its "box_format", default "xyxy", says how the boxes are written),
    "masks" from a "seg.png" or "mask.png" label image; a Pipeline moves them with the image.

    Indices: with `count=True` (default) a sample's `index` is a running global index:
    the samples of all earlier shards plus its position in its shard. With `count=False` the
    shard sizes are unknown and `index` is `(shard_id << 32) | position`; `len()` then raises
    a TypeError.

    Nothing is lost silently. A sample that cannot be made (a member above max_bytes, a label
    that does not parse) comes out of `iter_shard` as a `readers.Unreadable` in its place, and
    the stream goes on. A shard damaged past its first header (a corrupt header checksum, a
    file that ends inside a member, inside a header or without the end-of-archive blocks) is
    read up to the damage, then gives an Unreadable for each sample the damage took (the
    members found past a corrupt header, as GNU tar finds them; 1 where how many is unknown);
    the counts include them. What counting found wrong (damage, and keys that come back after
    other members, each run of which becomes a sample of its own) is listed in `problems` as
    (source, what), and a warning is issued when the reader is built.

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
                 count: bool = True, max_bytes: int = MAX_BYTES):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ReaderError(f"TarShards: max_bytes must be an int >= 1, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.problems: list[tuple[str, str]] = []
        self.shards: list[str] = _expand(paths)
        if not self.shards:
            raise ReaderError(f"TarShards: no shard paths given ({paths!r})")
        missing = [p for p in self.shards if not os.path.isfile(p)]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            what = "is not a regular file" if os.path.exists(missing[0]) else "does not exist"
            raise ReaderError(f"TarShards: shard {missing[0]!r} {what}{more}")
        self.counts: list[int] | None = None
        self._offsets: list[int] | None = None
        self.ignored: list[tuple[str, str]] = []  # found when counting
        if count:
            self.counts = []
            for p in self.shards:
                n, problems, ignored = _count_samples(p)
                self.counts.append(n)
                self.problems += problems
                self.ignored += ignored
            if self.problems:
                source, what = self.problems[0]
                more = f" (and {len(self.problems) - 1} more; see the reader's problems)" if len(self.problems) > 1 else ""
                warnings.warn(f"TarShards: {source}: {what}{more}", stacklevel=2)
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
        return _shard_samples(path, base, stop, skip, self.max_bytes)

    def __repr__(self) -> str:
        n = len(self) if self.counts is not None else "?"
        return f"TarShards(shards={len(self.shards)}, samples={n})"


# ------------------------------------------------------------------------------------ stages
class _Oversized:
    """A wanted member above max_bytes, in a group in place of its bytes (never read)."""

    def __init__(self, size: int) -> None:
        self.size = size


def _shard_samples(path: str, base: int, stop: int | None, skip: int, max_bytes: int) -> Iterator[Sample | Unreadable]:
    """The samples of one shard after the first `skip` (see TarShards.iter_shard), then, for a
    shard damaged past its first header, an Unreadable for each sample the damage took; and
    for a counted shard that ends or breaks off before its count (truncated since, or a
    compressed one), an Unreadable for each sample it no longer gives."""
    index, why = base + skip, "the shard ended early: it changed or was truncated since it was counted"
    try:
        table = member_table(path)  # an OSError here too: the shard is gone, or no regular file now
        members = _direct_members(path, table.members) if table is not None else _tar_members(path)
        for sample in _to_samples(_group_by_key(members, path, skip, max_bytes), path, base + skip, stop, max_bytes):
            yield sample
            index += 1
        if table is not None and table.damage is not None:
            readable = _count_groups((name for name, _, _ in table.members), path)
            lost = _lost_sources(path, table.lost)
            reason = _lost_reason(table.damage, len(lost), table.unknown)
            for k in range(max(skip, readable), readable + len(lost)):
                if stop is not None and base + k >= stop:
                    raise ValueError(f"{path}: the shard holds more samples than were counted when the reader "
                                     "was built; it changed since")
                yield Unreadable(lost[k - readable], base + k, reason)
                index = base + k + 1
    except OSError as e:  # a stream that breaks off: the samples it still owes are lost
        if stop is None:
            raise
        why = f"the shard broke off: {e}"
    for k in range(index, stop if stop is not None else index):
        yield Unreadable(path, k, f"{why}; {stop - index} sample(s) lost with it")  # type: ignore[operator]


def _tar_members(path: str) -> Iterator[tuple[str, int, Callable[[], bytes]]]:
    """Stage 1: yield (member name, size, loader) for each regular file of the tar, in order.

    The loader returns the member's bytes; it is valid only until the next member is taken
    (stream mode cannot go back). Tar format errors become OSErrors naming the shard.

    An uncompressed tar whose headers `member_table` understands is read directly
    (`_direct_members`): one seek and one read per wanted member, nothing for the others
    (tarfile costs ~50 us per member in Python; measured on the 2-core machine, it made tar
    shards ~10% slower than a folder). Anything else streams through tarfile here, which also
    reports what is wrong with a bad shard.
    """
    try:
        with open_regular(path) as f, tarfile.open(fileobj=f, mode="r|*") as tar:
            for info in tar:
                if info.isfile():
                    yield info.name, info.size, _loader(tar, info, path)
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise OSError(f"{path}: corrupt or truncated tar: {e}") from e


def _direct_members(path: str, table: list[tuple[str, int, int]]) -> Iterator[tuple[str, int, Callable[[], bytes]]]:
    with open_regular(path) as f:
        for name, offset, size in table:

            def load(offset: int = offset, size: int = size, name: str = name) -> bytes:
                f.seek(offset)
                data = f.read(size)
                if len(data) != size:
                    raise OSError(f"{path}:{name}: corrupt or truncated tar: {len(data)} of {size} bytes")
                return data

            yield name, size, load


def _loader(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str) -> Callable[[], bytes]:
    def load() -> bytes:
        try:
            f = tar.extractfile(info)
            assert f is not None  # regular files always have a file object
            return f.read()
        except (tarfile.TarError, EOFError, zlib.error) as e:
            raise OSError(f"{path}:{info.name}: corrupt or truncated tar: {e}") from e

    return load


def _group_by_key(members: Iterable[tuple[str, int, Callable[[], bytes] | None]], path: str,
                  skip: int = 0, max_bytes: int | None = None) -> Iterator[Group]:
    """Stage 2: merge consecutive members with the same key into one group.

    Only groups holding an image are yielded (they are the samples), and the first `skip` of
    them are dropped without loading any member. In a yielded group, image and label members
    map to their bytes (an _Oversized in place of a member above max_bytes, not read); other
    members map to None (present but not read).
    """
    done = 0  # samples (groups with an image) completed so far
    key: str | None = None
    group: dict[str, Any] = {}
    names: dict[str, str] = {}
    for name, size, load in members:
        parts = split_name(name)
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
        if load is None or done < skip or ext not in _WANTED:
            group[ext] = None
        elif max_bytes is not None and size > max_bytes:
            group[ext] = _Oversized(size)
        else:
            group[ext] = load()
        names[ext] = name
    if key is not None and _has_image(group) and done >= skip:
        yield key, group, names


def _has_image(group: dict[str, bytes | None]) -> bool:
    return any(ext in group for ext in _IMAGE_EXTS)


def _to_samples(groups: Iterable[Group], path: str, first_index: int, stop: int | None,
                max_bytes: int | None = None) -> Iterator[Sample | Unreadable]:
    """Stage 3: pick the image and the label of each group; number the samples. A sample that
    cannot be made (a member above max_bytes, a label that does not parse) is an Unreadable
    in its place: the stream goes on.

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
        big = next((e for e, v in group.items() if isinstance(v, _Oversized)), None)
        if big is not None:
            yield Unreadable(source, index, f"member {names[big]!r} holds {group[big].size:,} bytes, more than "
                                            f"max_bytes={max_bytes:,}; not read")
        else:
            try:
                yield Sample(group[ext], _label(group, source), source, index, tar_targets(group, ext, source))
            except ValueError as e:
                yield Unreadable(source, index, str(e))
        index += 1


def _label(group: dict[str, bytes | None], source: str) -> int | tuple[int, ...] | None:
    """The label of a group from its cls, txt or json member (see TarShards)."""
    if (raw := group.get("cls")) is not None:
        try:
            values = [int(v) for v in raw.split()]
        except ValueError:
            values = []
        if not values:
            raise ValueError(f"{source}: its .cls member ({len(raw)} bytes) is not an integer")
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


def _count_samples(path: str) -> tuple[int, list[tuple[str, str]], list[tuple[str, str]]]:
    """The samples of one shard, counted from its headers (member data is seeked over), what
    is wrong with it: (source, what) for damage past its first header (the samples lost to it
    are counted, each an Unreadable when streamed) and for keys that come back after other
    members (each run becomes a sample of its own), and what it holds that is no sample
    (`_ignored`).

    Uncompressed tars are scanned by `member_table`; anything it does not handle (compressed
    shards, unusual headers) goes through tarfile in random-access mode.
    """
    table = member_table(path)
    problems: list[tuple[str, str]] = []
    lost = 0
    if table is not None:
        names = [name for name, _, _ in table.members]
        if table.damage is not None:
            lost = len(_lost_sources(path, table.lost))
            problems.append((path, _lost_reason(table.damage, lost, table.unknown)))
    else:
        names = []
        try:
            with open_regular(path) as f, tarfile.open(fileobj=f, mode="r:*") as tar:
                for info in tar:
                    if info.isfile():
                        names.append(info.name)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
            if not names:
                raise ReaderError(f"TarShards: {path!r} is not a readable tar file: {e}") from e
            lost = 1  # the rest of a compressed shard cannot be read to count it
            problems.append((path, f"corrupt or truncated tar after {len(names)} members ({e}); how many samples "
                                   "it lost is unknown (counted as 1)"))
    try:
        n = _count_groups(names, path)
    except ValueError as e:
        raise ReaderError(f"TarShards: {e}") from e
    problems += [(f"{path}:{key}", "this key comes back after other members: each run of its members is a sample "
                                   "of its own (members of one sample must be consecutive)")
                 for key in _repeated_keys(names)]
    return n + lost, problems, _ignored(names, path)


def _ignored(names: list[str], path: str) -> list[tuple[str, str]]:
    """(source, why) for each run of one key's members without an image, and each member whose
    name has no extension: in the shard, but no sample. In the order of the shard."""
    out: list[tuple[int, str, str]] = []  # (position of the first member, source, why)
    key: str | None = None
    exts: list[str] = []
    first = 0

    def close() -> None:
        if key is not None and not any(e in _IMAGE_EXTS for e in exts):
            out.append((first, f"{path}:{key}", f"no image member: {', '.join('.' + e for e in exts)}, none of "
                                                f"{', '.join(sorted(_IMAGE_EXTS))}"))

    for position, name in enumerate(names):
        parts = split_name(name)
        if parts is None:  # left out of the runs, as _group_by_key leaves it
            out.append((position, f"{path}:{name}", "no extension: a member of no sample (a sample's members "
                                                    "are <key>.<extension>)"))
            continue
        if parts[0] != key:
            close()
            key, exts, first = parts[0], [], position
        exts.append(parts[1])
    close()
    return [(source, why) for _, source, why in sorted(out)]


def _count_groups(names: Iterable[str], path: str = "") -> int:
    """Samples (groups with an image) among member names."""
    return sum(1 for _ in _group_by_key(((name, 0, None) for name in names), path))


def _repeated_keys(names: list[str]) -> list[str]:
    """Keys whose members are not all consecutive, in the order they come back."""
    seen: set[str] = set()
    repeated: list[str] = []
    last = None
    for name in names:
        parts = split_name(name)
        if parts is None or parts[0] == last:
            continue
        last = parts[0]
        if last in seen and last not in repeated:
            repeated.append(last)
        seen.add(last)
    return repeated


def _lost_sources(path: str, lost: list[str]) -> list[str]:
    """A source for each sample lost to a shard's damage: its image member where the lost
    members' names are known, else the shard (one sample: how many is unknown)."""
    sources = []
    for key, group, names in _group_by_key(((name, 0, None) for name in lost), path):
        ext = next(e for e in _IMAGE_EXTS if e in group)
        sources.append(f"{path}:{names[ext]}")
    return sources or [path]


def _lost_reason(damage: str, lost: int, unknown: bool) -> str:
    if unknown:
        return (f"{damage}; the samples from the last one it cut on are lost, how many is unknown (counted as "
                f"{lost})")
    return f"{damage}; {lost} sample(s) of the shard lost with it"
