"""The planner's hot spots in C (planner.c, and detection.c for the detection ops: `detection()`),
loaded with ctypes; and `load()` / `shared()`, which load this package's other C files the same
way: alloc.c (nvImageCodec's allocators, see
decode/nvimgcodec_alloc.py), decode.c (a batch's nvImageCodec decode calls in one, see
decode/nvimgcodec_c.py), open.c (a batch's code streams and images in one, see
decode/nvimgcodec_open.py), queue.c (a decoder's decode queue and its thread, see
decode/nvimgcodec_queue.py), jpeg_headers.c (a batch's JPEG headers, see
decode/headers_batch.py) and warp.c (the CPU's general warp and pointwise pass, see
kernels/cpu/warp.py).

Why: a batch's planning is a few hundred numpy calls on arrays of a few hundred numbers, so it
costs numpy's per-call overhead, not arithmetic. On a 16-core H100 host a Compose call of the
rn50 pipeline spent about 1.3 ms of its 1.7 ms of host time planning (measured with cProfile)
while its kernels take 0.63 ms: the host bounds augment-only batches and
cached epochs. planner.c does the hashing of every draw, RandomResizedCrop's window, RandomFlip's
and RandomAffine's matrices, ColorJitter's parameters and colour maps, the affine inverse and
source regions, and the warp kernel's rows in one call each; detection.c RandomIoUCrop's trials
and a batch's boxes moved through their matrices.

`pip install` compiles each C file of this folder (setup.py, at the repository root) into a
shared library beside this file, `_<name>.<platform tag>.so` (e.g.
`_planner.cpython-311-x86_64-linux-gnu.so`), with `-O3 -ffp-contract=off -fno-fast-math` (no
fused multiply-adds, no fast-math, so each float64 operation rounds as numpy's does). Nothing is
compiled at import or at first use. In a checkout, `python setup.py build_ext --inplace` builds
them in place (an editable install, `pip install -e .`, does too).

The numpy code stays the reference and runs wherever this module gives None: where a library
was not built (no C compiler when pixelpipe was installed; a one-line notice on stderr, once
per library and process, says what runs instead), with PIXELPIPE_NATIVE=0, or inside
`disabled()`. Both give the same bits, with one documented exception: exp() in
RandomResizedCrop's aspect ratio is the C library's here, and numpy may use its own SIMD exp,
which can differ in the last bit; a crop side changes only if sqrt(area * ratio) falls within
that bit of a half-integer (the tests compare 360,000 windows and find them equal). The other
sines, cosines and tangents are numpy's, handed to the C code.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import importlib.machinery
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["address", "detection", "disabled", "enabled", "find", "library", "load", "shared", "signed", "wire"]

_DIR = Path(__file__).parent  # where setup.py's build_ext puts the libraries
_SOURCE = _DIR / "planner.c"
_LOCK = threading.Lock()
_STATE: dict[str, object] = {"tried": False, "lib": None, "off": os.environ.get("PIXELPIPE_NATIVE", "1") == "0"}
_TOLD: set[str] = set()  # the C files whose notice has been printed
_P, _I64, _F64, _U32, _INT = C.c_void_p, C.c_int64, C.c_double, C.c_uint32, C.c_int
_SIGNATURES = {
    "pp_prefix": (None, [_U32, _P, _P, _I64, _P]),
    "pp_op_blocks": (None, [_P, _I64, _P, _P, _I64, _P]),
    "pp_draw_hashes": (None, [_P, _I64, _I64, _P, _I64, _P]),
    "pp_random_resized_crop": (None, [_P, _I64, _P, _I64, _I64, _F64, _F64, _F64, _F64, _F64, _F64, _P]),
    "pp_affine_regions": (_I64, [_P, _P, _P, _I64, _INT, _F64, _P, _P]),
    "pp_warp_rows": (_I64, [_P, _P, _P, _P, _I64, _INT, _F64, _F64, _P]),
    "pp_random_flip": (None, [_P, _I64, _P, _I64, _F64, _F64, _P]),
    "pp_random_affine": (None, [_P, _I64, _P, _I64, _F64, _P, _INT, _P]),
    "pp_affine_matrix": (None, [_P, _P, _P, _I64, _P]),
    "pp_color_jitter": (None, [_P, _I64, _I64, _F64, _P, _P, _P]),
    "pp_jitter_color": (None, [_P, _P, _P, _I64, _I64, _P, _P, _P]),
}
_DETECTION_SIGNATURES = {
    "pp_iou_crop": (None, [_P, _I64, _P, _I64, _P, _P, _P, _I64, _F64, _F64, _F64, _F64, _I64, _I64, _P]),
    "pp_move_boxes": (None, [_P, _P, _I64, _P, _P, _P, _P, _P]),
}


def library() -> C.PyDLL | None:
    """The C planner, or None where the numpy code runs instead (see the module docstring).
    Loaded on the first call of the process."""
    if _STATE["off"]:
        return None
    if not _STATE["tried"]:
        with _LOCK:
            if not _STATE["tried"]:
                _STATE["lib"] = _load()
                _STATE["tried"] = True
    return _STATE["lib"]  # type: ignore[return-value]


def detection() -> C.PyDLL | None:
    """detection.c (RandomIoUCrop's trials, boxes moved through matrices), or None where the
    numpy code runs instead: as `library()` (PIXELPIPE_NATIVE=0, `disabled()`, not built).
    Loaded on the first call of the process; its calls keep the GIL, as the planner's do."""
    if _STATE["off"]:
        return None
    lib = _SHARED.get("detection.c", False)  # without the lock once loaded: a batch calls this a few times
    if lib is False:
        lib = shared("detection.c", "planning the detection ops in numpy, not in C", C.PyDLL, _DETECTION_SIGNATURES)
    return lib  # type: ignore[return-value]


def enabled() -> bool:
    """False with PIXELPIPE_NATIVE=0 and inside `disabled()`: callers of `shared()` libraries
    whose twin is torch code (kernels/cpu/blur.py) run the twin then."""
    return not _STATE["off"]


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


def find(source: Path, what: str) -> Path | None:
    """The shared library `pip install` built from `source` (a C file of this package), found
    beside this module as _<stem>.<platform tag>.so (this interpreter's tag first; any other
    works too, the libraries do not use Python's C API); or None after a one-line notice on
    stderr, once per C file and process: `what` (what pixelpipe does instead) and why."""
    found = [_DIR / f"_{source.stem}{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    found += sorted(_DIR.glob(f"_{source.stem}.*.so"))
    for path in found:
        if path.is_file():
            return path
    _notice(source.name, f"the C helpers were not built when pixelpipe was installed: no _{source.stem}.*.so in {_DIR}; "
            "reinstall with a C compiler, or in a checkout run `python setup.py build_ext --inplace`", what)
    return None


Signatures = dict[str, tuple[Any, list[Any]]]  # function name -> (restype, argtypes)


def load(name: str, what: str, dll: type = C.CDLL, signatures: Signatures | None = None,
         private: bool = False) -> C.CDLL | None:
    """This package's C file `name` (e.g. "planner.c"), its built library (`build`) loaded as
    `dll` (CDLL: calls release the GIL; PyDLL: they keep it), with `signatures` set (`signed`),
    or None after the one-line notice: `what` pixelpipe does instead, and why. The loader maps
    a path once per process, so each load of the same library shares its globals (the
    function pointers `wire` sets); `private=True` loads a copy of its own instead (tests wire
    stand-ins into one). `shared` loads once per process."""
    target = find(Path(name), what)
    if target is None:
        return None
    try:
        lib = _private(dll, target) if private else dll(str(target))
    except OSError as e:
        _notice(name, f"could not load {target}: {e}", what)
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
    """`load(name, ...)` once per process (None, after one notice, where it was not built)."""
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


def _private(dll: type, target: Path) -> C.CDLL:
    # a copy under a new name is a new mapping with its own globals; once mapped, the file
    # is not needed any more
    with tempfile.TemporaryDirectory(prefix="pixelpipe-", ignore_cleanup_errors=True) as tmp:
        copy = Path(tmp) / target.name
        shutil.copyfile(target, copy)
        return dll(str(copy))


def _load() -> C.PyDLL | None:
    # PyDLL: the calls keep the GIL. They take microseconds, and a call that let it go would
    # invite another of a Pipeline's threads to take it and hold it for up to the
    # interpreter's switch interval (5 ms) before this thread got it back
    return load(_SOURCE.name, "planning in numpy, not with the C planner", C.PyDLL, _SIGNATURES)


def _notice(name: str, why: str, what: str) -> None:
    if name not in _TOLD:
        _TOLD.add(name)
        print(f"pixelpipe: {what} ({why})", file=sys.stderr)
