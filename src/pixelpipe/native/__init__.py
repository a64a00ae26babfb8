"""The planner's hot spots in C (planner.c), compiled on first use and loaded with ctypes; and
`build()`, which compiles this package's other C files the same way: alloc.c (nvImageCodec's
allocators, see decode/nvimgcodec_alloc.py), decode.c (a batch's nvImageCodec decode calls in
one, see decode/nvimgcodec_c.py), open.c (a batch's code streams and images in one, see
decode/nvimgcodec_open.py), queue.c (a decoder's decode queue and its thread, see
decode/nvimgcodec_queue.py) and jpeg_headers.c (a batch's JPEG headers, see
decode/headers_batch.py).

Why: a batch's planning is a few hundred numpy calls on arrays of a few hundred numbers, so it
costs numpy's per-call overhead, not arithmetic. On a 16-core H100 host a Compose call of the
rn50 pipeline spent about 1.3 ms of its 1.7 ms of host time planning (session 10's profile in
docs/benchmarks.md) while its kernels take 0.63 ms: the host bounds augment-only batches and
cached epochs. planner.c does the hashing of every draw, RandomResizedCrop's window, RandomFlip's
and RandomAffine's matrices, ColorJitter's parameters and colour maps, the affine inverse and
source regions, and the warp kernel's rows in one call each.

The numpy code stays the reference and runs wherever this module gives None: without a C
compiler (`cc`, or $CC), with PIXELPIPE_NATIVE=0, or inside `disabled()`. Both give the same
bits, with one documented exception: exp() in RandomResizedCrop's aspect ratio is the C
library's here, and numpy may use its own SIMD exp, which can differ in the last bit; a crop
side changes only if sqrt(area * ratio) falls within that bit of a half-integer (the tests
compare 360,000 windows and find them equal). The other sines, cosines and tangents are
numpy's, handed to the C code.

The library is built with `-O3 -ffp-contract=off` (no fused multiply-adds, no fast-math, so
each float64 operation rounds as numpy's does) into $PIXELPIPE_CACHE, or ~/.cache/pixelpipe
(XDG_CACHE_HOME honoured), named by a hash of the source and the command: a new version
builds its own file, and concurrent first uses each write a temporary file and rename it.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["address", "build", "disabled", "library", "load", "shared", "signed", "wire"]

_SOURCE = Path(__file__).with_name("planner.c")
_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC", "-std=c99", "-pthread"]
_LOCK = threading.Lock()
_STATE: dict[str, object] = {"tried": False, "lib": None, "off": os.environ.get("PIXELPIPE_NATIVE", "1") == "0"}
_P, _I64, _F64, _U32, _INT = C.c_void_p, C.c_int64, C.c_double, C.c_uint32, C.c_int
_SIGNATURES = {
    "pp_prefix": (None, [_U32, _P, _P, _I64, _P]),
    "pp_op_blocks": (None, [_P, _I64, _P, _P, _I64, _P]),
    "pp_random_resized_crop": (None, [_P, _I64, _P, _I64, _I64, _F64, _F64, _F64, _F64, _F64, _F64, _P]),
    "pp_affine_regions": (_I64, [_P, _P, _P, _I64, _INT, _F64, _P, _P]),
    "pp_warp_rows": (_I64, [_P, _P, _P, _P, _I64, _INT, _F64, _F64, _P]),
    "pp_random_flip": (None, [_P, _I64, _P, _I64, _F64, _F64, _P]),
    "pp_random_affine": (None, [_P, _I64, _P, _I64, _F64, _P, _INT, _P]),
    "pp_affine_matrix": (None, [_P, _P, _P, _I64, _P]),
    "pp_color_jitter": (None, [_P, _I64, _I64, _F64, _P, _P, _P]),
    "pp_jitter_color": (None, [_P, _P, _P, _I64, _I64, _P, _P, _P]),
}


def library() -> C.PyDLL | None:
    """The compiled planner, or None where the numpy code runs instead (see the module
    docstring). Built on the first call of the process."""
    if _STATE["off"]:
        return None
    if not _STATE["tried"]:
        with _LOCK:
            if not _STATE["tried"]:
                _STATE["lib"] = _load()
                _STATE["tried"] = True
    return _STATE["lib"]  # type: ignore[return-value]


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Plan with the numpy code inside the block (the reference; tests and A/B runs). The switch
    is process-wide, so other threads plan in numpy meanwhile too (the same numbers)."""
    before = _STATE["off"]
    _STATE["off"] = True
    try:
        yield
    finally:
        _STATE["off"] = before


def address(a: np.ndarray) -> int:
    """The data pointer of a C-contiguous array (the caller keeps the array alive). Through
    ctypes' buffer protocol where the array is writable (a third of the time of
    `__array_interface__`, which builds a dict; a planner passes a dozen pointers per batch).
    Raises ValueError for a strided array: the C code would read the wrong numbers."""
    if not a.flags.c_contiguous:
        raise ValueError("the C planner takes C-contiguous arrays")
    try:
        return C.addressof(C.c_char.from_buffer(a))
    except (TypeError, ValueError):  # read-only, or empty
        return a.__array_interface__["data"][0]


def _cache_dir() -> Path:
    root = os.environ.get("PIXELPIPE_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pixelpipe"


def build(source: Path, what: str) -> Path | None:
    """`source` (a C file of this package) compiled into the cache (see the module docstring):
    the shared library's path, or None after a one-line notice on stderr: `what` (what pixelpipe
    does instead) and why."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        _notice("no C compiler (cc) found", what)
        return None
    text = source.read_bytes()
    key = hashlib.sha256(text + " ".join([cc, *_FLAGS, sys.platform]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"{source.stem}-{key}.so"
    try:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
            os.close(fd)
            try:
                done = subprocess.run([cc, *_FLAGS, "-o", tmp, str(source), "-lm"], capture_output=True, text=True)
                if done.returncode != 0:
                    _notice(f"{cc} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}", what)
                    return None
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except OSError as e:
        _notice(f"could not build {target}: {e}", what)
        return None
    return target


Signatures = dict[str, tuple[Any, list[Any]]]  # function name -> (restype, argtypes)


def load(name: str, what: str, dll: type = C.CDLL, signatures: Signatures | None = None) -> C.CDLL | None:
    """This package's C file `name` built (`build`) and loaded as `dll` (CDLL: calls release
    the GIL; PyDLL: they keep it), with `signatures` set (`signed`), or None after the
    one-line notice: `what` pixelpipe does instead, and why. A new load each call (tests load
    private copies); `shared` loads once per process."""
    target = build(Path(__file__).with_name(name), what)
    if target is None:
        return None
    try:
        lib = dll(str(target))
    except OSError as e:
        _notice(f"could not load {target}: {e}", what)
        return None
    return signed(lib, signatures or {})


def signed(lib: C.CDLL, signatures: Signatures) -> C.CDLL:
    """`lib` with each named function's restype and argtypes set."""
    for fname, (restype, argtypes) in signatures.items():
        fn = getattr(lib, fname)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


_SHARED: dict[str, C.CDLL | None] = {}


def shared(name: str, what: str, dll: type = C.CDLL, signatures: Signatures | None = None) -> C.CDLL | None:
    """`load(name, ...)` once per process (None, after one notice, where it cannot be built)."""
    with _LOCK:
        if name not in _SHARED:
            _SHARED[name] = load(name, what, dll, signatures)
        return _SHARED[name]


def wire(lib: C.CDLL, setter: str, functions: Any, names: Sequence[str]) -> C.CDLL:
    """Hand `lib`'s `setter` (a C function taking function pointers, process-wide for this copy
    of the library) the addresses of `functions.<name>` for each of `names` (ctypes functions
    or callbacks); returns `lib`."""
    getattr(lib, setter)(*[C.cast(getattr(functions, n), C.c_void_p) for n in names])
    return lib


def _load() -> C.PyDLL | None:
    # PyDLL: the calls keep the GIL. They take microseconds, and a call that let it go would
    # invite another of a Pipeline's threads to take it and hold it for up to the
    # interpreter's switch interval (5 ms) before this thread got it back
    return load(_SOURCE.name, "planning in numpy, not with the C planner", C.PyDLL, _SIGNATURES)


def _notice(why: str, what: str) -> None:
    print(f"pixelpipe: {what} ({why}; this needs a C compiler)", file=sys.stderr)
