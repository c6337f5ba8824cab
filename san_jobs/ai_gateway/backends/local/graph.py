"""PageRank over a small weighted graph (the heart of TextRank)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def pagerank(weights: FloatArray, damping: float = 0.85, iterations: int = 50) -> FloatArray:
    """Stationary scores of a random walk on ``weights`` (square, non-negative).

    Rows without edges jump uniformly, so isolated nodes get the base score instead of
    absorbing all mass. Converges in a few dozen iterations for the sizes we see.
    """
    n = weights.shape[0]
    if n == 0:
        return np.zeros(0)
    out = weights.sum(axis=1)
    # Row-normalise; dangling rows become uniform.
    transition = np.where(out[:, None] > 0, weights / np.where(out > 0, out, 1.0)[:, None], 1.0 / n)
    scores: FloatArray = np.full(n, 1.0 / n)
    base = (1.0 - damping) / n
    for _ in range(iterations):
        updated: FloatArray = base + damping * (transition.T @ scores)
        if np.abs(updated - scores).sum() < 1e-9:
            return updated
        scores = updated
    return scores
