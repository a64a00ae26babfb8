"""Test corpora for the pipeline tests, built in a test's tmp_path.

Images are small (28-48 pixels a side) so that whole epochs run in milliseconds. They are cut
from a few `pixelpipe.tools.datasets.synthetic` images (photo-like: gradients, edges, texture): sample
i is a window of base image i % BASES chosen by a generator seeded with (seed, i), so every
sample has its own pixels and the same (seed, i) always gives the same bytes.

Writers lay samples out the way users store datasets: a Folder tree with one subfolder per
class, a text file list (one or several integer labels per line), tar shards in webdataset
layout sorted by class. Each writer returns the dataset's samples in the reader's own index
order, so a test can tell which file the pipeline's "index" i refers to.

`bad_files` and friends make broken inputs (truncations, bit flips, zero bytes, text with an
image extension, a PNG whose header claims 100000 x 100000 pixels); `format_files` re-encodes a
photo of the ImageNet sample into every supported format. `within` runs a call that must not
hang, with a time limit (a thread join, not a pytest plugin).
"""

from __future__ import annotations

import functools
import io
import struct
import tarfile
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import need_sample
from PIL import Image

from pixelpipe.tools.datasets import synthetic

BASES = 6  # synthetic images the samples are cut from
MIN_SIDE, MAX_SIDE = 28, 48


@dataclass(frozen=True)
class Item:
    """One sample of a written corpus: its encoded bytes, label and where it was written
    ("" for in-memory corpora, "shard.tar:member" for tar shards)."""

    data: bytes
    label: int | tuple[int, ...]
    source: str = ""


# ----------------------------------------------------------------------------- images
@functools.cache
def _bases() -> tuple[Image.Image, ...]:
    return tuple(Image.open(io.BytesIO(b)).convert("RGB") for b, _ in synthetic(BASES, seed=11))


def encode(im: Image.Image, fmt: str = "JPEG", **kw: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def picture(i: int, seed: int = 0, size: tuple[int, int] | None = None) -> Image.Image:
    """Sample i as an RGB Pillow image: a random window of a base image, resized to `size`
    ((height, width); default: each side drawn in [MIN_SIDE, MAX_SIDE])."""
    rng = np.random.default_rng((seed, i))
    base = _bases()[i % BASES]
    w, h = base.size
    cw, ch = int(rng.integers(w // 3, w + 1)), int(rng.integers(h // 3, h + 1))
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    if size is None:
        size = (int(rng.integers(MIN_SIDE, MAX_SIDE + 1)), int(rng.integers(MIN_SIDE, MAX_SIDE + 1)))
    return base.crop((x0, y0, x0 + cw, y0 + ch)).resize((size[1], size[0]), Image.Resampling.BILINEAR)


@functools.cache
def _jpegs(n: int, seed: int) -> tuple[bytes, ...]:
    return tuple(encode(picture(i, seed), "JPEG", quality=90) for i in range(n))


def images(n: int, seed: int = 0) -> list[bytes]:
    """n small distinct JPEGs of varied sizes (cached: the same call returns the same bytes)."""
    return list(_jpegs(n, seed))


def samples(n: int, classes: int = 4, seed: int = 0) -> list[Item]:
    """n (JPEG, label) samples in memory; sample i has label i % classes."""
    return [Item(b, i % classes) for i, b in enumerate(images(n, seed))]


# ----------------------------------------------------------------------------- writers
def write_folder(root: Path, items: list[Item], ext: str = "jpg") -> list[Item]:
    """root/class_<label>/<k>.<ext> for each item; returns the items in Folder order (classes
    sorted, then paths sorted) with `source` set to the file path."""
    written = []
    for k, it in enumerate(items):
        path = root / f"class_{it.label:02d}" / f"{k:05d}.{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(it.data)
        written.append(Item(it.data, it.label, str(path)))
    return sorted(written, key=lambda it: (it.label, it.source))


def write_filelist(root: Path, items: list[Item], name: str = "list.txt") -> tuple[Path, list[Item]]:
    """Images under root/img and a text list naming them with their label(s), one per line, in
    the given order (FileList index k = items[k]). Returns the list path and the items with
    their sources."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    lines, written = ["# path label(s)"], []
    for k, it in enumerate(items):
        rel = f"img/{k:05d}.jpg"
        (root / rel).write_bytes(it.data)
        labels = it.label if isinstance(it.label, tuple) else (it.label,)
        lines.append(" ".join([rel, *map(str, labels)]))
        written.append(Item(it.data, it.label, str(root / rel)))
    path = root / name
    path.write_text("\n".join(lines) + "\n")
    return path, written


def write_tars(root: Path, items: list[Item], shards: int, sort: bool = True) -> tuple[list[str], list[Item]]:
    """Tar shards in webdataset layout (<key>.jpg + <key>.cls), the items sorted by label when
    `sort` (so shards hold runs of one class), split into `shards` contiguous chunks of nearly
    equal size. Returns the shard paths and the items in TarShards' running index order."""
    root.mkdir(parents=True, exist_ok=True)
    ordered = sorted(items, key=lambda it: it.label) if sort else list(items)
    bounds = np.linspace(0, len(ordered), shards + 1).round().astype(int)
    paths, written = [], []
    for s in range(shards):
        path = root / f"shard-{s:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for k in range(bounds[s], bounds[s + 1]):
                it = ordered[k]
                key = f"{k:06d}"
                label = it.label if isinstance(it.label, tuple) else (it.label,)
                for ext, payload in (("jpg", it.data), ("cls", " ".join(map(str, label)).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
                written.append(Item(it.data, it.label, f"{path}:{key}.jpg"))
        paths.append(str(path))
    return paths, written


# ----------------------------------------------------------------------------- broken inputs
def png_bytes(pixels: np.ndarray, color_type: int, width: int | None = None,
              height: int | None = None) -> bytes:
    """A PNG written by hand (so 16-bit colour and false headers are possible): `pixels` is
    HxW or HxWxC, uint8 (depth 8) or uint16 (depth 16); width/height override the IHDR."""
    depth = 16 if pixels.dtype == np.uint16 else 8
    h, w = pixels.shape[:2]
    rows = pixels.astype(">u2" if depth == 16 else np.uint8).reshape(h, -1).view(np.uint8)
    raw = b"".join(b"\x00" + rows[y].tobytes() for y in range(h))  # filter type 0 per row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width or w, height or h, depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def huge_png(side: int = 100_000) -> bytes:
    """A PNG whose IHDR claims side x side pixels (10**10 by default) with 2x2 pixels of data."""
    return png_bytes(np.zeros((2, 2, 3), np.uint8), 2, width=side, height=side)


def truncations(data: bytes, count: int) -> list[bytes]:
    """`count` prefixes of data, cut at offsets spread from 1 byte to the last byte."""
    cuts = np.unique(np.linspace(1, len(data) - 1, count).round().astype(int))
    return [data[:c] for c in cuts]


def bit_flips(data: bytes, count: int, seed: int = 0, skip: int = 0) -> list[bytes]:
    """`count` copies of data, each with one random bit flipped at or after byte `skip`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        b = bytearray(data)
        pos = int(rng.integers(skip, len(b)))
        b[pos] ^= 1 << int(rng.integers(8))
        out.append(bytes(b))
    return out


def bad_files(good: bytes) -> dict[str, tuple[bytes, str]]:
    """Named broken inputs that must be errors: (bytes, file extension)."""
    return {
        "truncated": (good[: len(good) // 2], "jpg"),
        "corrupt_marker": (good[:2] + b"\x00" * 16 + good[18:], "jpg"),
        "zero_bytes": (b"", "jpg"),
        "text": (b"this is not an image, only text\n" * 4, "jpg"),
        "huge_header": (huge_png(), "png"),
    }


# ----------------------------------------------------------------------------- formats
def photo(name: str = "n01518878_ostrich.JPEG") -> Image.Image:
    """An ImageNet-sample photo as RGB (the test is skipped when the sample is absent)."""
    return Image.open(need_sample(name)).convert("RGB")


# The transpose that undoes each EXIF orientation's display transform (PIL.ImageOps.exif_transpose
# applies the forward one), so that a file stored this way displays as the original.
_UNDO = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def with_orientation(im: Image.Image, orientation: int) -> bytes:
    """A JPEG with an EXIF orientation tag whose displayed image is `im`."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    stored = im.transpose(_UNDO[orientation]) if orientation != 1 else im
    return encode(stored, "JPEG", quality=90, exif=exif.tobytes())


def format_files(im: Image.Image) -> dict[str, tuple[bytes, str]]:
    """`im` (RGB) re-encoded in every supported format and mode: name -> (bytes, extension).
    Every file displays at im's size."""
    rgb = np.asarray(im)
    grey = np.asarray(im.convert("L"))
    # 16-bit samples whose high byte is the 8-bit image and whose low byte is noise
    noise = np.random.default_rng(0).integers(0, 256, rgb.shape, dtype=np.uint16)
    wide16 = rgb.astype(np.uint16) << 8 | noise
    grey16 = grey.astype(np.uint16) << 8 | noise[..., 0]
    files = {
        "jpeg_baseline": (encode(im, "JPEG", quality=92), "jpg"),
        "jpeg_progressive": (encode(im, "JPEG", quality=92, progressive=True), "jpeg"),
        "jpeg_grey": (encode(im.convert("L"), "JPEG", quality=92), "jpg"),
        "jpeg_cmyk": (encode(im.convert("CMYK"), "JPEG", quality=92), "jpg"),
        "jpeg_420": (encode(im, "JPEG", quality=80, subsampling=2), "JPG"),
        "png_rgb8": (encode(im, "PNG"), "png"),
        "png_rgba8": (encode(im.convert("RGBA"), "PNG"), "png"),
        "png_grey8": (encode(im.convert("L"), "PNG"), "png"),
        "png_palette": (encode(im.quantize(64), "PNG"), "png"),
        "png_rgb16": (png_bytes(wide16, 2), "png"),
        "png_grey16": (png_bytes(grey16, 0), "png"),
        "webp_lossy": (encode(im, "WEBP", quality=80), "webp"),
        "webp_lossless": (encode(im, "WEBP", lossless=True), "webp"),
        "bmp_rgb": (encode(im, "BMP"), "bmp"),
        "bmp_palette": (encode(im.quantize(32), "BMP"), "bmp"),
        "png_named_jpg": (encode(im, "PNG"), "jpg"),  # the content decides, not the name
    }
    for o in range(1, 9):
        files[f"jpeg_exif_{o}"] = (with_orientation(im, o), "jpg")
    return files


# ----------------------------------------------------------------------------- hang guard
def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """fn() run on a daemon thread: its result, or the exception it raised re-raised here; the
    test fails if it is still running after `seconds` (a hang)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=target, name="test-hang-guard", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: the consumer hangs")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def prefetch_threads() -> set[threading.Thread]:
    """The pipeline producer threads alive now."""
    return {t for t in threading.enumerate() if t.name == "pixelpipe-prefetch" and t.is_alive()}


_SCRIPT_HEAD = """
import io
import numpy as np
from PIL import Image
import pixelpipe as pp

def jpeg(i):
    buf = io.BytesIO()
    pixels = np.random.default_rng(i).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, "JPEG")
    return buf.getvalue()
"""


def assert_script_exits_cleanly(body: str) -> None:
    """Run `body` (after imports and a `jpeg(i)` maker) in a fresh interpreter: it must print
    "done" and exit 0, never hang or abort at interpreter exit (threads still running)."""
    import subprocess
    import sys
    import textwrap

    code = _SCRIPT_HEAD + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.strip() == "done"
    assert proc.returncode == 0, proc.stderr[-2000:]


# ----------------------------------------------------------------------------- batches
def assert_same(a: list[dict], b: list[dict]) -> None:
    """Same batches, bit for bit."""
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), f"batch {k}: {key!r} differs"


def take(pipe: Any, k: int) -> list[dict]:
    """The first k batches of the pipeline's next epoch, then stop iterating."""
    out: list[dict] = []
    if k == 0:
        return out
    for b in pipe:
        out.append(b)
        if len(out) == k:
            break
    return out


# ----------------------------------------------------------------------------- crafted tars
def _member_offsets(path: Path) -> dict[str, int]:
    """Header offset of each member of a tar, by name."""
    with tarfile.open(path) as tar:
        return {m.name: m.offset for m in tar}


def _with_header(raw: bytes, at: int, edit: Callable[[bytearray], None], checksum: bool) -> bytes:
    """raw with the 512-byte header at `at` edited, its checksum fixed when `checksum`."""
    out = bytearray(raw)
    block = out[at : at + 512]
    edit(block)
    if checksum:
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
    out[at : at + 512] = block
    return bytes(out)


def crafted_tars(root: Path, n: int = 20, at: int = 10) -> dict[str, tuple[Path, list[Item], dict[str, Any]]]:
    """Tar shards of n samples (<key>.jpg + <key>.cls, labels k % 4) broken in one way each, at
    sample `at`: name -> (path, the items as written, what is known: "lost" (samples the
    damage takes, as TarShards counts them), "bad" (indices that cannot be read)).

    checksum: a flipped byte in sample at's image header (checksum left as it was); cut_header:
    the file ends 100 bytes into that header; cut_boundary: it ends just before it; cut_data: in
    the middle of that image's data; no_end: without the end-of-archive blocks; huge_member:
    the header claims 8 GiB (checksum fixed); bad_label: that sample's .cls is text;
    repeated_key: a 21st sample reusing sample 3's key after the others.
    """
    root.mkdir(parents=True, exist_ok=True)
    items = [Item(b, k % 4) for k, b in enumerate(images(n, seed=5))]
    base = root / "good.tar"
    _, written = write_tars(root / "base", items, shards=1, sort=False)
    (root / "base" / "shard-000.tar").rename(base)
    written = [Item(it.data, it.label, it.source.replace(str(root / "base" / "shard-000.tar"), str(base)))
               for it in written]
    raw = base.read_bytes()
    offsets = _member_offsets(base)
    hdr = offsets[f"{at:06d}.jpg"]
    end = offsets[f"{n - 1:06d}.cls"] + 1024  # the last member's header and its one block of data
    rest = list(range(at, n))

    def flip(block: bytearray) -> None:
        block[0] ^= 0x20  # "0000..." -> "\x10000..." in the name field

    def huge(block: bytearray) -> None:
        block[124:136] = b"\x80" + (8 << 30).to_bytes(11, "big")  # GNU base-256: too big for 11 octal digits

    out: dict[str, tuple[Path, list[Item], dict[str, Any]]] = {}

    def put(name: str, data: bytes, known: dict[str, Any], shown: list[Item] | None = None) -> None:
        path = root / f"{name}.tar"
        path.write_bytes(data)
        out[name] = (path, [Item(it.data, it.label, it.source.replace(str(base), str(path)))
                            for it in (written if shown is None else shown)], known)

    put("checksum", _with_header(raw, hdr, flip, checksum=False), {"lost": n - at, "bad": rest})
    put("cut_header", raw[: hdr + 100], {"lost": 1, "bad": [at - 1]}, written[:at])
    put("cut_boundary", raw[:hdr], {"lost": 1, "bad": [at - 1]}, written[:at])
    put("cut_data", raw[: hdr + 700], {"lost": 1, "bad": [at]}, written[: at + 1])
    put("no_end", raw[:end], {"lost": 1, "bad": [n - 1]})
    put("huge_member", _with_header(raw, hdr, huge, checksum=True), {"lost": n - at, "bad": rest})
    label = root / "label.tar"
    with tarfile.open(label, "w") as tar:
        for k, it in enumerate(written):
            for ext, payload in (("jpg", it.data), ("cls", b"dog" if k == at else str(it.label).encode())):
                info = tarfile.TarInfo(f"{k:06d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    out["bad_label"] = (label, [Item(it.data, it.label, it.source.replace(str(base), str(label)))
                                for it in written], {"lost": 0, "bad": [at]})
    repeated = root / "repeated_key.tar"
    extra = Item(images(1, seed=6)[0], 3)
    with tarfile.open(repeated, "w") as tar:
        for k, it in enumerate([*written, extra]):
            key = f"{k if k < n else 3:06d}"
            for ext, payload in (("jpg", it.data), ("cls", str(it.label).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    out["repeated_key"] = (repeated, [Item(it.data, it.label, f"{repeated}:{(k if k < n else 3):06d}.jpg")
                                      for k, it in enumerate([*written, extra])], {"lost": 0, "bad": []})
    return out
