"""Maps of points for the targets: points through per-sample matrices, and points along boxes'
outlines (what a box is moved by when a map of points moves its image: data.targets.Boxes.moved_by)."""

from __future__ import annotations

import numpy as np

__all__ = ["box_outline", "transform_points"]


def box_outline(boxes: np.ndarray, per_edge: int) -> np.ndarray:
    """float64 [K, P, 2] (x, y): points on the outlines of boxes [K, 4] (x0, y0, x1, y1),
    `per_edge` evenly spaced along each edge, corners included. per_edge = 2 gives the four
    corners themselves (P = 4); more gives P = 4 per_edge (the corners repeated)."""
    x0, y0, x1, y1 = boxes.T
    if per_edge <= 2:
        return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1),
                         np.stack([x0, y1], 1)], 1)
    t = np.linspace(0.0, 1.0, per_edge)[None, :]
    xs, ys = x0[:, None] + (x1 - x0)[:, None] * t, y0[:, None] + (y1 - y0)[:, None] * t
    edge = lambda a: np.broadcast_to(a[:, None], xs.shape)
    return np.concatenate([np.stack([xs, edge(y0)], 2), np.stack([xs, edge(y1)], 2), np.stack([edge(x0), ys], 2),
                           np.stack([edge(x1), ys], 2)], 1)


def transform_points(matrix: np.ndarray, points: np.ndarray, sample: np.ndarray) -> np.ndarray:
    """Points [K, 2] (x, y), each through the matrix of its sample (`sample`: [K] positions
    into matrix [N, 3, 3]), perspective division included: [K, 2]."""
    m = matrix[sample]
    x, y = points[:, 0], points[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        pz = m[:, 2, 0] * x + m[:, 2, 1] * y + m[:, 2, 2]
        u = (m[:, 0, 0] * x + m[:, 0, 1] * y + m[:, 0, 2]) / pz
        v = (m[:, 1, 0] * x + m[:, 1, 1] * y + m[:, 1, 2]) / pz
    return np.stack([u, v], 1)
