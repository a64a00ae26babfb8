"""Ops that mix the samples of a batch, as batch ops: MixUp and CutMix.

They run last, on the finished batch dict ("image" and the labels and targets that came with
it), and turn integer labels into soft targets. Mixing is within a batch by nature, so not
everything can be independent of the batch. What is:

- whether a sample is mixed, its weight lambda (and CutMix's rectangle): functions of (seed,
  epoch, sample index, op position), the same in any batch;
- its partner: the sample after it in an order of the batch drawn from the same per-sample
  draws (a random key per sample, ties broken by the index), cyclically. The partner depends
  on which samples share the batch, not on their order: a batch given in another order gives
  the same rows, reordered. In another batch a sample gets another partner.

Rows whose "valid" entry is False (a Pipeline's padding) are neither mixed nor partners.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..data.random import Draws
from ..data.transfer import to_device
from .checks import check_prob
from .kinds import BatchOp, Op, Params

__all__ = ["CutMix", "MixUp", "beta_np"]

_TRIES = 8  # Marsaglia-Tsang acceptance is over 95% per try: 8 tries fail once in 1e10 draws
_BETA_DRAWS = 2 * (3 * _TRIES + 1)


def _gamma_np(u: np.ndarray, shape: float) -> np.ndarray:
    """Gamma(shape, 1) variates [N] from uniforms u [N, 3 * _TRIES + 1] (Marsaglia and Tsang's
    method, with the U ** (1 / shape) boost below shape 1): a fixed number of tries, so that
    every sample uses the same draws."""
    u = u.astype(np.float64) + 2.0**-25  # (0, 1): the draws are multiples of 2**-24 from 0
    boost = shape < 1.0
    a = shape + 1.0 if boost else shape
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    t = _TRIES
    z = np.sqrt(-2.0 * np.log(u[:, :t])) * np.cos(2.0 * math.pi * u[:, t:2 * t])
    v = (1.0 + c * z) ** 3
    safe = np.where(v > 0, v, 1.0)
    ok = (v > 0) & (np.log(u[:, 2 * t:3 * t]) < 0.5 * z * z + d - d * safe + d * np.log(safe))
    first = ok.argmax(1)
    g = d * safe[np.arange(len(u)), first]
    g = np.where(ok.any(1), g, d)
    if boost:
        g = g * u[:, 3 * t] ** (1.0 / shape)
    return g


def beta_np(draws: Draws, first: int, alpha: float) -> np.ndarray:
    """float64 [N]: Beta(alpha, alpha) per sample, from draws first .. first + _BETA_DRAWS - 1
    (the ratio of two Gamma(alpha) variates)."""
    n = 3 * _TRIES + 1
    u = draws.uniforms_np(range(first, first + 2 * n))
    g1, g2 = _gamma_np(u[:, :n], alpha), _gamma_np(u[:, n:], alpha)
    total = g1 + g2
    return np.where(total > 0, g1 / np.where(total > 0, total, 1.0), 0.5)


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    return alpha


class _Mix(BatchOp):
    """What MixUp and CutMix share: the draws, the pairing and the soft labels."""

    def __init__(self, alpha: float, num_classes: int | None, p: float, label_key: str,
                 label_smoothing: float) -> None:
        self.alpha = _check_alpha(alpha)
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < 1):
            raise ValueError(f"num_classes must be a whole number >= 1, got {num_classes!r}")
        self.num_classes = num_classes
        self.p = check_prob("p", p)
        if not isinstance(label_key, str):
            raise ValueError(f"label_key must be a string, got {label_key!r}")
        self.label_key = label_key
        self.label_smoothing = float(label_smoothing)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")

    draws = 2 + _BETA_DRAWS

    def eval_form(self, style: str) -> list[Op]:
        return []

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        lam = beta_np(draws, 2, self.alpha)
        on = draws.bernoulli_np(0, self.p)
        return {"on": on, "lam": np.where(on, lam, 1.0), "key": draws.uniform_np(1), "sizes": sizes,
                "index": draws.indices.cpu().numpy()}

    def _refuse(self, batch: dict[str, Any], keys: tuple[str, ...]) -> None:
        for k in keys:
            if batch.get(k) is not None:
                raise ValueError(f"{type(self).__name__} cannot mix {k!r}: {self._why(k)}; drop them from the "
                                 "batch or mix the images only")

    def _why(self, key: str) -> str:
        return "they do not blend"

    def partners(self, batch: dict[str, Any], params: Params) -> tuple[np.ndarray, np.ndarray]:
        """(partner [N] row of each row, mixed bool [N]): valid rows cycled in the order of their
        keys (ties broken by the sample index); invalid rows keep themselves, unmixed."""
        n = len(params["key"])
        valid = batch.get("valid")
        valid = np.ones(n, dtype=bool) if valid is None else np.asarray(torch.as_tensor(valid).cpu(), dtype=bool)
        rows = np.flatnonzero(valid)
        order = rows[np.lexsort((params["index"][rows], params["key"][rows]))]
        partner = np.arange(n)
        partner[order] = np.roll(order, -1)
        return partner, params["on"] & valid & (partner != np.arange(n))

    def soft_labels(self, batch: dict[str, Any], partner: np.ndarray, lam: np.ndarray, device: Any) -> torch.Tensor:
        """lam * t + (1 - lam) * t[partner], t the one-hot (smoothed) labels, float32 [N, K]."""
        key = self.label_key
        if key not in batch:
            raise KeyError(f"{type(self).__name__} needs the labels under {key!r} in the batch (a Pipeline's "
                           f"'label'; with Compose pass {key}=...); the batch has {sorted(batch)}")
        labels = torch.as_tensor(batch[key])
        n = len(partner)
        if labels.is_floating_point():
            if labels.dim() != 2 or labels.shape[0] != n or (self.num_classes not in (None, labels.shape[1])):
                raise ValueError(f"soft labels {key!r} must be float [{n}, num_classes], got {tuple(labels.shape)}")
            t = labels.to(torch.float32)
        else:
            if self.num_classes is None:
                raise ValueError(f"{type(self).__name__} needs num_classes to turn integer labels into soft targets")
            if labels.dim() != 1 or labels.shape[0] != n:
                raise ValueError(f"labels {key!r} must be integers [{n}] (one class per sample), got "
                                 f"{tuple(labels.shape)}")
            own = labels.cpu().numpy()
            used = np.unique(np.concatenate([np.flatnonzero(lam < 1), partner[lam < 1]]))
            bad = used[(own[used] < 0) | (own[used] >= self.num_classes)]
            if len(bad):
                raise ValueError(f"label {int(own[bad[0]])} of row {int(bad[0])} is outside [0, {self.num_classes}) "
                                 f"(num_classes={self.num_classes}); -1 marks a sample without a label")
            k = self.num_classes
            t = torch.zeros(n, k, dtype=torch.float32, device=labels.device)
            hit = to_device((own >= 0) & (own < k), labels.device)
            t[hit, labels[hit]] = 1.0
            if self.label_smoothing:
                t = t * (1.0 - self.label_smoothing) + self.label_smoothing / k
        t = t.to(device)
        w = to_device(lam.astype(np.float32), device).view(-1, 1)
        return w * t + (1.0 - w) * t[to_device(partner, device)]


def _cast(mixed: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.is_floating_point():
        return mixed.to(like.dtype)
    info = torch.iinfo(like.dtype)
    return mixed.round_().clamp_(info.min, info.max).to(like.dtype)


class MixUp(_Mix):
    """Blend each image with its partner: lam * x + (1 - lam) * x_partner, and its label the
    same way (Zhang et al., "mixup"; torchvision's and timm's MixUp), lam ~ Beta(alpha, alpha)
    drawn per sample, with probability p per sample.

    Args:
        alpha: the Beta distribution's parameter (DeiT: 0.8).
        num_classes: the number of classes, to turn integer labels into one-hot targets.
        p: probability that a sample is mixed (an unmixed sample keeps its image, and its
            label becomes one-hot).
        label_key: where the labels are in the batch: a Pipeline's "label", int64 [N]; or float
            [N, num_classes] soft targets (e.g. from an earlier MixUp or CutMix), mixed as they are.
        label_smoothing: targets are 1 - s + s / K for the class and s / K elsewhere (timm's).

    The labels come back as float32 [N, num_classes] under label_key. The image keeps its dtype
    (uint8 images are rounded). Boxes, keypoints and masks cannot be blended: a batch holding
    them is refused. See the module docstring for what depends on the batch: lam and whether a
    sample is mixed do not, its partner does.

    Example: ``MixUp(0.8, num_classes=1000)`` last in a Compose or a Pipeline's transforms.
    """

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, p: float = 1.0,
                 label_key: str = "label", label_smoothing: float = 0.0) -> None:
        super().__init__(alpha, num_classes, p, label_key, label_smoothing)

    def apply(self, batch: dict[str, Any], params: Params, draws: Draws) -> dict[str, Any]:
        self._refuse(batch, ("boxes", "keypoints", "masks"))
        x = batch["image"]
        partner, mixed = self.partners(batch, params)
        lam = np.where(mixed, params["lam"], 1.0)
        soft = self.soft_labels(batch, partner, lam, x.device)
        w = to_device(lam.astype(np.float32), x.device).view(-1, *([1] * (x.dim() - 1)))
        xf = x.to(torch.float32)
        out = _cast(w * xf + (1.0 - w) * xf[to_device(partner, x.device)], x)
        return {**batch, "image": out, self.label_key: soft}


class CutMix(_Mix):
    """Paste a rectangle of its partner into each image, and mix the labels by the area it
    covers (Yun et al., "CutMix"; torchvision's CutMix), with probability p per sample.

    Per sample, as torchvision: lam ~ Beta(alpha, alpha); a centre (cx, cy) uniform among the
    pixels; half sides int(0.5 sqrt(1 - lam) W) and int(0.5 sqrt(1 - lam) H); the rectangle
    clipped to the image; the label weight is 1 - (its area) / (H W).

    Args:
        alpha: the Beta distribution's parameter (DeiT: 1.0).
        num_classes, p, label_key, label_smoothing: as MixUp's.

    Masks (label images) take their partner's rectangle too, pixel for pixel. Boxes and
    keypoints are refused: a box pasted into another image would need its class, which the
    targets do not carry (per-box classes live in the user's own keys). The image keeps its
    dtype and layout (NCHW or NHWC). See the module docstring for what depends on the batch:
    lam, the rectangle and whether a sample is mixed do not, its partner does.

    Example: ``CutMix(1.0, num_classes=1000)``.
    """

    draws = 2 + _BETA_DRAWS + 2

    def __init__(self, alpha: float = 1.0, num_classes: int | None = None, p: float = 1.0,
                 label_key: str = "label", label_smoothing: float = 0.0) -> None:
        super().__init__(alpha, num_classes, p, label_key, label_smoothing)

    def _why(self, key: str) -> str:
        return "a box or keypoint moved into another image would need its class, which the targets do not carry"

    def sample(self, draws: Draws, sizes: np.ndarray) -> Params:
        params = super().sample(draws, sizes)
        h, w = sizes[:, 0], sizes[:, 1]
        cy = np.floor(draws.uniform_np(2 + _BETA_DRAWS) * h)
        cx = np.floor(draws.uniform_np(3 + _BETA_DRAWS) * w)
        r = 0.5 * np.sqrt(1.0 - params["lam"])
        half_h, half_w = np.floor(r * h), np.floor(r * w)
        params["box"] = np.stack([np.maximum(cy - half_h, 0), np.maximum(cx - half_w, 0),
                                  np.minimum(cy + half_h, h), np.minimum(cx + half_w, w)], 1)  # y0, x0, y1, x1
        area = (params["box"][:, 2] - params["box"][:, 0]) * (params["box"][:, 3] - params["box"][:, 1])
        params["lam"] = 1.0 - area / (h * w)
        return params

    def apply(self, batch: dict[str, Any], params: Params, draws: Draws) -> dict[str, Any]:
        self._refuse(batch, ("boxes", "keypoints"))
        x = batch["image"]
        partner, mixed = self.partners(batch, params)
        lam = np.where(mixed, params["lam"], 1.0)
        box = np.where(mixed[:, None], params["box"], 0.0)
        h, w = (int(v) for v in params["sizes"][0]) if len(lam) else (0, 0)
        out = _paste(x, partner, box, (h, w))
        result = {**batch, "image": out, self.label_key: self.soft_labels(batch, partner, lam, x.device)}
        masks = batch.get("masks")
        if masks is not None:
            result["masks"] = _paste(masks, partner, box, (h, w))
        return result


def _paste(x: torch.Tensor, partner: np.ndarray, box: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    """x with each row's box (y0, x0, y1, x1) taken from its partner's row. x: [N, H, W],
    [N, C, H, W] or [N, H, W, C]; the spatial dims are those of size (h, w)."""
    h, w = size
    if x.shape[0] == 0:
        return x
    if x.dim() == 3 or (x.dim() == 4 and tuple(x.shape[1:3]) == (h, w) and tuple(x.shape[2:4]) != (h, w)):
        rows_dim, cols_dim = 1, 2  # [N, H, W] or NHWC
    else:
        rows_dim, cols_dim = x.dim() - 2, x.dim() - 1
    dev = x.device
    b = to_device(box.astype(np.int64), dev)
    rows = torch.arange(h, device=dev).view(1, h)
    cols = torch.arange(w, device=dev).view(1, w)
    inside = (((rows >= b[:, 0:1]) & (rows < b[:, 2:3]))[:, :, None]
              & ((cols >= b[:, 1:2]) & (cols < b[:, 3:4]))[:, None, :])  # [N, H, W]
    shape = [x.shape[0]] + [1] * (x.dim() - 1)
    shape[rows_dim], shape[cols_dim] = h, w
    return torch.where(inside.view(shape), x[to_device(partner, dev)], x)
