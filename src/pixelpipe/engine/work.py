"""A batch between the two halves of an Engine's run: `Prepared` (what `Engine.prepare` hands to
`Engine.finish`), the stage it holds (`StageWork`), and a GPU decode planned but not run yet
(`PendingDecode`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.targets import Targets
from ..data.views import DeviceViews
from ..plan import Program, Stage, StagePlan
from .sources import EncodedSource, SampleError
from .stats import BatchDecode, DecodeStats

__all__ = ["PendingDecode", "Prepared", "StageWork"]


@dataclass
class StageWork:
    """Stage k of a program planned (and, on CUDA, its images decoded), ready for its passes."""

    program: Program
    k: int
    plan: StagePlan
    source: Any
    spec: Any
    packed: Any = None  # kernels.Packed: the kernel's inputs made ahead (prepare_split on CUDA)
    decoded: BatchDecode | None = None  # how its images were decoded (None: given decoded)

    @property
    def stage(self) -> Stage:
        return self.program.stages[self.k]

    @property
    def final(self) -> bool:
        return self.k + 1 == len(self.program.stages)


@dataclass
class Prepared:
    """What Engine.prepare hands to Engine.finish."""

    program: Program
    seed: int
    epoch: Any  # an int, or int64 [N] per-sample epochs
    idx: np.ndarray  # int64 [N] global sample indices
    first: StageWork
    targets: Targets | None = None  # as given, before the first stage
    frames: np.ndarray | None = None  # int64 [N], each image's frame in its clip (per-frame ops); None: images


class PendingDecode:
    """A batch planned for the GPU decoder, not decoded yet. The decoder's per-sample planning
    (checks, code streams) happens here, on the planning thread, so that the decoding thread
    (a Pipeline's decode lane) only decodes."""

    def __init__(self, decoder: Any, stats: DecodeStats, source: EncodedSource, regions: np.ndarray,
                 idx: np.ndarray, lane: int | None = None) -> None:
        self.decoder, self.stats, self.source, self.regions, self.idx = decoder, stats, source, regions, idx
        if lane is not None:  # the decoder may have fewer lanes (its Python binding has one)
            lane %= decoder.lanes
        self.planned = decoder.plan(source.blobs, [tuple(r) for r in regions.tolist()], source.jpeg_headers,
                                    lane=lane)

    def run(self) -> tuple[DeviceViews, BatchDecode]:
        """Decode the planned batch: its views, and how its samples were decoded (counted in
        the engine's decode_stats)."""
        from ..decode.gpu_fallback import SampleDecodeError

        x = self.source
        try:
            views, fallback, reasons = self.decoder.decode_views(x.blobs, planned=self.planned)
        except SampleDecodeError as e:  # neither decoder could read it: the pipeline's policy decides
            raise SampleError(e.sample, e.reason, e.more) from e
        index = self.idx.tolist() if len(fallback) else []
        record = BatchDecode(gpu=len(x) - len(fallback), fallbacks=[(index[i], why) for i, why in zip(fallback, reasons)])
        self.stats.add(record)
        return views, record
