"""What a volume warp is asked to compute: the contract the plain-torch reference and the Triton
kernel both follow.

Sampling convention (both implementations): output voxel j has its centre at p = j + 0.5 in
continuous coordinates (voxel k covers [k, k + 1)); its source point is q = inverse @ p; in
index units (voxel centres at integers) that is c = q - 0.5, which is exactly
`torch.nn.functional.grid_sample(..., align_corners=False)`. Trilinear reads the 8 voxels
around c; nearest reads the voxel whose centre is closest (ties: grid_sample rounds half to
even, the Triton kernel rounds half up; only exact ties differ). Taps outside the volume:

- "constant": read `fill` (the label map reads `label_fill`);
- "replicate": read the nearest edge voxel (grid_sample's padding_mode="border");
- "reflect": mirror about the volume's faces, the edge voxel repeated (grid_sample's
  "reflection" with align_corners=False; scipy.ndimage's mode="reflect").

Antialiasing: where the warp shrinks input axis a by a stretch s (input voxels per output
voxel, the length of row a of the inverse's linear part) of at least AA_MIN_STRETCH, the input
is first blurred along that axis by a Gaussian of sigma = (s - 1) / 2 input voxels (skimage's
rule), truncated at 3 sigma, edges replicated. The blur runs as its own pass before the warp
(the same torch code on every device), only on the samples and axes that need it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["AA_MIN_STRETCH", "BORDERS_3D", "Deformation", "Warp3DSpec", "antialias_sigmas"]

BORDERS_3D = ("constant", "reflect", "replicate")
AA_MIN_STRETCH = 1.25


def antialias_sigmas(inverse: np.ndarray) -> np.ndarray:
    """float64 [N, 3]: the Gaussian sigma (input voxels) of each input axis, 0 where the warp
    shrinks it by less than AA_MIN_STRETCH."""
    stretch = np.linalg.norm(inverse[:, :3, :3], axis=2)  # row a: d(input a) / d(output)
    return np.where(stretch >= AA_MIN_STRETCH, (stretch - 1.0) / 2.0, 0.0)


@dataclass
class Deformation:
    """An elastic deformation inside the warp (ops.volume_elastic). Output point p reads input
    point outer @ (y + d(y)), y = inner @ p: y lies in the frame the deformation was drawn in
    (the volume as the ops before it left it, `frame` voxels), d is the coarse field
    interpolated trilinearly at y, control point k of axis a sitting at k / (c_a - 1) * frame_a
    (the first and last on the faces; beyond them the nearest face's value).

    Attributes:
        inner: float64 [N, 4, 4], output -> frame (the inverse of the ops after it).
        outer: float64 [N, 4, 4], frame -> input (the inverse of the ops before it).
        field: float32 [N, 3, c0, c1, c2], displacements in frame voxels along axes 0, 1, 2.
        frame: float64 [N, 3], the frame's size.
    """

    inner: np.ndarray
    outer: np.ndarray
    field: np.ndarray
    frame: np.ndarray


@dataclass
class Warp3DSpec:
    """One warp of a ragged volume batch.

    Attributes:
        inverse: float64 [N, 4, 4], output voxel coordinates -> input voxel coordinates.
        out_size: (D, H, W) of every output.
        border: one of BORDERS_3D.
        fill: the image's value beyond a "constant" border (input units).
        label_fill: the label map's value there.
        sigmas: float64 [N, 3] antialiasing sigmas per input axis (zeros: none).
        deform: an elastic deformation between the matrices, or None; `inverse` is then
            outer @ inner (the matrix part, which the antialiasing reads).
    """

    inverse: np.ndarray
    out_size: tuple[int, int, int]
    border: str = "constant"
    fill: float = 0.0
    label_fill: int = 0
    sigmas: np.ndarray | None = None
    deform: Deformation | None = None

    def __post_init__(self) -> None:
        self.inverse = np.ascontiguousarray(self.inverse, dtype=np.float64).reshape(-1, 4, 4)
        if self.border not in BORDERS_3D:
            raise ValueError(f"border must be one of {', '.join(map(repr, BORDERS_3D))}, got {self.border!r}")
        if self.sigmas is None:
            self.sigmas = np.zeros((len(self.inverse), 3))

    def __len__(self) -> int:
        return len(self.inverse)

    def rows(self) -> np.ndarray:
        """float64 [N, 12]: the inverse's top 3x4 rows, the kernel's per-sample parameters."""
        return np.ascontiguousarray(self.inverse[:, :3, :].reshape(-1, 12))
