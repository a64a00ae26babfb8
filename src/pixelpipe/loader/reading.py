"""How a Pipeline reads the samples of its batches (`Reading`): slots to items, the on_error
policy (a failed sample is recorded once per epoch, then raised, skipped or replaced by a
deterministic other sample), and the padding of an epoch's short last batch.

Readers of files (`reads_files`: Folder, FileList) are read ahead: the files of the next
slots of the epoch's order are read on reader threads, a chunk of files in one C call without
the GIL (the reader's `read_many`, readers._files), while the producer plans the batch
before. Read one after the other on the producer thread, each file cost it about 30 us, a
quarter of a GPU pipeline's budget per image at 15k images/s (rn50 on an H100: 9.9k images/s
from files against 16.9k from memory). A file's error comes out where it is read, as before.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

from ..engine import SampleError
from ..readers import Sample, Unreadable
from ..readers._base import label_values
from .producer import ArraySlots, Run
from .sampler import Entry, replacement

READ_CHUNK = 32  # files a reader thread reads per task (one C call)
HEAD = 2  # batches of a stream's first items kept to pad its epoch's last batch from

__all__ = ["Item", "Reading", "Record"]


@dataclass
class Item:
    """A sample read for a batch (data None when its pixels are in the device cache)."""

    data: Any
    label: Any
    index: int
    source: str
    valid: bool
    attempt: int = 0  # how many replacements led here (on_error="replace")
    targets: dict[str, Any] | None = None  # boxes, masks, ... as the reader gave them


@dataclass
class Record:
    """What a cached sample keeps besides its pixels, so that later epochs need not read it."""

    label: Any
    source: str
    targets: dict[str, Any] | None = None


class Reading:
    """A Pipeline's reading: its reader, policy and batch size, and the records of the samples
    its cache holds (`records`, index -> Record: those are not read again).

    Args:
        reader: an indexable or streaming reader (pixelpipe.readers).
        on_error: "raise", "skip" or "replace".
        seed: the seed replacements are drawn from.
        batch_size: samples per batch.
        rank: this process's rank (named in errors).
        labels: an indexable reader's label table (int64 [N] or [N, K]), or None.
    """

    def __init__(self, reader: Any, on_error: str, seed: int, batch_size: int, rank: int, labels: Any,
                 read_threads: int = 0) -> None:
        self.reader, self.on_error, self.seed = reader, on_error, seed
        self.batch_size, self.rank, self.labels = batch_size, rank, labels
        self.records: dict[int, Record] = {}
        ahead = read_threads > 0 and getattr(reader, "reads_files", False) and reader.indexable
        self._threads = read_threads if ahead else 0
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: dict[int, Future] = {}  # sample index -> the chunk reading it
        self._raw = _reads_raw(type(reader))  # its chunks as bytes and paths, no Sample per file
        # a reader whose read_items gives what its read does (Memory): a batch's items in one pass
        self._items = not ahead and reader.indexable and _reads_items(type(reader))

    def fill(self, run: Run) -> bool:
        """Read slots until a batch is pending (reading errors go through the policy here);
        whether the slots ran out."""
        if self._threads:
            self._read_ahead(run)
            self._take_read(run)
        elif self._items:
            self._take_items(run)
        while len(run.pending) < self.batch_size:
            slot = next(run.slots, None)
            if slot is None:
                return True
            run.cursor += 1
            item = self.read(run, slot)  # a sample failed this epoch: skipped, or its stand-in
            if item is not None:
                run.pending.append(item)
                self.keep_head(run, item)
        return False

    def _take_read(self, run: Run) -> None:
        """fill's bulk path: the next slots of an indexable order whose files were read ahead
        without error, taken as items in one pass (their labels gathered in one call), up to
        the first slot that needs more (a failure, a cached sample, a repeat not read ahead),
        which the slot-by-slot path takes from there. The same items as that path, for half
        the producer's time in fill (3.0 -> 1.45 ms of thread CPU per batch of 256, measured on
        a 2-core VM), time it spends holding the GIL it shares with the training loop."""
        index, valid = self._next_slots(run)
        if not len(index):
            return
        labels = label_values(self.labels, index) if self.labels is not None else None
        ahead, failed, records, pending = self._ahead, run.failed, self.records, run.pending
        last, chunk = None, None
        taken = 0
        for k, (i, v) in enumerate(zip(index.tolist(), valid.tolist())):
            future = ahead.get(i)
            if future is None or i in failed or i in records:
                break
            if future is not last:
                last, chunk = future, future.result()
            j = chunk.at[i]
            got = chunk.got[j]
            if isinstance(got, Exception):
                break
            if chunk.sources is not None:  # bytes and paths (the reader's read_raw), and targets
                item = Item(got, None if labels is None else labels[k], i, chunk.sources[j], v, 0,
                            None if chunk.targets is None else chunk.targets[j])
            else:
                item = Item(got.data, got.label if labels is None else labels[k], i, got.source, v, 0, got.targets)
            del ahead[i]
            pending.append(item)
            taken += 1
        self._taken(run, taken)

    def _take_items(self, run: Run) -> None:
        """fill's bulk path for a reader with read_items (Memory): the next slots of an
        indexable order taken as items in one pass (the labels gathered in one call), up to the first
        slot that failed this epoch or is cached, which the slot-by-slot path takes from there.
        The same items as that path, which cost the planning thread about a quarter of its
        time holding the GIL on an H200 host (py-spy, rn50 from memory at 23k images/s)."""
        index, valid = self._next_slots(run)
        if not len(index):
            return
        order, failed, records = index.tolist(), run.failed, self.records
        if failed or records:  # stop before the first slot the slot-by-slot path must take
            order = order[: next((k for k, i in enumerate(order) if i in failed or i in records), len(order))]
            if not order:
                return
        datas, own, sources, targets = self.reader.read_items(order)
        labels = label_values(self.labels, index[: len(order)]) if self.labels is not None else own
        run.pending.extend(map(Item, datas, labels, order, sources, valid[: len(order)].tolist(),
                               repeat(0, len(order)), targets))
        self._taken(run, len(order))

    def _next_slots(self, run: Run) -> tuple[Any, Any]:
        """The bulk paths' slots: (index, valid) arrays of the slots that would complete the
        pending batch, without taking them; empty where the order is not indexable's arrays."""
        need = self.batch_size - len(run.pending)
        if need <= 0 or not isinstance(run.slots, ArraySlots):
            return (), ()
        return run.slots.peek(need)

    @staticmethod
    def _taken(run: Run, k: int) -> None:
        """The bulk paths took the next k slots as items."""
        run.slots.skip(k)
        run.cursor += k

    def read(self, run: Run, slot: Any, attempt: int = 0) -> Item | None:
        """One slot as an item: from the cache's records, the reader, or (a failure) the policy."""
        if isinstance(slot, Entry):
            if slot.index in run.failed:
                return self.substitute(run, slot.index, slot.valid, attempt)
            known = self.records.get(slot.index)
            if known is not None:  # in the cache: nothing to read
                return Item(None, known.label, slot.index, known.source, slot.valid, attempt, known.targets)
            try:
                chunk = self._ahead.pop(slot.index, None)
                s = self.reader.read(slot.index) if chunk is None else chunk.result().sample(slot.index)
            except Exception as e:  # whatever a reader (a user's Dataset too) raises: the policy decides
                return self.fail(run, slot.index, self.reader.sources(slot.index), _reason(e), slot.valid, attempt)
            label = label_values(self.labels, [slot.index])[0] if self.labels is not None else s.label
            return Item(s.data, label, slot.index, s.source, slot.valid, attempt, s.targets)
        if isinstance(slot, Unreadable):  # a stream's sample it could not produce
            return self.fail(run, slot.index, slot.source, slot.reason, True, attempt)
        return Item(slot.data, slot.label, slot.index, slot.source, True, targets=slot.targets)

    def keep_head(self, run: Run, item: Any) -> None:
        """Keep a stream's first items read this epoch (a Sample or Item; Unreadable ones are
        not): what pad repeats. A resumed run keeps them again as it replays its reads."""
        if self.reader.indexable or len(run.head) >= HEAD * self.batch_size or isinstance(item, Unreadable):
            return
        if not isinstance(item, Item):
            item = Item(item.data, item.label, item.index, item.source, True, targets=item.targets)
        run.head.append(item)

    def fail(self, run: Run, index: int, source: str, reason: str, valid: bool, attempt: int) -> Item | None:
        """Record a failed sample once per epoch and apply the policy."""
        self._record(run, index, source, reason)
        return self.substitute(run, index, valid, attempt)

    def _record(self, run: Run, index: int, source: str, reason: str) -> None:
        """List a failed sample (once per epoch); under "raise", raise it."""
        if index not in run.failed:
            run.failed.add(index)
            run.errors.append((index, source, reason))
        if self.on_error == "raise":
            raise SampleError(index, f"{source}: {reason}")

    def substitute(self, run: Run, index: int, valid: bool, attempt: int) -> Item | None:
        """on_error="replace": a deterministic other sample (at most 8 tries); else nothing."""
        if self.on_error != "replace" or not self.reader.indexable or attempt >= 8:
            return None
        other = replacement(index, len(self.reader), self.seed, run.epoch, attempt)
        return self.read(run, Entry(other, valid), attempt + 1)

    def refill(self, run: Run, items: list[Item], bad: Item, reason: str) -> list[Item]:
        """The pending items after `bad` failed to decode: under "replace" each item of that
        sample is replaced where it stands by the stand-in a read of it would have given, under
        "skip" dropped (the slots after them fill the batch), so a batch comes out the same
        whether a failure is met here or, known already, where the slot is read."""
        self._record(run, bad.index, bad.source, reason)
        out = []
        for it in items:
            if it.index != bad.index:
                out.append(it)
            elif (sub := self.substitute(run, it.index, it.valid, it.attempt)) is not None:
                out.append(sub)
        return out

    def _read_ahead(self, run: Run) -> None:
        """Start reading the files of the next two batches' slots that are neither read nor
        cached, in chunks, on the reader threads."""
        if not isinstance(run.slots, ArraySlots):
            return
        index, _ = run.slots.peek(2 * self.batch_size)
        todo = [i for i in dict.fromkeys(index.tolist()) if i not in self._ahead and i not in self.records]
        if not todo:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="pixelpipe-read")
        for k in range(0, len(todo), READ_CHUNK):
            part = todo[k : k + READ_CHUNK]
            chunk = self._pool.submit(_read_all, self.reader, part, self._raw)
            for i in part:
                self._ahead[i] = chunk

    def close(self) -> None:
        """Stop the reader threads (reads in flight finish) and forget what they read."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._ahead.clear()

    def pad(self, run: Run) -> None:
        """Fill the epoch's last batch: its real items, then repeats (marked invalid) of the
        first readable items of this rank's epoch, skipping those that failed. The repeats are
        a function of the epoch alone (not of what was made before), so a run restored from a
        state saved anywhere, padding included, pads exactly as the run it continues."""
        pool = self._pad_pool(run)
        if not pool:
            raise RuntimeError(f"rank {self.rank} has no readable samples left to fill its batches "
                               f"({len(run.failed)} failed this epoch; see pipe.errors)")
        run.pending = [it for it in run.pending if it.valid]
        k = 0
        while len(run.pending) < self.batch_size:
            run.pending.append(replace(pool[k % len(pool)], valid=False, attempt=0))
            k += 1

    def _pad_pool(self, run: Run) -> list[Item]:
        """Up to batch_size readable items from the start of this rank's epoch: an indexable
        reader's order read again (a failure goes through the policy: listed, then skipped or
        its stand-in taken), then, where none of those can be read, the dataset's samples in
        index order (a rank whose samples all failed still pads from readable ones); a
        stream's first items kept as they were read (keep_head)."""
        if not isinstance(run.slots, ArraySlots):
            return [it for it in run.head if it.index not in run.failed][: self.batch_size]
        pool: list[Item] = []
        for order in (run.slots.order.index, range(len(self.reader))):
            for k in range(len(order)):
                if len(pool) == self.batch_size:
                    return pool
                item = self.read(run, Entry(int(order[k]), False))
                if item is not None and item.index not in run.failed:
                    pool.append(item)
            if pool:
                return pool
        return pool


class _Chunk:
    """What a reader thread read: per index (`at`: index -> position) its sample, or with
    `sources` its bytes and source (a reader's read_raw) and, from readers of targets, its
    targets dict; or the error reading it raised."""

    __slots__ = ("at", "got", "sources", "targets")

    def __init__(self, indices: list[int], got: list[Any], sources: list[str] | None = None,
                 targets: list[dict[str, Any]] | None = None) -> None:
        self.at = dict(zip(indices, range(len(indices))))
        self.got, self.sources, self.targets = got, sources, targets

    def sample(self, index: int) -> Any:
        """Sample `index` (a read_raw chunk's without its label: the reader's label table gives
        it), or the error reading it raised."""
        j = self.at[index]
        got = self.got[j]
        if isinstance(got, Exception):
            raise got
        if self.sources is None:
            return got
        return Sample(got, None, self.sources[j], index, None if self.targets is None else self.targets[j])


def _read_all(reader: Any, indices: list[int], raw: bool) -> _Chunk:
    """A reader thread's chunk: each sample read (the reader's read_raw with `raw`, else
    read_many), or the error reading it raised."""
    try:
        if raw:
            return _Chunk(indices, *reader.read_raw(indices))
        return _Chunk(indices, reader.read_many(indices))
    except Exception as e:  # raised where each sample is taken (Reading.read)
        return _Chunk(indices, [e] * len(indices))


def _reads_items(cls: type) -> bool:
    """Whether a reader class's read_items gives what its read does: it has one, and no
    subclass below the class that defines it changed read (a user's subclass changing the
    samples keeps the slot-by-slot path)."""
    owner = next((c for c in cls.__mro__ if "read_items" in c.__dict__), None)
    return owner is not None and cls.read is owner.read


def _reads_raw(cls: type) -> bool:
    """Whether a reader class's read_raw gives what its read_many does: it has one, and no
    subclass below the class that defines it changed read_many (a user's subclass adding
    targets or changing the bytes keeps its read_many on the read-ahead)."""
    owner = next((c for c in cls.__mro__ if "read_raw" in c.__dict__), None)
    return owner is not None and cls.read_many is owner.read_many


def _reason(e: BaseException) -> str:
    """An error as a reason: its message; its type too where the message alone may not say
    (anything but the OSErrors and ValueErrors readers raise)."""
    return str(e) if isinstance(e, (OSError, ValueError)) and str(e) else f"{type(e).__name__}: {e}"
