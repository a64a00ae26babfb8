"""VolumeBatch: N volumes of different sizes in one flat buffer, with their label maps, voxel
sizes and voxel-to-world affines.

The rank-3 twin of ImageBatch: one contiguous buffer holds every volume [D, H, W, C] (C last,
row-major), one after the other, and a small int64 table says where each starts and how big it
is, so one kernel launch reads the whole ragged batch from one pointer and the table. Label
maps (one integer channel, the volume's spatial size) sit in a second buffer with their own
offsets.

Axes: a volume's axes 0, 1, 2 are its array axes (D, H, W), exactly as stored (for NIfTI,
nibabel's i, j, k). `spacing[n]` is the voxel size along those three axes, in mm; `affine[n]`
is the 4x4 matrix taking a voxel index (i, j, k, 1) to world (x, y, z, 1) in mm, NIfTI's
convention (RAS+ world, index at the voxel's centre), as nibabel's `img.affine` gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["VOLUME_DTYPES", "LABEL_DTYPES", "VolumeBatch", "VolumeHeaders", "spacing_of"]

VOLUME_DTYPES = (torch.uint8, torch.int16, torch.uint16, torch.float16, torch.float32)
LABEL_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.int64)
# Columns of VolumeBatch.table.
OFFSET, DEPTH, HEIGHT, WIDTH, CHANNELS, LABEL_OFFSET = 0, 1, 2, 3, 4, 5


def spacing_of(affine: np.ndarray) -> np.ndarray:
    """float64 [..., 3]: the voxel size along each array axis, the lengths of the affine's first
    three columns (nibabel's `voxel_sizes`)."""
    return np.linalg.norm(np.asarray(affine, dtype=np.float64)[..., :3, :3], axis=-2)


def _tensor(x: Any, what: str) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else torch.as_tensor(x)
    if t.dim() not in (3, 4):
        raise ValueError(f"{what}: a volume is [D, H, W] or [D, H, W, C], got shape {tuple(t.shape)}")
    return t if t.dim() == 4 else t.unsqueeze(-1)


def _common(dtypes: set[torch.dtype], allowed: tuple[torch.dtype, ...], what: str) -> torch.dtype:
    for d in dtypes:
        if d not in allowed:
            raise ValueError(f"{what} dtype {d} is not supported; use one of {', '.join(map(str, allowed))}")
    if len(dtypes) == 1:
        return next(iter(dtypes))
    return torch.float32 if what == "volume" else torch.int64  # mixed: one buffer needs one dtype


class VolumeBatch:
    """N volumes ([D, H, W] or [D, H, W, C], any sizes) in one buffer, with optional label maps.

    Args:
        data: 1-D tensor (uint8, int16, uint16, float16 or float32) holding every volume back
            to back, [D, H, W, C] row-major.
        table: int64 [N, 6] (offset, D, H, W, C, label offset) into data (and into labels).
        labels: 1-D integer tensor holding each label map [D, H, W] at its label offset, or None.
        spacing: float64 [N, 3] voxel sizes along the array axes (default: from the affines).
        affine: float64 [N, 4, 4] voxel-index-to-world matrices (default: diag(spacing, 1)).
        sources: where each volume came from, for error messages.

    The table lives on the CPU (planning reads sizes on the host); `kernel_table()` gives a
    copy on the data's device.

    Example:
        >>> import torch
        >>> b = VolumeBatch.from_list([torch.zeros(4, 5, 6, dtype=torch.int16),
        ...                            torch.zeros(3, 3, 3, dtype=torch.int16)])
        >>> len(b), b.sizes.tolist()
        (2, [[4.0, 5.0, 6.0], [3.0, 3.0, 3.0]])
    """

    def __init__(self, data: torch.Tensor, table: torch.Tensor, labels: torch.Tensor | None = None,
                 spacing: np.ndarray | None = None, affine: np.ndarray | None = None,
                 sources: Sequence[str] | None = None) -> None:
        if data.dim() != 1 or data.dtype not in VOLUME_DTYPES:
            raise ValueError(f"data must be a 1-D tensor of one of {VOLUME_DTYPES}, got {data.dtype} "
                             f"{tuple(data.shape)}")
        table = torch.as_tensor(table, dtype=torch.int64).cpu()
        if table.dim() != 2 or table.shape[1] != 6:
            raise ValueError(f"table must be [N, 6] (offset, D, H, W, C, label offset), got {tuple(table.shape)}")
        n = len(table)
        t = table.numpy()
        voxels = t[:, DEPTH] * t[:, HEIGHT] * t[:, WIDTH]
        if n and ((t[:, OFFSET] < 0).any() or int((t[:, OFFSET] + voxels * t[:, CHANNELS]).max()) > data.numel()):
            raise ValueError("table points outside the data buffer")
        if n and (t[:, 1:5] <= 0).any():
            raise ValueError("every volume needs at least one voxel and one channel")
        if labels is not None:
            if labels.dim() != 1 or labels.dtype not in LABEL_DTYPES:
                raise ValueError(f"labels must be a 1-D integer tensor, got {labels.dtype} {tuple(labels.shape)}")
            if n and int((t[:, LABEL_OFFSET] + voxels).max()) > labels.numel():
                raise ValueError("table points outside the labels buffer")
        if affine is None:
            base = np.ones((n, 3)) if spacing is None else np.asarray(spacing, dtype=np.float64).reshape(n, 3)
            affine = np.zeros((n, 4, 4))
            affine[:, [0, 1, 2], [0, 1, 2]] = base
            affine[:, 3, 3] = 1.0
        given = spacing is not None
        affine = np.asarray(affine, dtype=np.float64).reshape(n, 4, 4)
        spacing = spacing_of(affine) if spacing is None else np.asarray(spacing, dtype=np.float64).reshape(n, 3)
        if given and n and not np.allclose(spacing, spacing_of(affine), rtol=1e-4):
            bad = int(np.argmax(np.abs(spacing - spacing_of(affine)).max(1)))
            raise ValueError(f"volume {bad}: spacing {spacing[bad].tolist()} disagrees with its affine's voxel sizes "
                             f"{spacing_of(affine)[bad].tolist()}; give one of them")
        if n and not (np.isfinite(spacing).all() and (spacing > 0).all()):
            raise ValueError(f"spacing must be positive and finite, got {spacing.tolist()}")
        if n and (np.abs(np.linalg.det(affine[:, :3, :3])) < 1e-12).any():
            raise ValueError("every affine's 3x3 part must be invertible")
        self.data, self.table, self.labels = data, table, labels
        self.spacing, self.affine = spacing, affine
        self.sources = list(sources) if sources is not None else [f"volume[{i}]" for i in range(n)]
        self._device_table: torch.Tensor | None = None

    @classmethod
    def from_list(cls, volumes: Sequence[Any], labels: Sequence[Any] | None = None,
                  spacing: Sequence[Any] | None = None, affine: Sequence[Any] | None = None,
                  sources: Sequence[str] | None = None, device: str | torch.device | None = None) -> VolumeBatch:
        """Pack volumes ([D, H, W] or [D, H, W, C] tensors or arrays) into one buffer.

        Volumes of one dtype keep it; mixed dtypes are stored as float32 (one buffer, one
        dtype). labels: per volume an integer map [D, H, W] (or [D, H, W, 1]) of its spatial
        size, or None for all. spacing: per volume 3 voxel sizes; affine: per volume a 4x4
        matrix (spacing then defaults to its column lengths)."""
        vols = [_tensor(v, f"volume {i}") for i, v in enumerate(volumes)]
        n = len(vols)
        dev = torch.device(device) if device is not None else (vols[0].device if vols else torch.device("cpu"))
        dtype = _common({v.dtype for v in vols}, VOLUME_DTYPES, "volume") if vols else torch.float32
        shapes = np.array([tuple(v.shape) for v in vols], dtype=np.int64).reshape(n, 4)
        sizes = shapes.prod(1)
        table = np.zeros((n, 6), dtype=np.int64)
        table[:, OFFSET] = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if n else []
        table[:, 1:5] = shapes
        data = torch.cat([v.reshape(-1).to(dev, dtype) for v in vols]) if n else torch.zeros(0, dtype=dtype, device=dev)
        lab = None
        if labels is not None:
            if len(labels) != n:
                raise ValueError(f"got {len(labels)} label maps for {n} volumes")
            maps = [_tensor(m, f"label map {i}") for i, m in enumerate(labels)]
            for i, (m, s) in enumerate(zip(maps, shapes)):
                if tuple(m.shape) != (*s[:3], 1):
                    raise ValueError(f"label map {i} has shape {tuple(m.shape[:3])}, its volume {tuple(s[:3])}; "
                                     "a label map is one integer channel of its volume's spatial size")
            ldtype = _common({m.dtype for m in maps}, LABEL_DTYPES, "label map") if maps else torch.int64
            voxels = shapes[:, :3].prod(1)
            table[:, LABEL_OFFSET] = np.concatenate([[0], np.cumsum(voxels)[:-1]]) if n else []
            lab = (torch.cat([m.reshape(-1).to(dev, ldtype) for m in maps]) if n
                   else torch.zeros(0, dtype=ldtype, device=dev))
        sp = None if spacing is None else np.asarray(spacing, dtype=np.float64).reshape(n, 3)
        af = None if affine is None else np.asarray(affine, dtype=np.float64).reshape(n, 4, 4)
        return cls(data, torch.from_numpy(table), lab, sp, af, sources)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def sizes(self) -> torch.Tensor:
        """float64 [N, 3]: (D, H, W) of every volume."""
        return self.table[:, 1:4].to(torch.float64)

    @property
    def channels(self) -> torch.Tensor:
        """int64 [N]: channels of every volume."""
        return self.table[:, CHANNELS]

    def common_channels(self) -> int:
        """The channel count all volumes share (1 for an empty batch): a warp writes one
        batched tensor. A ValueError when they differ."""
        chans = {int(c) for c in self.channels.tolist()}
        if len(chans) > 1:
            raise ValueError(f"the volumes have different channel counts {sorted(chans)}; one batch needs one")
        return chans.pop() if chans else 1

    def kernel_table(self) -> torch.Tensor:
        """The table on the data's device (copied once)."""
        if self._device_table is None or self._device_table.device != self.data.device:
            self._device_table = self.table.to(self.data.device)
        return self._device_table

    def volume(self, i: int) -> torch.Tensor:
        """Volume i as a [D, H, W, C] view of the buffer."""
        o, d, h, w, c, _ = self.table[i].tolist()
        return self.data[o : o + d * h * w * c].view(d, h, w, c)

    def label(self, i: int) -> torch.Tensor | None:
        """Label map i as a [D, H, W] view of the labels buffer (None without labels)."""
        if self.labels is None:
            return None
        _, d, h, w, _, lo = self.table[i].tolist()
        return self.labels[lo : lo + d * h * w].view(d, h, w)

    def repeat_each(self, k: int) -> VolumeBatch:
        """Each sample k times in a row (k patches per volume): new table rows pointing at the
        same voxels, no copy of the buffers."""
        rep = lambda a: np.repeat(a, k, axis=0)
        return VolumeBatch(self.data, self.table.repeat_interleave(k, 0), self.labels, rep(self.spacing),
                           rep(self.affine), [s for s in self.sources for _ in range(k)])

    def to(self, device: str | torch.device) -> VolumeBatch:
        """The batch with its buffers on `device` (the table stays on the CPU)."""
        lab = None if self.labels is None else self.labels.to(device)
        return VolumeBatch(self.data.to(device), self.table, lab, self.spacing, self.affine, self.sources)

    def __repr__(self) -> str:
        labels = "" if self.labels is None else f", labels {self.labels.dtype}"
        return f"VolumeBatch({len(self)} volumes, {self.data.dtype}{labels}, {self.device})"


class VolumeHeaders:
    """What planning reads of a batch before its voxels are read: each volume's shape, spacing
    and affine, and its label map (RandomCropByLabel counts label voxels) as an array that may
    be a memory map. Compose3D.plan takes it in place of a VolumeBatch, so a loader can plan
    first and then read only the box of voxels each warp needs.

    Args:
        shapes: per volume (D, H, W) (or (D, H, W, C): the channels are ignored).
        affine: float64 [N, 4, 4] voxel-index-to-world matrices.
        labels: per volume its label map [D, H, W] (numpy, memory map or tensor), or None.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], affine: np.ndarray,
                 labels: Sequence[Any] | None = None) -> None:
        self.shapes = np.array([tuple(s)[:3] for s in shapes], dtype=np.int64).reshape(-1, 3)
        self.affine = np.asarray(affine, dtype=np.float64).reshape(-1, 4, 4)
        self.spacing = spacing_of(self.affine)
        self._labels = None if labels is None else list(labels)
        if len(self.affine) != len(self.shapes) or (self._labels is not None and len(self._labels) != len(self.shapes)):
            raise ValueError("shapes, affines and label maps must have one entry per volume")

    def __len__(self) -> int:
        return len(self.shapes)

    @property
    def sizes(self) -> torch.Tensor:
        return torch.from_numpy(self.shapes.astype(np.float64))

    @property
    def labels(self) -> list[Any] | None:
        return self._labels

    def label(self, i: int) -> torch.Tensor | None:
        if self._labels is None:
            return None
        m = self._labels[i]
        if isinstance(m, torch.Tensor):
            return m
        m = np.asarray(m)
        # a read-only memory map is copied (torch wants writable arrays); RandomCropByLabel reads it all
        return torch.from_numpy(m if m.flags.writeable and m.flags.c_contiguous else np.array(m, order="C"))
