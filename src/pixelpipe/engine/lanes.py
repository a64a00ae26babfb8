"""An Engine's GPU decodes for a Pipeline, on threads of their own: one thread and one CUDA stream
per decoder lane (GpuDecoding(lanes=N)), consecutive batches on alternate lanes; or, with
GpuDecoding(ahead_fraction=...), lane 1 (the second decoder's share) for the batches planned
while the Pipeline is ahead of its consumer and lane 0 for the others.

A batch planned on the producer thread (Engine.prepare(defer_decode=True)) is decoded here
while the producer plans the next one and the finisher thread launches the kernels of the one
before; the finisher waits for the decode's event on its side stream, never the other way
round.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from ..data.threads import one_torch_thread

__all__ = ["DecodeLanes"]


class DecodeLanes:
    """The decode threads and streams of one Engine (made on first use, shut by close)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._pool: ThreadPoolExecutor | None = None
        self._streams: dict[int, Any] = {}  # lane -> its CUDA stream
        self._next = 0  # the lane of the next batch
        self.counts = [0, 0]  # batches submitted to lane 0, and to the others

    def next_lane(self, ahead: bool = False) -> int:
        """The lane the next batch plans for (the decoder may have fewer: PendingDecode wraps it).
        ahead: whether the Pipeline is ahead of its consumer (a made batch waits to be taken);
        it decides the lane when the decoder follows the consumer."""
        if self.engine.gpu.follows_consumer:
            return 1 if ahead else 0
        return self._next

    def submit(self, prepared: Any, lane: int) -> Future:
        """Decode `prepared` on `lane`'s thread and stream; the future gives the event its
        kernels wait for. The next batch goes to the next lane."""
        n = self.engine.gpu.decoders
        self._next = (lane + 1) % n
        self.counts[lane > 0] += 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(n, thread_name_prefix="pixelpipe-decode-gpu", initializer=one_torch_thread)
        return self._pool.submit(self._decode_on, prepared, lane)

    def _decode_on(self, prepared: Any, lane: int) -> Any:
        """The GPU decode of a prepared batch, on a thread of its own and its decoder lane's
        CUDA stream: it overlaps the planning of the next batch (producer thread), the kernels
        of the one before (finisher thread, side stream) and, with several lanes, the decodes
        of other batches; it never waits for those kernels. Returns an event the kernels wait
        for. A SampleError surfaces in the finish, which then makes the batch again in one piece."""
        stream = self._streams.get(lane)
        if stream is None:
            stream = self._streams[lane] = torch.cuda.Stream(self.engine.device)
        with torch.cuda.stream(stream):
            self.engine.decode(prepared)
            done = torch.cuda.Event()
            done.record(stream)
        return done

    def finish(self, decoded: Future, prepared: Any) -> dict[str, Any]:
        """On the finisher thread (side stream current): wait for the decode, then the kernels.
        The decoder's buffers outlive the kernels (DeviceViews.retire on the side stream)."""
        torch.cuda.current_stream(self.engine.device).wait_event(decoded.result())
        return self.engine.finish(prepared)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
