"""Compose: a list of ops and the output form, planned into fused stages. A spec: the engine runs it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .data.targets import TARGET_KEYS, TargetForm, Targets
from .engine import Engine, SampleError, default_engine
from .ops.kinds import EVAL_STYLES, Op
from .plan import Output, Program, Stage, build

__all__ = ["Compose", "SampleError"]


class Compose:
    """A list of ops applied as a few fused passes.

    Args:
        ops: the ops, in order.
        dtype: output dtype: torch.uint8, float16, bfloat16 or float32. Floats are in [0, 1]
            (or normalised by a Normalize op).
        layout: "NCHW" or "NHWC".
        channels: 3 (grey images are replicated) or 1 (the grey of colour images).
        antialias: antialias every shrinking warp (default True).
        mask_fill: the label masks take where a warp reads beyond a "constant" border
            (default 0; e.g. 255 as an ignore index).
        box_format: how boxes are given and returned: "xyxy" (default: corners), "xywh"
            (corner and size, COCO's), "cxcywh" (centre and size) in pixels, or the same with
            an "n" ("xyxyn", "xywhn", "cxcywhn": divided by the image's width and height, YOLO's
            labels are "cxcywhn").
        targets: "list" (default: per-box entries as one tensor per sample) or "padded" (one
            tensor [N, max K, ...] padded with 0, -1 for labels, and "box_counts" /
            "keypoint_counts" int64 [N]).
        flip_pairs: pairs (a, b) of keypoint joints that are each other's mirror image (left
            and right eye, ...): in a sample the geometry mirrors (an odd number of flips),
            each instance's joints a and b are exchanged after moving, so a left wrist stays
            a left wrist. Needs keypoints given per instance, [K, J, 2 or 3].
        boxes_from_masks: each moved box becomes the box of its instance's warped mask, not the
            box enclosing its moved corners (larger than the object after a rotation, a shear
            or a perspective warp). Needs masks with one channel per box ([H, W, K], nonzero
            inside) or an instance map ([H, W], box k's pixels hold k + 1); a box whose mask
            left the image gets visibility 0 (pixelpipe.data.mask_boxes).
        exact_resize: on the CPU, decode JPEGs at full size. By default (False) a region that
            the ops shrink by 2x or more is decoded at a reduced DCT scale (1/2, 1/4 or 1/8:
            libjpeg's scaled IDCT, several times less work) and resampled from there, which
            differs from resampling the full-size decode (Pillow's decode then resize) by a mean
            of 0.6-0.9 grey levels on photos; True resamples the full-size pixels, as Pillow
            does (docs/ops.md states both tolerances). GPU decoding is always full size.

    Calling it: ``compose(images, seed=0, epoch=0, indices=None)`` where images is an
    ImageBatch, a list of HWC uint8 tensors/arrays, an NHWC batch [N, H, W, C] of equal-sized
    ones (ImageBatch.from_dense), or a list of encoded images (bytes).
    Encoded images are planned from their headers first and only the region each output needs
    is decoded. `indices` are the samples' global indices (default 0..N-1): with the seed and
    epoch they fix every random draw, so a sample gets the same augmentation in any batch.
    It returns the image tensor; given targets, a dict:

    - ``boxes=``: per image an array [K, 4] of boxes in `box_format`; out: float32 boxes in
      the same format, each enclosing its moved corners, clipped to the output image;
    - ``labels=``: per image the boxes' class ids [K]; out: int64, row for row with the boxes;
    - ``keypoints=``: per image [K, 2] (x, y) or [K, 3] (x, y, visibility), or [K, J, 2 or 3]
      (J points of each of K instances, one per box when boxes are given); out: float32
      [K, 3] (or [K, J, 3]), visibility 0 for points that left the image;
    - ``masks=``: per image an integer label image [H, W] or [H, W, C] of the image's size;
      out: one tensor [N, H, W] (or [N, C, H, W] / [N, H, W, C], the output's layout), warped
      with the images' matrices by nearest neighbour;
    - any other keyword (``ids=...``) is passed through as it is.

    The dict has "image" and those keys. A SanitizeBoxes at the end of the ops drops boxes
    that the geometry shrank or pushed out (with their labels and per-box keypoints), and
    the dict's "kept" gives, per sample, the positions of the kept boxes among those given
    (pixelpipe.data.targets.to_detection turns the dict into torchvision's detection targets).

    The work runs on `engine` (a pixelpipe.Engine: its threads, GPU decoder and device), or on
    the process's default engine for `device` (None: the input's device, the CPU for encoded
    images).

    Example:
        >>> import torch, pixelpipe as pp
        >>> t = pp.Compose([pp.RandomResizedCrop(224), pp.RandomFlip(),
        ...                 pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])],
        ...                dtype=torch.float16)
        >>> t([torch.zeros(300, 400, 3, dtype=torch.uint8)]).shape
        torch.Size([1, 3, 224, 224])
        >>> out = t([torch.zeros(300, 400, 3, dtype=torch.uint8)], boxes=[[[10, 20, 110, 220]]])
        >>> sorted(out), out["boxes"][0].shape
        (['boxes', 'image'], torch.Size([1, 4]))
    """

    def __init__(self, ops: Sequence[Op], dtype: torch.dtype = torch.float32, layout: str = "NCHW",
                 channels: int = 3, antialias: bool = True, mask_fill: int = 0, box_format: str = "xyxy",
                 targets: str = "list", flip_pairs: Sequence[Sequence[int]] | None = None,
                 boxes_from_masks: bool = False, exact_resize: bool = False) -> None:
        ops = list(ops)
        for i, op in enumerate(ops):
            if not isinstance(op, Op):
                raise TypeError(f"ops[{i}] is {type(op).__name__}, not a pixelpipe op")
        self.ops = ops
        self.output = Output(dtype, layout, channels, antialias, mask_fill, exact_resize)
        self.program: Program = build(ops, self.output, TargetForm(box_format, targets, flip_pairs=flip_pairs,
                                                                      boxes_from_masks=bool(boxes_from_masks)))
        self.targets = self.program.targets

    @property
    def dtype(self) -> torch.dtype:
        return self.output.dtype

    @property
    def layout(self) -> str:
        return self.output.layout

    @property
    def channels(self) -> int:
        return self.output.channels

    @property
    def antialias(self) -> bool:
        return self.output.antialias

    @property
    def exact_resize(self) -> bool:
        return self.output.exact_resize

    @property
    def stages(self) -> list[Stage]:
        return self.program.stages

    def like(self, ops: Sequence[Op]) -> Compose:
        """A Compose of other ops with this one's output form."""
        o, t = self.output, self.targets
        return Compose(ops, o.dtype, o.layout, o.channels, o.antialias, o.mask_fill, t.box_format, t.form,
                       t.flip_pairs, t.boxes_from_masks, o.exact_resize)

    def eval(self, style: str = "center") -> Compose:
        """The deterministic evaluation form of these ops, for validation and serving: each op
        replaced by what its `eval_form(style)` says (random ops dropped or made central), with
        the same output form. style: "center" or "imagenet" (see pixelpipe.eval)."""
        if style not in EVAL_STYLES:
            raise ValueError(f"style must be one of {', '.join(map(repr, EVAL_STYLES))}, got {style!r}")
        ops: list[Op] = []
        for i, op in enumerate(self.ops):
            try:
                form = op.eval_form(style)
            except TypeError as e:
                raise TypeError(f"ops[{i}] ({type(op).__name__}): {e}") from None
            for k, o in enumerate(form):
                if not isinstance(o, Op):
                    raise TypeError(f"ops[{i}] ({type(op).__name__}).eval_form returned {type(o).__name__} at "
                                    f"position {k}, not a pixelpipe op")
                ops.append(o)
        return self.like(ops)

    def plan(self) -> str:
        """The stages this list runs as, one line each."""
        return self.program.describe()

    def __repr__(self) -> str:
        inner = ",\n".join(f"    {op!r}" for op in self.ops)
        o = self.output
        extra = "".join(f", {k}={v!r}" for k, v, default in (
            ("channels", o.channels, 3), ("antialias", o.antialias, True), ("mask_fill", o.mask_fill, 0),
            ("box_format", self.targets.box_format, "xyxy"), ("targets", self.targets.form, "list"),
            ("exact_resize", o.exact_resize, False)) if v != default)
        return f"Compose([\n{inner}\n], dtype={o.dtype}, layout={o.layout!r}{extra})"

    def __call__(self, images: Any, seed: int = 0, epoch: int = 0, indices: Any = None, *,
                 engine: Engine | None = None, device: str | torch.device | None = None,
                 **values: Any) -> Any:
        if engine is not None and device is not None:
            raise ValueError("give an engine or a device, not both (the engine has its device)")
        eng = engine if engine is not None else default_engine(device)
        if not hasattr(images, "__len__"):
            images = list(images)
        n = len(images)
        targets = Targets.from_args(n, **{k: values.pop(k) for k in TARGET_KEYS if k in values})
        prepared = eng.prepare(self.program, images, seed, epoch, indices, targets)
        batch = eng.finish(prepared)
        if not targets and not values and not self.program.batch_ops:
            return batch["image"]
        batch.update(values)
        return self.program.mix(batch, seed, epoch, prepared.idx)
