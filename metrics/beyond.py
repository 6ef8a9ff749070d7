"""Beyond-accuracy metrics of a whole run: coverage, novelty, Gini, popularity."""

from __future__ import annotations

import numpy as np

__all__ = ["coverage", "gini", "novelty", "popularity"]


def coverage(recommended: np.ndarray, catalog_size: int) -> float:
    """Distinct recommended items / catalog size.

    >>> coverage(np.array([[1, 2], [2, 3]]), 10)
    0.3
    """
    if catalog_size <= 0:
        raise ValueError(f"'catalog_size' must be a positive int (got {catalog_size})")
    return len(np.unique(recommended)) / catalog_size


def gini(counts: np.ndarray) -> float:
    """Gini coefficient of recommendation counts over the catalog (0 = even, → 1 = concentrated).

    ``counts`` has one entry per catalog item, 0 for never-recommended items.

    >>> gini(np.array([1, 1, 1, 1]))
    0.0
    >>> gini(np.array([0, 0, 0, 4]))
    0.75
    """
    x = np.sort(np.asarray(counts, dtype=np.float64))
    n, total = len(x), x.sum()
    if n == 0 or total == 0:
        return 0.0
    i = np.arange(1, n + 1)
    return float(np.sum((2 * i - n - 1) * x) / (n * total))


def novelty(share: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean of ``-log2`` of each recommended item's popularity share in training.

    ``share[u, j]`` is the training share of the item at rank ``j``; ``valid`` masks padding.
    Users with an empty list get NaN.

    >>> novelty(np.array([[0.5, 0.25]]), np.array([[True, True]])).tolist()
    [1.5]
    """
    info = np.where(valid, -np.log2(np.where(valid, share, 1.0)), 0.0)
    n = valid.sum(axis=1)
    out = np.full(len(n), np.nan)
    np.divide(info.sum(axis=1), n, out=out, where=n > 0)
    return out


def popularity(count: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean training popularity (interaction count) of recommended items.

    >>> popularity(np.array([[10.0, 2.0]]), np.array([[True, False]])).tolist()
    [10.0]
    """
    n = valid.sum(axis=1)
    out = np.full(len(n), np.nan)
    np.divide(np.where(valid, count, 0.0).sum(axis=1), n, out=out, where=n > 0)
    return out
