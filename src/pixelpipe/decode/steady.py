"""Steady sizes for the buffers a GPU decoder allocates per batch, so that a pipeline's memory
stops growing after its first batches.

Why: the regions of a GPU batch are decoded into one buffer whose size is the sum of the
regions that batch drew at random (and the samples decoded on the CPU into another). Allocated
at their exact sizes, torch's caching allocator meets a new size with every batch: its peak is
a running maximum over random sizes, which kept rising for epochs ( H100, 500
images, batch 256: +1.6% between epochs 1 and 5 for rn50, +15% for rich), and blocks of ever
new sizes fragment its reserved memory (554 -> 796 MiB over 25 epochs).

How: `HighWater` remembers the largest size asked for so far and answers with that plus
headroom (25%, rounded up to 2 MiB). Every batch of about that size then gets the same size,
so torch hands back the same cached blocks, epoch after epoch; the peak moves only if a batch
needs more than the headroom (the sum over 256 random regions of ImageNet-like images spreads
by a few percent). A need under half the high-water mark (a short last batch, or a decoder
called for a few images) gets its exact size, so that a small batch never holds a large buffer.
The buffer's tail beyond the last image is never read: ImageBatch allows a larger buffer.
"""

from __future__ import annotations

import threading

__all__ = ["ALIGN", "HEADROOM", "HighWater"]

HEADROOM = 1.25  # the size handed out, over the largest need so far
ALIGN = 2 << 20  # bytes; sizes handed out are multiples of this (torch rounds large blocks to 2 MiB)


class HighWater:
    """Sizes for a buffer allocated once per batch (thread-safe).

    Example:
        >>> hw = HighWater()
        >>> hw.size(100 << 20) == hw.size(90 << 20) == 126 << 20  # the same size for both
        True
        >>> hw.size(1000)  # far under the mark: exact
        1000
    """

    def __init__(self, headroom: float = HEADROOM, align: int = ALIGN) -> None:
        if headroom < 1.0:
            raise ValueError(f"headroom must be >= 1, got {headroom}")
        if align < 1:
            raise ValueError(f"align must be >= 1, got {align}")
        self.headroom, self.align = float(headroom), int(align)
        self.mark = 0  # bytes handed out for needs near the largest so far
        self._lock = threading.Lock()

    def size(self, need: int) -> int:
        """How many bytes to allocate for a buffer that needs `need` (>= need)."""
        if need < 0:
            raise ValueError(f"need must be >= 0, got {need}")
        with self._lock:
            if need > self.mark:
                self.mark = -(-int(need * self.headroom) // self.align) * self.align
            return self.mark if 2 * need >= self.mark else need
