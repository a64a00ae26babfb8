"""The libpng fast path of decode_region gives exactly the Pillow path's pixels (whole decode,
crop, `_to_array`'s conversions) for every colour type, bit depth, palette, transparency,
interlacing and colour chunk; leaves 16-bit files, animations and odd layouts to Pillow; fails
where Pillow fails; and is really taken."""

from __future__ import annotations

import ctypes
import io
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageFile

import pixelpipe.decode.cpu as cpu
from pixelpipe.decode import DecodeError, decode_region, png

pytestmark = pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")  # Pillow's P -> RGB
needs_libpng = pytest.mark.skipif(not png.available(), reason="no libpng 1.6")
PHOTOS = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-sample"
ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(a: np.ndarray, ctype: int, depth: int = 8, interlace: bool = False, before: tuple = (),
         after: tuple = (), plte: np.ndarray | None = None, trns: bytes | None = None, split: int = 0) -> bytes:
    """A PNG written here (Pillow writes neither Adam7 nor 2/4-bit grey): samples `a` (h, w, c),
    filter Sub on odd rows, extra chunks `before` / `after` the image data."""
    a = a[:, :, None] if a.ndim == 2 else a
    raw = b""
    for y0, x0, dy, dx in ADAM7 if interlace else ((0, 0, 1, 1),):
        sub = a[y0::dy, x0::dx]
        for y, row in enumerate(sub.reshape(sub.shape[0], -1) if sub.size else ()):
            if depth == 16:
                data = row.astype(">u2").tobytes()
            else:
                per = 8 // depth
                v = np.concatenate([row, np.zeros(-len(row) % per, row.dtype)]).reshape(-1, per).astype(np.uint8)
                data = (v << (8 - depth * np.arange(1, per + 1)).astype(np.uint8)).sum(1).astype(np.uint8).tobytes()
            if y % 2:  # Sub: each byte minus the byte one pixel to its left
                step = max(1, a.shape[2] * depth // 8)
                b = np.frombuffer(data, np.uint8)
                data = bytes([1]) + (b - np.concatenate([np.zeros(step, np.uint8), b[:-step]])).tobytes()
            else:
                data = b"\0" + data
            raw += data
    z = zlib.compress(raw)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", a.shape[1], a.shape[0], depth, ctype,
                                                             0, 0, int(interlace)))
    out += b"".join(_chunk(k, v) for k, v in before)
    out += _chunk(b"PLTE", np.asarray(plte, np.uint8).tobytes()) if plte is not None else b""
    out += _chunk(b"tRNS", trns) if trns is not None else b""
    out += b"".join(_chunk(b"IDAT", z[i : i + (split or len(z))]) for i in range(0, len(z), split or len(z)))
    return out + b"".join(_chunk(k, v) for k, v in after) + _chunk(b"IEND", b"")


def _synthetic(name: str, interlace: bool, h: int = 29, w: int = 37) -> bytes:
    rng = np.random.default_rng(len(name) + interlace)
    a = rng.integers(0, 256, (h, w, 4)).astype(np.uint8)
    a[::3, :, 3] = rng.choice(np.array([0, 255], np.uint8), (len(range(0, h, 3)), w))
    kind, _, depth = name.partition("_")
    bits = int(depth or 8)
    index = rng.integers(0, 1 << bits, (h, w))
    if kind in ("grey", "greytrns"):
        return _png(index, 0, bits, interlace, trns=b"\0\1" if kind == "greytrns" else None)
    if kind in ("pal", "paltrns", "palshort"):  # palshort: indices past the palette's end
        n = 1 << bits if kind != "palshort" else max(1, (1 << bits) // 2 - 1)
        trns = bytes(rng.integers(0, 256, min(n, 5)).astype(np.uint8)) if kind == "paltrns" else None
        return _png(index, 3, bits, interlace, plte=rng.integers(0, 256, (n, 3)), trns=trns)
    if kind == "rgbtrns":
        return _png(a[..., :3], 2, 8, interlace, trns=struct.pack(">HHH", *a[0, 0, :3]))
    return {"rgb": lambda: _png(a[..., :3], 2, 8, interlace), "rgba": lambda: _png(a, 6, 8, interlace),
            "ga": lambda: _png(a[..., [0, 3]], 4, 8, interlace)}[kind]()


SYNTHETIC = ["grey_1", "grey_2", "grey_4", "grey_8", "greytrns_2", "greytrns_8", "ga", "rgb", "rgbtrns", "rgba",
             "pal_1", "pal_2", "pal_4", "pal_8", "paltrns_4", "paltrns_8", "palshort_2", "palshort_8"]
PHOTO_MODES = ["RGB", "RGBA", "L", "LA", "P", "P_trns", "1", "RGB_adam7", "L_adam7", "P_adam7"]


def _photo(mode: str, seed: int, path: Path) -> bytes:
    im = Image.open(path).convert("RGB").crop((seed * 7, seed * 5, 200 + seed * 31, 163 + seed * 17))
    base, _, extra = mode.partition("_")
    if base in ("RGBA", "LA"):
        yy, xx = np.mgrid[0 : im.height, 0 : im.width]
        im.putalpha(Image.fromarray(np.clip((xx + yy * 0.7) % 300 - 40, 0, 255).astype(np.uint8)))
    im = im.convert(base) if base != "P" else im.quantize(200 - 60 * seed)
    if extra == "adam7":  # through our writer: Pillow cannot interlace
        arr = np.asarray(im)
        if base == "P":
            return _png(arr, 3, 8, True, plte=np.asarray(im.getpalette()[: 3 * (200 - 60 * seed)]))
        return _png(arr, 2 if base == "RGB" else 0, 8, True)
    buf = io.BytesIO()
    im.save(buf, "PNG", **({"transparency": 3} if extra == "trns" else {}))
    return buf.getvalue()


def _pillow_path(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[np.ndarray, float]]:
    """decode_region with the fast path switched off (what it returned before it existed)."""

    def run(*args, **kwargs) -> tuple[np.ndarray, float]:
        with monkeypatch.context() as m:
            m.setattr(cpu, "decode_png_region", lambda *a: None)
            return decode_region(*args, **kwargs)

    return run


def _regions(rng: np.random.Generator, h: int, w: int, n: int) -> list[tuple[int, int, int, int] | None]:
    out: list[tuple[int, int, int, int] | None] = [None, (h - 1, w - 1, h, w), (0, w - 1, h, w), (h - 1, 0, h, w)]
    for _ in range(n):
        y0, y1 = sorted(int(v) for v in rng.choice(h + 1, 2, replace=False))
        x0, x1 = sorted(int(v) for v in rng.choice(w + 1, 2, replace=False))
        out.append((y0, x0, y1, x1))
    return out


def _check_same(data: bytes, pillow: Callable, rng: np.random.Generator, n: int = 6) -> None:
    whole = pillow(data, rgb=False)[0]
    h, w = whole.shape[:2]
    assert png.decode_png_region(data, (0, 0, h, w), (h, w)) is not None, "the fast path declined"
    for i, region in enumerate(_regions(rng, h, w, n)):
        rgb = bool(i % 2)
        got, scale = decode_region(data, region, rgb=rgb)
        want = pillow(data, region, rgb=rgb)[0]
        assert scale == 1.0 and got.shape == want.shape and got.flags.writeable
        assert got.flags.c_contiguous or region is not None
        np.testing.assert_array_equal(got, want, err_msg=f"{h}x{w} {region} rgb={rgb}")


def test_png_image_layout() -> None:
    assert ctypes.sizeof(png._Image) == 104  # png.h: pointer, 7 x png_uint_32, char[64]
    assert png._Image.version.offset == 8 and png._Image.message.offset == 36


@needs_libpng
@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_equal_pillow_path(name: str, interlace: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    _check_same(_synthetic(name, interlace), _pillow_path(monkeypatch), rng)
    for h, w in ((1, 1), (1, 9), (9, 1), (8, 8)):  # smaller than Adam7's passes
        _check_same(_synthetic(name, interlace, h, w), _pillow_path(monkeypatch), rng, 2)


@needs_libpng
@pytest.mark.skipif(not PHOTOS.is_dir(), reason="no ImageNet sample")
@pytest.mark.parametrize("mode", PHOTO_MODES)
def test_photos_equal_pillow_path(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(len(mode))
    for seed, path in enumerate(sorted(PHOTOS.glob("*.JPEG"))[:3]):
        _check_same(_photo(mode, seed, path), _pillow_path(monkeypatch), rng)


ICC = b"icc\0\0" + zlib.compress(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
COLOUR_CHUNKS = {  # libpng would transform or warn on some of these: they never reach it
    "gAMA 1.0": [(b"gAMA", struct.pack(">I", 100000))],
    "gAMA 0.5 + cHRM": [(b"gAMA", struct.pack(">I", 50000)),
                        (b"cHRM", struct.pack(">8I", 34570, 35850, 73470, 26530, 15960, 84040, 3660, 100))],
    "sRGB + gAMA": [(b"sRGB", b"\0"), (b"gAMA", struct.pack(">I", 45455))],
    "iCCP (RGB profile)": [(b"iCCP", ICC)],
    "sBIT, bKGD, pHYs, tEXt": [(b"sBIT", b"\5\5\5\5"), (b"bKGD", b"\0\1\0\2\0\3"), (b"pHYs", bytes(9)),
                               (b"tEXt", b"Comment\0hi")],
    "cICP": [(b"cICP", bytes([9, 16, 0, 1]))],
    "unknown critical": [(b"ABCD", b"x")],
}


@needs_libpng
@pytest.mark.parametrize("chunks", COLOUR_CHUNKS)
@pytest.mark.parametrize("name", ["grey_8", "greytrns_2", "ga", "rgb", "rgba", "paltrns_8"])
def test_colour_chunks_are_ignored_as_pillow_does(name: str, chunks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _synthetic(name, False)  # the chunks go right after IHDR, before PLTE / tRNS / IDAT
    data = data[:33] + b"".join(_chunk(k, v) for k, v in COLOUR_CHUNKS[chunks]) + data[33:]
    _check_same(data, _pillow_path(monkeypatch), np.random.default_rng(0), 2)


@needs_libpng
def test_fast_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _synthetic("rgba", True)
    calls = []
    fast = cpu.decode_png_region
    monkeypatch.setattr(cpu, "decode_png_region", lambda *a: calls.append(a) or fast(*a))
    monkeypatch.setattr(cpu, "_open", lambda *a: pytest.fail("Pillow decoded a PNG the fast path handles"))
    out, _ = decode_region(data, (3, 5, 20, 30))
    assert out.shape == (17, 25, 3) and len(calls) == 1
    grey, _ = decode_region(_synthetic("grey_4", False), (1, 2, 5, 9), rgb=False)
    assert grey.shape == (4, 7, 1) and len(calls) == 2


def _apng() -> bytes:
    frames = [Image.new("RGB", (20, 10), c) for c in ((200, 10, 10), (10, 200, 10))]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], duration=50)
    return buf.getvalue()


UNUSUAL = {
    "16-bit grey": lambda: _png(np.arange(600, dtype=np.uint16).reshape(20, 30) * 99, 0, 16),
    "16-bit RGBA": lambda: _png(np.arange(2400, dtype=np.uint16).reshape(20, 30, 4) * 27, 6, 16),
    "Pillow I;16": lambda: (lambda b: (Image.fromarray(np.arange(600, dtype=np.uint16).reshape(20, 30) * 99)
                                       .save(b, "PNG"), b.getvalue())[1])(io.BytesIO()),
    "animation": _apng,
    "IDATs not in one run": lambda: _split_run(),
    "other chunk after IDAT": lambda: _png(np.zeros((20, 30, 3), np.uint8), 2, after=((b"zTXt", b"k\0\0x"),)),
    "no IEND": lambda: _png(np.zeros((20, 30), np.uint8), 0)[:-12],
}


def _split_run() -> bytes:
    """A tEXt between two IDAT chunks: Pillow stops reading image data there, libpng would not."""
    data = _png(np.arange(600, dtype=np.uint8).reshape(20, 30), 0, split=20)
    second = data.index(b"IDAT", data.index(b"IDAT") + 4) - 4
    return data[:second] + _chunk(b"tEXt", b"a\0b") + data[second:]


@needs_libpng
@pytest.mark.parametrize("case", UNUSUAL)
def test_unusual_files_fall_back_to_pillow(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = UNUSUAL[case]()
    assert png.decode_png_region(data, (0, 0, 10, 20), None) is None
    try:
        want = _pillow_path(monkeypatch)(data, (1, 2, 10, 20))[0]
    except DecodeError as e:
        with pytest.raises(DecodeError) as got:
            decode_region(data, (1, 2, 10, 20))
        assert str(got.value) == str(e)
        return
    np.testing.assert_array_equal(decode_region(data, (1, 2, 10, 20))[0], want)


@needs_libpng
@pytest.mark.parametrize("truncated_ok", [False, True])
@pytest.mark.parametrize("name", ["rgba", "paltrns_4", "grey_8"])
def test_corrupt_fails_as_pillow_fails(name: str, truncated_ok: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Truncations and bit flips anywhere (chunk lengths, types, CRCs, image data): DecodeError
    with Pillow's message where the Pillow path raises one, the same pixels where it does not."""
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", truncated_ok)
    pillow = _pillow_path(monkeypatch)
    data = _synthetic(name, truncated_ok, 40, 50)
    data = data[:33] + _chunk(b"gAMA", struct.pack(">I", 45455)) + data[33:-12] + _chunk(b"tEXt", b"k\0v") + data[-12:]
    rng = np.random.default_rng(1)
    failures = 0
    for k in range(150):
        bad = bytearray(data)
        if k < 20:
            bad = bad[: 30 + k * (len(data) - 30) // 20]
        else:
            bad[int(rng.integers(8, len(data)))] ^= 1 << int(rng.integers(0, 8))
        region = (0, 0, 10, 12)  # the top corner: most damage lies below it
        try:
            want = pillow(bytes(bad), region)[0]
        except DecodeError as e:
            failures += 1
            with pytest.raises(DecodeError) as got:
                decode_region(bytes(bad), region)
            assert str(got.value) == str(e)
            continue
        np.testing.assert_array_equal(decode_region(bytes(bad), region)[0], want, err_msg=f"flip {k}")
    assert failures >= 20


@needs_libpng
def test_threads_agree() -> None:
    blobs = [_synthetic(n, i % 2 == 1, 64, 80) for i, n in enumerate(("rgb", "rgba", "grey_8", "pal_8"))]
    want = [decode_region(b)[0] for b in blobs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: decode_region(blobs[i % 4])[0], range(64)))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % 4])


@pytest.mark.parametrize("missing", ["library", "version", "self-test"])
def test_unavailable_without_a_working_libpng(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    png._library.cache_clear()
    try:
        if missing == "library":
            monkeypatch.setattr(png, "_candidates", lambda: ["/nonexistent/libpng16.so.16"])
        elif missing == "version":
            monkeypatch.setattr(png._Lib, "__init__", lambda self, path: setattr(self, "version", 10500))
        else:
            monkeypatch.setattr(png, "_self_test", lambda lib: False)
        assert not png.available()
        data = _synthetic("rgb", False)
        assert png.decode_png_region(data, (0, 0, 29, 37), (29, 37)) is None
        assert decode_region(data, (1, 2, 20, 30))[0].shape == (19, 28, 3)  # Pillow decodes it
    finally:
        monkeypatch.undo()
        png._library.cache_clear()
