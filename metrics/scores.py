"""Score metrics (AUC family): computed over every scored candidate, not only the top k.

Every engine reduces its candidates to :class:`AucCounts` (per user: relevant and irrelevant
candidates and the pairs a relevant item wins, ties counting 1/2; plus the pooled wins across
users), and :func:`score_metric` turns them into ``auc``, ``gauc`` and ``global_auc``: the one
place that says how the family aggregates. ``auc_counts`` builds them from a long table of scored
candidates (``metrics.evaluate``); ``matrix_auc_counts`` and ``pooled_wins2`` from dense score
rows over a whole catalog, one batch of users at a time (the harness's models).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "AucCounts",
    "auc",
    "auc_counts",
    "gauc",
    "gauc_weights",
    "global_auc",
    "matrix_auc_counts",
    "pooled_wins2",
    "score_metric",
    "user_auc",
]


@dataclass(frozen=True)
class AucCounts:
    """What the AUC family is computed from, one entry per user.

    ``wins``: sum over the user's relevant candidates of (#irrelevant candidates scored lower
    + 1/2 #irrelevant candidates scored equal); ``n_pos`` / ``n_neg``: the user's relevant /
    irrelevant candidates; ``pooled_wins``: the same sum of wins with the irrelevant candidates of
    every user (the numerator of ``global_auc``; NaN when it was not computed).
    """

    wins: np.ndarray
    n_pos: np.ndarray
    n_neg: np.ndarray
    pooled_wins: float = float("nan")


def auc_counts(
    group: np.ndarray, score: np.ndarray, relevant: np.ndarray, n_groups: int
) -> AucCounts:
    """:class:`AucCounts` of scored candidates given as a long table (group code, score, label).

    One lexsort over all candidates; tie blocks are found by score changes, so no loop over
    groups. ``pooled_wins`` is left NaN (``metrics.evaluate`` pools ``global_auc`` from a
    histogram of the scores; :func:`global_auc` for one table).
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
    return AucCounts(
        wins=np.bincount(block_group, weights=wins, minlength=n_groups),
        n_pos=np.bincount(group, weights=relevant, minlength=n_groups),
        n_neg=np.bincount(group, weights=~relevant, minlength=n_groups),
    )


def user_auc(counts: AucCounts) -> np.ndarray:
    """Per-user AUC ``wins / (n_pos * n_neg)``; NaN for users without a relevant or an
    irrelevant candidate."""
    pairs = np.asarray(counts.n_pos, dtype=np.float64) * counts.n_neg
    out = np.full(pairs.shape, np.nan)
    np.divide(counts.wins, pairs, out=out, where=pairs > 0)
    return out


def auc(group: np.ndarray, score: np.ndarray, relevant: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group AUC: P(score of a relevant > score of an irrelevant), ties counting 1/2.

    Groups (users) with no relevant or no irrelevant candidate get NaN.

    >>> auc(np.zeros(4, int), np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0], bool), 1)
    array([0.875])
    """
    return user_auc(auc_counts(group, score, relevant, n_groups))


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


def score_metric(
    metric: str, counts: AucCounts, *, gauc_weight: str = "candidates"
) -> tuple[np.ndarray, float]:
    """Per-user values and the summary of ``auc``, ``gauc`` or ``global_auc`` from ``counts``.

    ``auc``: mean of the defined per-user AUCs; ``gauc``: their mean weighted by each user's
    number of scored candidates (``gauc_weight="candidates"``: ``n_pos + n_neg``, the project's
    convention) or of relevant candidates (``"positives"``: ``n_pos``, RecBole's);
    ``global_auc``: pooled wins over all (relevant, irrelevant) pairs of all users, no per-user
    value.

    >>> c = AucCounts(np.array([2.0, 0.5]), np.array([2, 1]), np.array([1, 3]), 2.5)
    >>> round(score_metric("gauc", c)[1], 6), round(score_metric("global_auc", c)[1], 6)
    (0.52381, 0.208333)
    """
    per = user_auc(counts)
    if metric == "auc":
        ok = ~np.isnan(per)
        return per, float(per[ok].mean()) if ok.any() else float("nan")
    if metric == "gauc":
        return per, gauc(per, gauc_weights(counts, gauc_weight))
    if metric == "global_auc":
        pairs = float(np.sum(counts.n_pos, dtype=np.float64) * np.sum(counts.n_neg))
        value = counts.pooled_wins / pairs if pairs > 0 else float("nan")
        return np.full(per.shape, np.nan), float(value)
    raise ValueError(f"{metric!r} is not a score metric (auc, gauc, global_auc)")


def gauc_weights(counts: AucCounts, gauc_weight: str = "candidates") -> np.ndarray:
    """Each user's weight in ``gauc``: ``n_pos + n_neg`` (``"candidates"``) or ``n_pos``
    (``"positives"``)."""
    if gauc_weight not in ("candidates", "positives"):
        raise ValueError(f"'gauc_weight' must be 'candidates' or 'positives' (got {gauc_weight!r})")
    weight = np.asarray(counts.n_pos, np.float64)
    return weight + counts.n_neg if gauc_weight == "candidates" else weight


def matrix_auc_counts(scores: np.ndarray, pos_rows: np.ndarray, pos_cols: np.ndarray) -> AucCounts:
    """:class:`AucCounts` of each row of a dense score matrix: every finite entry is a scored
    candidate (``-inf`` marks items that are not, e.g. seen items excluded), the relevant ones at
    ``(pos_rows, pos_cols)`` (distinct pairs; those at ``-inf`` are not candidates and ignored).

    Each row is sorted once; the number of entries below / equal to each relevant score is found
    by a bisection vectorized over all relevant items (``log2(n_cols)`` steps), and the relevant
    items' own counts among themselves are taken off. Cost: one row sort per batch, whatever
    the number of relevant items. ``pooled_wins`` is left NaN (see :func:`pooled_wins2`).

    >>> s = np.array([[0.9, 0.5, 0.5, 0.1, -np.inf]])
    >>> float(user_auc(matrix_auc_counts(s, np.array([0, 0]), np.array([0, 1])))[0])
    0.875
    """
    n_rows, n_cols = scores.shape
    pos_rows = np.asarray(pos_rows, dtype=np.int64)
    pos_cols = np.asarray(pos_cols, dtype=np.int64)
    value = scores[pos_rows, pos_cols]
    keep = np.isfinite(value)
    rows, value = pos_rows[keep], value[keep]
    n_cand = np.isfinite(scores).sum(axis=1)
    n_pos = np.bincount(rows, minlength=n_rows)
    if rows.size == 0:
        return AucCounts(np.zeros(n_rows), n_pos, n_cand - n_pos)
    ordered = np.sort(scores, axis=1)  # -inf (non-candidates) first
    below = _row_searchsorted(ordered, rows, value, strict=True) - (n_cols - n_cand[rows])
    at_most = _row_searchsorted(ordered, rows, value, strict=False) - (n_cols - n_cand[rows])
    pos_below, pos_at_most = _within_group_ranks(rows, value)
    lower = below - pos_below
    tied = (at_most - below) - (pos_at_most - pos_below)
    wins2 = np.bincount(rows, weights=2 * lower + tied, minlength=n_rows)
    return AucCounts(wins2 / 2, n_pos, n_cand - n_pos)


def pooled_wins2(pos: np.ndarray, neg: np.ndarray) -> int:
    """Twice the wins of the relevant scores ``pos`` over the irrelevant scores ``neg``:
    ``sum(2 * #{v < p} + #{v == p} for p in pos)``, exact in integers.

    ``neg`` is sorted (a copy) and every ``p`` located in it by binary search: summed over
    batches of ``neg`` it gives ``2 * AucCounts.pooled_wins`` with memory bounded by the batch.

    >>> pooled_wins2(np.array([0.5, 0.9]), np.array([0.1, 0.5]))
    7
    """
    ordered = np.sort(neg, axis=None)
    left = np.searchsorted(ordered, pos, side="left")
    right = np.searchsorted(ordered, pos, side="right")
    return int(left.sum(dtype=np.int64) + right.sum(dtype=np.int64))


def _row_searchsorted(
    ordered: np.ndarray, rows: np.ndarray, value: np.ndarray, *, strict: bool
) -> np.ndarray:
    """For each ``i``, the number of entries of the ascending row ``ordered[rows[i]]`` that are
    ``< value[i]`` (``strict``) or ``<= value[i]``: a bisection run on all ``i`` at once."""
    n_cols = ordered.shape[1]
    lo = np.zeros(rows.size, dtype=np.int64)
    hi = np.full(rows.size, n_cols, dtype=np.int64)
    for _ in range(int(n_cols).bit_length()):
        active = lo < hi
        mid = (lo + hi) >> 1
        probe = ordered[rows, np.minimum(mid, n_cols - 1)]
        right = active & ((probe < value) if strict else (probe <= value))
        lo = np.where(right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)
    return lo


def _within_group_ranks(group: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each ``i``: how many entries of its group have a value ``< value[i]`` and ``<=``
    ``value[i]`` (itself included)."""
    order = np.lexsort((value, group))
    g, v = group[order], value[order]
    n = g.size
    idx = np.arange(n)
    new_group = np.r_[True, g[1:] != g[:-1]]
    new_block = new_group | np.r_[True, v[1:] != v[:-1]]
    group_first = np.maximum.accumulate(np.where(new_group, idx, 0))
    block_first = np.maximum.accumulate(np.where(new_block, idx, 0))
    block_end = np.append(idx[new_block][1:], n)[np.cumsum(new_block) - 1]
    below, at_most = np.empty(n, np.int64), np.empty(n, np.int64)
    below[order] = block_first - group_first
    at_most[order] = block_end - group_first
    return below, at_most
