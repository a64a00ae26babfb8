"""decode.nvimgcodec_alloc: the allocator shim forwards nvImageCodec's calls to the CUDA runtime
functions it is handed, with the right arguments; the runtime is found in the process's maps.
Checked here with stand-in functions (no GPU needed); tests/test_decode_gpu_native.py decodes with
and without the allocators on a GPU and compares the pixels."""

from __future__ import annotations

import ctypes as C
from types import SimpleNamespace

import pytest
from helpers import native_built, private_copy

from pixelpipe import native
from pixelpipe.decode import cudart
from pixelpipe.decode import nvimgcodec_alloc as alloc

SHIM = native_built("alloc.c")
needs_cc = pytest.mark.skipif(SHIM is None, reason="no C compiler: the allocator shim cannot be built")

POOL_MALLOC = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_size_t, C.c_void_p, C.c_void_p)
FREE_ASYNC = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p)
HOST_ALLOC = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_size_t, C.c_uint)
FREE_HOST = C.CFUNCTYPE(C.c_int, C.c_void_p)


@pytest.fixture()
def shim(tmp_path):
    """A private copy of the shim (its function pointers are process-wide globals: the copy
    keeps the library's own, which a GPU decoder may be using, untouched), wired to
    stand-ins that record their arguments and return `status`."""
    lib = private_copy(SHIM, tmp_path)
    calls: list[tuple] = []
    status = {"rc": 0}

    def pool_malloc(ptr, size, pool, stream):
        calls.append(("pool_malloc", size, pool, stream))
        ptr[0] = 0xD000
        return status["rc"]

    def free_async(ptr, stream):
        calls.append(("free_async", ptr, stream))
        return status["rc"]

    def host_alloc(ptr, size, flags):
        calls.append(("host_alloc", size, flags))
        ptr[0] = 0xB000
        return status["rc"]

    def free_host(ptr):
        calls.append(("free_host", ptr))
        return status["rc"]

    keep = [POOL_MALLOC(pool_malloc), FREE_ASYNC(free_async), HOST_ALLOC(host_alloc), FREE_HOST(free_host)]
    native.wire(lib, "pp_alloc_set", SimpleNamespace(**dict(zip(alloc.RUNTIME_FUNCTIONS, keep))),
                alloc.RUNTIME_FUNCTIONS)
    for name in ("pp_device_malloc", "pp_pinned_malloc"):
        getattr(lib, name).argtypes = [C.c_void_p, C.POINTER(C.c_void_p), C.c_size_t, C.c_void_p]
    for name in ("pp_device_free", "pp_pinned_free"):
        getattr(lib, name).argtypes = [C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p]
    lib.pp_alloc_counts.argtypes = [C.c_void_p]
    return lib, calls, status, keep


def _counts(lib):
    out = (C.c_ulonglong * len(alloc.COUNTS))()
    lib.pp_alloc_counts(out)
    return dict(zip(alloc.COUNTS, out))


@needs_cc
def test_device_memory_comes_from_the_pool_ctx_points_to(shim):
    lib, calls, status, _ = shim
    pool = C.c_void_p(0x5150)
    out = C.c_void_p()
    assert lib.pp_device_malloc(C.addressof(pool), C.byref(out), 1 << 20, 0x77) == 0
    assert calls == [("pool_malloc", 1 << 20, 0x5150, 0x77)] and out.value == 0xD000
    status["rc"] = 2  # the runtime's error code comes back unchanged
    assert lib.pp_device_malloc(C.addressof(pool), C.byref(out), 8, None) == 2


@needs_cc
def test_frees_are_stream_ordered_and_null_is_a_no_op(shim):
    lib, calls, _, _ = shim
    assert lib.pp_device_free(None, 0xD000, 64, 0x77) == 0
    assert lib.pp_device_free(None, None, 64, 0x77) == 0
    assert lib.pp_pinned_free(None, 0xB000, 64, 0x77) == 0
    assert lib.pp_pinned_free(None, None, 64, 0x77) == 0
    assert calls == [("free_async", 0xD000, 0x77), ("free_host", 0xB000)]


@needs_cc
def test_calls_are_counted_by_kind(shim):
    lib, _, _, _ = shim
    pool, out = C.c_void_p(0x5150), C.c_void_p()
    lib.pp_device_malloc(C.addressof(pool), C.byref(out), 64, 0x77)
    lib.pp_device_malloc(C.addressof(pool), C.byref(out), 64, 0x77)
    lib.pp_device_free(None, 0xD000, 64, 0x77)
    lib.pp_device_free(None, 0xD000, 64, None)
    lib.pp_device_free(None, None, 64, None)  # a NULL pointer is not counted
    lib.pp_pinned_malloc(None, C.byref(out), 64, None)
    lib.pp_pinned_free(None, 0xB000, 64, None)
    lib.pp_pinned_free(None, 0xB000, 64, 0x77)
    assert _counts(lib) == {"device_mallocs": 2, "device_frees": 1, "device_frees_null_stream": 1,
                            "pinned_mallocs": 1, "pinned_frees": 1, "pinned_frees_on_a_stream": 1}


def test_counts_are_none_before_any_allocators_are_made(monkeypatch):
    monkeypatch.setattr(alloc, "_MADE", {})
    assert alloc.counts() is None


@needs_cc
def test_pinned_memory_is_portable(shim):
    lib, calls, _, _ = shim
    out = C.c_void_p()
    assert lib.pp_pinned_malloc(None, C.byref(out), 4096, 0x77) == 0
    assert calls == [("host_alloc", 4096, 1)] and out.value == 0xB000  # cudaHostAllocPortable


def test_runtime_found_in_the_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /opt/venv/nvidia/cu13/lib/libcudart.so.13\n"
        "7f04-7f05 rw-p 00000000 00:00 0 \n")
    assert cudart.path(str(maps)) == "/opt/venv/nvidia/cu13/lib/libcudart.so.13"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n")
    assert cudart.path(str(maps)) is None
    assert cudart.path(str(tmp_path / "absent")) is None


def test_struct_layouts_match_the_header():
    # nvimgcodec.h 0.9: three header fields, two function pointers, a context, a padding
    assert C.sizeof(alloc.DeviceAllocator) == C.sizeof(alloc.PinnedAllocator) == 56
    assert alloc.DeviceAllocator.device_mem_padding.offset == alloc.PinnedAllocator.pinned_mem_padding.offset == 48


def test_environment_switch_turns_them_off(monkeypatch):
    monkeypatch.setenv("PIXELPIPE_NVIMGCODEC_ALLOCATORS", "0")
    assert alloc.allocators(0) is None  # before touching CUDA: also true on a machine without it
