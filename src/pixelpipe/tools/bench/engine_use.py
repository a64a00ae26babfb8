"""How busy the GPU's JPEG engines (NVJPG), video decoders (NVDEC) and SMs were while a
contender was timed.

Why: a GPU pipeline that decodes with the hardware JPEG decoder is bound by those engines
once they are busy all the time; then no pipeline using the same engines can be much faster,
whatever else it does. `pixelpipe bench --device cuda` prints these figures beside the rates
so that a table shows which contenders ran into that bound (the issue's "decoder occupancy").

Where the figures come from: NVML (libnvidia-ml, part of the NVIDIA driver) keeps a short
history of utilisation samples per GPU: each sample is the percentage of the last sampling
period (about 1/6 s to 1 s, the driver's choice) during which the engine was busy. For the
JPEG engines, NVML averages over all of them (an H100 has seven). `EngineMeter` reads the
samples taken between its start() and stop() with nvmlDeviceGetSamples and averages them.
That covers the whole GPU: anything else running on it counts too.

The video decoders (`pixelpipe bench --pipeline video`) are read with
nvmlDeviceGetDecoderUtilization: the percentage of its last sampling period during which the
NVDEC engines were busy (averaged over them; an H100 has seven), and that period's length.
`EngineMeter` asks for it on a thread of its own: once at start() for the period only, then
once per period until stop(), and once more at stop(), and averages the readings after the
first, so that work from before the window does not count (a window shorter than one period
gets the one reading at stop(), which reaches back before the window).

No NVML (no driver library, a CPU device, a GPU without JPEG engines) gives None, never an
error: the bench then prints no such figures.
"""

from __future__ import annotations

import ctypes as C
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["DecoderPoll", "EngineMeter", "Usage", "decoder_poll", "open_meter", "window_mean"]

# nvmlSamplingType_t values (nvml.h)
GPU_UTILIZATION = 1  # percent of time one or more kernels ran
JPG_UTILIZATION = 8  # percent of time the NVJPG engines were busy
_SUCCESS, _NOT_FOUND = 0, 6  # nvmlReturn_t: NOT_FOUND = no sample newer than the time asked for

Samples = list[tuple[int, float]]  # (timestamp in microseconds since the epoch, percent)
Reader = Callable[[int, int], Samples | None]  # (sampling type, since µs) -> samples, None: unsupported
# () -> (percent busy over the last sampling period, the period in µs), None: unsupported
DecoderPoll = Callable[[], tuple[float, int] | None]
POLL_SECONDS = (0.02, 1.0)  # the shortest and longest wait between two decoder readings


class _Value(C.Union):  # nvmlValue_t
    _fields_ = [("d", C.c_double), ("ui", C.c_uint), ("ul", C.c_ulong), ("ull", C.c_ulonglong),
                ("sll", C.c_longlong), ("si", C.c_int)]


class Sample(C.Structure):  # nvmlSample_t
    _fields_ = [("time", C.c_ulonglong), ("value", _Value)]


# nvmlValueType_t -> the union member that holds the value
_MEMBER = {0: "d", 1: "ui", 2: "ul", 3: "ull", 4: "sll", 5: "si"}


def sample_values(samples: Sequence[Sample], value_type: int) -> Samples | None:
    """(timestamp, value) of each NVML sample, read as its value type says; None for a type
    this does not know."""
    member = _MEMBER.get(value_type)
    if member is None:
        return None
    return [(int(s.time), float(getattr(s.value, member))) for s in samples]


def window_mean(samples: Samples, start_us: int, stop_us: int) -> float | None:
    """The mean of the samples taken after start_us and up to stop_us, or None if none was.
    A sample describes the period that ends at its timestamp, so the first one may reach a
    little before start_us (at most one sampling period)."""
    inside = [v for t, v in samples if start_us < t <= stop_us]
    return sum(inside) / len(inside) if inside else None


@dataclass(frozen=True)
class Usage:
    """Mean utilisation in percent over a timed window; None where NVML had no sample."""

    jpeg: float | None  # the NVJPG engines
    kernels: float | None  # NVML's "GPU utilization": the time some kernel ran (not SM occupancy)
    decoder: float | None = None  # the NVDEC engines (measured only when asked for)


class EngineMeter:
    """Mean NVJPG and kernel utilisation between start() and stop(), from `read` (NVML's
    samples, or a fake in tests); with `decoder`, the mean NVDEC utilisation too, from its
    readings (module docstring). jpeg=False leaves the JPEG engines out (a video run)."""

    def __init__(self, read: Reader, clock: Callable[[], float] = time.time, decoder: DecoderPoll | None = None,
                 jpeg: bool = True) -> None:
        self._read, self._clock, self._decoder, self._jpeg = read, clock, decoder, jpeg
        self._start: int | None = None
        self._poller: _Poller | None = None

    def start(self) -> None:
        self._start = int(self._clock() * 1e6)
        if self._decoder is not None:
            self._poller = _Poller(self._decoder)

    def stop(self) -> Usage | None:
        """The window's usage; None if start() was not called or NVML gave nothing at all."""
        if self._start is None:
            return None
        decoder = self._poller.stop() if self._poller is not None else None
        start, stop = self._start, int(self._clock() * 1e6)
        self._start, self._poller = None, None
        means: list[float | None] = []
        for kind in (JPG_UTILIZATION, GPU_UTILIZATION):
            got = self._read(kind, start) if kind != JPG_UTILIZATION or self._jpeg else None
            means.append(None if got is None else window_mean(got, start, stop))
        usage = Usage(means[0], means[1], decoder)
        return None if usage == Usage(None, None, None) else usage


class _Poller:
    """Reads `poll` on a daemon thread: at once for the sampling period (the reading is not
    kept), then once per period until stop(), which reads it once more and returns the mean of
    the readings kept (None when poll said it cannot read)."""

    def __init__(self, poll: DecoderPoll) -> None:
        self._poll = poll
        self._readings: list[float] = []
        self._unsupported = False
        self._wait = POLL_SECONDS[0]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pixelpipe-nvdec-poll", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        got = self._poll()
        if got is None:
            self._unsupported = True
            return
        value, period_us = got
        self._readings.append(float(value))
        self._wait = min(max(period_us / 1e6, POLL_SECONDS[0]), POLL_SECONDS[1])

    def _run(self) -> None:
        self._read()  # for the period only: this reading covers time before the window
        self._readings.clear()
        while not self._unsupported and not self._done.wait(self._wait):
            self._read()

    def stop(self) -> float | None:
        self._done.set()
        self._thread.join()
        if not self._unsupported:
            self._read()
        if self._unsupported or not self._readings:
            return None
        return sum(self._readings) / len(self._readings)


# ------------------------------------------------------------------------------------ NVML
_LOCK = threading.Lock()
_NVML: list[C.CDLL | None] = []


def _load_library() -> C.CDLL:
    """The NVIDIA driver's NVML library (raises OSError where there is none)."""
    return C.CDLL("libnvidia-ml.so.1")


def _nvml() -> C.CDLL | None:
    """libnvidia-ml, initialised once per process, or None where it cannot be loaded."""
    with _LOCK:
        if not _NVML:
            lib = None
            try:
                lib = _load_library()
                if lib.nvmlInit_v2() != _SUCCESS:
                    lib = None
                else:
                    lib.nvmlDeviceGetSamples.argtypes = [C.c_void_p, C.c_int, C.c_ulonglong, C.POINTER(C.c_int),
                                                         C.POINTER(C.c_uint), C.POINTER(Sample)]
            except (OSError, AttributeError):
                lib = None
            if lib is not None and hasattr(lib, "nvmlDeviceGetDecoderUtilization"):  # else decoder_poll says None
                lib.nvmlDeviceGetDecoderUtilization.argtypes = [C.c_void_p, C.POINTER(C.c_uint), C.POINTER(C.c_uint)]
            _NVML.append(lib)
        return _NVML[0]


def _pci_bus_id(index: int) -> bytes | None:
    """The PCI bus id of CUDA device `index` (as torch numbers them), from the CUDA runtime."""
    from ...decode.cudart import runtime

    rt = runtime()
    if rt is None:
        return None
    buf = C.create_string_buffer(64)
    if rt.cudaDeviceGetPCIBusId(buf, C.c_int(len(buf)), C.c_int(index)) != 0:
        return None
    return buf.value


def _device_handle(device: torch.device) -> tuple[C.CDLL, C.c_void_p] | None:
    """NVML and its handle of `device`, or None without NVML or a CUDA device."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    lib = _nvml()
    index = device.index if device.index is not None else torch.cuda.current_device()
    bus = _pci_bus_id(index) if lib is not None else None
    if lib is None or bus is None:
        return None
    handle = C.c_void_p()
    if lib.nvmlDeviceGetHandleByPciBusId_v2(C.c_char_p(bus), C.byref(handle)) != _SUCCESS:
        return None
    return lib, handle


def nvml_reader(device: torch.device) -> Reader | None:
    """A Reader of NVML's samples for `device`, or None without NVML or a CUDA device."""
    found = _device_handle(device)
    return None if found is None else samples_reader(*found)


def samples_reader(lib: C.CDLL, handle: C.c_void_p) -> Reader:
    """A Reader of the samples nvmlDeviceGetSamples keeps for the device `handle`."""
    get = lib.nvmlDeviceGetSamples  # its argtypes are set once, in _nvml

    def read(kind: int, since_us: int) -> Samples | None:
        value_type, count = C.c_int(), C.c_uint(0)
        code = get(handle, kind, since_us, C.byref(value_type), C.byref(count), None)  # how many at most
        if code == _NOT_FOUND:
            return []
        if code != _SUCCESS or count.value == 0:
            return None
        buf = (Sample * count.value)()
        code = get(handle, kind, since_us, C.byref(value_type), C.byref(count), buf)
        if code == _NOT_FOUND:
            return []
        if code != _SUCCESS:
            return None
        return sample_values(buf[: count.value], value_type.value)

    return read


def decoder_poll(lib: C.CDLL, handle: C.c_void_p) -> DecoderPoll:
    """A DecoderPoll of nvmlDeviceGetDecoderUtilization for the device `handle`: None once the
    call fails (a GPU without NVDEC, an NVML without the call)."""
    get = getattr(lib, "nvmlDeviceGetDecoderUtilization", None)

    def poll() -> tuple[float, int] | None:
        if get is None:
            return None
        busy, period = C.c_uint(0), C.c_uint(0)
        if get(handle, C.byref(busy), C.byref(period)) != _SUCCESS:
            return None
        return float(busy.value), int(period.value)

    return poll


def open_meter(device: torch.device, nvdec: bool = False) -> EngineMeter | None:
    """An EngineMeter of `device` through NVML, or None where NVML cannot say. nvdec: measure
    the video decoders instead of the JPEG engines (`pixelpipe bench --pipeline video`)."""
    found = _device_handle(device)
    if found is None:
        return None
    read = samples_reader(*found)
    return EngineMeter(read, decoder=decoder_poll(*found), jpeg=False) if nvdec else EngineMeter(read)
