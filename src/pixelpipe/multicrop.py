"""FiveCrop and TenCrop for evaluation: several fixed views of each image, stacked.

They are not ops: an op maps each sample to one output (the plan holds one matrix per sample,
and targets, indices and batch ops follow samples one to one), where a five-crop maps each
image to five. So each view is its own Compose ([*before, Crop(size, anchor), *after]: one
warp per view, the crop folded with the ops around it, each view decoding only its window from
encoded images), and the views are stacked along a new dimension 1: [N, 5, C, h, w] for NCHW
([N, 5, h, w, C] for NHWC), the layout torchvision users get from
``torch.stack(FiveCrop(size)(image))`` per image, batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .compose import Compose
from .ops.crop import Crop
from .ops.geometry import RandomFlip
from .ops.kinds import Op

__all__ = ["FiveCrop", "TenCrop"]

# torchvision's five_crop order: top-left, top-right, bottom-left, bottom-right, centre
ANCHORS = ((0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (0.5, 0.5))


class FiveCrop:
    """The four corner crops and the centre crop of each image (torchvision's FiveCrop),
    stacked: [N, 5, C, h, w].

    Args:
        size: the crops' (height, width); one int is a square.
        before: deterministic ops applied before cropping (a Resize(256), say).
        after: ops applied to each crop (Normalize, say).
        **output: the Compose's output form (dtype, layout, channels, antialias).

    Corners sit at the image's corners, the centre crop at round((H - h) / 2), round((W - w) /
    2) as torchvision's center_crop (tested, 0 levels apart). An image smaller than a crop is
    padded by the stage's border (black), where torchvision raises. Called like a Compose:
    ``FiveCrop(224, before=[Resize(256)])(images)``; images only (no targets).
    """

    def __init__(self, size: int | tuple[int, int], before: Sequence[Op] = (), after: Sequence[Op] = (),
                 **output: Any) -> None:
        self.size = size
        self.views = [Compose([*before, Crop(size, anchor), *after], **output) for anchor in ANCHORS]

    def __call__(self, images: Any, seed: int = 0, epoch: int = 0, indices: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.stack([view(images, seed, epoch, indices, **kwargs) for view in self.views], 1)

    def __len__(self) -> int:
        return len(self.views)


class TenCrop(FiveCrop):
    """FiveCrop's five crops, then the five crops of the image flipped left-right (top-bottom
    with vertical_flip=True), as torchvision's TenCrop: [N, 10, C, h, w]. The flip is a matrix
    folded with the crop: each view is still one warp."""

    def __init__(self, size: int | tuple[int, int], vertical_flip: bool = False, before: Sequence[Op] = (),
                 after: Sequence[Op] = (), **output: Any) -> None:
        super().__init__(size, before, after, **output)
        flip = RandomFlip(0.0, 1.0) if vertical_flip else RandomFlip(1.0, 0.0)
        self.views += [Compose([*before, flip, Crop(size, anchor), *after], **output) for anchor in ANCHORS]
