"""Pipeline: reader -> epoch order -> read -> plan + decode + warp + pointwise -> batches.

A background thread prepares batches ahead of the consumer (up to `prefetch`), reading and
decoding on the Compose's thread pool; on CUDA it works on a side stream and hands each batch
over with an event, so the consumer's stream waits for exactly that batch. Errors raised in the
background are re-raised in the consumer, never a hang.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .compose import Compose, SampleError
from .ops._base import Op
from .readers import open_reader
from .sampler import Entry, batches_per_epoch, indexable_epoch, replacement, stream_epoch

__all__ = ["Pipeline"]

POLICIES = ("raise", "skip", "replace")
_END = object()


@dataclass
class _Item:
    data: Any
    label: Any
    index: int
    source: str
    valid: bool
    attempt: int = 0  # how many replacements led here (on_error="replace")


_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """Stop every pipeline's threads before the interpreter goes (a producer thread still
    inside torch at exit aborts the process)."""
    for pipe in list(_LIVE):
        try:
            pipe._shutdown()
        except Exception:
            pass


class Pipeline:
    """An iterator of training batches.

    Args:
        reader: a pixelpipe reader, or anything `pixelpipe.readers.open_reader` accepts (a
            folder, a file list, tar shards, a list or iterable of samples).
        transforms: a Compose, or a list of ops (made into a float32 NCHW Compose).
        batch_size: samples per batch.
        device: "cpu", "cuda" or "cuda:N": where batches are made and returned.
        seed: fixes shuffling and every augmentation.
        shuffle: a fresh global order every epoch.
        drop_last: drop the tail that does not fill a batch on every rank; otherwise the last
            batch is filled by repeating samples, marked False in "valid".
        num_threads: reading/decoding threads (default: the cores available).
        prefetch: batches prepared ahead of the consumer.
        shard: (rank, world_size); default from torch.distributed when it is initialised.
        on_error: "raise" (an error naming the sample and file), "skip" (drop it and fill the
            batch from the next samples) or "replace" (substitute another sample). Every error
            is listed in `pipe.errors` as (index, source, reason).
        shuffle_buffer: samples held to shuffle streaming readers.
        max_pixels: images whose header claims more pixels are errors.
        cache: "gpu" (or "device") keeps every decoded image on the pipeline's device after
            it is first read, so later epochs skip reading and decoding and run at resampling
            speed. Whole images are cached (not the regions one epoch needs).
        cache_max_side: cache (and augment, from the first epoch on) images shrunk so that
            their longer side is at most this; makes big datasets fit.
        cache_budget: bytes of device memory for the cache (default: half the free memory);
            a dataset that does not fit raises CacheFullError naming the numbers.

    Each batch is a dict: "image" (the transforms' tensor), "label" (int64 [B] or [B, K], -1
    where a sample has none), "index" (global sample indices) and "valid" (bool [B]).
    `len(pipe)` is the number of batches per epoch; each new `iter(pipe)` starts the next
    epoch (`pipe.epoch`), except right after `load_state_dict`, which continues the saved one.
    """

    def __init__(self, reader: Any, transforms: Compose | list[Op], batch_size: int, device: str = "cpu",
                 seed: int = 0, shuffle: bool = True, drop_last: bool = False, num_threads: int | None = None,
                 prefetch: int = 2, shard: tuple[int, int] | None = None, on_error: str = "raise",
                 shuffle_buffer: int = 2048, max_pixels: int = 100_000_000, cache: str | None = None,
                 cache_max_side: int | None = None, cache_budget: int | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch}")
        if on_error not in POLICIES:
            raise ValueError(f"on_error must be one of {POLICIES}, got {on_error!r}")
        self.reader = open_reader(reader)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
        ops = transforms.ops if isinstance(transforms, Compose) else list(transforms)
        base = transforms if isinstance(transforms, Compose) else Compose(ops)
        self.transforms = Compose(ops, dtype=base.dtype, layout=base.layout, channels=base.channels,
                                  antialias=base.antialias, num_threads=num_threads, device=self.device,
                                  max_pixels=max_pixels)
        self.batch_size, self.seed, self.shuffle, self.drop_last = batch_size, seed, shuffle, drop_last
        self.prefetch, self.on_error, self.shuffle_buffer = prefetch, on_error, shuffle_buffer
        self.rank, self.world = _shard(shard)
        self.errors: list[tuple[int, str, str]] = []
        self.epoch = -1  # becomes 0 on the first iteration
        self._resume: int | None = None  # cursor to continue the current epoch from
        self._cursor = 0  # slots of the current epoch behind the batches the consumer received
        self._made = 0  # batches of the current epoch the consumer received
        self._thread: threading.Thread | None = None
        self._finisher = None
        if self.device.type == "cuda":
            from concurrent.futures import ThreadPoolExecutor

            self._finisher = ThreadPoolExecutor(1, thread_name_prefix="pixelpipe-kernels")
        self._stop = threading.Event()
        self._queue: queue.Queue | None = None
        if self.reader.indexable and len(self.reader) == 0:
            raise ValueError("the dataset is empty")
        counts = self._stream_counts()
        if not self.reader.indexable and counts is not None and sum(counts) == 0:
            raise ValueError(f"the dataset is empty: {len(counts)} shard(s) hold no samples")
        if not self.reader.indexable and counts is None and self.world > 1:
            raise ValueError("a stream of unknown length cannot be sharded over several ranks: they would get "
                             "different numbers of batches; give the reader its length (Iterable(source, length=N)) "
                             "or use tar shards with counts")
        self._done = False  # the consumer has received the end of the current epoch
        self._failed: set[int] = set()  # samples that failed this epoch (not read again)
        self._new_errors: list[tuple[int, str, str]] = []  # producer side, handed over with batches
        _LIVE.add(self)
        self._labels = self.reader.labels if self.reader.indexable else None
        if cache not in (None, "gpu", "device"):
            raise ValueError(f"cache must be None, 'gpu' or 'device', got {cache!r}")
        if cache == "gpu" and self.device.type != "cuda":
            raise ValueError("cache='gpu' needs device='cuda'; use cache='device' to cache on the CPU")
        self._cache = None
        if cache is not None:
            from .cache import DeviceCache

            self._cache = DeviceCache(self.device, cache_budget, cache_max_side)

    # ----------------------------------------------------------------------------- sizes
    def __len__(self) -> int:
        if self.reader.indexable:
            return batches_per_epoch(len(self.reader), self.world, self.batch_size, self.drop_last)
        if self._stream_counts() is None:
            raise TypeError("the number of batches of this streaming reader is unknown (no sample counts)")
        running = self._resume is not None or (self._thread is not None and not self._done)
        upcoming = self.epoch if running and self.epoch >= 0 else self.epoch + 1
        return self._stream_rank_totals(upcoming)[0][1]

    def _stream_counts(self) -> list[int] | None:
        """Samples per shard of a streaming reader, when known."""
        counts = getattr(self.reader, "counts", None)
        if counts is not None:
            return list(counts)
        try:
            n = len(self.reader)
        except TypeError:
            return None
        shards = getattr(self.reader, "shards", [None])
        return [n] if len(shards) == 1 else None

    def _stream_rank_totals(self, epoch: int) -> list[tuple[int, int]]:
        """(samples, batches) of every rank for a counted streaming reader."""
        from .sampler import shard_order

        counts = self._stream_counts()
        assert counts is not None
        order = shard_order(len(counts), self.seed, epoch, self.shuffle)
        if len(counts) >= self.world:
            totals = [sum(counts[s] for s in order[r :: self.world]) for r in range(self.world)]
        else:
            n = sum(counts)
            totals = [len(range(r, n, self.world)) for r in range(self.world)]
        b = self.batch_size
        batches = min(t // b for t in totals) if self.drop_last else max(-(-t // b) for t in totals)
        return [(t, batches) for t in totals]

    # ----------------------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._shutdown()
        if self._resume is None:
            self.epoch += 1
            self._cursor, self._made = 0, 0
        start, self._resume = self._cursor, None
        self._done = False
        self._failed = set()
        self._new_errors = []
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=self.prefetch)
        self._thread = threading.Thread(target=self._produce, args=(self.epoch, start, self._made, self._queue, self._stop),
                                        name="pixelpipe-prefetch", daemon=True)
        self._thread.start()
        return self._consume(self._queue)

    def _consume(self, q: queue.Queue) -> Iterator[dict[str, Any]]:
        try:
            while True:
                item = q.get()
                if isinstance(item, tuple) and item[0] is _END:
                    self.errors.extend(item[1])
                    if q is self._queue:
                        self._done = True
                    return
                if isinstance(item, BaseException):
                    self._shutdown()
                    raise item
                yield self._receive(item)
        finally:  # the loop was left early (break, exception, garbage): stop this epoch's thread
            if q is self._queue and not self._done:
                self._shutdown()

    def _receive(self, item: tuple[Any, ...]) -> dict[str, Any]:
        batch, cursor, made, event, errors = item
        if event is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(event)
            for v in batch.values():
                if isinstance(v, torch.Tensor) and v.is_cuda:
                    v.record_stream(stream)
        self._cursor, self._made = cursor, made
        self.errors.extend(errors)
        return batch

    def _produce(self, epoch: int, start: int, made: int, q: queue.Queue, stop: threading.Event) -> None:
        try:
            for item in self._batches(epoch, start, made, stop):
                if not _offer(q, item, stop):
                    return
            _offer(q, (_END, self._take_errors()), stop)
        except BaseException as e:  # handed to the consumer, with the errors behind it
            self.errors.extend(self._take_errors())
            _offer(q, e, stop)

    def _take_errors(self) -> list[tuple[int, str, str]]:
        errors, self._new_errors = self._new_errors, []
        return errors

    def _total(self, epoch: int) -> int | None:
        """Batches this epoch on every rank; None for streams of unknown length."""
        if self.reader.indexable:
            return len(self)
        if self._stream_counts() is None:
            return None
        return self._stream_rank_totals(epoch)[0][1]

    def _batches(self, epoch: int, start: int, made: int, stop: threading.Event) -> Iterator[tuple[Any, ...]]:
        side = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        slots = self._slots(epoch)
        for _ in range(start):  # resume: streams replay their reads (no decoding)
            next(slots, None)
        total = self._total(epoch)
        b = self.batch_size
        cursor = start
        last: list[_Item] = []
        pending: list[_Item] = []
        finisher = self._finisher if side is not None else None
        previous: tuple[Any, int, int, list] | None = None
        while not stop.is_set() and (total is None or made < total):
            pending, cursor, exhausted = self._fill(slots, cursor, pending, epoch)
            if exhausted and len(pending) < b:
                if total is None and (self.drop_last or not pending):
                    break
                pool = [it for it in pending + last if it.index not in self._failed]
                if not pool:
                    raise RuntimeError(f"rank {self.rank} has no readable samples left to fill its batches "
                                       f"({len(self._failed)} failed this epoch; see pipe.errors)")
                k = 0
                while len(pending) < b:
                    it = pool[k % len(pool)]
                    pending.append(_Item(it.data, it.label, it.index, it.source, False))
                    k += 1
            with torch.cuda.stream(side) if side is not None else _nullcontext():
                items = pending[:b]
                work, pending = self._make(pending, epoch, split=finisher is not None)
            if work is None:
                continue
            made += 1
            last = items
            errors = self._take_errors()
            if finisher is None:
                yield work, cursor, made, None, errors
                continue
            # CUDA: the kernels of this batch run on the finisher thread while this thread reads
            # and decodes the next one (nvImageCodec releases the GIL while it decodes)
            future = finisher.submit(self._finish_on, side, work)
            if previous is not None:
                yield self._handoff(*previous)
            previous = (future, cursor, made, errors)
        if previous is not None:
            yield self._handoff(*previous)

    @staticmethod
    def _handoff(future: Any, cursor: int, made: int, errors: list) -> tuple[Any, ...]:
        batch, event = future.result()
        return batch, cursor, made, event, errors

    def _finish_on(self, side: Any, work: Any) -> tuple[dict[str, Any], Any]:
        with torch.cuda.stream(side):
            batch = work()
            event = torch.cuda.Event()
            event.record(side)
        return batch, event

    def _slots(self, epoch: int) -> Iterator[Entry | Any]:
        """This rank's epoch as a lazy sequence of slots (Entry for indexable, Sample else)."""
        if self.reader.indexable:
            return iter(indexable_epoch(len(self.reader), self.seed, epoch, self.shuffle, self.rank, self.world,
                                        self.batch_size, self.drop_last))
        stream = stream_epoch(self.reader.iter_shard, len(self.reader.shards), self.seed, epoch, self.shuffle,
                              self.rank, self.world, self.shuffle_buffer)
        return _read_ahead(stream, 2 * self.batch_size, self._stop)

    def _fill(self, slots: Iterator, cursor: int, pending: list[_Item], epoch: int) -> tuple[list[_Item], int, bool]:
        """Read slots until a batch is pending; reading errors go through the policy here."""
        exhausted = False
        while len(pending) < self.batch_size:
            slot = next(slots, None)
            if slot is None:
                exhausted = True
                break
            cursor += 1
            if isinstance(slot, Entry) and slot.index in self._failed:
                continue  # a padding repeat of a sample that already failed this epoch
            item = self._read(slot, epoch)
            if item is not None:
                pending.append(item)
        return pending, cursor, exhausted

    def _read(self, slot: Any, epoch: int, attempt: int = 0) -> _Item | None:
        if isinstance(slot, Entry):
            if slot.index in self._failed:
                return self._substitute(slot.index, slot.valid, epoch, attempt)
            try:
                s = self.reader.read(slot.index)
            except (OSError, ValueError) as e:
                return self._fail(slot.index, self.reader.sources(slot.index), str(e), slot.valid, epoch, attempt)
            label = self._labels[slot.index] if self._labels is not None else s.label
            return _Item(s.data, label, slot.index, s.source, slot.valid, attempt)
        return _Item(slot.data, slot.label, slot.index, slot.source, True)

    def _fail(self, index: int, source: str, reason: str, valid: bool, epoch: int, attempt: int) -> _Item | None:
        """Record a failed sample once per epoch and apply the policy."""
        if index not in self._failed:
            self._failed.add(index)
            self._new_errors.append((index, source, reason))
        if self.on_error == "raise":
            raise SampleError(index, f"{source}: {reason}")
        return self._substitute(index, valid, epoch, attempt)

    def _substitute(self, index: int, valid: bool, epoch: int, attempt: int) -> _Item | None:
        """on_error="replace": a deterministic other sample (at most 8 tries); else nothing."""
        if self.on_error != "replace" or not self.reader.indexable or attempt >= 8:
            return None
        other = replacement(index, len(self.reader), self.seed, epoch, attempt)
        return self._read(Entry(other, valid), epoch, attempt + 1)

    def _make(self, pending: list[_Item], epoch: int, split: bool = False) -> tuple[Any, list[_Item]]:
        """Run the transforms on the pending items; on a sample error apply the policy and
        return the rest to be refilled. With split, only the first half of the transforms
        (planning and GPU decoding) runs and a callable finishing the batch is returned."""
        items = pending[: self.batch_size]
        rest = pending[self.batch_size :]
        try:
            source = [it.data for it in items] if self._cache is None else self._from_cache(items)
            prepared = self.transforms.prepare(source, seed=self.seed, epoch=epoch,
                                               indices=torch.tensor([it.index for it in items], dtype=torch.int64))
            if not split:
                return self._wrap(self.transforms.finish(prepared), items), rest
        except SampleError as e:
            bad = items[e.position]
            if self.on_error == "raise":
                self._new_errors.append((bad.index, bad.source, e.reason))
                raise SampleError(bad.index, f"{bad.source}: {e.reason}") from e
            keep = [it for it in items + rest if it.index != bad.index]
            sub = self._fail(bad.index, bad.source, e.reason, bad.valid, epoch, bad.attempt)
            if sub is not None:
                keep.append(sub)
            return None, keep
        return (lambda: self._wrap(self.transforms.finish(prepared), items)), rest

    def _wrap(self, images: torch.Tensor, items: list[_Item]) -> dict[str, Any]:
        labels = _labels([it.label for it in items])
        return {
            "image": images,
            "label": labels.to(self.device, non_blocking=True),
            "index": torch.tensor([it.index for it in items], dtype=torch.int64).to(self.device, non_blocking=True),
            "valid": torch.tensor([it.valid for it in items], dtype=torch.bool).to(self.device, non_blocking=True),
        }

    def _from_cache(self, items: list[_Item]) -> Any:
        """The batch as a view of the device cache, decoding (whole images) what is missing."""
        from .batch import to_storable
        from .decode import decode_region

        cache = self._cache
        assert cache is not None
        missing = [(k, it) for k, it in enumerate(items) if it.index not in cache]

        def load(pair: tuple[int, _Item]) -> tuple[int, _Item, torch.Tensor]:
            k, it = pair
            try:
                if isinstance(it.data, (bytes, bytearray, memoryview)):
                    arr, _ = decode_region(it.data, rgb=False, max_pixels=self.transforms.max_pixels)
                    return k, it, torch.from_numpy(arr)
                return k, it, to_storable(torch.as_tensor(it.data), k)
            except ValueError as e:
                raise SampleError(k, str(e)) from e

        for k, it, image in self.transforms._executor().map(load, missing):
            if it.index not in cache:  # a repeated sample in one batch is stored once
                cache.put(it.index, image)
        return cache.batch([it.index for it in items])

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Epoch and position of what the consumer has received; restore with load_state_dict
        to continue with exactly the same remaining batches."""
        return {"epoch": self.epoch, "cursor": self._cursor, "batches": self._made, "finished": self._done,
                "seed": self.seed, "batch_size": self.batch_size,
                "shard": (self.rank, self.world), "errors": list(self.errors)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("seed", "batch_size"):
            if state[key] != getattr(self, key):
                raise ValueError(f"state was saved with {key}={state[key]}, this pipeline has {getattr(self, key)}")
        if tuple(state["shard"]) != (self.rank, self.world):
            raise ValueError(f"state was saved on shard {tuple(state['shard'])}, this pipeline is {(self.rank, self.world)}")
        self._shutdown()
        self.epoch, self._cursor, self._made = int(state["epoch"]), int(state["cursor"]), int(state["batches"])
        self.errors = [tuple(e) for e in state.get("errors", [])]
        total = self._total(self.epoch) if self.epoch >= 0 else None
        finished = bool(state.get("finished")) or (total is not None and self._made >= total)
        # a state saved before the first epoch or after an epoch's end continues with the next epoch
        self._resume = None if self.epoch < 0 or finished else self._cursor

    # ----------------------------------------------------------------------------- lifetime
    def _shutdown(self) -> None:
        if self._thread is not None:
            self._stop.set()
            if self._queue is not None:
                while True:  # unblock a producer waiting on a full queue
                    try:
                        self._queue.get_nowait()
                    except queue.Empty:
                        break
            self._thread.join(timeout=30)
            self._thread = None
            if self._queue is not None:  # an iterator still waiting on this queue ends
                self._queue.put((_END, []))
                self._queue = None

    def close(self) -> None:
        """Stop the background thread and the decoding threads."""
        self._shutdown()
        self.transforms.close()
        if self._finisher is not None:
            self._finisher.shutdown(wait=True)
        if self._cache is not None:
            self._cache.clear()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:
            pass


def _read_ahead(items: Iterator[Any], depth: int, stop: threading.Event) -> Iterator[Any]:
    """Iterate `items` on a thread of its own, up to `depth` ahead: a stream's reading (tar
    members, a generator's work) overlaps the decoding of the batch before. Same order; an
    exception comes out where the item would have."""
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    done = object()

    def run() -> None:
        try:
            for item in items:
                if not _offer(q, (item, None), stop):
                    return
            _offer(q, (done, None), stop)
        except BaseException as e:
            _offer(q, (done, e), stop)

    threading.Thread(target=run, name="pixelpipe-read-ahead", daemon=True).start()
    while True:
        item, error = q.get()
        if item is done:
            if error is not None:
                raise error
            return
        yield item


def _offer(q: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Put item on q unless the pipeline stops first (then False)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _labels(labels: list[Any]) -> torch.Tensor:
    if all(lab is None for lab in labels):
        return torch.full((len(labels),), -1, dtype=torch.int64)
    rows = [(-1 if lab is None else lab) for lab in labels]
    if any(isinstance(r, torch.Tensor) for r in rows):
        return torch.stack([torch.as_tensor(r, dtype=torch.int64) for r in rows])
    return torch.tensor(rows, dtype=torch.int64)


def _shard(shard: tuple[int, int] | None) -> tuple[int, int]:
    if shard is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    rank, world = (int(v) for v in shard)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard must be (rank, world_size) with 0 <= rank < world_size, got {shard}")
    return rank, world
