"""loader/handover.py: a batch's CUDA blocks are marked as used on the consumer's stream,
the list form of targets (views into one upload buffer) included, so that torch's caching
allocator cannot give them back to the side stream while the consumer's work still uses them."""

from __future__ import annotations

import pytest
import torch

from pixelpipe.loader.handover import bases, hand_over


def test_bases_finds_each_storage_once_through_lists_and_dicts():
    buf = torch.arange(40.0)
    boxes = list(buf[:32].split(4))  # 8 views of one buffer
    labels = list(buf[32:].view(2, 4).unbind(0))  # views of views: the same base
    other = torch.zeros(3)
    batch = {"image": other, "boxes": boxes, "labels": labels,
             "targets": [{"boxes": boxes[0], "area": torch.ones(2)}], "names": ["a", "b"], "count": 3}
    found = list(bases(list(batch.values())))
    ids = [id(t) for t in found]
    assert len(ids) == len(set(ids)) == 3  # buf, other, the area tensor
    assert any(t is buf for t in found) and any(t is other for t in found)


def test_bases_of_plain_values():
    t = torch.ones(2)
    assert [x is t for x in bases(t)] == [True]
    assert list(bases([1, "x", None, {}])) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_handed_over_view_keeps_its_block_from_the_side_stream():
    side, consumer = torch.cuda.Stream(), torch.cuda.current_stream()
    for marked in (False, True):
        with torch.cuda.stream(side):
            buf = torch.zeros(1 << 20, device="cuda")  # 4 MiB: its own block
            done = torch.cuda.Event()
            done.record(side)
        batch = {"boxes": list(buf.split(1 << 18))}
        if marked:
            hand_over(batch, done, consumer)
        else:
            consumer.wait_event(done)
        ptr = buf.data_ptr()
        torch.cuda._sleep(200_000_000)  # the consumer's stream busy for a while...
        batch["boxes"][1].add_(1)  # ...then writing into the batch
        del batch, buf
        with torch.cuda.stream(side):
            again = torch.empty(1 << 20, device="cuda")
        # unmarked, the side stream gets the block back at once; marked, not while the write is pending
        assert (again.data_ptr() == ptr) is (not marked)
        torch.cuda.synchronize()
        del again
