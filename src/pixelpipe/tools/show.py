"""See what a transform list does: each image beside several augmented versions of it.

`show(images, transforms)` returns a PIL image (a notebook displays it as it is): one row per
image, its original first, then `columns` augmented versions, column k being what epoch k of a
run with `seed` gives that sample (the same numbers a Pipeline draws), with the class name
under each row. `pixelpipe show` writes the same grid for samples of a dataset to a PNG.

Pillow is imported on first use, so `import pixelpipe` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..compose import Compose, SampleError
from ..data.batch import ImageBatch, batch_or_images
from ..ops import Normalize, Op
from .progress import Progress
from .show_targets import draw_targets, sample_targets

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["show", "show_dataset"]

GAP = 6  # pixels between tiles and around the grid
HEADER = 18  # the row of column titles
CAPTION = 16  # the strip under each row of tiles
BACKGROUND = (255, 255, 255)
TILE_BACKGROUND = (232, 232, 232)  # around images that do not fill their square tile
TEXT = (40, 40, 40)


def grid_size(rows: int, columns: int, tile: int, titles: bool = True) -> tuple[int, int]:
    """(width, height) in pixels of a grid of rows x columns tiles, with or without the row
    of column titles at the top."""
    return GAP + columns * (tile + GAP), (HEADER if titles else GAP) + rows * (tile + CAPTION + GAP)


def show(images: Any, transforms: Compose | Sequence[Op] | str | None = None, *,
         labels: Sequence[Any] | None = None, classes: Sequence[str] | None = None,
         captions: Sequence[str] | None = None, indices: Sequence[int] | None = None,
         columns: int = 4, seed: int = 0, tile: int = 160,
         mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
         quiet: bool = True, boxes: Sequence[Any] | None = None, box_labels: Sequence[Any] | None = None,
         masks: Sequence[Any] | None = None, keypoints: Sequence[Any] | None = None) -> Image.Image:
    """A grid of each image beside `columns` augmented versions of it, as a PIL RGB image.

    Args:
        images: encoded images (bytes), HWC uint8 arrays or tensors, (image, label) pairs
            (what `pixelpipe.tools.datasets.synthetic` returns), or an ImageBatch. Also an already
            transformed batch: a 4-D tensor (NCHW or NHWC) or a Pipeline batch dict; its
            tiles are then shown as they are, `columns + 1` to a row.
        transforms: a Compose, a list of ops, or a preset name ("imagenet_train",
            "fastai_like", ... see `pixelpipe.presets`). None shows the originals only.
        labels: one label per image (ints); default: the labels of (image, label) pairs or
            of the Pipeline batch.
        classes: class names, indexed by label, for the captions.
        captions: one caption per image; overrides labels and classes.
        indices: the samples' indices in their dataset (default 0..N-1): with the seed and the
            epoch (0..columns-1) they fix every random draw, as in a Pipeline.
        columns: augmented versions per image.
        seed: the run's seed.
        tile: side of each square tile, in pixels; images are fitted inside, aspect kept.
        mean, std: how an already transformed float batch was normalised (default: the
            ImageNet values when its values leave [0, 1]). A Compose's own Normalize is undone
            from the Compose itself.
        quiet: no progress bar (it is drawn only on a terminal anyway).
        boxes, box_labels, masks, keypoints: per image, the targets a Compose takes as boxes=,
            labels=, masks= and keypoints= (boxes in the Compose's `box_format`; see
            pixelpipe.Compose): drawn on the original and, moved by the transforms, on every
            augmented version (boxes as outlines in their label's colour, masks as a coloured
            overlay, visible keypoints as dots). A Pipeline batch dict's "boxes" (as corners,
            "xyxy"), "masks" and "keypoints" are drawn too.

    Returns:
        A PIL image of `grid_size(len(images), columns + 1, tile)` pixels: a row of column
        titles ("original", "epoch 0", ...), then one row per image with its caption below.
        Without transforms (and for transformed batches) the tiles are laid out `columns + 1`
        to a row, each with its own caption, and there is no titles row.

    Raises:
        SampleError: an image cannot be decoded (the message names its position).

    Example:
        >>> import pixelpipe as pp
        >>> from pixelpipe.tools.datasets import synthetic
        >>> grid = pp.show(synthetic(4), "fastai_like", columns=3, tile=96)
        >>> grid.size
        (414, 490)
    """
    if columns < 0 or tile < 8:
        raise ValueError(f"columns must be >= 0 and tile >= 8, got columns={columns}, tile={tile}")
    if isinstance(images, dict) or (isinstance(images, torch.Tensor) and images.dim() == 4):
        if transforms is not None:
            raise ValueError("this batch is already transformed; pass the original images (encoded "
                             "bytes or HWC arrays) to see them beside their augmentations")
        return _show_tensor(images, labels, classes, captions, columns + 1, tile, mean, std)
    targets = {k: v for k, v in (("boxes", boxes), ("labels", box_labels), ("masks", masks),
                                 ("keypoints", keypoints)) if v is not None}
    items, found = _split(images)
    labels = found if labels is None else list(labels)
    names = _captions(len(items), labels, classes, captions)
    idx = list(range(len(items))) if indices is None else [int(i) for i in indices]
    if len(idx) != len(items):
        raise ValueError(f"indices must have one entry per image ({len(items)}), got {len(idx)}")
    t = _compose(transforms)
    for name, values in targets.items():
        if len(values) != len(items):
            raise ValueError(f"{name} must have one entry per image ({len(items)}), got {len(values)}")
    box_format = t.targets.box_format if t is not None else "xyxy"
    epochs = range(columns) if t is not None else range(0)
    with Progress(len(items) * (len(epochs) + 1), "show", quiet=quiet) as bar:
        rows = []
        for i, item in enumerate(items):
            img = _original(item, i)
            if targets:
                img = draw_targets(img, tile, **_given(targets, i, box_format, img.shape[:2]))
            rows.append([img])
            bar.update(1)
        if t is not None:
            for epoch in epochs:
                for row, (out, moved) in zip(rows, _column(t, items, seed, epoch, idx, targets)):
                    img = _displayable(out, t)
                    row.append(draw_targets(img, tile, **moved) if moved else img)
                bar.update(len(items))
    if t is None:  # a contact sheet of the originals, each with its caption
        per_row = columns + 1
        return _render(_chunks([r[0] for r in rows], per_row), _chunks(names, per_row), None, tile)
    titles = ["original"] + [f"epoch {k}" for k in range(columns)]
    return _render(rows, [[n] + [""] * columns for n in names], titles, tile)


@dataclass
class _Picked:
    """A sample chosen for `show_dataset`."""

    data: Any
    index: int
    caption: str


def show_dataset(data: str | None, transforms: Compose | Sequence[Op] | str, n: int = 16,
                 columns: int = 4, seed: int = 0, tile: int = 160,
                 quiet: bool = True) -> tuple[Image.Image, list[tuple[str, str]]]:
    """`show` for n samples of a dataset (evenly spread over it; the first n of a stream).

    data: a folder, file list or tar shards (see `pixelpipe.tools.survey.open_data`), or None for
    the built-in synthetic JPEGs. Samples that cannot be read or decoded are left out and
    returned as (source, reason) beside the grid.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    picked, skipped = _pick(data, n)
    if not picked:
        reasons = "; ".join(f"{source}: {reason}" for source, reason in skipped[:3])
        raise ValueError(f"none of the {len(skipped)} samples picked could be decoded ({reasons}"
                         f"{'; ...' if len(skipped) > 3 else ''})")
    grid = show([p.data for p in picked], transforms, captions=[p.caption for p in picked],
                indices=[p.index for p in picked], columns=columns, seed=seed, tile=tile, quiet=quiet)
    return grid, skipped


# ------------------------------------------------------------------------------- inputs
def _split(images: Any) -> tuple[list[Any], list[Any] | None]:
    """(images, labels or None) from the accepted input kinds."""
    from ..readers._base import split_item

    images = batch_or_images(images)
    if isinstance(images, ImageBatch):
        return images.tolist(), None
    items, labels = [], []
    for i, item in enumerate(images):
        image, label, _ = split_item(item, f"images[{i}]")
        items.append(image)
        labels.append(label)
    return items, (labels if any(lab is not None for lab in labels) else None)


def _captions(n: int, labels: Sequence[Any] | None, classes: Sequence[str] | None,
              captions: Sequence[str] | None) -> list[str]:
    if captions is not None:
        if len(captions) != n:
            raise ValueError(f"captions must have one entry per image ({n}), got {len(captions)}")
        return [str(c) for c in captions]
    if labels is None:
        return [""] * n
    if len(labels) != n:
        raise ValueError(f"labels must have one entry per image ({n}), got {len(labels)}")
    out = []
    for lab in labels:
        lab = lab.tolist() if isinstance(lab, torch.Tensor) else lab
        if lab is None or lab == -1:
            out.append("")
        elif classes is not None and isinstance(lab, int) and 0 <= lab < len(classes):
            out.append(str(classes[lab]))
        else:
            out.append(f"label {lab}")
    return out


def _compose(transforms: Compose | Sequence[Op] | str | None) -> Compose | None:
    if transforms is None or isinstance(transforms, Compose):
        return transforms
    if isinstance(transforms, str):
        from ..presets import PRESETS

        if transforms not in PRESETS:
            raise ValueError(f"unknown preset {transforms!r}; choose from {', '.join(PRESETS)}")
        return PRESETS[transforms]()
    return Compose(list(transforms))


def _original(item: Any, position: int) -> np.ndarray:
    """The whole image, as displayed (EXIF orientation applied), HWC uint8 RGB."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        from ..decode import DecodeError, decode_region

        try:
            return decode_region(item, rgb=True)[0]
        except DecodeError as e:
            raise SampleError(position, str(e)) from e
    arr = item.detach().cpu().numpy() if isinstance(item, torch.Tensor) else np.asarray(item)
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3):
        raise SampleError(position, f"expected an HWC uint8 image, got {arr.dtype} {arr.shape}")
    arr = arr[:, :, None] if arr.ndim == 2 else arr
    return _rgb(arr)


def _column(t: Compose, items: list[Any], seed: int, epoch: int, idx: list[int],
            targets: dict[str, Sequence[Any]]) -> list[tuple[torch.Tensor, dict[str, Any]]]:
    """One epoch's outputs, one per item, each with its moved targets (for draw_targets): as
    one batch, or one by one when the outputs cannot share a batch (sizes that differ, encoded
    and decoded images mixed). Draws depend on the sample index only, so both give the same
    pixels."""

    def run(part: list[Any], where: list[int], at: list[int]) -> list[tuple[torch.Tensor, dict[str, Any]]]:
        given = {k: [v[j] for j in at] for k, v in targets.items()}
        out = t(part, seed=seed, epoch=epoch, indices=where, **given)
        if not given:  # a Compose with batch ops (Mosaic, MixUp) returns a dict all the same
            return [(x, {}) for x in (out["image"] if isinstance(out, dict) else out)]
        return [(x, sample_targets(out, k, t.targets.box_format)) for k, x in enumerate(out["image"])]

    try:
        return run(items, idx, list(range(len(items))))
    except SampleError:
        raise
    except (ValueError, TypeError):
        return [run([item], [i], [k])[0] for k, (item, i) in enumerate(zip(items, idx))]


def _given(targets: dict[str, Sequence[Any]], i: int, box_format: str, hw: tuple[int, ...]) -> dict[str, Any]:
    """Image i's targets as given, boxes as corners in its pixels: what draw_targets takes."""
    from ..data.targets import convert_boxes

    got = {k: v[i] for k, v in targets.items()}
    if got.get("boxes") is not None:
        got["boxes"] = convert_boxes(got["boxes"], box_format, "xyxy", np.array([hw[1], hw[0]], dtype=np.float64))
    return got


def _rgb(arr: np.ndarray) -> np.ndarray:
    c = arr.shape[2]
    if c == 1 or c == 2:
        return np.repeat(arr[:, :, :1], 3, axis=2)
    return np.ascontiguousarray(arr[:, :, :3])


def _displayable(x: torch.Tensor, t: Compose) -> np.ndarray:
    """One output sample of t back to HWC uint8 RGB: layout, dtype and Normalize undone."""
    x = x.detach().cpu()
    if t.layout == "NHWC":
        x = x.permute(2, 0, 1)
    if x.dtype == torch.uint8:
        return _rgb(x.permute(1, 2, 0).numpy())
    x = x.to(torch.float32)
    norm = next((op for op in t.ops if isinstance(op, Normalize)), None)
    if norm is not None:
        x = _unnormalize(x, norm.mean, norm.std)
    return _rgb(_to_uint8(x).permute(1, 2, 0).numpy())


def _unnormalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    m = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
    if x.shape[0] == 1 and m.shape[0] == 3:  # grey output of a colour Normalize: use the first
        m, s = m[:1], s[:1]
    return x * s + m


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    return (x.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)


def _show_tensor(batch: Any, labels: Sequence[Any] | None, classes: Sequence[str] | None,
                 captions: Sequence[str] | None, per_row: int, tile: int,
                 mean: Sequence[float] | None, std: Sequence[float] | None) -> Image.Image:
    """Tiles of an already transformed batch (4-D tensor or a Pipeline batch dict)."""
    if isinstance(batch, dict):
        if "image" not in batch:
            raise ValueError("a batch dict needs an 'image' entry (what a Pipeline yields)")
        x = batch["image"]
        if labels is None and isinstance(batch.get("label"), torch.Tensor):
            labels = batch["label"].tolist()
    else:
        x = batch
    x = x.detach().cpu()
    if x.dim() != 4:
        raise ValueError(f"expected a 4-D batch tensor, got shape {tuple(x.shape)}")
    if x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = x.permute(0, 3, 1, 2)  # NHWC
    if x.dtype != torch.uint8:
        x = x.to(torch.float32)
        if mean is not None or std is not None or (len(x) and (x.min() < 0 or x.max() > 1)):
            from ..presets import IMAGENET_MEAN, IMAGENET_STD

            x = _unnormalize(x, IMAGENET_MEAN if mean is None else mean, IMAGENET_STD if std is None else std)
        x = _to_uint8(x)
    tiles = [_rgb(img.permute(1, 2, 0).numpy()) for img in x]
    if isinstance(batch, dict) and any(k in batch for k in ("boxes", "masks", "keypoints")):
        tiles = [draw_targets(img, tile, **sample_targets(batch, i, "xyxy")) for i, img in enumerate(tiles)]
    names = _captions(len(tiles), labels, classes, captions)
    return _render(_chunks(tiles, per_row), _chunks(names, per_row), None, tile)


def _chunks(seq: Sequence[Any], k: int) -> list[list[Any]]:
    return [list(seq[i : i + k]) for i in range(0, len(seq), k)]


# ------------------------------------------------------------------------------- drawing
def _render(rows: list[list[np.ndarray]], captions: list[list[str]], titles: list[str] | None,
            tile: int) -> Image.Image:
    """Draw the tiles in a grid; captions[r][c] goes under tile (r, c), titles above columns.
    The caption of the first tile of a row may run under the rest of the row when they have
    none."""
    from PIL import Image, ImageDraw

    columns = max((len(r) for r in rows), default=len(titles or []))
    columns = max(columns, len(titles or []), 1)
    top = HEADER if titles else GAP
    width, height = grid_size(len(rows), columns, tile, titles=bool(titles))
    canvas = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    for c, title in enumerate(titles or []):
        x = GAP + c * (tile + GAP)
        draw.text((x + tile // 2, HEADER // 2 + 1), _fit(draw, title, tile), fill=TEXT, anchor="mm")
    for r, row in enumerate(rows):
        y = top + r * (tile + CAPTION + GAP)
        for c, img in enumerate(row):
            x = GAP + c * (tile + GAP)
            canvas.paste(_fit_tile(img, tile), (x, y))
        texts = captions[r] if r < len(captions) else []
        for c, text in enumerate(texts):
            if not text:
                continue
            free = c + 1
            while free < len(texts) and not texts[free]:  # empty neighbours lend their room
                free += 1
            room = tile + (free - c - 1) * (tile + GAP)
            draw.text((GAP + c * (tile + GAP), y + tile + 2), _fit(draw, text, room), fill=TEXT)
    return canvas


def _fit_tile(img: np.ndarray, tile: int) -> Image.Image:
    """The image scaled to fit a tile x tile square (aspect kept), centred on a grey square."""
    from PIL import Image

    pil = Image.fromarray(img)
    w, h = pil.size
    s = tile / max(w, h)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    if size != (w, h):
        pil = pil.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    if size == (tile, tile):
        return pil
    square = Image.new("RGB", (tile, tile), TILE_BACKGROUND)
    square.paste(pil, ((tile - size[0]) // 2, (tile - size[1]) // 2))
    return square


def _fit(draw: Any, text: str, room: float) -> str:
    """text, shortened with '...' to fit `room` pixels in the default font."""
    text = text.encode("latin-1", "replace").decode("latin-1")  # what any default font draws
    if draw.textlength(text) <= room:
        return text
    while text and draw.textlength(text + "...") > room:
        text = text[:-1]
    return text + "..."


# ------------------------------------------------------------------------------- datasets
def _pick(data: str | None, n: int) -> tuple[list[_Picked], list[tuple[str, str]]]:
    """n decodable samples of a dataset, and the (source, reason) of those that failed."""
    from .survey import check_sample, open_data

    if data is None:
        from .datasets import synthetic

        return [_Picked(b, i, f"class {label}") for i, (b, label) in enumerate(synthetic(n))], []
    reader = open_data(data)
    classes = getattr(reader, "classes", None)
    samples = []
    if reader.indexable:
        total = len(reader)
        wanted = range(total) if n >= total else [k * total // n for k in range(n)]
        skipped = []
        for i in wanted:
            try:
                samples.append(reader.read(i))
            except (OSError, ValueError) as e:
                skipped.append((reader.sources(i), f"cannot read: {e}"))
    else:
        skipped = []
        for shard_id in range(len(reader.shards)):
            try:
                for s in reader.iter_shard(shard_id):
                    samples.append(s)
                    if len(samples) == n:
                        break
            except (OSError, ValueError) as e:
                skipped.append((reader.shards[shard_id], str(e)))
            if len(samples) == n:
                break
    picked = []
    for s in samples:
        _, problem = check_sample(s.data, decode=True)
        if problem is not None:
            skipped.append((s.source, problem))
            continue
        picked.append(_Picked(s.data, s.index, _caption(s.label, s.source, classes)))
    return picked, skipped


def _caption(label: Any, source: str, classes: Sequence[str] | None) -> str:
    name = os.path.basename(source.rsplit(":", 1)[-1])
    if label is None:
        return os.path.splitext(name)[0]
    if classes is not None and isinstance(label, int) and 0 <= label < len(classes):
        return str(classes[label])
    return f"label {label}  {name}"
