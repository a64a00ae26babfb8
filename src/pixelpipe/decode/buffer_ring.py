"""A decoder lane's ring of batch buffers: the buffers its batches decode into, lent batch after
batch and lent again once the kernels that read them have run, so that how many are alive is
fixed from the first batches on.

Why: a buffer allocated per batch (at `steady.HighWater`'s size) and dropped once the kernels
that read it were seen to be done, which a Pipeline sees at the next batch's end, leaves the
count alive to timing: two in a Pipeline's first epoch, three later, when batch k's buffer
still waited for that check while batch k+2 was planned. torch's peak then stepped by a
buffer after the first epoch (two-batch epochs, an H200: rich +20%, fastai_like +26%, simclr
+17%, all at epoch 2), although the buffers were all of one size.

How: `take(need, allocate)` answers with a buffer of the high-water size and a `Lease`; the
views made of it (`data.views.DeviceViews`) call `Lease.retired(event)` once the kernels that
read it are enqueued, the event recorded after them. A buffer whose event has completed is lent
again; with `slots` buffers in the ring and none of them done, the one retired first is waited
for (its kernels were enqueued a batch ago) instead of a new one allocated. A Pipeline plans
batch k+2 only after batch k's kernels were enqueued, so two buffers per lane suffice. A buffer
never retired (a batch dropped before its kernels ran) leaves the ring once nothing else holds
it, as it would have been freed before; a need far under the mark (a short batch) or a ring
whose every buffer is lent gets a buffer of its own, outside the ring.

Every buffer is lent again on the stream it was allocated in (a lane decodes on one stream), so
the decoder's writes stay in order; the kernels' reads are over once the event completed.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from .steady import HighWater

__all__ = ["BufferRing", "Lease"]


class _Slot:
    __slots__ = ("buffer", "event", "lent", "order")

    def __init__(self, buffer: torch.Tensor) -> None:
        self.buffer = buffer
        self.event: Any = None  # recorded after the kernels that read the last batch in it
        self.lent: Lease | None = None  # the lease of the batch it is lent to
        self.order = 0  # when it was retired (the ring waits for the earliest)


class Lease:
    """One batch's hold on a ring buffer: `retired(event)` once every kernel reading it is
    enqueued, `event` recorded after them (DeviceViews.retire calls it)."""

    __slots__ = ("_ring", "_slot")

    def __init__(self, ring: BufferRing, slot: _Slot) -> None:
        self._ring, self._slot = ring, slot

    def retired(self, event: Any) -> None:
        self._ring._retire(self, event)


class BufferRing:
    """Buffers for one decoder lane's batches, sized by a HighWater (thread-safe).

    Args:
        slots: buffers the ring holds at most (>= 1).
        water: the sizing rule (a HighWater of its own by default).

    Example:
        >>> ring = BufferRing(slots=2, water=HighWater(align=1))
        >>> buf, lease = ring.take(1000, lambda size: torch.empty(size, dtype=torch.uint8))
        >>> buf.numel(), lease is not None  # 25% of headroom, lent from the ring
        (1250, True)
    """

    def __init__(self, slots: int = 2, water: HighWater | None = None) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = int(slots)
        self.water = water if water is not None else HighWater()
        self._ring: list[_Slot] = []
        self._lock = threading.Lock()
        self._retires = itertools.count(1)
        self.allocated = 0  # buffers allocated for the ring
        self.outside = 0  # buffers handed out outside it
        self.waits = 0  # times a lent buffer's kernels were waited for

    def __len__(self) -> int:
        return len(self._ring)

    def take(self, need: int, allocate: Callable[[int], torch.Tensor]) -> tuple[torch.Tensor, Lease | None]:
        """A buffer of at least `need` bytes and its lease (None: a buffer of its own, outside
        the ring). `allocate(size)` makes a uint8 buffer of `size` bytes where the caller
        decodes (its stream current)."""
        size = self.water.size(need)
        if size != self.water.mark:  # far under the mark: exact, outside the ring
            self.outside += 1
            return allocate(size), None
        wait = None
        with self._lock:
            self._ring = [s for s in self._ring if self._keep(s, size)]
            ready = [s for s in self._ring if s.lent is None and (s.event is None or s.event.query())]
            if ready:
                slot = ready[0]
            elif len(self._ring) < self.slots:
                slot = None
            else:
                waiting = [s for s in self._ring if s.lent is None]
                if not waiting:  # every buffer lent: one outside the ring
                    self.outside += 1
                    return allocate(size), None
                slot = wait = min(waiting, key=lambda s: s.order)
                self.waits += 1
            if slot is None:  # allocated under the lock: concurrent takes never pass `slots`
                slot = _Slot(allocate(size))
                self._ring.append(slot)
                self.allocated += 1
            lease = slot.lent = Lease(self, slot)
        if wait is not None:
            wait.event.synchronize()  # lent already: no other batch takes it meanwhile
        slot.event = None
        return slot.buffer, lease

    def _keep(self, slot: _Slot, size: int) -> bool:
        """Whether `slot` stays in the ring (the lock held): not if nothing but the ring holds a
        lent buffer (its batch was dropped unretired), nor a free one of an old size (the
        retired views hold it until their kernels ran)."""
        if slot.lent is not None:
            return sys.getrefcount(slot.buffer) > 2  # the slot's own reference and the argument's
        return slot.buffer.numel() == size

    def _retire(self, lease: Lease, event: Any) -> None:
        with self._lock:
            slot = lease._slot
            if slot.lent is lease:  # not a batch's lease that was retired already
                slot.event, slot.order, slot.lent = event, next(self._retires), None
