"""native/decode.c: nvImageCodec's decode, wait, statuses and release in one C call. Checked
with stand-ins for the library's four functions (no GPU needed): the calls, their order and
arguments, the statuses handed back, the future released exactly once whatever step fails; and
CDecoder._run through it against its twin, the same calls made one by one from Python.
tests/test_decode_gpu_native.py decodes through it and call by call on a GPU and compares."""

from __future__ import annotations

import ctypes as C
import time
from types import SimpleNamespace

import pytest
from helpers import native_built, private_copy

from pixelpipe import native
from pixelpipe.decode import nvimgcodec_c as capi
from pixelpipe.decode import nvimgcodec_structs as S

SHIM = native_built("decode.c")
pytestmark = pytest.mark.skipif(SHIM is None, reason="no C compiler: native/decode.c cannot be built")

DECODE = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_void_p, C.c_int, C.c_void_p, C.POINTER(C.c_void_p))
WAIT = C.CFUNCTYPE(C.c_int, C.c_void_p)
STATUS = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_uint32), C.POINTER(C.c_size_t))
DESTROY = C.CFUNCTYPE(C.c_int, C.c_void_p)
FUTURE = 0xF00


@pytest.fixture()
def lib(tmp_path):
    """A private copy of decode.c's library (its function pointers are process-wide) wired to
    stand-ins; `fail` names the step that returns an error (status 7)."""
    lib = private_copy(SHIM, tmp_path)
    calls: list[tuple] = []
    fail = {"step": None}

    def decode(decoder, streams, images, n, params, future):
        calls.append(("decode", decoder, streams, images, n, params))
        if fail["step"] == "decode":
            return 7
        future[0] = FUTURE
        return 0

    def wait(future):
        time.sleep(0.002)
        calls.append(("wait", future))
        return 7 if fail["step"] == "wait" else 0

    def status(future, out, size):
        calls.append(("status", future, size[0]))
        if fail["step"] == "status":
            return 7
        for i in range(size[0]):
            out[i] = 1 if i % 2 == 0 else 0x43
        size[0] = size[0] - 1 if fail["step"] == "short" else size[0]
        return 0

    def destroy(future):
        calls.append(("destroy", future))
        return 0

    keep = [DECODE(decode), WAIT(wait), STATUS(status), DESTROY(destroy)]
    functions = SimpleNamespace(**dict(zip(capi.DECODE_FUNCTIONS, keep)))
    native.wire(native.signed(lib, capi.DECODE_SIGNATURES), "pp_decode_set", functions, capi.DECODE_FUNCTIONS)
    return lib, calls, fail, keep


def run(lib, n=5):
    status = (C.c_uint32 * n)()
    size = C.c_size_t(n)
    times = (C.c_double * 2)()
    failure = C.c_int(0)
    t0 = time.perf_counter()
    step = lib.pp_decode_batch(0xDEC, 0x51, 0x1A, n, 0x9A, status, C.byref(size), times, C.byref(failure))
    return step, list(status), size.value, (t0, times[0], times[1], time.perf_counter()), failure.value


def test_a_batch_in_one_call(lib):
    lib, calls, _, _ = lib
    step, status, size, (t0, issued, waited, t1), failure = run(lib)
    assert step == 0 and failure == 0 and size == 5
    assert status == [1, 0x43, 1, 0x43, 1]
    assert calls == [("decode", 0xDEC, 0x51, 0x1A, 5, 0x9A), ("wait", FUTURE), ("status", FUTURE, 5),
                     ("destroy", FUTURE)]
    assert t0 <= issued <= waited <= t1 and waited - issued >= 0.002  # the same clock as perf_counter


def test_a_short_status_list_is_handed_back(lib):
    lib, _, fail, _ = lib
    fail["step"] = "short"
    step, _, size, _, _ = run(lib)
    assert step == 0 and size == 4  # CDecoder._run raises on it


@pytest.mark.parametrize("where, code, destroyed", [("decode", 1, False), ("wait", 2, True), ("status", 3, True)])
def test_a_failing_step_is_named_and_the_future_released_once(lib, where, code, destroyed):
    lib, calls, fail, _ = lib
    fail["step"] = where
    step, _, _, _, failure = run(lib)
    assert step == code and failure == 7
    assert [c for c in calls if c[0] == "destroy"] == ([("destroy", FUTURE)] if destroyed else [])
    assert [c[0] for c in calls][-1] == ("destroy" if destroyed else "decode")


def assert_outcome(got, where) -> None:
    """What a batch of 4 gives with the stand-ins when `where` fails: the statuses, or the error."""
    expected = {None: [1, 0x43, 1, 0x43], "decode": "decoding failed", "wait": "waiting for the decode failed",
                "status": "reading the statuses failed", "short": "reported 3 statuses for 4 images"}[where]
    if isinstance(expected, list):
        assert got == expected
    else:
        assert expected in got


def _decoder(lib, keep, in_c: bool):
    """A CDecoder around the stand-ins (no library instance): its `_run` through decode.c
    (in_c) or through the four calls one by one from Python (its twin)."""
    calls = SimpleNamespace(**dict(zip(capi.DECODE_FUNCTIONS, keep)))
    dec = object.__new__(capi.CDecoder)
    dec._api = SimpleNamespace(free=calls, held=calls, batch=lib.pp_decode_batch if in_c else None)
    dec._decoder = C.c_void_p(0xDEC)
    dec._params = S.make(S.DecodeParams, S.ST_DECODE_PARAMS)
    dec.native_batch, dec.last_times = True, None
    return dec


def attempt(calls, dec, decode):
    """decode(dec, streams, images) on a batch of 4 (empty handle arrays): its statuses or its
    error's message, the names of the library calls it made in order, and dec.last_times."""
    calls.clear()
    streams, images = (C.c_void_p * 4)(), (C.c_void_p * 4)()
    try:
        got = decode(dec, streams, images)
    except RuntimeError as e:
        got = str(e)
    return got, [c[0] for c in calls], dec.last_times


@pytest.mark.parametrize("where", [None, "decode", "wait", "status", "short"])
def test_cdecoder_run_agrees_with_its_twin(lib, where):
    """CDecoder._run through decode.c and call by call: the same statuses, the same library
    calls, the same errors (a failing step named, a short status list refused)."""
    lib, calls, fail, keep = lib
    fail["step"] = where
    seen = [attempt(calls, _decoder(lib, keep, in_c), lambda dec, s, i: dec._run(s, i, 4)) for in_c in (True, False)]
    assert seen[0][:2] == seen[1][:2]
    assert seen[0][2] is not None and seen[1][2] is None  # timestamps from decode.c only
    assert_outcome(seen[0][0], where)


@pytest.mark.parametrize("where", [None, "decode", "wait", "status", "short"])
def test_the_queue_decodes_what_run_decodes(lib, where):
    """A batch submitted to the decode queue (native/queue.c, its thread calling decode.c) and
    collected (`CDecoder._collect`) against `_run` on this thread: the same statuses, the same
    library calls, the same errors."""
    from pixelpipe.decode import nvimgcodec_queue

    qlib = nvimgcodec_queue.library()
    if qlib is None:
        pytest.skip("native/queue.c cannot be built here")
    lib, calls, fail, keep = lib
    fail["step"] = where

    def queued(dec, streams, images):
        queue = nvimgcodec_queue.DecodeQueue.start(qlib, C.cast(lib.pp_decode_batch, C.c_void_p), None, None, 0)
        try:
            return dec._collect(queue.submit(dec._decoder, streams, images, 4, dec._params), 4)
        finally:
            queue.close()

    seen = [attempt(calls, _decoder(lib, keep, True), decode)
            for decode in (queued, lambda dec, s, i: dec._run(s, i, 4))]
    assert seen[0][:2] == seen[1][:2]
    issued, waited, back = seen[0][2]
    assert 0 < issued <= waited <= back  # decode.c's timestamps, through the queue
    assert_outcome(seen[0][0], where)
