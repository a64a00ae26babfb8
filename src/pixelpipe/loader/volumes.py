"""VolumePipeline: an indexable volume reader -> epoch order -> read -> Compose3D -> batches.

Smaller than the image Pipeline on purpose: volumes are few and large (a batch of 8 CT scans
is ~100 MB), so reading a batch's files on a thread pool while the previous batch is
transformed is all the overlap that pays; there is no decode stage to plan (the files hold
raw voxels) and no streaming reader yet. The epoch order, sharding and padding are the image
Pipeline's (loader.sampler), so both loaders deal samples to ranks alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..compose3d import Compose3D
from ..data.devices import check_device
from ..data.errors import SampleError
from ..data.threads import default_threads
from ..data.volumes import LABEL_DTYPES, VOLUME_DTYPES, VolumeBatch, VolumeHeaders
from ..kernels.reference.warp3d import source_box
from ..readers._nifti import Volumes, VolumeSample
from .collate import shard_of
from .sampler import batches_per_epoch, indexable_epoch, replacement

__all__ = ["VolumePipeline"]

ON_ERROR = ("raise", "skip", "replace")
_NP_OK = {np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16), np.dtype(np.float16), np.dtype(np.float32)}
_LABEL_OK = {np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64)}
assert len(_NP_OK) == len(VOLUME_DTYPES) and len(_LABEL_OK) == len(LABEL_DTYPES)


def as_arrays(s: VolumeSample) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The sample's voxels as tensors of a dtype a VolumeBatch stores: kept when supported,
    else float32 (images) or int64 (label maps). A memory map is copied here, once."""
    img = s.image if s.image.dtype in _NP_OK else s.image.astype(np.float32)
    lab = s.label
    if lab is not None and lab.dtype not in _LABEL_OK:
        lab = lab.astype(np.int64)
    own = lambda a: a if a.flags.writeable and a.flags.c_contiguous else np.array(a, order="C")  # a read-only map: copied
    return torch.from_numpy(own(np.asarray(img))), None if lab is None else torch.from_numpy(own(np.asarray(lab)))


class VolumePipeline:
    """An iterator of volume batches.

    Args:
        reader: a pixelpipe.readers.Volumes, or a list it takes (paths, (image, label) pairs,
            MONAI-style dicts).
        transforms: a Compose3D, or a list of volume ops (a float32 Compose3D).
        batch_size: samples per batch.
        device: where batches are made ("cpu", "cuda"): the voxels are moved there before the
            warp, so on CUDA the fused kernel runs.
        seed: fixes the order and every augmentation.
        shuffle: a fresh global order every epoch.
        drop_last: drop the tail that does not fill a batch on every rank; otherwise the last
            batch is filled by repeating samples, marked False in "valid".
        shard: (rank, world_size); default from torch.distributed when initialised.
        on_error: "raise" (a SampleError naming the sample and file), "skip" (leave it out:
            that batch is shorter) or "replace" (read a deterministic other sample instead).
        num_threads: threads reading files (default: the cores available, shared
            between torchrun's ranks on this host, at most 8).

    Each batch is Compose3D's dict ("image", "label" when the reader has label maps,
    "affine", "spacing", "index") plus "valid" (bool [B]). `len(pipe)` is the number of
    batches per epoch; each new `iter(pipe)` starts the next epoch, except right after
    `load_state_dict`, which continues the saved epoch at the saved batch: the batches that
    follow are exactly those the saved run would have made. `errors` lists (index, source,
    reason) of the samples that failed.

    Partial reads: each batch is planned from the volumes' headers (shape, affine, and the
    label maps when RandomCropByLabel needs them), then only the box of voxels each warp
    reads is copied out of the file (a 96^3 crop of a 160x192x160 scan: a fifth of it); an
    uncompressed NIfTI or .npy file is memory-mapped, so the rest is never read from disk.
    `voxels_read` / `voxels_total` count it. The output is the Compose3D's on the whole volumes,
    up to float32 rounding of the moved coordinates.
    """

    def __init__(self, reader: Any, transforms: Compose3D | list[Any], batch_size: int, device: str = "cpu",
                 seed: int = 0, shuffle: bool = True, drop_last: bool = False, shard: tuple[int, int] | None = None,
                 on_error: str = "raise", num_threads: int | None = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {on_error!r}")
        if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                        or num_threads < 1):
            raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
        self.reader = reader if isinstance(reader, Volumes) else Volumes(reader)
        self.transforms = transforms if isinstance(transforms, Compose3D) else Compose3D(list(transforms))
        self.batch_size, self.device, self.seed = batch_size, torch.device(device), int(seed)
        check_device(self.device)
        self.shuffle, self.drop_last, self.on_error = bool(shuffle), bool(drop_last), on_error
        self.rank, self.world = shard_of(shard)
        self.epoch, self._position, self._resume = -1, 0, False
        self.errors: list[tuple[int, str, str]] = []
        # voxels copied out of the files against the voxels the volumes hold (the plan is made
        # from the headers first, and only the box each warp reads is copied)
        self.voxels_read, self.voxels_total = 0, 0
        self._pool = ThreadPoolExecutor(num_threads or min(8, default_threads()))
        if len(self) == 0:
            raise ValueError(f"{len(self.reader)} volumes make no batch of {batch_size} on {self.world} ranks "
                             "with drop_last=True")

    def __len__(self) -> int:
        return batches_per_epoch(len(self.reader), self.world, self.batch_size, self.drop_last)

    def state_dict(self) -> dict[str, Any]:
        """What resuming needs: the epoch, the batches of it already delivered, the errors."""
        return {"epoch": self.epoch, "position": self._position, "seed": self.seed, "errors": list(self.errors)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["seed"]) != self.seed:
            raise ValueError(f"the state was saved with seed {state['seed']}, this pipeline has seed {self.seed}")
        self.epoch, self._position = int(state["epoch"]), int(state["position"])
        self.errors = [tuple(e) for e in state.get("errors", [])]  # type: ignore[misc]
        self._resume = True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _read(self, index: int) -> tuple[int, VolumeSample | None, str]:
        """(the index read, the sample or None, why not): errors become values so that the
        policy decides on the consumer's side."""
        n = len(self.reader)
        for attempt in range(8 if self.on_error == "replace" else 1):
            i = index if attempt == 0 else replacement(index, n, self.seed, self.epoch, attempt)
            try:
                return i, self.reader.read(i), ""
            except Exception as e:  # the policy below names it
                reason = f"{type(e).__name__}: {e}"
                self._note(i, reason)
                if self.on_error == "raise":
                    return i, None, reason
        return index, None, reason

    def _note(self, i: int, reason: str) -> None:
        if all(e[0] != i for e in self.errors):
            self.errors.append((i, self.reader.sources(i), reason))

    def _submit(self, order: Any, b: int) -> list[Future]:
        lo = b * self.batch_size
        return [self._pool.submit(self._read, int(i)) for i in order.index[lo : lo + self.batch_size]]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self._resume:
            self.epoch, self._position = self.epoch + 1, 0
        self._resume = False
        order = indexable_epoch(len(self.reader), self.seed, self.epoch, self.shuffle, self.rank, self.world,
                                self.batch_size, self.drop_last)
        total = len(self)
        pending = self._submit(order, self._position) if self._position < total else None
        while pending is not None:
            b = self._position
            got = [f.result() for f in pending]
            pending = self._submit(order, b + 1) if b + 1 < total else None  # read ahead while this one runs
            valid = order.valid[b * self.batch_size : (b + 1) * self.batch_size]
            batch = self._collate(got, valid)
            self._position = b + 1
            if batch is not None:
                yield batch

    def _boxed(self, samples: list[VolumeSample], labelled: bool, index: np.ndarray) -> dict[str, Any]:
        """Plan from the headers, then read of each volume only the box of voxels its warp
        reads (source_box): from a memory map (uncompressed NIfTI, .npy) only those pages are
        touched, and only they are converted and copied to the device."""
        headers = VolumeHeaders([s.image.shape for s in samples], np.stack([s.affine for s in samples]),
                                [s.label for s in samples] if labelled else None)
        plan = self.transforms.plan(headers, self.seed, self.epoch, index)
        warp = plan.warp
        assert warp.sigmas is not None
        inverse = warp.inverse.copy()
        images, labels = [], []
        for i, s in enumerate(samples):
            shape = np.array(s.image.shape[:3], dtype=np.int64)
            whole = bool((warp.sigmas[i] > 0).any()) or warp.deform is not None
            lo, hi = (np.zeros(3, np.int64), shape) if whole else source_box(warp.inverse[i], shape, warp.out_size)
            box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))
            part = VolumeSample(s.image[box], None if s.label is None else s.label[box], s.affine, s.source, s.index)
            img, lab = as_arrays(part)
            images.append(img)
            labels.append(lab)
            moved = np.eye(4)
            moved[:3, 3] = -lo
            inverse[i] = moved @ inverse[i]
            self.voxels_read += int(np.prod(hi - lo))
            self.voxels_total += int(np.prod(shape))
        batch = VolumeBatch.from_list(images, labels if labelled else None, affine=[s.affine for s in samples],
                                      sources=[s.source for s in samples], device=self.device)
        return self.transforms.finish(batch, replace(plan, warp=replace(warp, inverse=inverse)), index)

    def _collate(self, got: list[tuple[int, VolumeSample | None, str]], valid: np.ndarray) -> dict[str, Any] | None:
        keep = []
        for pos, (i, s, reason) in enumerate(got):
            if s is None:
                if self.on_error == "raise":
                    raise SampleError(pos, f"index {i} ({self.reader.sources(i)}): {reason}")
                continue  # skip (replace found none either)
            keep.append((pos, s))
        if not keep:
            return None
        samples = [s for _, s in keep]
        has = [s.label is not None for s in samples]
        if any(has) and not all(has):
            raise ValueError("some volumes of the batch have label maps and some not; a batch needs all or none")
        index = np.array([s.index for s in samples], dtype=np.int64)
        if self.transforms.num_samples > 1:  # patches share their volume's voxels: read whole
            arrays = [as_arrays(s) for s in samples]
            batch = VolumeBatch.from_list([a for a, _ in arrays], [b for _, b in arrays] if all(has) else None,
                                          affine=[s.affine for s in samples], sources=[s.source for s in samples],
                                          device=self.device)
            self.voxels_read += int(batch.table[:, 1:4].prod(1).sum())
            self.voxels_total += int(batch.table[:, 1:4].prod(1).sum())
            out = self.transforms(batch, seed=self.seed, epoch=self.epoch, indices=index)
        else:
            out = self._boxed(samples, all(has), index)
        out["valid"] = torch.from_numpy(np.array([bool(valid[p]) for p, _ in keep]))
        return out

    def __repr__(self) -> str:
        return (f"VolumePipeline({self.reader!r}, batch_size={self.batch_size}, device={str(self.device)!r}, "
                f"{len(self)} batches per epoch)")
