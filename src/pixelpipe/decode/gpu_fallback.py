"""The samples of a GPU batch that nvImageCodec does not take, decoded on the CPU.

`decode_sample` is what each of GpuDecoder's CPU threads runs for one sample (decode_region,
errors naming the sample). `CpuUpload` puts a planned batch's CPU-decoded samples on the device
as soon as the last of them is decoded, from the thread that decoded it: one pinned buffer filled
by numpy, one copy on a side stream, one event. The thread that decodes batches then only makes
its stream wait for that event. It used to make the copy itself, and each torch call released
the GIL and waited to take it back while the CPU threads and the planning thread used it: about
8 ms per batch of 256 with 16 such samples on an H100.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np
import torch

from .cpu import decode_region
from .headers import DecodeError
from .steady import HighWater

__all__ = ["CpuUpload", "SampleDecodeError", "decode_sample"]


class SampleDecodeError(DecodeError):
    """Neither decoder can read sample `sample` ("sample i: reason"); `more` lists (sample,
    reason) of the batch's other samples neither can read, so that they are all reported at once."""

    def __init__(self, sample: int, reason: str, more: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(f"sample {sample}: {reason}" + (f" (and {len(more)} more failing)" if more else ""))
        self.sample, self.reason, self.more = sample, reason, list(more)


def decode_sample(blobs: list[bytes], regions: list[tuple[int, int, int, int]] | None, exif: bool,
                  i: int, max_pixels: int = 100_000_000) -> np.ndarray:
    """Sample i decoded by decode_region as RGB (its region, if any), HWC uint8. Errors name it."""
    region = None if regions is None else regions[i]
    try:
        pixels = decode_region(blobs[i], region=region, rgb=True, exif=exif, max_pixels=max_pixels)[0]
    except DecodeError as e:
        raise SampleDecodeError(i, str(e)) from e
    except ValueError as e:
        raise ValueError(f"sample {i}: {e}") from e
    if region is not None and pixels.shape[:2] != (region[2] - region[0], region[3] - region[1]):
        raise RuntimeError(f"sample {i}: the CPU decoder returned {pixels.shape[:2]} for region {tuple(region)}")
    return pixels


class CpuUpload:
    """The samples of `futures` (sample -> Future of its HWC uint8 pixels) copied into one
    device buffer once all of them are decoded, by the thread that finishes the last one, on
    `stream` (None: the copy is synchronous, for a CPU device). Nothing is copied if any of them
    failed: the caller reads the futures and raises the failure.

    `samples`: the samples it holds. After `wait()` returns True: `data` (the device buffer),
    `places` (sample -> (offset, shape) in it) and `event` (recorded on `stream` after the copy;
    None without a stream). `steady` sizes the device buffer (see decode/steady.py)."""

    def __init__(self, futures: dict[int, Future[np.ndarray]], device: torch.device,
                 stream: torch.cuda.Stream | None, steady: HighWater | None = None) -> None:
        self.device, self.stream, self.steady = device, stream, steady
        self.data: torch.Tensor | None = None
        self.places: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.event: torch.cuda.Event | None = None
        self.error: BaseException | None = None  # an error of the copy itself
        self._futures = dict(futures)
        self.samples = frozenset(futures)
        self._left = len(futures)
        self._lock = threading.Lock()
        self._done = threading.Event()
        if not futures:
            self._done.set()
        for future in futures.values():  # runs at once for a future already done
            future.add_done_callback(self._one_done)

    def result(self, i: int) -> np.ndarray:
        """Sample i's pixels (waits for them); raises its decoding error."""
        return self._futures[i].result()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the copy is issued (or found impossible); True when `data` holds every
        sample."""
        if not self._done.wait(timeout):
            raise TimeoutError("the CPU-decoded samples were not uploaded in time")
        return self.data is not None

    def into(self, stream: torch.cuda.Stream | None) -> None:
        """Wait for the copy to be issued and make `stream` wait for it (with samples). Raises
        the lowest sample's decoding error, or the copy's."""
        if not self._futures:
            return
        if not self.wait():
            if self.error is not None:
                raise RuntimeError(f"copying the CPU-decoded samples to the device failed: {self.error}") \
                    from self.error
            self._raise_failures()
        if stream is not None and self.event is not None:
            stream.wait_event(self.event)
            assert self.data is not None
            self.data.record_stream(stream)  # made on the upload stream, read on this one

    def _raise_failures(self) -> None:
        """Raise the lowest failing sample's error; when every failure is a SampleDecodeError,
        one that names them all."""
        errors = [(i, self._futures[i].exception()) for i in sorted(self._futures)]
        errors = [(i, e) for i, e in errors if e is not None]
        if not errors:
            return
        if all(isinstance(e, SampleDecodeError) for _, e in errors):
            first = errors[0][1]
            raise SampleDecodeError(first.sample, first.reason, [(e.sample, e.reason) for _, e in errors[1:]]) from first
        self.result(errors[0][0])  # raises the lowest one

    def _one_done(self, _: Future[np.ndarray]) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if not last:
            return
        try:
            self._upload()
        except BaseException as e:  # a done-callback's exception would only be logged
            self.error = e
        finally:
            self._done.set()

    def _upload(self) -> None:
        if any(f.exception() is not None for f in self._futures.values()):
            return
        order = sorted(self._futures)
        host = [np.ascontiguousarray(self._futures[i].result()) for i in order]
        starts = np.cumsum([0] + [a.size for a in host]).tolist()
        pinned = self.stream is not None
        with torch.cuda.device(self.device) if pinned else contextlib.nullcontext(), \
                torch.cuda.stream(self.stream) if pinned else contextlib.nullcontext():
            size = starts[-1] if self.steady is None else self.steady.size(starts[-1])
            data = torch.empty(size, dtype=torch.uint8, device=self.device)
            staging = torch.empty(starts[-1], dtype=torch.uint8, pin_memory=pinned)
            np.concatenate([a.reshape(-1) for a in host], out=staging.numpy())
            data[: starts[-1]].copy_(staging, non_blocking=pinned)
            if pinned:
                event = torch.cuda.Event()
                event.record(self.stream)
                self.event = event
        self.places = {i: (o, a.shape) for i, a, o in zip(order, host, starts)}
        self.data = data

