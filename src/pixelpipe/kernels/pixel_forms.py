"""Fast forms of pixel ops on a device, which the engine runs in place of an op's apply().

Ops never import kernels/ (the layers: tests/test_layers.py), so a pixel op cannot launch a
Triton kernel itself. `pixel_form(op, x)` gives the engine (engine.pixels.run_pixels) a
function computing what op.apply computes, for ops that have one on x's device; everywhere
else, and for an op nested in another (a structure's choice), op.apply runs: the twin, which
the tests hold each form to.

- GaussianBlur on CUDA, float32: two Triton launches (kernels.triton.blur) instead of a
  product and a sum per tap and axis.
  As the stage's last pixel op, where the output form needs a pass anyway (Normalize after
  it, or another dtype or layout): `finishing_form`, whose last launch reads every sample and
  writes the output, normalised and cast (kernels.triton.blur.blur_rows_into).
- GaussianBlur on the CPU, float32: one C call (kernels.cpu.blur, native/blur.c) where it was
  built and native code is on (not with PIXELPIPE_NATIVE=0 or inside native.disabled()).
- A policy's pixel operations (AutoAugment, RandAugment, TrivialAugmentWide, TimmRandAugment:
  ops.policies' PolicySteps of pixel kind) on CUDA, float32, 1 or 3 channels: a few Triton
  launches a step (kernels.triton.policy) instead of a gather, the operation's torch form and
  a write-back per (step, operation) pair.
- The same on the CPU, float32, 1 or 3 channels: one C call for all the steps of a batch or
  piece (kernels.cpu.policy, native/policy.c), each sample through its steps in the cache, where
  it was built and native code is on. Triton is never imported for it.
- RandomErasing(value="random") on CUDA: one Triton launch hashes and writes every rectangle's
  noise (kernels.triton.erasing) instead of about 60 torch launches (erasing.noise_on_device).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..ops.blur import GaussianBlur, gaussian_kernels
from ..ops.erasing import RandomErasing, erased_rows, noise_output, noise_table
from ..ops.kinds import Op, Params
from ..ops.policies import PolicySteps
from .cpu.blur import blur_library, blur_rows_cpu
from .cpu.policy import CODES, policy_library, policy_steps_cpu

__all__ = ["FinishingForm", "PixelForm", "erasing_noise_form", "finishing_form", "gaussian_blur_cpu_form",
           "gaussian_blur_finish", "gaussian_blur_form", "pixel_form",
           "policy_cpu_form", "policy_form"]

# (x, the op's params, owned, the op's draws) -> the op's result; owned: x may be overwritten
PixelForm = Callable[[torch.Tensor, Params, bool, Draws], torch.Tensor]
# (x, the op's params, out, Normalize's scale and bias or None) -> None: the op's result
# written into out (the stage's output rows, any float dtype and strides), normalised on the way
FinishingForm = Callable[[torch.Tensor, Params, torch.Tensor, "torch.Tensor | None", "torch.Tensor | None"], None]


def pixel_form(op: Op, x: torch.Tensor) -> PixelForm | None:
    """The fast form of pixel op `op` for x (float [N, C, H, W]), or None: run op.apply."""
    if x.dtype != torch.float32:
        return None
    if isinstance(op, PolicySteps) and _policy_form_takes(op, x):
        if x.device.type == "cuda" and _triton():
            return lambda x, params, owned, draws: policy_form(op, x, params, owned, draws)
        if x.device.type == "cpu" and policy_library() is not None:
            return lambda x, params, owned, draws: policy_cpu_form(op, x, params, owned, draws)
        return None
    if (isinstance(op, RandomErasing) and type(op).apply is RandomErasing.apply
            and type(op).apply_owned is RandomErasing.apply_owned and op.value == "random"
            and x.device.type == "cuda" and x.dim() == 4 and _triton()):
        return lambda x, params, owned, draws: erasing_noise_form(op, x, params, owned, draws)
    if not _plain_blur(op):
        return None
    if x.device.type == "cuda" and _triton():
        return lambda x, params, owned, draws: gaussian_blur_form(op, x, params, owned)
    if x.device.type == "cpu" and x.dim() == 4 and blur_library() is not None:
        return lambda x, params, owned, draws: gaussian_blur_cpu_form(op, x, params, owned)
    return None


def finishing_form(op: Op, x: torch.Tensor) -> FinishingForm | None:
    """A form of `op` for x (float32 [N, C, H, W]) that writes the stage's output itself, with
    Normalize's scale and bias applied as it stores, or None: where op is the stage's last pixel
    op and the output needs a pass of its own, the engine runs this instead of the op's form
    and that pass. GaussianBlur on CUDA (kernels.triton.blur.blur_rows_into)."""
    if x.dtype != torch.float32 or x.device.type != "cuda" or x.dim() != 4 or not _plain_blur(op) or not _triton():
        return None
    return lambda x, params, out, scale, bias: gaussian_blur_finish(op, x, params, out, scale, bias)


def _plain_blur(op: Op) -> bool:
    """Whether op is a GaussianBlur whose apply() is GaussianBlur's (a subclass that changed it
    runs its own)."""
    return isinstance(op, GaussianBlur) and type(op).apply is GaussianBlur.apply


def _policy_form_takes(op: PolicySteps, x: torch.Tensor) -> bool:
    """Whether a policy form (Triton's or C's) runs op on x: a policy's pixel part on images of
    1 or 3 channels, every operation one with a code."""
    return (op.kind == "pixel" and x.dim() == 4 and x.shape[1] in (1, 3)
            and all(name in CODES for name in op.operation_names()))


def _policy_program(op: PolicySteps, x: torch.Tensor, params: Params, draws: Draws) -> tuple[np.ndarray, np.ndarray]:
    """(codes int32 [S, N], values float64 [S, N]) of the policy forms: each step's operation
    code (CODES, 0 none) and number per sample (PolicySteps.program)."""
    which, values = op.program(params, draws, x.shape[-2:])
    table = np.array([CODES[name] for name in op.operation_names()] + [0], dtype=np.int32)
    return table[which], values  # -1 (no operation) takes the last entry, 0


def policy_form(op: PolicySteps, x: torch.Tensor, params: Params, owned: bool, draws: Draws) -> torch.Tensor:
    """op.apply(x, params, draws) by the policy kernel (kernels.triton.policy; any device
    Triton runs on, its interpreter on CPU tensors): each step's operation and number per
    sample (PolicySteps.program), then the kernel's launches."""
    from .triton.policy import policy_steps

    return policy_steps(x, *_policy_program(op, x, params, draws), owned)


def policy_cpu_form(op: PolicySteps, x: torch.Tensor, params: Params, owned: bool, draws: Draws) -> torch.Tensor:
    """op.apply(x, params, draws) by policy.c (CPU float32 tensors; needs policy_library()), in
    one call for all the steps."""
    return policy_steps_cpu(x, *_policy_program(op, x, params, draws), owned)


def erasing_noise_form(op: RandomErasing, x: torch.Tensor, params: Params, owned: bool, draws: Draws) -> torch.Tensor:
    """RandomErasing(value="random").apply(x, params, draws) by the noise kernel
    (kernels.triton.erasing; any device Triton runs on): one launch for every rectangle's
    values, written into x when owned (and contiguous), else into a copy."""
    from .triton.erasing import noise_rectangles

    rows = erased_rows(params)
    if len(rows) == 0:
        return x
    out = noise_output(x, owned)
    table = noise_table(tuple(x.shape[1:]), rows, params["top"], params["left"], params["height"], params["width"],
                        draws, op.draws)
    return noise_rectangles(out, table)


def gaussian_blur_form(op: GaussianBlur, x: torch.Tensor, params: Params, owned: bool) -> torch.Tensor:
    """GaussianBlur.apply(x, params) by the Triton blur kernel (any device Triton runs on; its
    interpreter runs it on CPU tensors): the rows that blur, each with its sigma's kernels."""
    from .triton.blur import blur_rows

    return blur_rows(*_blur_arguments(op, x, params), owned)


def gaussian_blur_finish(op: GaussianBlur, x: torch.Tensor, params: Params, out: torch.Tensor,
                         scale: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    """GaussianBlur.apply(x, params), then x * scale + bias when given, written into `out` (any
    float dtype and strides) by the Triton blur kernel's finishing pass (any device Triton runs
    on)."""
    from .triton.blur import blur_rows_into

    x, rows, along_w, along_h = _blur_arguments(op, x, params)
    blur_rows_into(x, rows, along_w, along_h, out, scale, bias)


def gaussian_blur_cpu_form(op: GaussianBlur, x: torch.Tensor, params: Params, owned: bool) -> torch.Tensor:
    """GaussianBlur.apply(x, params) by blur.c (CPU float32 tensors; needs blur_library()),
    in one call."""
    return blur_rows_cpu(*_blur_arguments(op, x, params), owned)


def _blur_arguments(op: GaussianBlur, x: torch.Tensor, params: Params) -> tuple[Any, ...]:
    """(x, rows that blur, kernels along the rows, kernels along the columns) of the blur
    kernels' calls: each row's sigma's Gaussian, None for an axis of one tap."""
    rows = np.flatnonzero(params["on"])
    sigma = params["sigma"][rows]
    kh, kw = op.kernel_size
    along_w = gaussian_kernels(kw, sigma) if kw > 1 else None
    along_h = along_w if kh == kw else gaussian_kernels(kh, sigma) if kh > 1 else None  # square: one table
    return x, rows, along_w, along_h


@functools.cache
def _triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
