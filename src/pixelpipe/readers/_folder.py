"""Folder: an ImageNet-style tree, one subfolder per class, or a flat folder of unlabeled images.

Listing is the only work done at construction, and it has to be fast for large trees (100,000
files in well under a second on a warm cache): we walk with `os.scandir`, whose entries carry
the file type from the directory listing itself, so no regular file is stat-ed. Only
directories cost a stat (to walk each real folder once), and symlinks a stat and a realpath
(to follow only those that stay inside the root), and there are few of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import torch

from ._base import IMAGE_EXTENSIONS, MAX_BYTES, ReaderError, Sample, check_index, check_indices
from ._files import read_files, read_one

__all__ = ["Folder"]


LINKS = ("inside", "any", "none")


class Folder:
    """Images under `root/<class name>/...`, labelled by class; or images directly in `root`,
    unlabeled.

    Args:
        root: the dataset folder. Each subfolder is a class; its label is the index of its name
            in sorted order (`classes`). A root with no subfolders is a flat folder: its images
            are the dataset, without labels.
        extensions: file name extensions counted as images, matched case-insensitively
            ("JPG" counts as "jpg"). Other files are ignored (and listed in `ignored`).
        follow_symlinks: "inside" (default) follows symlinks whose target lies inside root,
            "any" follows every symlink, "none" none. A symlink not followed is listed in
            `ignored`, with where it points.
        max_bytes: a file larger than this is an error when read (OSError naming the file and
            both sizes), never a read of gigabytes; 256 MiB by default.

    Two layouts:

    * class folders (`root/dog/1.jpg`, `root/cat/2.jpg`): `classes` lists the folder names,
      `labels` is int64 [N], each sample's label its class index. Images lying directly under
      root beside the class folders belong to no class: they are left out of the dataset, as
      torchvision's ImageFolder does;
    * a flat folder (`root/1.jpg`, `root/2.jpg`, no subfolder): a dataset without labels.
      `classes` is [], `labels` is None, every sample's label is None, and a Pipeline's batch
      has label -1 for every sample, as for the other unlabeled readers. The repr says
      "unlabeled".

    Files are found recursively inside each class folder (nested subfolders are fine) and
    sorted by path, so sample i is the same file on every machine. Names starting with "." are
    skipped (hidden files, macOS "._x.jpg" resource forks, ".ipynb_checkpoints"). Each real
    folder is walked once, as the class folder it is: a symlink back to the root, to a class
    folder or to a folder already walked (a loop) is not followed, so no image is listed twice
    or under another class. A class folder with no images keeps its label (labels do not shift
    when one class is empty) but contributes no samples. Only regular files are samples: a
    FIFO, a socket or a device with an image name is not (reading one would block or never end).

    Nothing is left out silently: `ignored` lists (path, reason) for every file and symlink
    that is not a sample (images beside the class folders, other extensions, special files,
    symlinks not followed), sorted by path; the repr counts them and `pixelpipe inspect` lists
    them.

    `read(i)` opens the file at that moment: a file deleted since the listing raises
    FileNotFoundError naming its path; one that is no longer a regular file, or holds more
    than max_bytes, an OSError saying so.

    Raises:
        ReaderError: root is missing or not a folder, or holds no images (in its class folders,
            or directly in it when it has none).

    Example:
        >>> reader = Folder("/data/imagenet/train")            # doctest: +SKIP
        >>> reader.classes[:2], len(reader), reader.labels[:3]  # doctest: +SKIP
        (['n01440764', 'n01443537'], 1281167, tensor([0, 0, 0]))
        >>> Folder("/data/unlabeled")                          # doctest: +SKIP
        Folder('/data/unlabeled', samples=5000, unlabeled)
    """

    indexable = True
    reads_files = True  # read() opens a file: a Pipeline reads ahead on threads

    def __init__(self, root: str | os.PathLike[str], extensions: Iterable[str] = IMAGE_EXTENSIONS,
                 follow_symlinks: str = "inside", max_bytes: int = MAX_BYTES):
        self.root = os.fspath(root)
        if isinstance(extensions, str):
            extensions = (extensions,)
        self.extensions = frozenset(e.lower().lstrip(".") for e in extensions)
        if not self.extensions:
            raise ReaderError("Folder: extensions is empty; nothing would count as an image")
        if follow_symlinks not in LINKS:
            raise ReaderError(f"Folder: follow_symlinks must be one of {LINKS}, got {follow_symlinks!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ReaderError(f"Folder: max_bytes must be an int >= 1, got {max_bytes!r}")
        self.follow_symlinks, self.max_bytes = follow_symlinks, max_bytes
        if not os.path.isdir(self.root):
            what = "is not a folder" if os.path.exists(self.root) else "does not exist"
            raise ReaderError(f"Folder: root {self.root!r} {what}")
        self._real_root = os.path.realpath(self.root)
        self._skipped: list[tuple[str, str]] = []

        class_dirs: list[tuple[str, str]] = []
        loose: list[str] = []  # images directly under root
        with os.scandir(self.root) as it:
            for e in it:
                if e.name.startswith("."):
                    continue
                kind = self._kind(e)
                if kind == "dir":
                    class_dirs.append((e.name, e.path))
                elif kind == "file" and self._is_image(e.name):
                    loose.append(e.path)
                elif kind == "file":
                    self._skipped.append((e.path, self._not_image(e.name)))
        class_dirs.sort()
        loose.sort()
        exts = ", ".join(sorted(self.extensions))
        self.classes: list[str] = [name for name, _ in class_dirs]
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        if class_dirs:  # images beside the class folders, in no class: not samples (see above)
            self._skipped += [(p, "an image beside the class folders, in no class") for p in loose]
        self._paths: list[str] = []
        self._labels: torch.Tensor | None = None
        self._label_list: list[int] | list[None] = []

        if not class_dirs:  # a flat folder: its images, unlabeled
            self.ignored: list[tuple[str, str]] = sorted(self._skipped)
            if not loose:
                raise ReaderError(
                    f"Folder: {self.root!r} holds no images ({exts}) and no class subfolders; "
                    f"expected root/<class>/<image> or root/<image>{self._links_out()}"
                )
            self._paths, self._label_list = loose, [None] * len(loose)
            return

        # every class folder is claimed before any is walked: a link from one class into
        # another (or to the root) is not followed, whichever class sorts first
        seen = {_identity(self.root)}
        claimed = []
        for name, path in class_dirs:
            ident = _identity(path)
            claimed.append(ident not in seen)
            if ident in seen:
                self._skipped.append((path, "the same folder as the root or another class folder (a symlink)"))
            seen.add(ident)
        counts = []
        for (_, path), mine in zip(class_dirs, claimed):
            found: list[str] = []
            if mine:
                self._walk(path, found, seen)
            found.sort()
            self._paths.extend(found)
            counts.append(len(found))
        self.ignored = sorted(self._skipped)
        if not self._paths:
            beside = (f"; the {len(loose)} images directly under root (such as "
                      f"{os.path.basename(loose[0])!r}) are in no class: move them into class "
                      "folders, or the subfolders away to read root as a flat, unlabeled folder"
                      if loose else "")
            raise ReaderError(
                f"Folder: no images ({exts}) under the {len(self.classes)} class folders of "
                f"{self.root!r}{beside}{self._links_out()}"
            )
        label_np = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        self._labels = torch.from_numpy(label_np)
        self._label_list = label_np.tolist()

    def _links_out(self) -> str:
        """What a "no images" error adds when symlinks leaving the root were not followed."""
        n = sum(1 for _, why in self._skipped if why.startswith("a symlink leaving the root"))
        return f"; {n} symlinks leaving the root were not followed (follow_symlinks='any' follows them)" if n else ""

    def _is_image(self, name: str) -> bool:
        dot = name.rfind(".")
        return dot > 0 and name[dot + 1 :].lower() in self.extensions

    def _not_image(self, name: str) -> str:
        dot = name.rfind(".")
        ext = f"extension .{name[dot + 1:]}" if dot > 0 else "no extension"
        return f"not an image: {ext}, not one of {', '.join(sorted(self.extensions))}"

    def _kind(self, entry: os.DirEntry) -> str:
        """"dir", "file" (a regular file), or "" (listed in ignored, with why). The type comes
        with the listing: only symlinks cost a stat (and a realpath)."""
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not os.path.exists(target):
                self._skipped.append((entry.path, f"a broken symlink (to {target})"))
                return ""
            if self.follow_symlinks == "none":
                self._skipped.append((entry.path, f"a symlink (to {target}), not followed: follow_symlinks='none'"))
                return ""
            if self.follow_symlinks == "inside" and os.path.commonpath([self._real_root, target]) != self._real_root:
                self._skipped.append((entry.path, f"a symlink leaving the root (to {target}), not followed; "
                                                  "follow_symlinks='any' follows it"))
                return ""
        if entry.is_dir():
            return "dir"
        if entry.is_file():
            return "file"
        self._skipped.append((entry.path, "not a regular file (a FIFO, a socket or a device)"))
        return ""

    def _walk(self, folder: str, out: list[str], seen: set[tuple[int, int]]) -> None:
        """Append the image paths under folder (recursively) to out, unsorted; each real
        folder once (`seen`: the folders walked or claimed)."""
        subdirs = []
        with os.scandir(folder) as it:
            for entry in it:
                name = entry.name
                if name.startswith("."):
                    continue
                kind = self._kind(entry)
                if kind == "file":
                    if self._is_image(name):
                        out.append(entry.path)
                    else:
                        self._skipped.append((entry.path, self._not_image(name)))
                elif kind == "dir":
                    subdirs.append(entry.path)
        for sub in subdirs:
            ident = _identity(sub)
            if ident in seen:  # a symlink loop, or a second link to a folder already walked
                self._skipped.append((sub, "a symlink to a folder already listed (a loop, or a second link)"))
                continue
            seen.add(ident)
            self._walk(sub, out, seen)

    def __len__(self) -> int:
        return len(self._paths)

    def read(self, i: int) -> Sample:
        """Read the bytes of sample i now (FileNotFoundError/OSError naming the path if gone)."""
        return read_one(self, i)

    def read_many(self, indices: list[int]) -> list[Sample | OSError]:
        """read(i) of each index, the files read in one call (readers._files): each sample,
        or the OSError reading its file raised."""
        datas, paths = self.read_raw(indices)
        return [d if isinstance(d, OSError) else Sample(d, self._label_list[i], p, i)
                for i, p, d in zip(indices, paths, datas)]

    def read_raw(self, indices: list[int]) -> tuple[list[bytes | OSError], list[str]]:
        """Each index's bytes (or the OSError reading it raised) and its path: read_many
        without a Sample per file (see FileList.read_raw)."""
        paths = list(map(self._paths.__getitem__, check_indices(indices, len(self._paths), "Folder")))
        return read_files(paths, self.max_bytes), paths

    def sources(self, i: int) -> str:
        """The path of sample i."""
        return self._paths[check_index(i, len(self._paths), "Folder")]

    @property
    def labels(self) -> torch.Tensor | None:
        """int64 [N]: the class index of every sample (shared; do not modify); None for a flat
        folder (unlabeled)."""
        return self._labels

    def __repr__(self) -> str:
        ignored = f", ignored={len(self.ignored)}" if self.ignored else ""
        if not self.classes:
            return f"Folder({self.root!r}, samples={len(self)}, unlabeled{ignored})"
        return f"Folder({self.root!r}, samples={len(self)}, classes={len(self.classes)}{ignored})"


def _identity(path: str) -> tuple[int, int]:
    """(device, inode) of the folder a path leads to, symlinks followed."""
    st = os.stat(path)
    return st.st_dev, st.st_ino
