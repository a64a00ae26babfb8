"""native/open.c (decode/nvimgcodec_open.py): a batch's code streams, region views and images
made in one C call, against its twin, CDecoder's calls one by one from Python. Checked with
stand-ins for nvImageCodec's five functions (no GPU needed): the same library calls with the
same arguments (the blob bytes, the regions, the image sizes, strides, addresses and stream
read back from the structs), the same slots and reasons for samples that fail at each step,
and the same handles destroyed on release. tests/test_decode_gpu_native.py compares pixels on
a GPU."""

from __future__ import annotations

import collections
import ctypes as C
import threading
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import native_built, private_copy

from pixelpipe import native
from pixelpipe.decode import nvimgcodec_c as capi
from pixelpipe.decode import nvimgcodec_open
from pixelpipe.decode import nvimgcodec_structs as S

CREATE = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.c_void_p, C.c_size_t, C.c_char_p)
SUB = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.c_void_p)
DESTROY = C.CFUNCTYPE(C.c_int, C.c_void_p)
IMAGE = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.c_void_p)
INSTANCE, STREAM = 0x1A57, 0x5E


class Library:
    """Stand-ins for the five functions: handles are counters; b"unparsable" fails the code
    stream, a region starting at row 99 fails the view, a width of 77 fails the image."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.read_at: list[int] = []  # where each code stream's bytes were read
        self.ids: dict[tuple, int] = {}  # a handle per thing made, the same whichever path made it

        def handle(*key) -> int:
            return self.ids.setdefault(key, 0x1000 + len(self.ids))

        def create(instance, out, data, length, name):
            blob = C.string_at(data, length)
            self.read_at.append(data)
            self.calls.append(("create", instance, blob, name))
            if blob == b"unparsable":
                return 7
            out[0] = handle("stream", blob)
            self.calls.append(("made", out[0], blob))
            return 0

        def sub(stream, out, view):
            v = S.CodeStreamView.from_address(view)
            r = v.region
            self.calls.append(("sub", stream, v.struct_type, r.struct_type, r.ndim, tuple(r.start[:2]), tuple(r.end[:2])))
            if r.start[0] == 99:
                return 7
            out[0] = handle("view", stream, tuple(r.start[:2]))
            self.calls.append(("made", out[0], stream))
            return 0

        def image(instance, out, info):
            i = S.ImageInfo.from_address(info)
            p = i.plane_info[0]
            self.calls.append(("image", instance, i.struct_type, i.color_spec, i.sample_format, i.buffer_kind,
                               i.cuda_stream, i.num_planes, p.num_channels, p.sample_type, p.width, p.height,
                               p.row_stride, i.buffer))
            if p.width == 77:
                return 7
            out[0] = handle("image", p.width, p.height)
            self.calls.append(("made", out[0], p.width))
            return 0

        def destroy(kind):
            def fn(h):
                self.calls.append((kind, h))
                return 0
            return fn

        self.keep = [CREATE(create), SUB(sub), DESTROY(destroy("destroy stream")), IMAGE(image),
                     DESTROY(destroy("destroy image"))]
        self.fns = SimpleNamespace(
            nvimgcodecCodeStreamCreateFromHostMem=self.keep[0], nvimgcodecCodeStreamGetSubCodeStream=self.keep[1],
            nvimgcodecCodeStreamDestroy=self.keep[2], nvimgcodecImageCreate=self.keep[3],
            nvimgcodecImageDestroy=self.keep[4])


SHIM = native_built("open.c")
pytestmark = pytest.mark.skipif(SHIM is None, reason="no C compiler: native/open.c cannot be built")


@pytest.fixture()
def stand_ins(monkeypatch, tmp_path):
    """A private copy of open.c's library (its function pointers are process-wide) wired to
    the stand-ins, and output_buffer on the host (the same offsets, no CUDA)."""
    library = Library()
    lib = native.signed(private_copy(SHIM, tmp_path), nvimgcodec_open.SIGNATURES)
    native.wire(lib, "pp_open_set", library.fns, nvimgcodec_open.FUNCTIONS)

    def cpu_buffer(shape, stream, steady=None):
        offsets, total = [], 0
        for h, w in shape.tolist():
            offsets.append(total)
            total += h * w * 3
        return np.array(offsets, dtype=np.int64), torch.empty(max(total, 1), dtype=torch.uint8), None

    monkeypatch.setattr(nvimgcodec_open, "output_buffer", cpu_buffer)
    return lib, library


def decoder(library: Library) -> capi.CDecoder:
    dec = object.__new__(capi.CDecoder)
    dec._api = SimpleNamespace(free=library.fns, held=library.fns, batch=None)
    dec._instance = C.c_void_p(INSTANCE)
    dec._open_lock, dec._opened, dec._decoded = threading.RLock(), weakref.WeakSet(), collections.deque()
    dec.staging = None
    return dec


class HostStaging:
    """PinnedStaging's interface over ordinary host tensors (no CUDA): what was taken and given."""

    def __init__(self) -> None:
        self.taken: list[tuple[int, torch.Tensor]] = []
        self.given: list[tuple[torch.Tensor, object]] = []

    def take(self, nbytes: int) -> torch.Tensor:
        arena = torch.full((nbytes + 100,), 0xEE, dtype=torch.uint8)
        self.taken.append((nbytes, arena))
        return arena

    def give(self, arena: torch.Tensor, stream: object, done: object = None) -> None:
        self.given.append((arena, stream))


BLOBS = [b"first jpeg", b"unparsable", b"second", b"third one", b"fourth", b"fifth!"]
BOXES = [(1, 2, 30, 40), (0, 0, 5, 5), None, (99, 0, 120, 50), (3, 4, 13, 81), (0, 0, 8, 9)]
SIZES = [(29, 38), (5, 5), (20, 30), (21, 50), (10, 77), (8, 9)]


def opened_both_ways(stand_ins):
    lib, library = stand_ins
    stream = SimpleNamespace(cuda_stream=STREAM, device=torch.device("cpu"))
    seen = []
    for in_c in (True, False):
        library.calls.clear()
        dec = decoder(library)
        opened = capi.Opened(dec, BLOBS)
        if in_c:
            nvimgcodec_open.open_batch(lib, dec, dec._instance, opened, BOXES, SIZES, stream)
        else:
            dec._code_streams(opened, BOXES)
            dec._images(opened, SIZES, stream)
        seen.append((dec, opened, list(library.calls)))
    return seen


def test_the_same_calls_slots_and_reasons_as_the_calls_one_by_one(stand_ins):
    (_, fast, fast_calls), (_, slow, slow_calls) = opened_both_ways(stand_ins)
    base = [o.buffer.data_ptr() for o in (fast, slow)]

    def normal(calls, b):  # buffer addresses relative to each path's own buffer
        return sorted(((*c[:-1], c[-1] - b) if c[0] == "image" else c for c in calls), key=repr)

    # open.c interleaves the steps per image, the twin does each step for all images first
    assert normal(fast_calls, base[0]) == normal(slow_calls, base[1])
    images = [c for c in fast_calls if c[0] == "image"]
    assert [c[10:13] for c in images] == [(38, 29, 114), (30, 20, 90), (77, 10, 231), (9, 8, 27)]
    assert {c[6] for c in images} == {STREAM}
    subs = [c for c in fast_calls if c[0] == "sub"]
    assert [(c[5], c[6]) for c in subs] == [((1, 2), (30, 40)), ((99, 0), (120, 50)), ((3, 4), (13, 81)),
                                           ((0, 0), (8, 9))]
    assert fast.ok == slow.ok == [0, 2, 5]
    for a, b, k in zip(fast.slots, slow.slots, range(len(BLOBS))):
        if isinstance(a, str):
            assert a == b
        else:
            ia, ib = dict(a.__cuda_array_interface__), dict(b.__cuda_array_interface__)
            assert ia.pop("data")[0] - base[0] == ib.pop("data")[0] - base[1]
            assert ia == ib and a.strides == b.strides, k
    assert fast.slots[1] == "nvImageCodec cannot parse it"
    assert fast.slots[3] == "nvImageCodec refused the region (99, 0, 120, 50)"
    assert fast.slots[4] == "nvImageCodec could not describe its output"
    fast_streams, fast_images = fast.batch
    slow_streams, slow_images = slow.batch
    assert list(fast_streams[:3]) == list(slow_streams[:3]) and list(fast_images[:3]) == list(slow_images[:3])
    fast.release(), slow.release()  # while the stand-ins live


def test_staged_blobs_are_copied_64_byte_aligned_and_the_code_streams_read_the_copies(stand_ins):
    lib, library = stand_ins
    stream = SimpleNamespace(cuda_stream=STREAM, device=torch.device("cpu"))
    results = []
    for staged in (False, True):
        library.calls.clear(), library.read_at.clear()
        dec = decoder(library)
        dec.staging = HostStaging() if staged else None
        opened = capi.Opened(dec, BLOBS)
        nvimgcodec_open.open_batch(lib, dec, dec._instance, opened, BOXES, SIZES, stream)
        results.append((dec, opened, [c for c in library.calls if c[0] != "image"], list(library.read_at)))
    (_, plain, plain_calls, _), (dec, staged, staged_calls, read_at) = results
    assert staged_calls == plain_calls  # the same bytes parsed, the same handles made
    assert staged.ok == plain.ok and [type(s) for s in staged.slots] == [type(s) for s in plain.slots]
    (nbytes, arena), = dec.staging.taken
    assert nbytes == sum(-(-len(b) // 64) * 64 for b in BLOBS)
    base, at = arena.data_ptr(), 0
    for blob, address in zip(BLOBS, read_at):
        assert address == base + at  # in batch order, each 64-byte aligned within the arena
        assert bytes(arena[at:at + len(blob)].tolist()) == blob
        at += -(-len(blob) // 64) * 64
    assert staged.staging is arena and dec.staging.given == []
    staged.release()
    assert dec.staging.given == [(arena, stream)] and staged.staging is None  # back with the batch's stream
    plain.release()


def test_a_batch_past_the_largest_arena_reads_its_blobs_in_place(stand_ins, monkeypatch):
    from pixelpipe.decode import pinned_staging

    lib, library = stand_ins
    monkeypatch.setattr(pinned_staging, "LARGEST", 64)  # every batch of BLOBS needs more
    dec = decoder(library)
    dec.staging = HostStaging()
    opened = capi.Opened(dec, BLOBS)
    library.read_at.clear()
    nvimgcodec_open.open_batch(lib, dec, dec._instance, opened, BOXES, SIZES,
                               SimpleNamespace(cuda_stream=STREAM, device=torch.device("cpu")))
    assert dec.staging.taken == [] and opened.staging is None
    assert [C.string_at(a, len(b)) for a, b in zip(library.read_at, BLOBS)] == BLOBS  # the blobs themselves
    opened.release()
    assert dec.staging.given == []


def test_release_destroys_every_handle_made_once_subs_before_their_parents(stand_ins):
    seen = opened_both_ways(stand_ins)
    library = stand_ins[1]
    destroyed = []
    for dec, opened, calls in seen:
        made = [c[1] for c in calls if c[0] == "made"]
        library.calls.clear()
        opened.release()
        opened.release()  # once only
        gone = [c for c in library.calls if c[0].startswith("destroy")]
        assert sorted(h for _, h in gone) == sorted(made)
        order = [h for _, h in gone]
        parent_of = {c[1]: c[2] for c in calls if c[0] == "made" and c[2] in made}
        for sub, parent in parent_of.items():
            assert order.index(sub) < order.index(parent)
        destroyed.append(sorted(gone))
    assert destroyed[0] == destroyed[1]


def test_release_takes_the_ticket_back_before_it_drops_the_buffer(stand_ins):
    """A planned batch dropped while the queue's thread decodes it: the buffer it writes into
    stays held until the decode is taken back (retired)."""
    lib, library = stand_ins
    stream = SimpleNamespace(cuda_stream=STREAM, device=torch.device("cpu"))
    dec = decoder(library)
    opened = capi.Opened(dec, BLOBS)
    nvimgcodec_open.open_batch(lib, dec, dec._instance, opened, BOXES, SIZES, stream)
    seen = []
    opened.ticket = SimpleNamespace(event=None, retire=lambda: seen.append((opened.buffer is not None, opened.native is not None)))
    opened.release()
    assert seen == [(True, True)] and opened.buffer is None and opened.native is None


def test_close_on_another_thread_waits_for_an_open_in_progress(stand_ins):
    """close() called while open() is making a batch's code streams on another thread (a
    pipeline's planning thread): the decoder and instance are destroyed only after open() is
    done and its handles are destroyed; an open() after close() raises."""
    lib, library = stand_ins
    inside, go = threading.Event(), threading.Event()
    create = library.fns.nvimgcodecCodeStreamCreateFromHostMem

    def slow_create(instance, out, data, length, name):
        if data == b"slow":
            inside.set()
            assert go.wait(10)
        return create(instance, out, data, length, name)

    def destroy(kind):
        return lambda h: library.calls.append((kind, h.value)) or 0

    library.fns.nvimgcodecCodeStreamCreateFromHostMem = slow_create
    library.fns.nvimgcodecDecoderDestroy = destroy("destroy decoder")
    library.fns.nvimgcodecInstanceDestroy = destroy("destroy instance")
    dec = decoder(library)
    dec._decoder, dec._queue = C.c_void_p(0xDEC), None
    opened = []
    planner = threading.Thread(target=lambda: opened.append(dec.open([b"slow", b"next"], [None, (0, 0, 4, 4)])))
    planner.start()
    assert inside.wait(10)
    closer = threading.Thread(target=dec.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # waiting for the open in progress
    assert not any(c[0] in ("destroy decoder", "destroy instance") for c in library.calls)
    go.set()
    planner.join(10)
    closer.join(10)
    assert not planner.is_alive() and not closer.is_alive()
    kinds = [c[0] for c in library.calls]
    made = [c[1] for c in library.calls if c[0] == "made"]
    assert len(made) == 3  # two code streams and the second one's region view
    gone = [c[1] for c in library.calls if c[0] == "destroy stream"]
    assert sorted(gone) == sorted(made)  # the batch open() made was released by close()
    assert kinds.index("destroy decoder") > max(i for i, k in enumerate(kinds) if k == "destroy stream")
    assert kinds[-1] == "destroy instance"
    assert opened[0].released
    with pytest.raises(RuntimeError, match="closed"):
        dec.open([b"late"], [None])
