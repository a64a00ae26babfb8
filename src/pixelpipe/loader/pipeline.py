"""Pipeline: reader -> epoch order -> read -> plan + decode + warp + pointwise -> batches.

A background thread prepares batches ahead of the consumer (up to `prefetch`), and goes on into
the next epoch when one ends, so the next epoch's first batches are ready when the consumer
starts it. It reads and plans batch k+1 while a finisher thread runs batch k's second half (on
the CPU decoding and warping, on its Engine's thread pool; on CUDA the kernels, on a side
stream, each batch handed over with an event); optionally a third thread decodes between. Errors
raised in the background are re-raised in the consumer, never a hang.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from ..compose import Compose
from ..data.targets import TARGET_KEYS, Targets, sample_values, targets_of
from ..data.threads import one_torch_thread
from ..engine import Engine, GpuDecoding, SampleError
from ..engine.stats import BatchDecode, DecodeStats
from ..ops.kinds import Op
from ..readers import open_reader
from .arguments import check_arguments, check_state
from .cached import CachedBatches, planned_epoch
from .collate import as_batch, collate, labels_tensor
from .collate import shard_of as _shard
from .epochs import Epochs
from .errors import ErrorLog, Reported
from .handover import hand_over
from .producer import STOPPED, ArraySlots, EpochEnd, Failure, Made, Producer, Replay, Run, produce
from .reading import Item, Reading
from .remake import MadeRows, keep_rows, told
from .sampler import EpochOrder

__all__ = ["Pipeline"]

READ_THREADS = 4  # threads reading a file reader's next files ahead (loader.reading)
AHEAD_IDLE_S = 10.0  # after an epoch, how long the producer's run into the next waits for the loop


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


class Pipeline(Reported):
    """An iterator of training batches.

    Args:
        reader: a pixelpipe reader, or anything `pixelpipe.readers.open_reader` accepts (a
            folder, a file list, tar shards, a list or iterable of samples).
        transforms: a Compose, or a list of ops (made into a float32 NCHW Compose).
        gpu: how JPEGs are decoded on CUDA (pixelpipe.GpuDecoding; when None, its defaults
            with `hw_batch` this Pipeline's batch size).
        batch_size: samples per batch.
        device: "cpu", "cuda" or "cuda:N": where batches are made and returned.
        seed: fixes shuffling and every augmentation.
        shuffle: a fresh global order every epoch.
        drop_last: drop the tail that does not fill a batch on every rank (refused when that
            leaves no batch at all); otherwise the last batch is filled by repeating readable
            samples of the rank's epoch, marked False in "valid". A batch of padding only
            comes only after the rank's last sample (see docs/training.md for a safe loss).
        num_threads: reading/decoding threads (default: the cores available, shared between the
            ranks torchrun starts on this host; at most 8 on a GPU, where more were measured
            slower: data.threads.default_gpu_threads). The Pipeline runs its transforms on an Engine
            of its own (`pipe.engine`) with these threads, `device`, `max_pixels` and `gpu`.
        prefetch: batches prepared ahead of the consumer, across the end of an epoch too: the
            next epoch's first batches are ready when the consumer starts it (they wait
            AHEAD_IDLE_S, 10 s, for it; then the threads stop and the epoch starts afresh when
            asked for, so that a pipeline dropped after an epoch without close() goes).
        shard: (rank, world_size); default from torch.distributed when it is initialised.
            Every rank gets the same number of batches; with tar shards of any sizes the ranks'
            samples differ by at most one (a shard may be split between two ranks).
        on_error: "raise" (an error naming the sample and file), "skip" (drop it and fill the
            batch from the next samples) or "replace" (substitute another sample). See Errors
            below. `pipe.stats` (a pixelpipe.engine.stats.DecodeStats) counts how the delivered
            batches' samples were decoded: by nvImageCodec, on the CPU inside a GPU batch and
            why, on the CPU, or read from the cache.
        shuffle_buffer: samples held to shuffle streaming readers.
        max_pixels: images whose header claims more pixels are errors.
        cache: "gpu" (or "device") keeps every decoded image on the pipeline's device after
            it is first read, so later epochs skip reading and decoding and run at resampling
            speed. Whole images are cached (not the regions one epoch needs).
        cache_max_side: cache (and augment, from the first epoch on) images shrunk so that
            their longer side is at most this; makes big datasets fit.
        cache_budget: bytes of device memory for the cache, allocated at once (default: up to
            half the free memory, in a buffer that starts at 64 MiB and doubles as needed);
            a dataset that does not fit raises CacheFullError naming the numbers.
        decode_thread: on CUDA, decode each batch on a third thread (and stream) between the
            planning thread and the kernel thread (default); False decodes on the planning
            thread. Measured on an H200 (500 ImageNet JPEGs, batch 256, 8 threads, two runs
            each): rn50 8.2k against 7.1-7.4k images/s, rich 5.9-7.4k against 4.9-6.5k, val
            7.2-8.6k against 6.7-6.8k. Same batches either way. No effect on the CPU.
        fixed_shards: with several ranks and an indexable reader, each rank keeps the same
            samples every epoch and shuffles within them (as DALI's stick_to_shard), instead
            of taking its share of a new global permutation each epoch. None (default): on
            when `cache` is set, where it keeps each rank's cache at its share of the dataset
            (otherwise every rank would, over the epochs, cache nearly every sample).

    Each batch is a dict: "image" (the transforms' tensor), "label" (int64 [B] or [B, K], -1
    where a sample has none), "index" (global sample indices) and "valid" (bool [B]); with a
    reader whose samples carry targets (dict samples with "boxes", "keypoints", "masks"), those
    moved with the images as a Compose returns them, and any other per-sample value as a list.
    `len(pipe)` is the number of batches per epoch; each new `iter(pipe)` starts the next
    epoch (`pipe.epoch`), except right after `load_state_dict`, which continues the saved one.

    Errors: a sample that cannot be read or decoded is listed once in `pipe.errors`, as
    (index, source, reason) of its first failure, however many epochs meet it again (it is
    tried again every epoch: a file may be fixed) and however often the run is resumed;
    `pipe.epoch_errors` lists those that failed in the current epoch, each once. Both are part
    of `state_dict()`, whose size does not grow with the epochs. Nothing is lost silently: each
    sample an epoch deals this rank is in one of its batches (valid) or in `epoch_errors`.
    """

    def __init__(self, reader: Any, transforms: Compose | list[Op], batch_size: int, device: str = "cpu",
                 seed: int = 0, shuffle: bool = True, drop_last: bool = False, num_threads: int | None = None,
                 prefetch: int = 2, shard: tuple[int, int] | None = None, on_error: str = "raise",
                 shuffle_buffer: int = 2048, max_pixels: int = 100_000_000, cache: str | None = None,
                 cache_max_side: int | None = None, cache_budget: int | None = None,
                 decode_thread: bool = True, fixed_shards: bool | None = None,
                 gpu: GpuDecoding | None = None) -> None:
        args = check_arguments(batch_size, seed, shuffle, drop_last, prefetch, on_error, shuffle_buffer, cache,
                               cache_max_side, cache_budget, decode_thread, fixed_shards)
        batch_size, seed, fixed_shards = args["batch_size"], args["seed"], args["fixed_shards"]
        self.rank, self.world = _shard(shard)
        self.reader = open_reader(reader)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
        self.transforms = transforms if isinstance(transforms, Compose) else Compose(list(transforms))
        # the hardware decoder's buffers made for this Pipeline's batches (GpuDecoding.hw_batch)
        self.engine = Engine(self.device, num_threads, max_pixels, gpu or GpuDecoding(hw_batch=batch_size))
        self.batch_size, self.seed, self.shuffle, self.drop_last = batch_size, seed, args["shuffle"], args["drop_last"]
        self.prefetch, self.on_error, self.shuffle_buffer = args["prefetch"], on_error, args["shuffle_buffer"]
        self.fixed_shards = cache is not None if fixed_shards is None else bool(fixed_shards)
        self._log = ErrorLog()
        self.stats = DecodeStats()
        self.epoch = -1  # becomes 0 on the first iteration
        self._resume: int | None = None  # cursor to continue the current epoch from
        self._cursor = 0  # slots of the current epoch behind the batches the consumer received
        self._made = 0  # batches of the current epoch the consumer received
        self._producer: Producer | None = None
        self._token: object | None = None  # the consumer iterator of the current epoch
        self._finisher: ThreadPoolExecutor | None = None  # runs each batch's second half
        self.decode_thread = args["decode_thread"]
        self._epochs = Epochs(self.reader, seed, self.shuffle, self.rank, self.world, batch_size, self.drop_last,
                              self.fixed_shards, self.shuffle_buffer)
        self._done = False  # the consumer has received the end of the current epoch
        _LIVE.add(self)
        labels = self.reader.labels if self.reader.indexable else None
        self._reading = Reading(self.reader, on_error, seed, batch_size, self.rank, labels,
                                read_threads=min(READ_THREADS, self.engine.num_threads))
        if cache == "gpu" and self.device.type != "cuda":
            raise ValueError("cache='gpu' needs device='cuda'; use cache='device' to cache on the CPU")
        self._cache: CachedBatches | None = None
        if cache is not None:
            from .cache import DeviceCache

            store = DeviceCache(self.device, cache_budget, cache_max_side)
            if self.reader.indexable:  # what this rank will cache, for CacheFullError's estimate
                store.expected = -(-len(self.reader) // self.world)
            self._cache = CachedBatches(store, self.engine, self.transforms.program, seed, batch_size, self.device,
                                        labels, self._reading.records, self._epochs.order, self.reader.indexable)

    # ----------------------------------------------------------------------------- sizes
    def __len__(self) -> int:
        total = self._epochs.total()
        if total is None:
            raise TypeError("the number of batches of this streaming reader is unknown (no sample counts)")
        return total

    # ----------------------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[dict[str, Any]]:
        resume, self._resume = self._resume, None
        # the consumer received the whole of the last epoch: the producer went on into this one
        ahead = resume is None and self._done and self._producer is not None and not self._producer.expired
        if not ahead:
            self._shutdown()
        if resume is None:
            self.epoch += 1
            self._cursor, self._made = 0, 0
            self._log.new_epoch()
        if not ahead:
            epoch, start, made = self.epoch, self._cursor, self._made
            self._producer = Producer(lambda stop: self._produce(epoch, start, made, stop), self.prefetch,
                                      idle_after_end=AHEAD_IDLE_S)
        self._done = False
        self._token = token = object()
        assert self._producer is not None
        return self._consume(self._producer, token)

    def _consume(self, producer: Producer, token: object) -> Iterator[dict[str, Any]]:
        try:
            while True:
                item = producer.get()
                if token is not self._token:
                    if self._token is None:  # close() or load_state_dict(): this epoch ends here
                        return
                    # iter() was called again meanwhile (maybe on another thread)
                    raise RuntimeError("this iterator's epoch was replaced: iter(pipe) was called again, and a "
                                       "Pipeline runs one epoch at a time (iterate it from one loop)")
                if item is STOPPED:
                    return
                if isinstance(item, Failure):
                    self._log.add(item.errors)
                    self._shutdown()
                    raise item.error
                if isinstance(item, EpochEnd):
                    self._log.add(item.errors)
                    self._done = token is self._token
                    return
                yield self._receive(item)
        finally:  # the loop was left early (break, exception, garbage): stop the producer
            if token is self._token and not self._done:
                self._shutdown()

    def _receive(self, item: tuple[Any, ...]) -> dict[str, Any]:
        batch, epoch, cursor, made, event, errors, record = item
        assert epoch == self.epoch, f"a batch of epoch {epoch} reached epoch {self.epoch}"
        if event is not None:
            hand_over(batch, event, torch.cuda.current_stream(self.device))
        self._cursor, self._made = cursor, made
        self._log.add(errors)
        if record is not None:
            self.stats.add(record)
        return batch

    def _produce(self, epoch: int, start: int, made: int, stop: threading.Event) -> Iterator[Any]:
        """The producer thread's items, from `start` slots into `epoch` on (see _prefetch.produce)."""
        one_torch_thread()  # planning works on a few hundred numbers: no OpenMP team (see _threads)
        side = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        later: dict[int, Any] = {}  # epochs planned ahead of their runs (pixelpipe.loader.cached)
        yield from produce(lambda e, s, m: self._open(e, s, m, stop, later),
                           lambda run, redo: self._next_batch(run, side, redo),
                           lambda made: self._finish(side, made.work),
                           epoch, start, made, stop)

    def _finish(self, side: Any, work: Any) -> Future:
        """A batch's second half: on the finisher thread, where it may wait for a GPU decode
        or run CPU warps while the next batch is planned; inline for a GPU cache, whose
        kernels only need launching (a hand-off to another thread costs a GIL round trip
        per batch, more than the launch)."""
        if self._cache is None or side is None:
            return self._finisher_pool().submit(self._finish_on, side, work)
        done: Future = Future()
        try:
            done.set_result(self._finish_on(side, work))
        except BaseException as e:  # the same path as a failed finish on the finisher thread
            done.set_exception(e)
        return done

    def _open(self, epoch: int, start: int, made: int, stop: threading.Event,
              later: dict[int, Any] | None = None) -> Run:
        planned = planned_epoch(later, epoch, start, made)  # by the run before (cached epochs)
        slots = planned.order if planned is not None else self._epochs.order(epoch, stop)
        if isinstance(slots, EpochOrder):
            replay: Any = ArraySlots(slots)
            replay.skip(start)
        else:
            replay = Replay(slots)
        run = Run(epoch, replay, self._epochs.total(epoch), start, made, stop, later=later)
        if not isinstance(replay, ArraySlots):
            for _ in range(start):  # resume: streams replay their reads (no decoding), keeping their head
                slot = next(replay, None)
                if slot is None:
                    break
                self._reading.keep_head(run, slot)
            replay.forget(replay.position)
        if planned is not None:
            run.ahead.extend(planned.batches)
        return run

    def _next_batch(self, run: Run, side: Any, redo: bool = False) -> Made | None:
        """The next batch of run's epoch with its first half made, or None at the epoch's end.
        With redo, run was restored to just before a batch whose finish failed: that batch is
        made again, in one piece, first; so is a batch made again here after a sample failed
        (a split batch whose finish fails would be made twice more)."""
        b, whole = self.batch_size, redo
        reuse = MadeRows()  # samples of the batch made already
        if redo and run.partial is not None:  # keep what the failed finish made; refill its failures
            run.pending, redo = self._keep_made(run, run.partial, reuse), False
            run.partial = None
        while not run.stop.is_set() and (run.total is None or run.made < run.total):
            if not redo and self._cache is not None:  # later epochs: all cached
                made = self._cache.next_batch(run, side, self._wrap_cached)
                if made is not None:
                    return made
            if not redo:
                exhausted = self._reading.fill(run)
                if exhausted and len(run.pending) < b:
                    if run.total is None and (self.drop_last or not run.pending):
                        return None
                    self._reading.pad(run)
            saved = run.save()
            with torch.cuda.stream(side) if side is not None else nullcontext():
                if reuse:
                    work, record, run.pending = self._make_reusing(run, run.pending, reuse)
                else:
                    work, record, run.pending = self._make(run, run.pending, not whole, reuse)
            redo, whole = False, work is None
            if work is not None:
                run.made += 1
                return Made(run, work, saved, run.cursor, run.made, run.take_errors(), record=record)
        return None

    def _finisher_pool(self) -> ThreadPoolExecutor:
        if self._finisher is None:
            # CUDA: the finisher only plans launches (one torch thread, see _threads); CPU: it
            # may run batched reference warps, which use torch's threads
            init = one_torch_thread if self.device.type == "cuda" else None
            self._finisher = ThreadPoolExecutor(1, thread_name_prefix="pixelpipe-finish", initializer=init)
        return self._finisher

    @staticmethod
    def _finish_on(side: Any, work: Any) -> tuple[dict[str, Any], Any]:
        if side is None:
            return work(), None
        with torch.cuda.stream(side):
            batch = work()
            event = torch.cuda.Event()
            event.record(side)
        return batch, event

    def _make(self, run: Run, pending: list[Item], split: bool = True, reuse: MadeRows | None = None
              ) -> tuple[Any, Any, list[Item]]:
        """Run the first half of the transforms (planning; on CUDA, decoding) on the pending
        items and return a callable finishing the batch, one giving how it was decoded (a
        BatchDecode, once finished), and the rest; without split, run both halves here. On a
        sample error apply the policy and return None, None and the items left, to be
        refilled; the rows a one-piece finish made all the same go into `reuse`."""
        items = pending[: self.batch_size]
        rest = pending[self.batch_size :]
        engine, epoch = self.engine, run.epoch
        keep = self._cache is None and self.on_error != "raise"
        try:
            cached = None
            if self._cache is None:
                source = [it.data for it in items]
            else:
                source, cached = self._cache.batch_for(items)
            deferred = split and self.decode_thread and self.device.type == "cuda"
            producer = self._producer
            lane = engine.lanes.next_lane(producer is not None and producer.ahead) if deferred else None
            index = np.fromiter((it.index for it in items), np.int64, len(items))  # also the batch's "index"
            prepared = engine.prepare(self.transforms.program, source, self.seed, epoch, index, _targets(items),
                                      defer_decode=deferred, decode_lane=lane)
            record = (lambda: cached) if cached is not None else (lambda: prepared.first.decoded)
            if deferred:  # three batches at once: planned here, decoded, finished (kernels)
                decoded = engine.lanes.submit(prepared, lane)
                return told(lambda: self._wrap(engine.lanes.finish(decoded, prepared), items, index, epoch),
                             items), record, rest
            if not split:
                batch = self._wrap(engine.finish(prepared, partial=keep), items, index, epoch)
                return (lambda: batch), record, rest
        except SampleError as e:  # every failing sample of the batch at once: it is made again once
            if e.batch is not None and reuse is not None:
                keep_rows(reuse, items, e)
            left = items + rest
            for position, reason in e.failures:
                left = self._reading.refill(run, left, items[position], reason)
            return None, None, left
        return told(lambda: self._wrap(engine.finish(prepared, partial=keep), items, index, epoch), items), \
            record, rest

    def _keep_made(self, run: Run, failed: SampleError, reuse: MadeRows) -> list[Item]:
        """The run's pending items after a finish that failed on some samples (failed.items, the
        batch's items): the rows it made all the same (failed.batch, on the CPU) go into reuse,
        the failures through the policy (refill), as a batch made again in one piece would
        have them; the samples that failed are not decoded again to find them again."""
        items: list[Item] = failed.items  # type: ignore[attr-defined]
        if failed.batch is not None:
            keep_rows(reuse, items, failed)
        left = run.pending
        for position, reason in failed.failures:
            left = self._reading.refill(run, left, items[position], reason)
        return left

    def _make_reusing(self, run: Run, pending: list[Item], reuse: MadeRows) -> tuple[Any, Any, list[Item]]:
        """_make in one piece for a batch some of whose samples were made already (reuse): only
        the others (stand-ins, samples read to fill the batch) are made, the rows put together
        in the batch's order. Samples that fail again go through the policy and the batch is
        tried again, keeping what this try made."""
        items, rest = pending[: self.batch_size], pending[self.batch_size :]
        index = np.fromiter((it.index for it in items), np.int64, len(items))
        fresh = [j for j, it in enumerate(items) if reuse.get(it) is None]
        made = None
        if fresh:
            sub = [items[j] for j in fresh]
            try:
                prepared = self.engine.prepare(self.transforms.program, [it.data for it in sub], self.seed, run.epoch,
                                               index[fresh], _targets(sub))
                made = self.engine.finish(prepared, partial=True)["image"]
            except SampleError as e:
                left = items + rest
                if e.batch is not None:
                    keep_rows(reuse, sub, e)
                for position, reason in e.failures:
                    left = self._reading.refill(run, left, sub[position], reason)
                return None, None, left
        image = reuse.assemble(items, fresh, made)
        reuse.clear()
        batch = self._wrap({"image": image}, items, index, run.epoch)
        record = BatchDecode(cpu=len(items))
        return (lambda: batch), (lambda: record), rest

    def _wrap(self, out: dict[str, Any], items: list[Item], index: np.ndarray, epoch: int) -> dict[str, Any]:
        """The batch dict from the engine's output; index: the items' sample indices (int64,
        made once by _make)."""
        valid = np.fromiter((it.valid for it in items), np.bool_, len(items))
        table = self._reading.labels
        if table is not None:  # an indexable reader's table: one gather, not N rows stacked
            labels = table[torch.from_numpy(index)]
        else:
            labels = labels_tensor([it.label for it in items])
        batch = collate(out.pop("image"), index, valid, labels, self.device)
        return self._complete(batch, out, [it.targets for it in items], index, epoch)

    def _wrap_cached(self, out: dict[str, Any], tensors: tuple[torch.Tensor, ...], index: np.ndarray,
                     epoch: Any) -> dict[str, Any]:
        """The batch dict of a batch of cached samples (its label, index and valid tensors made ahead)."""
        batch = as_batch(out.pop("image"), *tensors)
        records = self._reading.records
        return self._complete(batch, out, [records[i].targets for i in index.tolist()], index, epoch)

    def _complete(self, batch: dict[str, Any], moved: dict[str, Any], targets: list[Any], index: np.ndarray,
                  epoch: Any) -> dict[str, Any]:
        """The moved targets, the samples' other values (a list per name), then the batch ops."""
        batch.update(moved)
        names = {k for t in targets if t for k in t if k not in TARGET_KEYS}
        for k in sorted(names):
            batch[k] = sample_values(targets, k)
        return self.transforms.program.mix(batch, self.seed, epoch, index)

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Epoch and position of what the consumer has received, and the errors it was told of;
        restore with load_state_dict to continue with exactly the same remaining batches."""
        return {"epoch": self.epoch, "cursor": self._cursor, "batches": self._made, "finished": self._done,
                "seed": self.seed, "batch_size": self.batch_size,
                "shard": (self.rank, self.world), "fixed_shards": self.fixed_shards, **self._log.state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state of state_dict(); a ValueError for a state that is not one, or one
        saved with another seed, batch size, shard or position outside the epoch."""
        settings = {"seed": self.seed, "batch_size": self.batch_size, "shard": (self.rank, self.world),
                    "fixed_shards": self.fixed_shards}
        pos = check_state(state, settings, lambda e: (self._epochs.total(e), self._epochs.slots(e)))
        self._shutdown()
        self._log.load(state)
        self.epoch, self._cursor, self._made = pos["epoch"], pos["cursor"], pos["batches"]
        total = self._epochs.total(self.epoch) if self.epoch >= 0 else None
        finished = pos["finished"] or (total is not None and self._made >= total)
        # a state saved before the first epoch or after an epoch's end continues with the next epoch
        self._resume = None if self.epoch < 0 or finished else self._cursor

    # ----------------------------------------------------------------------------- lifetime
    def _shutdown(self) -> None:
        """Stop the producer and discard what it made ahead (an iterator waiting on it ends)."""
        producer, self._producer, self._token = self._producer, None, None
        if producer is not None:
            producer.stop()

    def close(self) -> None:
        """Stop the background threads and the decoding threads."""
        self._shutdown()
        if self._finisher is not None:
            self._finisher.shutdown(wait=True)
            self._finisher = None
        self._reading.close()
        self.engine.close()
        if self._cache is not None:
            self._cache.clear()

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:
            pass


def _targets(items: list[Item]) -> Targets | None:
    """The batch's targets from its items' target dicts (None: no item has any)."""
    return targets_of([it.targets for it in items])
