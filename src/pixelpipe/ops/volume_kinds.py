"""The two kinds of volume op, and what each is handed while a Compose3D plans.

A volume op never touches voxels. It *samples* per-sample parameters from a `Draws` (numpy
arrays, one row per sample, drawn for the whole batch at once) and states its contribution:

- `VolumeGeometryOp`: a forward 4x4 matrix per sample (input voxel coordinates -> output
  voxel coordinates) and the output size. Consecutive ones multiply; the volume is resampled
  once (trilinear), its label map with the same matrix (nearest).
- `VolumeIntensityOp`: one `Step` of the pointwise program run on the warped values (an
  affine map and clip, a normalisation with per-sample statistics, a gamma, noise, a bias
  field). Consecutive affine-and-clip steps fold into one.

Volume ops are not 2-D `Op`s: a `Compose` refuses them and a `Compose3D` refuses 2-D ops.

Coordinates are continuous and in array-axis order (axis 0, 1, 2 = D, H, W): voxel (i, j, k)
covers [i, i+1) x [j, j+1) x [k, k+1), its centre is (i + 0.5, j + 0.5, k + 0.5); matrices
act on column vectors (p0, p1, p2, 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.random import Draws
from ..data.volumes import VolumeBatch, VolumeHeaders

__all__ = ["STEP_KINDS", "Step", "VolumeGeometryOp", "VolumeIntensityOp", "VolumeOp", "VolumeState", "Params"]

Params = dict[str, np.ndarray]

# the pointwise program's step kinds (kernels.reference.pointwise3d says what each computes)
STEP_KINDS = ("affine_clip", "normalize", "gamma", "contrast", "noise", "bias")


@dataclass
class Step:
    """One step of the pointwise program: `kind` (one of STEP_KINDS) and its per-sample
    parameters (float64 numpy arrays with one row per sample). `draw` is the op's Draws for
    steps with per-voxel randomness (noise), None otherwise."""

    kind: str
    params: dict[str, np.ndarray]
    draws: Draws | None = None


@dataclass
class VolumeState:
    """What a volume op sees while planning: the batch as the ops before it left it.

    Attributes:
        sizes: float64 [N, 3], the current (D, H, W).
        spacing: float64 [N, 3], the current voxel sizes in mm.
        affine: float64 [N, 4, 4], the current voxel-index-to-world matrices.
        matrix: float64 [N, 4, 4], the forward matrix from the input's coordinates to the
            current ones (the product of the geometric ops so far).
        batch: the input batch or its headers (its label maps are read by RandomCropByLabel
            only).
    """

    sizes: np.ndarray
    spacing: np.ndarray
    affine: np.ndarray
    matrix: np.ndarray
    batch: VolumeBatch | VolumeHeaders | None = None

    def __len__(self) -> int:
        return len(self.sizes)


class VolumeOp:
    """Base of every volume op. `kind`: "geometry" or "intensity"."""

    kind: str = "op"
    draws: int = 0  # how many leading draws sample() uses

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        """Draw this op's per-sample parameters (numpy arrays with one row per sample)."""
        return {}

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._fields().items())
        return f"{type(self).__name__}({args})"


class VolumeGeometryOp(VolumeOp):
    """A geometric volume op: a per-sample forward 4x4 matrix and output size."""

    kind = "geometry"

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        """Return (matrix float64 [N, 4, 4], output sizes float64 [N, 3])."""
        raise NotImplementedError


class VolumeIntensityOp(VolumeOp):
    """An intensity volume op: one step of the pointwise program."""

    kind = "intensity"

    def step(self, params: Params, draws: Draws) -> Step:
        raise NotImplementedError


def translation(t: np.ndarray) -> np.ndarray:
    """float64 [N, 4, 4] translations by t ([N, 3])."""
    m = np.tile(np.eye(4), (len(t), 1, 1))
    m[:, :3, 3] = t
    return m


def linear(lin: np.ndarray) -> np.ndarray:
    """float64 [N, 4, 4] from 3x3 linear parts [N, 3, 3]."""
    m = np.tile(np.eye(4), (len(lin), 1, 1))
    m[:, :3, :3] = lin
    return m


def about_centre(lin: np.ndarray, sizes: np.ndarray, out_sizes: np.ndarray | None = None,
                 shift: np.ndarray | None = None) -> np.ndarray:
    """[N, 4, 4]: the linear maps [N, 3, 3] applied about the volume's centre, which lands on
    the output's centre (plus `shift` [N, 3] voxels when given)."""
    out = sizes if out_sizes is None else out_sizes
    target = out / 2 if shift is None else out / 2 + shift
    return translation(target) @ linear(lin) @ translation(-sizes / 2)
