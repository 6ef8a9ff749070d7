"""Score metrics (AUC family): computed over every scored candidate, not only the top k."""

from __future__ import annotations

import numpy as np

__all__ = ["auc", "gauc", "global_auc"]


def auc(group: np.ndarray, score: np.ndarray, relevant: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group AUC: P(score of a relevant > score of an irrelevant), ties counting 1/2.

    Groups (users) with no relevant or no irrelevant candidate get NaN. One lexsort over all
    candidates; tie blocks are found by score changes, so no loop over groups.

    >>> auc(np.zeros(4, int), np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0], bool), 1)
    array([0.875])
    """
    group = np.asarray(group, dtype=np.int64)
    relevant = np.asarray(relevant, dtype=bool)
    order = np.lexsort((score, group))
    g, s, y = group[order], np.asarray(score)[order], relevant[order]
    new = np.ones(len(g), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
    block = np.cumsum(new) - 1
    pos_in = np.bincount(block, weights=y)
    neg_in = np.bincount(block, weights=~y)
    block_group = g[new]
    neg_before = np.cumsum(neg_in) - neg_in
    first_block = np.ones(len(block_group), dtype=bool)
    first_block[1:] = block_group[1:] != block_group[:-1]
    first = np.maximum.accumulate(np.where(first_block, np.arange(len(block_group)), 0))
    wins = pos_in * (neg_before - neg_before[first] + 0.5 * neg_in)
    num = np.bincount(block_group, weights=wins, minlength=n_groups)
    n_pos = np.bincount(group, weights=relevant, minlength=n_groups)
    n_neg = np.bincount(group, weights=~relevant, minlength=n_groups)
    pairs = n_pos * n_neg
    out = np.full(n_groups, np.nan)
    np.divide(num, pairs, out=out, where=pairs > 0)
    return out


def gauc(per_user_auc: np.ndarray, weights: np.ndarray) -> float:
    """Group AUC: per-user AUC averaged with weights (candidates or impressions per user).

    Users whose AUC is undefined (NaN) are left out.

    >>> gauc(np.array([1.0, 0.5, np.nan]), np.array([1, 3, 5]))
    0.625
    """
    ok = ~np.isnan(per_user_auc)
    w = np.asarray(weights, dtype=np.float64)[ok]
    return float(np.sum(per_user_auc[ok] * w) / w.sum()) if w.sum() > 0 else float("nan")


def global_auc(score: np.ndarray, relevant: np.ndarray) -> float:
    """One AUC over all (user, item) pairs pooled.

    >>> global_auc(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0], bool))
    0.875
    """
    return float(auc(np.zeros(len(score), np.int64), score, relevant, 1)[0])
