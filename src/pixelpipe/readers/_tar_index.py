"""Member names (and where their data lies) of an uncompressed tar, from its 512-byte headers.

TarShards counts the samples of every shard at construction. `tarfile` would do it, but it
decodes every field of every header in Python (about 50 us per member: 2 minutes for the 2.5
million members of ImageNet in tars). Here each header costs one read of 512 bytes, a checksum
and two small field decodes; member data is seeked over, never read.

Only what datasets use is handled: ustar, GNU and pax headers, GNU long names ("L") and pax
"path"/"size" records. Anything else (compressed files, sparse members, global pax headers,
long link names, a first header that is no tar header) returns None and the caller falls back
to `tarfile`, so the names agree with what `tarfile` reports when the shard is streamed. Where
they cannot agree is damage past the first header: tarfile ends a shard silently at a corrupt
header, and at the end of a file cut at a member boundary; here the damage is told (`Table`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ._files import open_regular

__all__ = ["Table", "member_names", "member_table", "split_name"]

_BLOCK = 512
_REGULAR = frozenset(b"0\x007")  # type flags tarfile treats as regular files
_NO_DATA = frozenset(b"123456")  # links, devices, dirs, fifos: tarfile skips no data after them
_FALLBACK = frozenset(b"gXKS")  # global pax, Solaris pax, long link name, sparse: use tarfile
_CHUNK = 1 << 20  # bytes read at once when looking for headers past a corrupt one


@dataclass
class Table:
    """A shard's regular-file members, as far as they can be read.

    members: (name, data offset, size) of each member that can be read, in order.
    damage: what is wrong with the shard (a corrupt header, the file ending inside a member or
        a header, or without the end-of-archive blocks), or None.
    lost: the names of the members lost to the damage, as far as they can be told (a corrupt
        header's name field and the members found past it).
    unknown: whether more may be lost than `lost` names (the file ends: what came after is gone).
    """

    members: list[tuple[str, int, int]]
    damage: str | None = None
    lost: list[str] = field(default_factory=list)
    unknown: bool = False


def split_name(name: str) -> tuple[str, str] | None:
    """("dir/0001", "seg.png") for "dir/0001.seg.png" (webdataset's key and extension); None for
    a name without an extension."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:  # no dot, or a dot file such as "dir/.hidden"
        return None
    return name[:dot], name[dot + 1 :].lower()


def member_names(path: str) -> list[str] | None:
    """Names of the regular-file members of the tar at path, in order, or None (see above)."""
    table = member_table(path)
    return None if table is None else [name for name, _, _ in table.members]


def member_table(path: str) -> Table | None:
    """The shard's members (see Table), or None for what is left to tarfile (see above).
    Streaming a shard reads each wanted member with one seek and one read.

    A shard damaged past its first header is not refused: its members up to the damage are
    listed, and what is lost is told, as GNU tar tells it (a checksum error, an unexpected end
    of file), never a silent end."""
    names: list[tuple[str, int, int]] = []
    with open_regular(path, buffering=0) as f:
        end = os.fstat(f.fileno()).st_size
        if end < _BLOCK:
            return None
        offset = 0
        long_name: str | None = None
        pax: dict[bytes, bytes] = {}
        while offset + _BLOCK <= end:
            f.seek(offset)
            block = f.read(_BLOCK)
            if block.count(0) == _BLOCK:  # end-of-archive marker
                return Table(names)
            size = _number(block[124:136])
            if size is None or _number(block[148:156]) != _checksum(block):
                if offset == 0:
                    return None  # not a tar this scan reads (tarfile says what it is)
                lost = [_text(block[:100].split(b"\0", 1)[0])] + _headers_after(f, offset + _BLOCK, end)
                return _damaged(names, f"a corrupt tar header at byte {offset:,} (its checksum does not match)", lost)
            kind = block[156]
            if kind in _FALLBACK:
                return None
            data = offset + _BLOCK
            if data + (0 if kind in _NO_DATA else size) > end:  # the data runs past the end of the file
                name = _text(block[:100].split(b"\0", 1)[0])
                why = (f"truncated tar: member {name!r} claims {size:,} bytes, but the file ends "
                       f"{end - data:,} bytes into it")
                after = _headers_after(f, data, end)
                return _damaged(names, why, [name] + after, unknown=not after)
            if kind in (ord("L"), ord("x")):
                f.seek(data)
                payload = f.read(size)
                if kind == ord("L"):
                    long_name = _text(payload.split(b"\0", 1)[0])
                elif (parsed := _pax_records(payload)) is None:
                    return None
                else:
                    pax = parsed
                offset = data + _blocks(size)
                continue
            name = _text(block[:100].split(b"\0", 1)[0])
            prefix = block[345:500].split(b"\0", 1)[0]
            if prefix:
                name = _text(prefix) + "/" + name
            if long_name is not None:
                name = long_name
            if b"path" in pax:
                name = _text(pax[b"path"]).rstrip("/")
            if b"size" in pax:
                try:
                    size = int(pax[b"size"])
                except ValueError:
                    size = 0
            long_name, pax = None, {}
            regular = kind in _REGULAR and not (kind == 0 and name.endswith("/"))
            if regular:
                names.append((name, data, size))
            offset = data + (0 if kind in _NO_DATA else _blocks(size))
    if offset < end:
        return _damaged(names, f"truncated tar: the file ends inside a header, at byte {end:,}", [], unknown=True)
    return _damaged(names, f"truncated tar: the file ends at byte {end:,} without the end-of-archive blocks", [],
                    unknown=True)


def _damaged(names: list[tuple[str, int, int]], why: str, lost: list[str], unknown: bool = False) -> Table:
    """A Table for a damaged shard. The members of the sample the damage cut in two (the last
    readable ones sharing the first lost one's key; where the file just ends, the last
    sample's, which may have had more) are lost with it: an image without its label is not
    a sample."""
    first = split_name(lost[0]) if lost else split_name(names[-1][0]) if names else None
    while first is not None and names and (split_name(names[-1][0]) or ("",))[0] == first[0]:
        lost.insert(0, names.pop()[0])
    return Table(names, why, lost, unknown)


def _headers_after(f: Any, start: int, end: int) -> list[str]:
    """Names of the regular-file members whose (ustar, GNU or pax) headers lie past a corrupt
    one: every 512-byte block from `start` on that carries the "ustar" magic and a valid
    checksum, as GNU tar finds them when it skips to the next header. Read a MiB at a time."""
    found: list[str] = []
    pos = start - (start % _BLOCK)
    while pos + _BLOCK <= end:
        f.seek(pos)
        buf = f.read(min(_CHUNK, end - pos))
        k = buf.find(b"ustar", 257)
        while k >= 0:
            at = k - 257
            if at % _BLOCK == 0 and at + _BLOCK <= len(buf):
                block = buf[at : at + _BLOCK]
                if _number(block[148:156]) == _checksum(block) and block[156] in _REGULAR:
                    found.append(_text(block[:100].split(b"\0", 1)[0]))
            k = buf.find(b"ustar", k + 1)
        pos += len(buf) - len(buf) % _BLOCK or _BLOCK
    return found


def _blocks(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _number(field: bytes) -> int | None:
    """A numeric header field: octal text, or GNU base-256 (first byte 0x80); None if invalid."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    if field[0] == 0xFF:
        return None  # negative base-256: never a valid size or checksum
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return None


def _checksum(block: bytes) -> int:
    """The unsigned header checksum: all bytes, with the checksum field counted as spaces."""
    return sum(block) - sum(block[148:156]) + 8 * ord(" ")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _pax_records(payload: bytes) -> dict[bytes, bytes] | None:
    """Parse "<length> <key>=<value>\\n" records; None for anything tarfile would treat specially."""
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(payload):
        space = payload.find(b" ", pos)
        if space < 0 or not payload[pos:space].isdigit():
            break  # tarfile also stops at the first record it cannot parse
        length = int(payload[pos:space])
        if length <= 0:
            return None
        key, eq, value = payload[space + 1 : pos + length - 1].partition(b"=")
        if not eq:
            break
        if key.startswith(b"GNU.sparse") or key == b"hdrcharset":
            return None
        records[key] = value
        pos += length
    return records


def random_access_members(shard: str, compressed_hint: str) -> list[tuple[str, int, int]]:
    """(name, data offset, size) of an uncompressed shard's regular files, for readers that read
    members by sample (one seek and one read each): the fast header index, else tarfile. A
    compressed shard (no random access) or a damaged one is a ReaderError naming it;
    `compressed_hint` says what to do instead."""
    import tarfile

    from ._base import ReaderError

    with open(shard, "rb") as f:
        magic = f.read(6)
    if magic.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ")):
        raise ReaderError(f"{shard}: a compressed tar has no random access; {compressed_hint}")
    table = member_table(shard)
    if table is not None:
        if table.damage:
            raise ReaderError(f"{shard}: {table.damage}")
        return list(table.members)
    with tarfile.open(shard) as tar:
        return [(m.name, m.offset_data, m.size) for m in tar.getmembers() if m.isfile()]

