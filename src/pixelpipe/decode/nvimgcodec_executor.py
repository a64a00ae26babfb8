"""An executor of pixelpipe's for nvImageCodec's decoders (native/executor.c), chosen with
`GpuDecoder(executor=True)` or, by default, PIXELPIPE_NVIMGCODEC_EXECUTOR=pixelpipe in the
environment (`wanted`); nvImageCodec's default executor otherwise.

Why it exists: DALI 2.4 hands nvImageCodec its own thread pool as the executor, which starts
each per-sample task as soon as nvImageCodec schedules it, and its decoder alone decoded rn50's
regions 5-8% faster than pixelpipe's call on one machine (docs/benchmarks.md). This executor
behaves the same way, so that a decode call with it and without it can be timed against each
other (`benchmarks/gpu_decoder_ceiling.py` and `gpu_decoding_ab.py` read the variable like a
Pipeline does). Timed so (a Pipeline over files, five alternating rounds on an H200), it was no
faster than nvImageCodec's own on the sample images or on a held-out set, so it stays opt-in.
Its workers make the decoder's device current first; a decoder's executor lives as long as the
decoder (CDecoder.close destroys it after the decoder).
"""

from __future__ import annotations

import ctypes as C
import os
from typing import Any

from .. import native
from . import nvimgcodec_structs as S

__all__ = ["Executor", "make", "wanted"]

_P = C.c_void_p
SIGNATURES = {
    "pp_executor_create": (_P, [C.c_int, C.c_int, _P]),
    "pp_executor_done": (C.c_longlong, [_P]),
    "pp_executor_threads": (C.c_int, [_P]),
    "pp_executor_destroy": (None, [_P]),
}


def wanted() -> bool:
    """Whether the environment asks for pixelpipe's executor (PIXELPIPE_NVIMGCODEC_EXECUTOR)."""
    choice = os.environ.get("PIXELPIPE_NVIMGCODEC_EXECUTOR", "nvimgcodec")
    if choice not in ("nvimgcodec", "pixelpipe"):
        raise ValueError(f'PIXELPIPE_NVIMGCODEC_EXECUTOR must be "nvimgcodec" or "pixelpipe", got {choice!r}')
    return choice == "pixelpipe"


def library() -> C.CDLL | None:
    # CDLL: nvImageCodec calls the pool's functions from its own threads, without the GIL
    return native.shared("executor.c", "nvImageCodec's decoders use their default executor", signatures=SIGNATURES)


class Executor:
    """A pool of `threads` workers and the nvimgcodecExecutorDesc_t that points to it
    (`address()` goes into nvimgcodecExecutionParams_t.executor)."""

    def __init__(self, lib: C.CDLL, handle: int, threads: int) -> None:
        self.lib, self.handle, self.threads = lib, handle, threads
        self.desc = S.make(S.ExecutorDesc, S.ST_EXECUTOR)
        self.desc.instance = handle
        for field, name in (("schedule", "pp_executor_schedule"), ("run", "pp_executor_run"),
                            ("wait", "pp_executor_wait"), ("getNumThreads", "pp_executor_threads")):
            setattr(self.desc, field, C.cast(getattr(lib, name), _P).value)

    def address(self) -> int:
        return C.addressof(self.desc)

    def tasks_done(self) -> int:
        """Tasks nvImageCodec has run on the pool so far (0 once closed)."""
        return int(self.lib.pp_executor_done(self.handle)) if self.handle else 0

    def close(self) -> None:
        """Finish what is queued and stop the workers (after the decoder that used it is gone)."""
        if self.handle:
            self.lib.pp_executor_destroy(self.handle)
            self.handle = None


def make(threads: int, device_index: int, set_device: Any = None) -> Executor | None:
    """A pool of max(threads, 1) workers on CUDA device `device_index`, or None where
    native/executor.c was not built or the pool cannot start. set_device: cudaSetDevice (a
    ctypes function), by default the CUDA runtime's."""
    lib = library()
    if lib is None:
        return None
    if set_device is None:
        from . import cudart

        rt = cudart.runtime()
        if rt is None:
            return None
        set_device = rt.cudaSetDevice
    n = max(int(threads), 1)
    handle = lib.pp_executor_create(n, device_index, C.cast(set_device, _P))
    return Executor(lib, handle, n) if handle else None
