"""Rating-prediction metrics: errors between predicted and true ratings, pooled over pairs."""

from __future__ import annotations

import numpy as np

__all__ = ["mae", "rmse", "user_errors"]


def rmse(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Root mean squared error over all pairs (seed 002, formula 1).

    >>> rmse(np.array([4.0, 2.0]), np.array([3.0, 4.0]))
    1.5811388300841898
    """
    err = np.asarray(predicted, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    return float(np.sqrt(np.mean(err**2))) if err.size else float("nan")


def mae(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Mean absolute error over all pairs (seed 002, formula 2).

    >>> mae(np.array([4.0, 2.0]), np.array([3.0, 4.0]))
    1.5
    """
    err = np.asarray(predicted, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    return float(np.mean(np.abs(err))) if err.size else float("nan")


def user_errors(
    group: np.ndarray, truth: np.ndarray, predicted: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-user (sum of squared errors, sum of absolute errors, pair count), for per-user tables."""
    err = np.asarray(predicted, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    return (
        np.bincount(group, weights=err**2, minlength=n_groups),
        np.bincount(group, weights=np.abs(err), minlength=n_groups),
        np.bincount(group, minlength=n_groups).astype(np.float64),
    )
