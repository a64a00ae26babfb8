"""A policy's pixel operations on float32 CPU images in C (native/policy.c), one call per batch or
piece: the CPU form of AutoAugment's, RandAugment's, TrivialAugmentWide's and TimmRandAugment's pixel part
(ops.policies' PolicySteps of pixel kind; reached through kernels.pixel_forms).

Why: the twin (PolicySteps.apply / apply_owned) runs a gather, the operation's torch form and a
write-back per (step, operation) pair of a piece, a dozen or more small torch calls per piece of
8 images, about 36% of the CPU RandAugment pipeline's time. policy.c takes each sample through
all its steps while it is in the cache, with the twin's float32 arithmetic in its order, so the
same bits except Contrast's image mean (summed in float64 there, in torch's float32 order by the
twin; tests/test_policy_cpu.py states the tolerance). The call releases the GIL, so the Engine's
threads run their pieces at once. Measured once on one thread (8 224x224 images, RandAugment(2,
9), 14 of 16 (step, sample) pairs doing something): 1.9 ms for the form, 1.1 of it the C call
and the rest PolicySteps.program's sampling, against 7.3 ms for the twin's apply_owned.

CODES, the operations' numbers, is the contract of every fast form of a policy (the Triton
kernel, kernels.triton.policy, takes it from here: this module imports no Triton).
"""

from __future__ import annotations

import ctypes as C

import numpy as np
import torch

from ... import native

__all__ = ["CODES", "policy_library", "policy_steps_cpu"]

# the operation codes (0: the sample does nothing at that step)
CODES = {"Brightness": 1, "Color": 2, "Contrast": 3, "Sharpness": 4, "Posterize": 5, "Solarize": 6,
         "AutoContrast": 7, "Equalize": 8, "Invert": 9, "SolarizeAdd": 10}

# pp_policy_steps(src, dst, codes int32 [S, N], values float32 [S, N], geo int64 [10])
_SIGNATURES = {"pp_policy_steps": (C.c_int64, [C.c_void_p] * 5)}


def policy_library() -> C.CDLL | None:
    """policy.c's library (loaded once per process), or None where it was not built (after
    native's one-line notice), with PIXELPIPE_NATIVE=0 or inside native.disabled(): the policy's
    torch forms run then."""
    if not native.enabled():
        return None
    return native.shared("policy.c", "a policy's pixel operations run as torch calls per operation on the CPU",
                         C.CDLL, _SIGNATURES)


def policy_steps_cpu(x: torch.Tensor, codes: np.ndarray, values: np.ndarray, owned: bool) -> torch.Tensor:
    """x (float32 [N, C, H, W] on the CPU, C 1 or 3, values in [0, 1], any strides) through S
    steps: at step s sample i takes operation codes[s, i] (CODES; 0 none) with its number
    values[s, i] (the factor of Brightness, Color, Contrast and Sharpness; the mask of
    Posterize's levels; Solarize's threshold in levels; SolarizeAdd's addend; unused
    otherwise), made float32 as the twin makes them. owned: x may be overwritten (the result is x where its samples' planes are
    contiguous); else, and for other layouts, the result is a new contiguous tensor. x itself
    when no sample does anything. Needs policy_library() (not None)."""
    if x.dim() != 4 or x.device.type != "cpu" or x.dtype != torch.float32 or x.shape[1] not in (1, 3):
        raise ValueError(f"policy_steps_cpu takes float32 CPU images [N, C, H, W] of 1 or 3 channels, got "
                         f"{x.dtype} {tuple(x.shape)} on {x.device}")
    n, c, h, w = x.shape
    if n == 0 or h * w == 0:
        return x
    codes = np.ascontiguousarray(np.asarray(codes).reshape(-1, n), dtype=np.int32)
    values = np.ascontiguousarray(np.asarray(values, dtype=np.float64).reshape(codes.shape), dtype=np.float32)
    if codes.size and (codes.min() < 0 or codes.max() > max(CODES.values())):
        raise ValueError(f"operation codes must lie in 0..{max(CODES.values())}, got {codes.min()}..{codes.max()}")
    if not codes.any():
        return x
    lib = policy_library()
    assert lib is not None, "policy_steps_cpu needs policy.c built and native code on"
    in_place = owned and x[0].is_contiguous() and (n == 1 or x.stride(0) >= c * h * w)
    out = x if in_place else torch.empty((n, c, h, w), dtype=torch.float32)
    geo = np.array([n, c, h, w, codes.shape[0], *x.stride(), out.stride(0)], dtype=np.int64)
    if lib.pp_policy_steps(x.data_ptr(), out.data_ptr(), native.address(codes), native.address(values),
                           native.address(geo)) != 0:
        raise MemoryError(f"policy.c could not allocate its scratch for {h}x{w} images")
    return out
