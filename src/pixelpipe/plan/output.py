"""What a Compose outputs (`Output`), and what each stage's pointwise pass writes (`Form`).

The output form (dtype, layout, channels) is applied last, after every op. A stage's kernel
writes the final tensor when it is the last stage and no pixel op follows its warp; otherwise
it writes the intermediate every pixel op and later stage reads: float32 NCHW in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["DTYPES", "Form", "LAYOUTS", "Output", "finish_tensor"]

DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32)
LAYOUTS = ("NCHW", "NHWC")


@dataclass(frozen=True)
class Output:
    """The output form of a Compose.

    dtype: torch.uint8, float16, bfloat16 or float32 (floats in [0, 1], or normalised);
    layout: "NCHW" or "NHWC"; channels: 3 (grey images replicated) or 1 (the grey of colour
    images); antialias: antialias every shrinking warp; mask_fill: the label masks take
    where a warp reads beyond a "constant" border (e.g. 0, or an ignore index such as 255);
    exact_resize: decode JPEGs at full size on the CPU, never at a reduced DCT scale (see
    Compose)."""

    dtype: torch.dtype = torch.float32
    layout: str = "NCHW"
    channels: int = 3
    antialias: bool = True
    mask_fill: int = 0
    exact_resize: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {self.layout!r}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {self.channels}")
        object.__setattr__(self, "antialias", bool(self.antialias))
        if not isinstance(self.exact_resize, bool):
            raise ValueError(f"exact_resize must be True or False, got {self.exact_resize!r}")
        if isinstance(self.mask_fill, bool) or not isinstance(self.mask_fill, int):
            raise ValueError(f"mask_fill must be an int (a label), got {self.mask_fill!r}")


@dataclass(frozen=True)
class Form:
    """What one stage's pointwise pass writes: dtype, layout, channels, and the normalisation
    it applies (mean and std in 0..1 units, or None)."""

    dtype: torch.dtype
    layout: str
    channels: int
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None


INTERMEDIATE = Form(torch.float32, "NCHW", 3)  # between stages and for pixel ops


def finish_tensor(x: torch.Tensor, output: Output) -> torch.Tensor:
    """The output form of float32 NCHW values (in [0, 1], or normalised) that pixel ops made:
    uint8 rounds clamp(x, 0, 1) * 255 to nearest, floats are cast; NHWC permutes."""
    if output.dtype == torch.uint8:
        x = torch.round(x.clamp(0.0, 1.0) * 255.0).to(torch.uint8)
    elif x.dtype != output.dtype:
        x = x.to(output.dtype)
    if output.layout == "NHWC":
        x = x.permute(0, 2, 3, 1).contiguous()
    return x
