"""The libwebp fast path of decode_region gives exactly the Pillow path's pixels (whole decode,
crop, alpha dropped) for every encoding and region, leaves animations to Pillow, fails where
Pillow fails, and is really taken."""

from __future__ import annotations

import ctypes
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers import SAMPLE_DIR
from PIL import Image

import pixelpipe.decode.cpu as cpu
from pixelpipe.decode import DecodeError, decode_region, webp

needs_libwebp = pytest.mark.skipif(not webp.available(), reason="no libwebp of Pillow's version")
ENCODINGS = ["q90", "q50", "lossless", "rgba_q90", "rgba_lossless", "grey"]


def _encode(im: Image.Image, encoding: str, seed: int = 0) -> bytes:
    buf = io.BytesIO()
    if encoding.startswith("rgba"):  # alpha bands, some of them fully transparent
        h, w = im.height, im.width
        yy, xx = np.mgrid[0:h, 0:w]
        im = im.copy()
        im.putalpha(Image.fromarray(np.clip((xx + yy * 0.7 + seed * 13) % 300 - 40, 0, 255).astype(np.uint8)))
    if encoding == "grey":
        im.convert("L").save(buf, "WEBP", quality=90)
    elif encoding.endswith("lossless"):
        im.save(buf, "WEBP", lossless=True, method=0)
    else:
        im.save(buf, "WEBP", quality=int(encoding.rsplit("q", 1)[1]))
    return buf.getvalue()


def _images(encoding: str) -> list[bytes]:
    rng = np.random.default_rng(3)
    out = []
    for h, w in ((97, 131), (16, 16), (1, 1), (33, 2)):  # odd sizes, one macroblock, a pixel, a sliver
        arr = rng.random((h, w, 3)) * 90 + np.linspace(0, 160, w)[None, :, None] + np.linspace(0, 5, h)[:, None, None]
        out.append(_encode(Image.fromarray(arr.astype(np.uint8)), encoding))
    if SAMPLE_DIR.is_dir():
        for seed, p in enumerate(sorted(SAMPLE_DIR.glob("*.JPEG"))[:3]):
            out.append(_encode(Image.open(p).convert("RGB"), encoding, seed))
    return out


def _pillow_path(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[np.ndarray, float]]:
    """decode_region with the fast path switched off (what it returned before it existed)."""

    def run(*args, **kwargs) -> tuple[np.ndarray, float]:
        with monkeypatch.context() as m:
            m.setattr(cpu, "decode_webp_region", lambda *a: None)
            return decode_region(*args, **kwargs)

    return run


def _regions(rng: np.random.Generator, h: int, w: int, n: int) -> list[tuple[int, int, int, int] | None]:
    out: list[tuple[int, int, int, int] | None] = [None, (h - 1, w - 1, h, w), (h // 2 | 1 if h > 1 else 0, 0, h, 1)]
    for _ in range(n):
        y0, y1 = sorted(int(v) for v in rng.choice(h + 1, 2, replace=False)) if h > 1 else (0, 1)
        x0, x1 = sorted(int(v) for v in rng.choice(w + 1, 2, replace=False)) if w > 1 else (0, 1)
        out.append((y0, x0, y1, x1))
    return out


@needs_libwebp
def test_structures_have_libwebp_sizes() -> None:
    """libwebp clears exactly sizeof(struct) bytes when it initialises one: compare with ours."""
    lib = webp._library()

    def cleared(call: Callable[[ctypes.c_void_p], object]) -> int:
        raw = (ctypes.c_uint8 * 1024)(*([0xAA] * 1024))
        call(ctypes.cast(raw, ctypes.c_void_p))
        return max(i for i in range(1024) if raw[i] != 0xAA) + 1

    config = cleared(lambda p: lib.init_config(ctypes.cast(p, ctypes.POINTER(webp._Config)), webp._ABI))
    assert config == ctypes.sizeof(webp._Config)
    data = _images("q90")[0]
    features = cleared(lambda p: lib.get_features(data, len(data), ctypes.cast(p, ctypes.POINTER(webp._Features)),
                                                  webp._ABI))
    assert features == ctypes.sizeof(webp._Features)
    init_buffer = ctypes.PyDLL(lib.path).WebPInitDecBufferInternal
    init_buffer.argtypes = [ctypes.c_void_p, ctypes.c_int]
    assert cleared(lambda p: init_buffer(p, webp._ABI)) == ctypes.sizeof(webp._DecBuffer)
    assert webp._Config.output.offset == ctypes.sizeof(webp._Features)
    assert webp._Config.options.offset == ctypes.sizeof(webp._Features) + ctypes.sizeof(webp._DecBuffer)


@needs_libwebp
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_regions_equal_pillow_path(encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pillow = _pillow_path(monkeypatch)
    rng = np.random.default_rng(len(encoding))
    for data in _images(encoding):
        whole = pillow(data)[0]
        h, w = whole.shape[:2]
        for i, region in enumerate(_regions(rng, h, w, 10)):
            assert webp.decode_webp_region(data, region or (0, 0, h, w), (h, w)) is not None
            rgb = bool(i % 2)
            got, scale = decode_region(data, region, rgb=rgb, min_size=(4, 4))
            want, want_scale = pillow(data, region, rgb=rgb, min_size=(4, 4)) if i < 4 else (
                whole if region is None else whole[region[0] : region[2], region[1] : region[3]], 1.0)
            assert scale == want_scale == 1.0
            assert got.shape == want.shape and got.shape[2] == 3 and got.flags.writeable
            np.testing.assert_array_equal(got, want, err_msg=f"{encoding} {h}x{w} {region}")


@needs_libwebp
def test_fast_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _images("rgba_q90")[0]
    calls = []
    fast = cpu.decode_webp_region
    monkeypatch.setattr(cpu, "decode_webp_region", lambda *a: calls.append(a) or fast(*a))
    monkeypatch.setattr(cpu, "_open", lambda *a: pytest.fail("Pillow opened a WebP the fast path handles"))
    out, _ = decode_region(data, (3, 5, 60, 99))
    assert out.shape == (57, 94, 3) and len(calls) == 1


@needs_libwebp
def test_exif_orientation_is_not_applied_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate: the WebP paths ignore it (read_header reports 1)
    im = Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 50, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, "WEBP", quality=90, exif=exif)
    data = buf.getvalue()
    assert webp.decode_webp_region(data, (0, 0, 30, 50), (30, 50)) is not None
    np.testing.assert_array_equal(decode_region(data, (2, 3, 30, 41))[0],
                                  _pillow_path(monkeypatch)(data, (2, 3, 30, 41))[0])


@needs_libwebp
def test_animation_falls_back_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    frames = [Image.new("RGB", (40, 30), c) for c in ((200, 10, 10), (10, 200, 10))]
    buf = io.BytesIO()
    frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], duration=50, lossless=True)
    data = buf.getvalue()
    assert webp.decode_webp_region(data, (0, 0, 30, 40), (30, 40)) is None
    got = decode_region(data, (5, 6, 20, 30))[0]
    np.testing.assert_array_equal(got, _pillow_path(monkeypatch)(data, (5, 6, 20, 30))[0])
    assert tuple(got[0, 0]) == (200, 10, 10)


@needs_libwebp
def test_declines_a_size_other_than_the_header_s() -> None:
    data = _images("q90")[0]
    assert webp.decode_webp_region(data, (0, 0, 97, 131), (97, 131)) is not None
    assert webp.decode_webp_region(data, (0, 0, 97, 131), (98, 131)) is None
    assert webp.decode_webp_region(data, (0, 0, 98, 131), None) is None


@needs_libwebp
@pytest.mark.parametrize("encoding", ["q90", "rgba_lossless"])
def test_corrupt_fails_as_pillow_fails(encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Truncations and bit flips: DecodeError with Pillow's message where the Pillow path raises
    one (the whole image is decoded, so damage below the region is seen too), the same pixels
    where it does not."""
    pillow = _pillow_path(monkeypatch)
    data = _images(encoding)[0]
    rng = np.random.default_rng(1)
    failures = 0
    for k in range(60):
        bad = bytearray(data)
        if k < 12:
            bad = bad[: 30 + k * (len(data) - 30) // 12]
        else:
            bad[int(rng.integers(30, len(data)))] ^= 1 << int(rng.integers(0, 8))
        region = (0, 0, 20, 30)  # the top corner: most damage lies below it
        try:
            want = pillow(bytes(bad), region)[0]
        except DecodeError as e:
            failures += 1
            with pytest.raises(DecodeError) as got:
                decode_region(bytes(bad), region)
            assert str(got.value) == str(e)
            continue
        np.testing.assert_array_equal(decode_region(bytes(bad), region)[0], want)
    assert failures >= 12  # every truncation, and some flips


@needs_libwebp
def test_threads_agree() -> None:
    blobs = _images("q90")[:2] + _images("lossless")[:2]
    want = [decode_region(b)[0] for b in blobs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: decode_region(blobs[i % 4])[0], range(64)))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % 4])


@pytest.mark.parametrize("missing", ["library", "version", "layout"])
def test_unavailable_without_a_matching_libwebp(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    webp._library.cache_clear()
    try:
        if missing == "library":
            monkeypatch.setattr(webp, "_candidates", lambda: ["/nonexistent/libwebp.so.7"])
        elif missing == "version":
            monkeypatch.setattr(webp, "_pillow_webp_version", lambda: 0x000901)  # no such libwebp
        else:
            monkeypatch.setattr(webp, "_layout_matches", lambda lib: False)
        assert not webp.available()
        data = _images("q90")[0]
        assert webp.decode_webp_region(data, (0, 0, 97, 131), (97, 131)) is None
        assert decode_region(data, (1, 2, 50, 60))[0].shape == (49, 58, 3)  # Pillow decodes it
    finally:
        monkeypatch.undo()
        webp._library.cache_clear()
