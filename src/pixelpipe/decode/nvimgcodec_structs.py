"""The ctypes mirrors of the structs, enumerations and constants of nvImageCodec's C API that
pixelpipe uses (`nvimgcodec.h` of nvidia-nvimgcodec-cu13 0.9.0; see nvimgcodec_c, which relies
on them, and tests/test_nvimgcodec_layout.py, which compares every size and field offset with
the installed header). Every struct starts with struct_type, struct_size and struct_next;
`make` fills those in."""

from __future__ import annotations

import ctypes as C
from typing import Any

ST_PROPERTIES, ST_INSTANCE, ST_DECODE_PARAMS, ST_REGION, ST_VIEW = 1, 2, 5, 8, 9
ST_IMAGE_INFO, ST_PLANE_INFO, ST_BACKEND, ST_BACKEND_PARAMS, ST_EXECUTION = 11, 12, 17, 29, 30
KINDS = {"GPU_ONLY": 2, "HYBRID_CPU_GPU": 3, "HW_GPU_ONLY": 4}  # nvimgcodecBackendKind_t
POLICY_IGNORE, POLICY_FIXED = 1, 2
SRGB, I_RGB, UINT8, STRIDED_DEVICE = 1, 8, 0x0802, 1
SUCCESS = 1
ST_DEVICE_ALLOCATOR, ST_PINNED_ALLOCATOR = 3, 4
ST_EXECUTOR = 28
STATUS_NAMES = {0x3: "failed", 0x7: "image corrupted", 0xB: "codec unsupported", 0x13: "no backend for it",
                0x43: "resolution unsupported", 0x83: "code stream feature unsupported",
                0x11: "region unsupported", 0x21: "chroma subsampling unsupported"}


def make(cls: type, struct_type: int) -> Any:
    s = cls()
    s.struct_type, s.struct_size, s.struct_next = struct_type, C.sizeof(cls), None
    return s


HEAD = [("struct_type", C.c_int), ("struct_size", C.c_size_t), ("struct_next", C.c_void_p)]


class Properties(C.Structure):
    _fields_ = [*HEAD, ("version", C.c_uint32), ("cudart_version", C.c_uint32)]


class BackendParams(C.Structure):
    _fields_ = [*HEAD, ("load_hint", C.c_float), ("load_hint_policy", C.c_int)]


class Backend(C.Structure):
    _fields_ = [*HEAD, ("kind", C.c_int), ("params", BackendParams)]


class ExecutionParams(C.Structure):
    _fields_ = [*HEAD, ("device_allocator", C.c_void_p), ("pinned_allocator", C.c_void_p),
                ("max_num_cpu_threads", C.c_int), ("executor", C.c_void_p), ("device_id", C.c_int),
                ("pre_init", C.c_int), ("skip_pre_sync", C.c_int), ("num_backends", C.c_int),
                ("backends", C.POINTER(Backend))]


class InstanceCreateInfo(C.Structure):
    _fields_ = [*HEAD, ("load_builtin_modules", C.c_int), ("load_extension_modules", C.c_int),
                ("extension_modules_path", C.c_char_p), ("create_debug_messenger", C.c_int),
                ("debug_messenger_desc", C.c_void_p), ("message_severity", C.c_uint32),
                ("message_category", C.c_uint32)]


class Orientation(C.Structure):
    _fields_ = [*HEAD, ("rotated", C.c_int), ("flip_x", C.c_int), ("flip_y", C.c_int)]


class PlaneInfo(C.Structure):
    _fields_ = [*HEAD, ("width", C.c_uint32), ("height", C.c_uint32), ("row_stride", C.c_size_t),
                ("num_channels", C.c_uint32), ("sample_type", C.c_int), ("precision", C.c_uint8)]


class ImageInfo(C.Structure):
    _fields_ = [*HEAD, ("codec_name", C.c_char * 256), ("color_spec", C.c_int), ("chroma_subsampling", C.c_int),
                ("sample_format", C.c_int), ("orientation", Orientation), ("num_planes", C.c_uint32),
                ("plane_info", PlaneInfo * 32), ("buffer", C.c_void_p), ("buffer_kind", C.c_int),
                ("cuda_stream", C.c_void_p)]


class OutOfBoundsSample(C.Structure):
    _fields_ = [("value", C.c_uint32), ("type", C.c_int)]


class Region(C.Structure):
    _fields_ = [*HEAD, ("ndim", C.c_int), ("start", C.c_int * 5), ("end", C.c_int * 5),
                ("out_of_bounds_policy", C.c_int), ("out_of_bounds_samples", OutOfBoundsSample * 5)]


class CodeStreamView(C.Structure):
    _fields_ = [*HEAD, ("image_idx", C.c_size_t), ("region", Region), ("bitstream_offset", C.c_size_t)]


class DecodeParams(C.Structure):
    _fields_ = [*HEAD, ("apply_exif_orientation", C.c_int)]


class DeviceAllocator(C.Structure):
    """nvimgcodecDeviceAllocator_t"""

    _fields_ = [*HEAD, ("device_malloc", C.c_void_p), ("device_free", C.c_void_p), ("device_ctx", C.c_void_p),
                ("device_mem_padding", C.c_size_t)]


class PinnedAllocator(C.Structure):
    """nvimgcodecPinnedAllocator_t"""

    _fields_ = [*HEAD, ("pinned_malloc", C.c_void_p), ("pinned_free", C.c_void_p), ("pinned_ctx", C.c_void_p),
                ("pinned_mem_padding", C.c_size_t)]


class ExecutorDesc(C.Structure):
    """nvimgcodecExecutorDesc_t: an executor of the caller's (native/executor.c's functions)."""

    _fields_ = [*HEAD, ("instance", C.c_void_p), ("schedule", C.c_void_p), ("run", C.c_void_p), ("wait", C.c_void_p),
                ("getNumThreads", C.c_void_p)]


def view_template() -> Any:
    """A region view of a stored image (its start and end are set per image)."""
    view = make(CodeStreamView, ST_VIEW)
    view.region.struct_type, view.region.struct_size = ST_REGION, C.sizeof(Region)
    view.region.ndim = 2
    return view


def info_template(stream: int) -> Any:
    """An interleaved RGB uint8 device image decoded in the order of CUDA stream `stream` (a
    cudaStream_t; its size, row stride and address are set per image)."""
    info = make(ImageInfo, ST_IMAGE_INFO)
    info.color_spec, info.sample_format, info.num_planes = SRGB, I_RGB, 1
    info.buffer_kind, info.cuda_stream = STRIDED_DEVICE, stream
    p = info.plane_info[0]
    p.struct_type, p.struct_size = ST_PLANE_INFO, C.sizeof(PlaneInfo)
    p.num_channels, p.sample_type, p.precision = 3, UINT8, 0
    return info
