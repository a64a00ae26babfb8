"""Folder: an ImageNet-style tree, one subfolder per class.

Listing is the only work done at construction, and it has to be fast for large trees (100,000
files in well under a second on a warm cache): we walk with `os.scandir`, whose entries carry
the file type from the directory listing itself, so no file is stat-ed. Only directories cost a
stat (to detect symlink loops), and there are few of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import torch

from ._base import IMAGE_EXTENSIONS, ReaderError, Sample, check_index

__all__ = ["Folder"]


class Folder:
    """Images under `root/<class name>/...`, labelled by class.

    Args:
        root: the dataset folder. Each subfolder is a class; its label is the index of its name
            in sorted order (`classes`). Files directly under root are ignored.
        extensions: file name extensions counted as images, matched case-insensitively
            ("JPG" counts as "jpg"). Other files are ignored.

    Files are found recursively inside each class folder (nested subfolders are fine) and
    sorted by path, so sample i is the same file on every machine. Names starting with "." are
    skipped (hidden files, macOS "._x.jpg" resource forks, ".ipynb_checkpoints"). Symlinked
    folders are followed, each real folder at most once. A class folder with no images keeps
    its label (labels do not shift when one class is empty) but contributes no samples.

    `read(i)` opens the file at that moment: a file deleted since the listing raises
    FileNotFoundError naming its path.

    Raises:
        ReaderError: root is missing or not a folder, has no subfolders, or holds no images.

    Example:
        >>> reader = Folder("/data/imagenet/train")            # doctest: +SKIP
        >>> reader.classes[:2], len(reader), reader.labels[:3]  # doctest: +SKIP
        (['n01440764', 'n01443537'], 1281167, tensor([0, 0, 0]))
    """

    indexable = True

    def __init__(self, root: str | os.PathLike[str], extensions: Iterable[str] = IMAGE_EXTENSIONS):
        self.root = os.fspath(root)
        if isinstance(extensions, str):
            extensions = (extensions,)
        self.extensions = frozenset(e.lower().lstrip(".") for e in extensions)
        if not self.extensions:
            raise ReaderError("Folder: extensions is empty; nothing would count as an image")
        if not os.path.isdir(self.root):
            what = "is not a folder" if os.path.exists(self.root) else "does not exist"
            raise ReaderError(f"Folder: root {self.root!r} {what}")

        with os.scandir(self.root) as it:
            class_dirs = sorted(
                (e.name, e.path) for e in it if not e.name.startswith(".") and e.is_dir()
            )
        if not class_dirs:
            raise ReaderError(
                f"Folder: {self.root!r} has no class subfolders; expected root/<class>/<image>"
            )
        self.classes: list[str] = [name for name, _ in class_dirs]
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}

        self._paths: list[str] = []
        counts = []
        for _, path in class_dirs:
            found: list[str] = []
            self._walk(path, found, set())
            found.sort()
            self._paths.extend(found)
            counts.append(len(found))
        if not self._paths:
            exts = ", ".join(sorted(self.extensions))
            raise ReaderError(
                f"Folder: no images ({exts}) under the {len(self.classes)} class folders of "
                f"{self.root!r}"
            )
        label_np = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        self._labels = torch.from_numpy(label_np)
        self._label_list: list[int] = label_np.tolist()

    def _walk(self, folder: str, out: list[str], seen: set[tuple[int, int]]) -> None:
        """Append the image paths under folder (recursively) to out, unsorted."""
        st = os.stat(folder)
        if (st.st_dev, st.st_ino) in seen:  # a symlink loop back to a folder already walked
            return
        seen.add((st.st_dev, st.st_ino))
        exts = self.extensions
        subdirs = []
        with os.scandir(folder) as it:
            for entry in it:
                name = entry.name
                if name.startswith("."):
                    continue
                dot = name.rfind(".")
                if dot > 0 and name[dot + 1 :].lower() in exts:
                    out.append(entry.path)
                elif entry.is_dir():
                    subdirs.append(entry.path)
        for sub in subdirs:
            self._walk(sub, out, seen)

    def __len__(self) -> int:
        return len(self._paths)

    def read(self, i: int) -> Sample:
        """Read the bytes of sample i now (FileNotFoundError/OSError naming the path if gone)."""
        i = check_index(i, len(self._paths), "Folder")
        path = self._paths[i]
        with open(path, "rb") as f:
            data = f.read()
        return Sample(data, self._label_list[i], path, i)

    def sources(self, i: int) -> str:
        """The path of sample i."""
        return self._paths[check_index(i, len(self._paths), "Folder")]

    @property
    def labels(self) -> torch.Tensor:
        """int64 [N]: the class index of every sample (shared; do not modify)."""
        return self._labels

    def __repr__(self) -> str:
        return f"Folder({self.root!r}, samples={len(self)}, classes={len(self.classes)})"
