"""FileList: a text or CSV file naming one image per line, with integer labels.

Parsing a million-line list has to take well under two seconds, so the common case never
loops over lines in Python: the whole file is split into tokens by one C call (`bytes.split`),
numpy counts the tokens of every line from the positions of whitespace and newlines (to check
that each line has the same number of fields and to find comment lines), and the label columns
are converted in bulk. Only the error paths, and CSV files with quoted fields (parsed with the
`csv` module), go line by line. Paths are kept as the bytes of the file and decoded when a
sample is read, which saves a million small decodes at construction.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import sys
from itertools import repeat
from typing import NoReturn

import numpy as np
import torch

from ._base import MAX_BYTES, ReaderError, Sample, check_index, check_indices, label_values
from ._files import read_files, read_one

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()  # os.fsdecode's

__all__ = ["FileList"]

_BOM = b"\xef\xbb\xbf"
_WHITESPACE = np.zeros(256, dtype=bool)  # the bytes that bytes.split() splits on
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True


class FileList:
    """Samples listed in a text file (DALI style) or a CSV file.

    Args:
        path: the list file.
            Text (any extension but .csv, e.g. .txt/.lst): one sample per line, a path then one
            or more integer labels separated by whitespace (`train/a.jpg 3` or `a.jpg 3 0 1`).
            Blank lines and lines starting with "#" are ignored. Paths cannot contain spaces;
            use CSV for those.
            CSV (a .csv extension, or a comma in the first line): a header row, then rows of
            path followed by integer label columns; the header's label column names become
            `label_names`. Quoted fields are supported.
        root: the folder relative paths are resolved against; by default the list file's
            folder. Absolute paths in the list are used as they are.
        max_bytes: a file larger than this is an error when read (OSError naming the file and
            both sizes), never a read of gigabytes; 256 MiB by default. Only regular files are
            read (a FIFO or a device is an error, never a blocking read).

    Every row must have the same number of labels K. One label gives `labels` of shape [N] and
    int labels on samples; several give [N, K] and tuple labels. `classes` is None (a list
    file does not name its classes); `label_names` is None for text lists.

    Raises:
        ReaderError: the file is missing or empty, or a line is malformed (the message names
            the file, the line number and the line).

    Example:
        >>> reader = FileList("/data/train.txt", root="/data/images")  # doctest: +SKIP
        >>> reader.read(0).source, reader.labels.shape                  # doctest: +SKIP
        ('/data/images/n01440764/x.JPEG', torch.Size([1281167]))
    """

    indexable = True
    reads_files = True  # read() opens a file: a Pipeline reads ahead on threads
    classes: list[str] | None = None

    def __init__(self, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None,
                 max_bytes: int = MAX_BYTES):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ReaderError(f"FileList: max_bytes must be an int >= 1, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.path = os.fspath(path)
        self.root = os.fspath(root) if root is not None else os.path.dirname(self.path)
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise ReaderError(f"FileList: cannot read list file {self.path!r}: {e}") from e
        raw = raw.removeprefix(_BOM)
        raw = raw.rstrip()  # trailing blank lines: dropping them here spares a filtering pass
        is_csv = self.path.lower().endswith(".csv") or b"," in _first_line(raw)
        self.label_names: list[str] | None = None
        if is_csv and b'"' in raw:
            tokens, counts, numbers = self._quoted_csv(raw)
        else:
            tokens, counts, numbers = _tokenize(raw, b"," if is_csv else None)
        if is_csv:
            if len(counts) == 0:
                raise ReaderError(f"FileList: {self.path!r} has no header row")
            width = int(counts[0])
            names = [t.decode("utf-8", "replace").strip() for t in tokens[:width]]
            if width < 2:
                self._bad(raw, int(numbers[0]), "a CSV header needs a path column and label columns")
            self.label_names = names[1:]
            tokens, counts, numbers = tokens[width:], counts[1:], numbers[1:]
        if len(counts) == 0:
            raise ReaderError(f"FileList: {self.path!r} lists no samples")
        if self.label_names is not None:
            width, like = len(self.label_names) + 1, "as in the header"
        else:
            width, like = int(counts[0]), f"as on line {numbers[0]}"
        if width < 2:
            self._bad(raw, int(numbers[0]), "expected a path followed by integer labels")
        wrong = np.flatnonzero(counts != width)
        if len(wrong):
            got = int(counts[wrong[0]])
            self._bad(raw, int(numbers[wrong[0]]), f"{got} fields, expected {width} (a path and "
                      f"{width - 1} label{'s' if width > 2 else ''}) {like}")

        self._paths: list[bytes] = tokens[0::width]
        root_bytes = os.fsencode(self.root)  # "root/" as bytes ("" for none): what os.path.join puts before a path
        self._root_bytes = root_bytes if not root_bytes or root_bytes.endswith(b"/") else root_bytes + b"/"
        columns = [self._parse_ints(tokens[j::width], j, raw, numbers) for j in range(1, width)]
        self._labels_np = columns[0] if width == 2 else np.stack(columns, axis=1)
        self._labels = torch.from_numpy(self._labels_np)

    # ------------------------------------------------------------------------ construction
    def _parse_ints(self, column: list[bytes], j: int, raw: bytes,
                    numbers: np.ndarray) -> np.ndarray:
        """Convert one label column to int64 in bulk; on failure, name the first bad line."""
        try:
            return np.fromiter(map(int, column), dtype=np.int64, count=len(column))
        except (ValueError, OverflowError):
            pass
        for row, token in enumerate(column):
            try:
                value = int(token)
                if not -(2**63) <= value < 2**63:
                    raise OverflowError
            except (ValueError, OverflowError):
                name = self.label_names[j - 1] if self.label_names else f"label {j}"
                self._bad(raw, int(numbers[row]), f"{name} {token.decode('utf-8', 'replace')!r} "
                          "is not a 64-bit integer")
        raise AssertionError("unreachable: a bulk parse failed but every token parsed")

    def _quoted_csv(self, raw: bytes) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        """Slow path for CSV files with quoted fields: the csv module, row by row."""
        text = raw.decode("utf-8", "surrogateescape")
        reader = csv.reader(io.StringIO(text, newline=""))
        tokens: list[bytes] = []
        counts, numbers = [], []
        for row in reader:
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            tokens.extend(os.fsencode(f) for f in row)
            counts.append(len(row))
            numbers.append(reader.line_num)
        return tokens, np.array(counts, dtype=np.int64), np.array(numbers, dtype=np.int64)

    def _bad(self, raw: bytes, line_number: int, why: str) -> NoReturn:
        line = raw.split(b"\n")[line_number - 1].rstrip(b"\r").decode("utf-8", "replace")
        raise ReaderError(f"FileList: {self.path}, line {line_number}: {why}: {line!r}")

    # ----------------------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._paths)

    def sources(self, i: int) -> str:
        """The resolved path of sample i."""
        return os.fsdecode(self._name(check_index(i, len(self._paths), "FileList")))

    def _name(self, i: int) -> bytes:
        """Sample i's path joined to the root as os.path.join joins them, in bytes."""
        p = self._paths[i]
        return p if p[:1] == b"/" or not self._root_bytes else self._root_bytes + p

    def read(self, i: int) -> Sample:
        """Read the bytes of sample i now (FileNotFoundError/OSError naming the path if gone)."""
        return read_one(self, i)

    def read_many(self, indices: list[int]) -> list[Sample | OSError]:
        """read(i) of each index, the files read in one call (readers._files): each sample,
        or the OSError reading its file raised."""
        indices = check_indices(indices, len(self._paths), "FileList")
        labels = label_values(self._labels_np, indices)
        datas, sources = self._read(indices)
        return [d if isinstance(d, OSError) else Sample(d, lab, src, i)
                for i, lab, d, src in zip(indices, labels, datas, sources)]

    def read_raw(self, indices: list[int]) -> tuple[list[bytes | OSError], list[str]]:
        """Each index's bytes (or the OSError reading it raised) and its path: read_many
        without a Sample per file, for a Pipeline's reader threads, whose Python shares the GIL
        with the training loop."""
        return self._read(check_indices(indices, len(self._paths), "FileList"))

    def _read(self, indices: list[int]) -> tuple[list[bytes | OSError], list[str]]:
        # a path per index in C loops (map), not a Python call each: a reader thread holds the
        # GIL for this, which the pipeline's other threads wait for
        names = list(map(self._paths.__getitem__, indices)) if not self._root_bytes else list(map(self._name, indices))
        return read_files(names, self.max_bytes), list(map(bytes.decode, names, repeat(_FS_ENCODING, len(names)),
                                                           repeat(_FS_ERRORS, len(names))))

    @property
    def labels(self) -> torch.Tensor:
        """int64 [N] (one label per line) or [N, K] (K labels); shared, do not modify."""
        return self._labels

    def __repr__(self) -> str:
        shape = tuple(self._labels.shape)
        return f"FileList({self.path!r}, root={self.root!r}, samples={len(self)}, labels={shape})"


def _tokenize(raw: bytes, sep: bytes | None) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Split raw into fields and group them by line, skipping blank and comment lines.

    sep None splits on runs of whitespace (text lists); b"," splits on single commas (CSV
    without quotes). Returns the fields of the kept lines, flattened; the number of fields of
    each kept line; and each kept line's 1-based line number.
    """
    a = np.frombuffer(raw, dtype=np.uint8)
    newlines = np.flatnonzero(a == ord("\n"))
    n_lines = len(newlines) + 1
    line_start = np.concatenate(([0], newlines + 1))
    if sep is None:
        tokens = raw.split()
        space = _WHITESPACE[a]
        starts = ~space
        starts[1:] &= space[:-1]  # a token starts at a non-space byte that follows a space
        starts = np.flatnonzero(starts)
        counts = np.bincount(np.searchsorted(newlines, starts), minlength=n_lines)
        first_byte = np.full(n_lines, ord(" "), dtype=np.uint8)
        with_tokens = np.flatnonzero(counts)
        first_byte[with_tokens] = a[starts[np.cumsum(counts)[with_tokens] - counts[with_tokens]]]
        keep = counts > 0
    else:
        tokens = raw.replace(b"\n", sep).split(sep)
        seps = np.flatnonzero(a == sep[0])
        counts = np.bincount(np.searchsorted(newlines, seps), minlength=n_lines) + 1
        line_end = np.append(newlines, len(a))
        length = line_end - line_start
        inside = line_start < len(a)
        first_byte = np.full(n_lines, ord(" "), dtype=np.uint8)
        first_byte[inside] = a[line_start[inside]]
        last_byte = a[np.maximum(line_end - 1, 0)] if len(a) else np.zeros(n_lines, np.uint8)
        keep = (length > 1) | ((length == 1) & (last_byte != ord("\r")))
    keep &= first_byte != ord("#")
    if counts[~keep].any():  # dropped lines hold fields (comments, CSV blank lines)
        tokens = list(itertools.compress(tokens, np.repeat(keep, counts).tolist()))
    counts = counts[keep]
    return tokens, counts, np.flatnonzero(keep) + 1


def _first_line(raw: bytes) -> bytes:
    """The first line that is neither blank nor a comment (b"" if there is none)."""
    start = 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        end = len(raw) if end < 0 else end
        line = raw[start:end].strip()
        if line and not line.startswith(b"#"):
            return line
        start = end + 1
    return b""
