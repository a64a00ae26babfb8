"""Handing a batch made on the Pipeline's side stream to the consumer's stream.

The consumer's stream waits for the event recorded after the batch's last kernel, and every
CUDA block the batch's tensors live in is marked as used on the consumer's stream
(`Tensor.record_stream`): torch's caching allocator gives a block back to the stream that
allocated it only once the work queued on the marked streams so far has finished. Without the
mark, a block the consumer is still using (an in-place `boxes /= 300`, a kernel reading the
labels) would go back to the side stream as soon as the consumer dropped its last reference, and
the next batches' uploads (the warp's tables of offsets among them) could be written into it
while the consumer's work still read or wrote it.

A batch holds tensors at its top level (images, labels, padded targets) and, in the list form
of targets, lists (or lists of dicts) of views into one upload buffer per batch. A block is
marked once, through the view's base, so a list of 256 boxes costs a walk over it, not 256
marks (three lists of 256 views: about 0.2 ms on a 2-core CPU, on the consumer's thread).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["bases", "hand_over"]


def bases(value: Any) -> Iterator[torch.Tensor]:
    """The distinct tensors whose storage the tensors in `value` (a tensor, or lists, tuples and
    dicts of them, nested) view: each view's base, or the tensor itself when it is no view."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            base = v if v._base is None else v._base
            if id(base) not in seen:
                seen.add(id(base))
                yield base
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())


def hand_over(batch: dict[str, Any], event: torch.cuda.Event, stream: torch.cuda.Stream) -> None:
    """Make `stream` wait for `event` (the batch's kernels done on the side stream) and mark the
    batch's CUDA blocks as used on `stream`."""
    stream.wait_event(event)
    for t in bases(list(batch.values())):
        if t.is_cuda:
            t.record_stream(stream)
