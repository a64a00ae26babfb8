"""Work ahead of the consumer: the producer's loop over epochs, the thread it runs on, the
read-ahead thread of streams, and the replayable slots that let speculative work be taken back.

`produce` makes a Pipeline's batches epoch after epoch, the first half of batch k+1 while the
finisher thread runs the second half of batch k, across epoch boundaries too; `Producer` runs
it on a thread of its own and hands its items (batches, `EpochEnd`, `Failure`) over in order,
holding at most `depth` batches and one epoch end that the consumer has not taken: the producer
goes on into the next epoch (its first batches are ready when the consumer starts it) without
running away on epochs of no batches. What a batch is (reading, the on_error policy, the
transforms) is the Pipeline's business; here are only the order of the work and its undoing.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..engine import SampleError

__all__ = ["STOPPED", "ArraySlots", "EpochEnd", "Failure", "Made", "Producer", "Replay", "Run", "offer", "produce", "read_ahead"]


@dataclass
class EpochEnd:
    """The producer made every batch of `epoch`; `errors` are those not handed over with a batch."""

    epoch: int
    errors: list[tuple[int, str, str]]


@dataclass
class Failure:
    """The producer raised `error` and stopped; `errors` are those listed up to it."""

    error: BaseException
    errors: list[tuple[int, str, str]]


STOPPED = object()  # what a consumer gets once the producer was stopped: the iteration ends


@dataclass
class Run:
    """The producer's state in one epoch: its place in the epoch's slots and what it holds.
    Saved before each batch is made, so that a batch whose finish fails can be made again."""

    epoch: int
    slots: Replay
    total: int | None  # batches this epoch; None for streams of unknown length
    cursor: int  # slots read
    made: int  # batches made
    stop: threading.Event
    pending: list[Any] = field(default_factory=list)
    head: list[Any] = field(default_factory=list)  # a stream's first items this epoch (pads its last batch)
    failed: set[int] = field(default_factory=set)  # samples that failed this epoch (not read again)
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # not handed over yet
    ahead: deque[Any] = field(default_factory=deque)  # batches planned ahead (pixelpipe.loader.cached)
    # epochs after this one planned ahead (pixelpipe.loader.cached.Planned by epoch), a map shared by
    # the runs of one producer; None: none are
    later: dict[int, Any] | None = None
    # a batch whose finish failed on some samples (SampleError with the batch's `items`, and the
    # others' rows as its `batch` where they were made): its failures and rows are taken when it
    # is made again (Pipeline._next_batch)
    partial: Any = None

    def save(self) -> tuple[Any, ...]:
        return (self.slots.position, self.cursor, self.made, list(self.pending), list(self.head), set(self.failed),
                list(self.errors))

    def restore(self, saved: tuple[Any, ...]) -> None:
        position, self.cursor, self.made, pending, head, failed, errors = saved
        self.slots.rewind(position)
        self.pending, self.head, self.failed, self.errors = list(pending), list(head), set(failed), list(errors)
        self.ahead.clear()

    def take_errors(self) -> list[tuple[int, str, str]]:
        errors, self.errors = self.errors, []
        return errors


@dataclass
class Made:
    """A batch whose first half ran; `work()` finishes it. `saved` is its run before it was made."""

    run: Run
    work: Any
    saved: tuple[Any, ...]
    cursor: int
    made: int
    errors: list[tuple[int, str, str]]
    future: Future | None = None  # its finish on the finisher thread
    record: Callable[[], Any] | None = None  # how it was decoded, once finished (stats.BatchDecode)
    after: list[EpochEnd] = field(default_factory=list)  # epoch ends the consumer gets after it


def produce(open_run: Callable[[int, int, int], Run], next_batch: Callable[[Run, bool], Made | None],
            finish: Callable[[Made], Future], epoch: int, start: int, made: int,
            stop: threading.Event) -> Iterator[Any]:
    """Batches and epoch ends for the consumer, epoch after epoch, until stopped or failed.

    Batch k+1 is made (its first half) while the finisher thread finishes batch k, before it
    is known whether k's finish fails on an undecodable sample. When it does, what was done
    since k was made is taken back (the slots read are given again, k's run restored, the
    runs after it dropped) and k is made again in one piece, so that the on_error policy
    applies exactly as it does when a batch is made in one piece. The run keeps the error as
    `partial` (its `items` and failures): the failures it names go through the policy
    without decoding the batch again to find them, and where the finish made k's other
    samples all the same (the error's `batch`, on the CPU), only stand-ins for the failed
    samples are made."""
    run = open_run(epoch, start, made)
    flight: Made | None = None  # the batch being finished on the finisher thread
    redo = False
    try:
        while not stop.is_set():
            error: BaseException | None = None
            try:
                new = next_batch(run, redo)
            except BaseException as e:  # handed to the consumer after the batch in flight
                new, error = None, e
            redo = False
            if stop.is_set():
                return
            if new is None and error is None:  # the epoch is over: on into the next one
                end = EpochEnd(run.epoch, run.take_errors())
                if flight is None or flight.run is not run:  # no rewind comes back to this run
                    run.slots.close()
                if flight is None:
                    yield end
                else:
                    flight.after.append(end)
                try:
                    run = open_run(run.epoch + 1, 0, 0)
                    continue
                except BaseException as e:  # handed over like an error in the next epoch's batch
                    error = e
            if flight is not None:
                try:
                    batch, event = flight.future.result()  # type: ignore[union-attr]
                except SampleError as e:  # made again in one piece: the policy decides
                    if run is not flight.run:
                        run.slots.close()
                    run = flight.run
                    run.restore(flight.saved)
                    run.partial = e if getattr(e, "items", None) is not None else None
                    flight, redo = None, True
                    continue
                except BaseException as e:
                    yield Failure(e, flight.errors)
                    return
                record = flight.record() if flight.record is not None else None
                yield batch, flight.run.epoch, flight.cursor, flight.made, event, flight.errors, record
                yield from flight.after
                if flight.run is not run:
                    flight.run.slots.close()
                flight = None
            if error is not None:
                yield Failure(error, run.take_errors())
                return
            assert new is not None
            run.slots.forget(new.saved[0])
            new.future = finish(new)
            flight = new
    finally:
        run.slots.close()
        if flight is not None:
            flight.run.slots.close()


class Producer:
    """Runs `work(stop)`, a generator of items, on a thread named `name`, and hands the
    items over in order through `get()`. The thread waits while `depth` batches (items that
    are neither EpochEnd nor Failure) or one EpochEnd wait for the consumer. `stop()` ends it:
    the generator is closed on its thread and what it left is discarded.

    idle_after_end: once the consumer took an EpochEnd, how many seconds the thread waits for
    it to take the next item before it stops by itself (`expired`; None: it waits for good).
    Why: a thread waiting for good keeps its generator, and through it the Pipeline it works
    for, alive: a Pipeline iterated to the end of an epoch and then dropped without close()
    kept its threads (four on the CPU) for the rest of the process."""

    def __init__(self, work: Callable[[threading.Event], Iterator[Any]], depth: int,
                 name: str = "pixelpipe-prefetch", idle_after_end: float | None = None) -> None:
        self._idle = idle_after_end
        self._after_end = False  # the consumer's last item was an EpochEnd
        self.expired = False  # stopped itself, idle_after_end after an epoch end
        self._stop = threading.Event()
        self._ready = threading.Condition()
        self._items: deque[Any] = deque()
        self._batches = 0  # batches waiting in _items
        self._ends = 0  # epoch ends waiting in _items
        self._depth = depth
        self._ahead = False
        self._thread = threading.Thread(target=self._run, args=(work(self._stop),), name=name, daemon=True)
        self._thread.start()

    def _run(self, items: Iterator[Any]) -> None:
        try:
            for item in items:
                if not self._put(item):
                    return
        except BaseException as e:  # a bug in the generator itself: the consumer still hears of it
            self._put(Failure(e, []))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
            with self._ready:  # nothing more comes: a consumer never waits in vain
                self._items.append(STOPPED)
                self._ready.notify_all()

    def _put(self, item: Any) -> bool:
        end, batch = isinstance(item, EpochEnd), not isinstance(item, (EpochEnd, Failure))
        with self._ready:
            if batch:
                self._ahead = self._batches > 0
            deadline = None
            while not self._stop.is_set() and ((batch and self._batches >= self._depth) or (end and self._ends >= 1)):
                if self._idle is None or not self._after_end:
                    deadline = None
                    self._ready.wait()
                    continue
                now = time.monotonic()
                deadline = now + self._idle if deadline is None else deadline
                if now >= deadline:  # nobody came back for the next epoch: let the pipeline go
                    self.expired = True
                    return False
                self._ready.wait(deadline - now)
            if self._stop.is_set():
                return False
            self._items.append(item)
            self._batches += batch
            self._ends += end
            self._ready.notify_all()
        return True

    @property
    def ahead(self) -> bool:
        """Whether the last batch handed over found the one before it still waiting for the
        consumer: the producer is ahead of its consumer."""
        return self._ahead

    def get(self) -> Any:
        """The next item (waiting for it); STOPPED once stopped."""
        with self._ready:
            while not self._items:
                self._ready.wait()
            item = self._items.popleft()
            if item is not STOPPED:
                self._after_end = isinstance(item, EpochEnd)
                self._ends -= isinstance(item, EpochEnd)
                self._batches -= not isinstance(item, (EpochEnd, Failure))
                self._ready.notify_all()
            else:
                self._items.appendleft(item)  # every later get() ends too
        return item

    def stop(self) -> None:
        """Stop the thread (it finishes the step it is in) and discard what it made."""
        self._stop.set()
        with self._ready:
            self._ready.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        with self._ready:
            self._items.clear()
            self._items.append(STOPPED)
            self._ready.notify_all()


class Replay:
    """An iterator that can be taken back. It keeps what it gave from the oldest position still
    needed (`forget` moves that on); `rewind(position)` gives those items again, and an
    exception the source raised after them too. The producer reads the next batch's slots
    through it before it knows that the batch before is made; if that one must be made again,
    the reading goes back."""

    def __init__(self, source: Iterator[Any]) -> None:
        self._source = source
        self._kept: list[Any] = []  # the items from position _base on
        self._base = 0
        self.position = 0  # items given so far
        self._error: BaseException | None = None  # what the source raised after the kept items
        self._ended = False

    def __iter__(self) -> Replay:
        return self

    def __next__(self) -> Any:
        k = self.position - self._base
        if k < len(self._kept):
            self.position += 1
            return self._kept[k]
        if self._error is not None:
            raise self._error
        if self._ended:
            raise StopIteration
        try:
            item = next(self._source)
        except StopIteration:
            self._ended = True
            raise
        except BaseException as e:
            self._error = e
            raise
        self._kept.append(item)
        self.position += 1
        return item

    def forget(self, position: int) -> None:
        """No rewind will go back before `position`."""
        del self._kept[: position - self._base]
        self._base = position

    def rewind(self, position: int) -> None:
        if not self._base <= position <= self.position:
            raise ValueError(f"cannot rewind to {position}: kept positions {self._base}..{self.position}")
        self.position = position

    def close(self) -> None:
        """Close the source (a stream's read-ahead thread stops)."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()


class ArraySlots:
    """Replay's interface over an indexable epoch's order (sampler.EpochOrder): the positions
    are array offsets, so nothing needs keeping to rewind, and `peek`/`skip` take many slots
    at once (a batch of cached samples is made without an object per sample)."""

    def __init__(self, order: Any) -> None:
        self.order = order
        self.position = 0

    def __iter__(self) -> ArraySlots:
        return self

    def __next__(self) -> Any:
        if self.position >= len(self.order):
            raise StopIteration
        self.position += 1
        return self.order[self.position - 1]

    def peek(self, k: int) -> tuple[Any, Any]:
        """(index, valid) arrays of the next k slots (fewer at the end), without taking them."""
        p = self.position
        return self.order.index[p : p + k], self.order.valid[p : p + k]

    def skip(self, k: int) -> None:
        self.position = min(self.position + k, len(self.order))

    def forget(self, position: int) -> None:
        pass

    def rewind(self, position: int) -> None:
        if not 0 <= position <= self.position:
            raise ValueError(f"cannot rewind to {position}: at {self.position}")
        self.position = position

    def close(self) -> None:
        pass


def read_ahead(items: Iterator[Any], depth: int, stop: threading.Event) -> Iterator[Any]:
    """Iterate `items` on a thread of its own, up to `depth` ahead: a stream's reading (tar
    members, a generator's work) overlaps the decoding of the batch before. Same order; an
    exception comes out where the item would have. The thread ends on `stop` or when this
    generator is closed (its epoch was discarded); a stop ends the iteration."""
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    done = object()
    closed = threading.Event()

    def run() -> None:
        try:
            for item in items:
                if not offer(q, (item, None), stop, closed):
                    return
            offer(q, (done, None), stop, closed)
        except BaseException as e:
            offer(q, (done, e), stop, closed)

    threading.Thread(target=run, name="pixelpipe-read-ahead", daemon=True).start()
    try:
        while True:
            try:
                item, error = q.get(timeout=0.1)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        closed.set()


def offer(q: queue.Queue, item: Any, *stops: threading.Event) -> bool:
    """Put item on q unless one of `stops` is set first (then False)."""
    while not any(s.is_set() for s in stops):
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False
