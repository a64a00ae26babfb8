"""Folder: an ImageNet-style tree, one subfolder per class, or a flat folder of unlabeled images.

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
from ._files import read_files

__all__ = ["Folder"]


class Folder:
    """Images under `root/<class name>/...`, labelled by class; or images directly in `root`,
    unlabeled.

    Args:
        root: the dataset folder. Each subfolder is a class; its label is the index of its name
            in sorted order (`classes`). A root with no subfolders is a flat folder: its images
            are the dataset, without labels.
        extensions: file name extensions counted as images, matched case-insensitively
            ("JPG" counts as "jpg"). Other files are ignored.

    Two layouts:

    * class folders (`root/dog/1.jpg`, `root/cat/2.jpg`): `classes` lists the folder names,
      `labels` is int64 [N], each sample's label its class index. Images lying directly under
      root beside the class folders belong to no class: they are left out of the dataset, as
      torchvision's ImageFolder does, and listed in `ignored` (and counted in the repr and by
      `pixelpipe inspect`) so that they are not lost silently;
    * a flat folder (`root/1.jpg`, `root/2.jpg`, no subfolder): a dataset without labels.
      `classes` is [], `labels` is None, every sample's label is None, and a Pipeline's batch
      has label -1 for every sample, as for the other unlabeled readers. The repr says
      "unlabeled".

    Files are found recursively inside each class folder (nested subfolders are fine) and
    sorted by path, so sample i is the same file on every machine. Names starting with "." are
    skipped (hidden files, macOS "._x.jpg" resource forks, ".ipynb_checkpoints"). Symlinked
    folders are followed, each real folder at most once. A class folder with no images keeps
    its label (labels do not shift when one class is empty) but contributes no samples.

    `read(i)` opens the file at that moment: a file deleted since the listing raises
    FileNotFoundError naming its path.

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

        class_dirs: list[tuple[str, str]] = []
        loose: list[str] = []  # images directly under root
        with os.scandir(self.root) as it:
            for e in it:
                if e.name.startswith("."):
                    continue
                if e.is_dir():  # the type comes with the listing (a stat only for symlinks)
                    class_dirs.append((e.name, e.path))
                elif self._is_image(e.name):
                    loose.append(e.path)
        class_dirs.sort()
        loose.sort()
        exts = ", ".join(sorted(self.extensions))
        self.classes: list[str] = [name for name, _ in class_dirs]
        self.class_to_idx: dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        # images beside the class folders, in no class: not samples (see the class docstring)
        self.ignored: list[str] = loose if class_dirs else []
        self._paths: list[str] = []
        self._labels: torch.Tensor | None = None
        self._label_list: list[int] | list[None] = []

        if not class_dirs:  # a flat folder: its images, unlabeled
            if not loose:
                raise ReaderError(
                    f"Folder: {self.root!r} holds no images ({exts}) and no class subfolders; "
                    "expected root/<class>/<image> or root/<image>"
                )
            self._paths, self._label_list = loose, [None] * len(loose)
            return

        counts = []
        for _, path in class_dirs:
            found: list[str] = []
            self._walk(path, found, set())
            found.sort()
            self._paths.extend(found)
            counts.append(len(found))
        if not self._paths:
            beside = (f"; the {len(loose)} images directly under root (such as "
                      f"{os.path.basename(loose[0])!r}) are in no class: move them into class "
                      "folders, or the subfolders away to read root as a flat, unlabeled folder"
                      if loose else "")
            raise ReaderError(
                f"Folder: no images ({exts}) under the {len(self.classes)} class folders of "
                f"{self.root!r}{beside}"
            )
        label_np = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        self._labels = torch.from_numpy(label_np)
        self._label_list = label_np.tolist()

    def _is_image(self, name: str) -> bool:
        dot = name.rfind(".")
        return dot > 0 and name[dot + 1 :].lower() in self.extensions

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
        (got,) = self.read_many([i])
        if isinstance(got, OSError):
            raise got
        return got

    def read_many(self, indices: list[int]) -> list[Sample | OSError]:
        """read(i) of each index, the files read in one call (readers._files): each sample,
        or the OSError reading its file raised."""
        paths = [self._paths[check_index(i, len(self._paths), "Folder")] for i in indices]
        return [d if isinstance(d, OSError) else Sample(d, self._label_list[i], p, i)
                for i, p, d in zip(indices, paths, read_files(paths))]

    def sources(self, i: int) -> str:
        """The path of sample i."""
        return self._paths[check_index(i, len(self._paths), "Folder")]

    @property
    def labels(self) -> torch.Tensor | None:
        """int64 [N]: the class index of every sample (shared; do not modify); None for a flat
        folder (unlabeled)."""
        return self._labels

    def __repr__(self) -> str:
        if not self.classes:
            return f"Folder({self.root!r}, samples={len(self)}, unlabeled)"
        ignored = f", ignored={len(self.ignored)}" if self.ignored else ""
        return f"Folder({self.root!r}, samples={len(self)}, classes={len(self.classes)}{ignored})"
