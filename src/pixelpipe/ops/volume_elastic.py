"""ElasticDeformation3D: a smooth random displacement of every voxel, from a coarse grid of
random control-point displacements interpolated in the warp.

It is the one geometric volume op that is not a matrix: Compose3D keeps its matrix slot as the
identity and hands the warp the coarse field with the matrices before and after it, so the
volume is still resampled once (kernels.spec3d.Deformation says how the warp reads it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..data.random import Draws
from .checks import check_prob
from .volume_geometry import per_axis
from .volume_kinds import Params, VolumeGeometryOp, VolumeState

__all__ = ["ElasticDeformation3D"]


class ElasticDeformation3D(VolumeGeometryOp):
    """Displace the voxels by a smooth random field, with probability p (TorchIO's
    RandomElasticDeformation, MONAI's Rand3DElastic).

    Args:
        control_points: control points per axis (>= 2; one number for all three), spread
            evenly over the volume as it reaches this op, the first and last on its faces.
        max_displacement: each control point moves by up to this many voxels along each
            axis (uniform in (-max, max); one number or three).
        locked_borders: the control points on the faces do not move, so the volume's outline
            stays (TorchIO's locked_borders=2 keeps two layers; here one).
        p: probability that a sample is deformed (others get no displacement).

    Between control points the displacement is interpolated trilinearly (TorchIO uses cubic
    B-splines: smoother, but the same idea). The output affine describes the matrix part only.
    """

    deformation = True

    def __init__(self, control_points: int | Sequence[int] = 7, max_displacement: float | Sequence[float] = 4.0,
                 locked_borders: bool = True, p: float = 1.0) -> None:
        cp = (control_points,) * 3 if isinstance(control_points, int) else tuple(control_points)
        if len(cp) != 3 or any(isinstance(c, bool) or not isinstance(c, int) or not 2 <= c <= 64 for c in cp):
            raise ValueError(f"control_points must be an int or 3 ints in [2, 64], got {control_points!r}")
        if locked_borders and min(cp) < 3:
            raise ValueError(f"with locked_borders, control_points must be >= 3 per axis (some must move), got {cp}")
        self.control_points = cp
        self.max_displacement = per_axis("max_displacement", max_displacement, 0.0, 1e4)
        self.locked_borders = bool(locked_borders)
        self.p = check_prob("p", p)
        self.draws = 1 + 3 * int(np.prod(cp))

    def sample(self, draws: Draws, state: VolumeState) -> Params:
        cp = self.control_points
        k = int(np.prod(cp))
        u = draws.uniforms_np(range(1, 1 + 3 * k), -1.0, 1.0).astype(np.float64).reshape(-1, 3, *cp)
        field = u * np.array(self.max_displacement).reshape(1, 3, 1, 1, 1)
        if self.locked_borders:
            inner = np.zeros(cp, dtype=bool)
            inner[1:-1, 1:-1, 1:-1] = True
            field = field * inner
        on = draws.bernoulli_np(0, self.p)
        return {"field": np.where(on.reshape(-1, 1, 1, 1, 1), field, 0.0)}

    def transform(self, params: Params, state: VolumeState) -> tuple[np.ndarray, np.ndarray]:
        return np.tile(np.eye(4), (len(state), 1, 1)), state.sizes
