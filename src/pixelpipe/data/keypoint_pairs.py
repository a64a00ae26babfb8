"""Left/right keypoint pairs: a mirrored image swaps its keypoints' sides.

A horizontal flip moves a person's left wrist to where a right wrist would be: the point moves
with the matrix, and its name must change too, or a pose model learns that left and right are
the same. Given the pairs of joints that are each other's mirror image (COCO's person: (1, 2)
the eyes, (3, 4) the ears, (5, 6) the shoulders, ...), every sample whose geometry mirrors it
(the stage matrix's determinant is negative: an odd number of flips) gets the two joints of
each pair exchanged in every instance. Two flips (a horizontal and a vertical one, or one in
each of two stages) mirror back and swap back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_flip_pairs", "mirror_keypoints"]


def check_flip_pairs(pairs: Sequence[Sequence[int]] | None) -> tuple[tuple[int, int], ...]:
    """The pairs as a tuple of (a, b), a != b, each joint in at most one pair; a ValueError
    naming `flip_pairs` otherwise."""
    if pairs is None:
        return ()
    out: list[tuple[int, int]] = []
    seen: set[int] = set()
    for k, pair in enumerate(pairs):
        try:
            a, b = (int(v) for v in pair)
            if any(float(v) != int(v) for v in pair):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"flip_pairs[{k}] must be two joint indices (a, b), got {pair!r}") from None
        if a < 0 or b < 0 or a == b:
            raise ValueError(f"flip_pairs[{k}] = {(a, b)}: two different joint indices >= 0")
        if a in seen or b in seen:
            raise ValueError(f"flip_pairs[{k}] = {(a, b)}: joint {a if a in seen else b} is in another pair too")
        seen.update((a, b))
        out.append((a, b))
    return tuple(out)


def mirror_keypoints(keypoints: Any, matrix: np.ndarray, pairs: tuple[tuple[int, int], ...]) -> Any:
    """`keypoints` (pixelpipe.data.targets.Keypoints, already moved by `matrix`, float64
    [N, 3, 3]) with each pair's joints exchanged in the instances of every sample that
    `matrix` mirrors (negative determinant)."""
    if not pairs or not len(keypoints.data):
        return keypoints
    joints = keypoints.joints
    if joints is None:
        raise ValueError("flip_pairs needs keypoints given per instance, [K, J, 2 or 3] per image (J joints "
                         "each), to know which joint is which")
    top = max(max(p) for p in pairs)
    if top >= joints:
        raise ValueError(f"flip_pairs names joint {top}, but the keypoints have {joints} joints per instance")
    mirrored = np.linalg.det(matrix) < 0  # [N]
    if not mirrored.any():
        return keypoints
    perm = np.arange(joints)
    for a, b in pairs:
        perm[a], perm[b] = b, a
    data = keypoints.data.reshape(-1, joints, 3)
    instance_sample = np.repeat(np.arange(len(keypoints.counts)), keypoints.counts // joints)
    swap = mirrored[instance_sample]
    out = data.copy()
    out[swap] = data[swap][:, perm]
    return type(keypoints)(out.reshape(-1, 3), keypoints.counts, joints)
