"""pixelpipe's own threads run torch with one intra-op thread; the user's threads keep theirs.

The per-thread count exists with torch's OpenMP builds (the CPU wheels); with a build whose
pool is shared by every thread the function cannot act for one thread and says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from corpus import samples

from pixelpipe import Compose, Pipeline, RandomResizedCrop
from pixelpipe.data.threads import one_torch_thread

OPENMP = "OpenMP" in torch.__config__.parallel_info()
DEFAULT = 3  # larger than 1 on any machine, so that a change is visible


@pytest.fixture(autouse=True)
def three_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(DEFAULT)
    yield
    torch.set_num_threads(before)


def in_new_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_the_calling_thread_gets_one_and_no_other_thread_changes() -> None:
    def worker() -> tuple[bool, int]:
        return one_torch_thread(), torch.get_num_threads()

    changed, count = in_new_thread(worker)
    if not OPENMP:
        assert changed is False and count == DEFAULT
        pytest.skip("this torch build shares one pool between threads: no per-thread count")
    assert changed is True and count == 1
    assert torch.get_num_threads() == DEFAULT  # the caller's thread
    assert in_new_thread(torch.get_num_threads) == DEFAULT  # threads started later


@pytest.mark.skipif(not OPENMP, reason="per-thread counts need torch's OpenMP build")
def test_a_pipeline_leaves_the_users_threads_alone_and_its_pool_single_threaded() -> None:
    compose = Compose([RandomResizedCrop(32)])
    with Pipeline([(it.data, it.label) for it in samples(6)], compose, 3, seed=1, num_threads=2) as pipe:
        assert sum(len(b["image"]) for b in pipe) == 6
        pool_counts = {pipe.engine.executor().submit(torch.get_num_threads).result() for _ in range(4)}
    assert pool_counts == {1}
    assert torch.get_num_threads() == DEFAULT
    assert in_new_thread(torch.get_num_threads) == DEFAULT


def test_default_threads_share_the_host_between_torchruns_ranks(monkeypatch):
    """default_threads: every core the process may use, divided by LOCAL_WORLD_SIZE only when
    the process may use the whole machine (a launcher that pinned each rank already split them);
    an Engine, and so a Pipeline, takes it when no count is given."""
    import os

    import pixelpipe.data.threads as threads
    from pixelpipe import Engine

    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert threads.default_threads() == 32
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert threads.default_threads() == 8
    assert Engine().num_threads == 8
    assert Engine(num_threads=3).num_threads == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert threads.default_threads() == 1  # never 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert threads.default_threads() == 6  # pinned to 6 cores already: all of them
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "not a number")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert threads.default_threads() == 32


def test_gpu_engines_take_at_most_eight_threads_by_default(monkeypatch):
    """On a CUDA device an Engine (and so a Pipeline) takes default_threads() capped at
    GPU_THREADS; on the CPU, or given a count, it takes what it did."""
    import os

    import pixelpipe.data.threads as threads
    from pixelpipe import Engine

    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr("pixelpipe.engine.engine.check_device", lambda device: None)  # no GPU needed here
    assert threads.GPU_THREADS == 8
    assert threads.default_gpu_threads() == 8
    assert Engine("cuda").num_threads == 8
    assert Engine("cuda:1").num_threads == 8
    assert Engine("cpu").num_threads == 32
    assert Engine().num_threads == 32  # the input's device: CPU decoding
    assert Engine("cuda", num_threads=16).num_threads == 16
    assert [threads.default_threads_for(d) for d in ("cuda", "cuda:1", torch.device("cuda", 0), "cpu", None)] == [
        8, 8, 8, 32, 32]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert threads.default_gpu_threads() == 4  # a rank's share of the host, under the cap
    assert Engine("cuda").num_threads == 4
