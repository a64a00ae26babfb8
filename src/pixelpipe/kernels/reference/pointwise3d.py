"""The reference pointwise program of volumes in plain torch: the intensity steps, in order, on
the warped float32 volumes [N, C, D, H, W], then the cast.

What each step computes (x the values entering it, per sample n):

- "affine_clip": clamp(a x + b, lo, hi); a chain of them folds into one (`fold_steps`);
- "normalize": (x - mean) / std over the sample's voxels and channels (population std; a std
  below eps counts as 1); fixed "sub" / "div" replace the statistics where not NaN; with
  nonzero, statistics over x != 0 and zeros stay 0;
- "gamma": ((x - min) / (max - min)) ** gamma * (max - min) + min, the sample's min and max;
- "contrast": mean + factor (x - mean);
- "noise": x + mean + sigma z, z = Draws.normal_field per voxel;
- "bias": x * exp(sum_t c_t z^i y^j x^k), (z, y, x) the output voxel centres in [-1, 1].

The statistics are those of the volume as it enters the step, as each implementation
computes them in float32 (sums in float64 here).
"""

from __future__ import annotations

import numpy as np
import torch

from ...ops.volume_intensity import bias_terms
from ...ops.volume_kinds import Step

__all__ = ["fold_steps", "pointwise3d_reference", "run_steps"]


def _fold_pair(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """clamp(a2 clamp(a1 x + b1, l1, h1) + b2, l2, h2) as one clamp(a x + b, lo, hi): the
    inner clamp's bounds map through the second affine map (swapped where a2 < 0), then the
    two intervals nest: clamp(clamp(w, L, H), l2, h2) = clamp(w, clamp(L, l2, h2), clamp(H, l2, h2))."""
    a1, b1, l1, h1 = first["a"], first["b"], first["lo"], first["hi"]
    a2, b2, l2, h2 = second["a"], second["b"], second["lo"], second["hi"]
    with np.errstate(invalid="ignore"):  # inf bounds map to inf of the right sign; a2 = 0 maps all to b2
        e1 = np.where(a2 == 0, b2, a2 * l1 + b2)
        e2 = np.where(a2 == 0, b2, a2 * h1 + b2)
    low, high = np.where(a2 >= 0, e1, e2), np.where(a2 >= 0, e2, e1)
    return {"a": a1 * a2, "b": a2 * b1 + b2, "lo": np.clip(low, l2, h2), "hi": np.clip(high, l2, h2)}


def fold_steps(steps: list[Step]) -> list[Step]:
    """The program with each run of consecutive affine_clip steps folded into one."""
    out: list[Step] = []
    for s in steps:
        if s.kind == "affine_clip" and out and out[-1].kind == "affine_clip":
            out[-1] = Step("affine_clip", _fold_pair(out[-1].params, s.params))
        else:
            out.append(s)
    return out


def _col(v: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).to(x.device).view(-1, 1, 1, 1, 1)


def _stats(x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample mean and population std (float64 sums), over `mask` where given."""
    flat = x.reshape(len(x), -1).to(torch.float64)
    if mask is None:
        return flat.mean(1), flat.std(1, unbiased=False)
    m = mask.reshape(len(x), -1).to(torch.float64)
    count = m.sum(1).clamp_min(1.0)
    mean = (flat * m).sum(1) / count
    var = ((flat - mean[:, None]) ** 2 * m).sum(1) / count
    return mean, var.sqrt()


def _normalize(x: torch.Tensor, p: dict[str, np.ndarray]) -> torch.Tensor:
    nonzero = bool(p["nonzero"][0]) if len(p["nonzero"]) else False
    mask = x != 0 if nonzero else None
    mean, std = _stats(x, mask)
    sub = torch.from_numpy(p["sub"]).to(x.device)
    div = torch.from_numpy(p["div"]).to(x.device)
    eps = torch.from_numpy(p["eps"]).to(x.device)
    sub = torch.where(torch.isnan(sub), mean, sub)
    div = torch.where(torch.isnan(div), torch.where(std < eps, torch.ones_like(std), std), div)
    scale, shift = (1.0 / div).to(torch.float32), (-sub / div).to(torch.float32)
    y = x * scale.view(-1, 1, 1, 1, 1) + shift.view(-1, 1, 1, 1, 1)
    return torch.where(mask, y, x) if mask is not None else y


def _bias(x: torch.Tensor, coefs: np.ndarray, order: int) -> torch.Tensor:
    n, _, D, H, W = x.shape
    axes = [(torch.arange(s, dtype=torch.float64, device=x.device) + 0.5) / s * 2 - 1 for s in (D, H, W)]
    z, y, w = torch.meshgrid(*axes, indexing="ij")
    c = torch.from_numpy(coefs).to(x.device)
    log = torch.zeros(n, D, H, W, dtype=torch.float64, device=x.device)
    for t, (i, j, k) in enumerate(bias_terms(order)):
        log += c[:, t].view(-1, 1, 1, 1) * (z**i * y**j * w**k)
    return x * torch.exp(log).to(torch.float32).unsqueeze(1)


def run_steps(x: torch.Tensor, steps: list[Step]) -> torch.Tensor:
    """The steps on float32 [N, C, D, H, W] (a new tensor; x is left as it was)."""
    for s in steps:
        p = s.params
        if s.kind == "affine_clip":
            lo, hi = p["lo"], p["hi"]
            x = x * _col(p["a"], x) + _col(p["b"], x)
            if np.isfinite(lo).any() or np.isfinite(hi).any():
                x = torch.maximum(torch.minimum(x, _col(hi, x)), _col(lo, x))
        elif s.kind == "normalize":
            x = _normalize(x, p)
        elif s.kind == "gamma":
            flat = x.reshape(len(x), -1)
            mn, mx = flat.amin(1).view(-1, 1, 1, 1, 1), flat.amax(1).view(-1, 1, 1, 1, 1)
            rng = mx - mn
            g = _col(p["gamma"], x)
            y = ((x - mn) / (rng + 1e-7)).clamp_min(0.0).pow(g) * rng + mn
            x = torch.where(g == 1.0, x, y)
        elif s.kind == "contrast":
            mean = _stats(x)[0].to(torch.float32).view(-1, 1, 1, 1, 1)
            f = _col(p["factor"], x)
            x = torch.where(f == 1.0, x, mean + f * (x - mean))  # a sample left out keeps its values exactly
        elif s.kind == "noise":
            assert s.draws is not None
            z = s.draws.normal_field(2, x.shape[1:], x.device)
            x = x + _col(p["mean"], x) + _col(p["sigma"], x) * z
        elif s.kind == "bias":
            order = int(p["order"][0]) if len(p["order"]) else 0
            x = _bias(x, p["coefs"], order)
        else:
            raise ValueError(f"unknown step kind {s.kind!r}")
    return x


def pointwise3d_reference(x: torch.Tensor, steps: list[Step], dtype: torch.dtype) -> torch.Tensor:
    """The folded program on the warped volumes, cast to `dtype`."""
    out = run_steps(x, fold_steps(steps))
    return out if out.dtype == dtype else out.to(dtype)



def split_program(steps: list[Step]) -> tuple[Step | None, Step | None, Step | None, list[Step]]:
    """The folded program as the fused kernel runs it: (first affine_clip, normalize, affine_clip
    after it, the rest). The kernel applies the first three in its epilogue (a normalize's
    statistics from a first pass over the same warp); the rest runs as `run_steps` after it.
    Any of the three may be None."""
    prog = fold_steps(steps)
    first = prog.pop(0) if prog and prog[0].kind == "affine_clip" else None
    norm = prog.pop(0) if prog and prog[0].kind == "normalize" else None
    after = prog.pop(0) if norm is not None and prog and prog[0].kind == "affine_clip" else None
    return first, norm, after, prog


def epilogue_rows(first: Step | None, after: Step | None, n: int) -> np.ndarray:
    """float32 [N, 8]: (a, b, lo, hi) of the first affine_clip then of the one after the
    normalize (identity where None), the fused kernel's per-sample epilogue parameters."""
    rows = np.tile(np.array([1.0, 0.0, -np.inf, np.inf] * 2), (n, 1))
    for col, s in ((0, first), (4, after)):
        if s is not None:
            rows[:, col:col + 4] = np.stack([s.params[k] for k in ("a", "b", "lo", "hi")], 1)
    return rows.astype(np.float32)


def norm_from_sums(sums: torch.Tensor, norm: Step) -> torch.Tensor:
    """float32 [N, 2] (scale, shift) of a normalize step from per-sample (sum, sum of squares,
    count) float64 [N, 3] of the values entering it: on the device, no host round trip."""
    p = norm.params
    dev = sums.device
    count = sums[:, 2].clamp_min(1.0)
    mean = sums[:, 0] / count
    std = (sums[:, 1] / count - mean * mean).clamp_min(0.0).sqrt()
    sub = torch.from_numpy(p["sub"]).to(dev)
    div = torch.from_numpy(p["div"]).to(dev)
    eps = torch.from_numpy(p["eps"]).to(dev)
    sub = torch.where(torch.isnan(sub), mean, sub)
    div = torch.where(torch.isnan(div), torch.where(std < eps, torch.ones_like(std), std), div)
    return torch.stack([1.0 / div, -sub / div], 1).to(torch.float32)


def fused_epilogue_reference(x: torch.Tensor, steps: list[Step]) -> torch.Tensor:
    """The fused kernel's epilogue written in torch (its twin): the split program's first three
    steps as the kernel applies them, statistics from the (sum, sum of squares, count) form,
    then the rest. Agrees with run_steps (tests/test_volumes_kernels.py)."""
    first, norm, after, rest = split_program(steps)
    n = len(x)
    rows = torch.from_numpy(epilogue_rows(first, after, n)).to(x.device).view(n, 8, 1, 1, 1, 1)
    y = torch.maximum(torch.minimum(x * rows[:, 0] + rows[:, 1], rows[:, 3]), rows[:, 2])
    if norm is not None:
        nonzero = bool(norm.params["nonzero"][0])
        m = (y != 0) if nonzero else torch.ones_like(y, dtype=torch.bool)
        flat, mf = y.reshape(n, -1).to(torch.float64), m.reshape(n, -1).to(torch.float64)
        sums = torch.stack([(flat * mf).sum(1), (flat * flat * mf).sum(1), mf.sum(1)], 1)
        st = norm_from_sums(sums, norm).view(n, 2, 1, 1, 1, 1)
        z = y * st[:, 0] + st[:, 1]
        y = torch.where(m, z, y)
    y = torch.maximum(torch.minimum(y * rows[:, 4] + rows[:, 5], rows[:, 7]), rows[:, 6])
    return run_steps(y, rest)
