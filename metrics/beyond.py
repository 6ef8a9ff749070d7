"""Beyond-accuracy metrics: coverage, novelty, Gini, popularity, diversity, unexpectedness,
serendipity, miscalibration, exposure, and the gap of a metric between user groups.

Per-user kernels take the batch's recommended items as rows ``rows[u, j]`` into an item matrix
(see :mod:`metrics.side`) with ``valid[u, j]`` masking padding; a user with too few items for a
value gets NaN. Nothing loops over users or pairs of items: sums of item vectors come from one
sparse selector product, and ``Σ_{i<j} v_i·v_j = (‖Σ v‖² − Σ ‖v‖²) / 2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from metrics.checks import require_columns, require_int
from metrics.sets import distinct

__all__ = [
    "GroupGap",
    "coverage",
    "distributional_coverage",
    "exposure",
    "gini",
    "group_gap",
    "history_similarity",
    "intra_list_jaccard",
    "intra_list_similarity",
    "miscalibration",
    "novelty",
    "popularity",
    "selector",
    "serendipity",
    "unexpectedness",
]

#: Cells (users × list length × dimensions) gathered at once by the dense kernels.
_CHUNK_CELLS = 1 << 22


def coverage(recommended: np.ndarray, catalog_size: int) -> float:
    """Distinct recommended items / catalog size.

    >>> coverage(np.array([[1, 2], [2, 3]]), 10)
    0.3
    """
    require_int("catalog_size", catalog_size)
    return len(distinct(recommended)) / catalog_size


def distributional_coverage(counts: np.ndarray) -> float:
    """Entropy ``−Σ_i p_i log2 p_i`` of how often each item is recommended, ``p_i`` = its share
    of all recommendations (Shani & Gunawardana 2010, eq. 21; Microsoft Recommenders'
    ``distributional_coverage``); 0 for no recommendations.

    >>> distributional_coverage(np.array([1, 1, 2]))
    1.5
    """
    x = np.asarray(counts, dtype=np.float64)
    x = x[x > 0]
    if x.size == 0:
        return 0.0
    p = x / x.sum()
    return float(-(p * np.log2(p)).sum())


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
    return _list_mean(-np.log2(np.where(valid, share, 1.0)), valid)


def popularity(count: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean training popularity (interaction count) of recommended items.

    >>> popularity(np.array([[10.0, 2.0]]), np.array([[True, False]])).tolist()
    [10.0]
    """
    return _list_mean(count, valid)


def _list_mean(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean of ``values[u, j]`` over the valid entries; NaN for an empty list (and where
    a valid entry is NaN)."""
    n = valid.sum(axis=1)
    out = np.full(len(n), np.nan)
    np.divide(np.where(valid, values, 0.0).sum(axis=1), n, out=out, where=n > 0)
    return out


def selector(rows: np.ndarray, valid: np.ndarray, n_rows: int) -> sp.csr_matrix:
    """Sparse ``users × n_rows`` matrix with a 1 at each valid (user, item row)."""
    counts = valid.sum(axis=1)
    indptr = np.concatenate(([0], np.cumsum(counts)))
    return sp.csr_matrix(
        (np.ones(int(indptr[-1])), rows[valid], indptr), shape=(rows.shape[0], n_rows)
    )


def _row_sq_norms(matrix: np.ndarray | sp.spmatrix) -> np.ndarray:
    if isinstance(matrix, np.ndarray):
        return np.einsum("ij,ij->i", matrix, matrix)
    return np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel()


def intra_list_similarity(
    vectors: np.ndarray | sp.csr_matrix, rows: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """Per-user mean pairwise dot product of the list's (L2-normalised) item vectors.

    ``(‖Σ_j v_j‖² − Σ_j ‖v_j‖²) / (n (n − 1))`` over the ``n`` valid items; NaN when ``n < 2``.

    >>> v = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    >>> intra_list_similarity(v, np.array([[0, 1, 2]]), np.ones((1, 3), bool)).round(6).tolist()
    [0.466667]
    """
    n = valid.sum(axis=1).astype(np.float64)
    self_sq = np.where(valid, _row_sq_norms(vectors)[rows], 0.0).sum(axis=1)
    if isinstance(vectors, np.ndarray):
        per_row = float(vectors.shape[1])
    else:
        per_row = vectors.nnz / max(1, vectors.shape[0])
    step = max(1, int(_CHUNK_CELLS // max(1.0, rows.shape[1] * per_row)))
    sum_sq = np.empty(len(n))
    for lo in range(0, len(n), step):  # chunks of users: the summed vectors stay small
        total = selector(rows[lo : lo + step], valid[lo : lo + step], vectors.shape[0]) @ vectors
        sum_sq[lo : lo + step] = _row_sq_norms(total)
    out = np.full(len(n), np.nan)
    np.divide(sum_sq - self_sq, n * (n - 1), out=out, where=n >= 2)
    return out


def intra_list_jaccard(binary: sp.csr_matrix, rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean pairwise Jaccard similarity ``|A ∩ B| / |A ∪ B|`` of the items' 0/1 feature
    sets (0 for two items without features); NaN when fewer than 2 items.

    >>> b = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
    >>> intra_list_jaccard(b, np.array([[0, 1]]), np.ones((1, 2), bool)).round(6).tolist()
    [0.333333]
    """
    users, width = rows.shape
    n = valid.sum(axis=1).astype(np.float64)
    sums = np.zeros(users)
    step = max(1, _CHUNK_CELLS // max(1, width * width * 4, width * binary.shape[1]))
    for lo in range(0, users, step):
        r, ok = rows[lo : lo + step], valid[lo : lo + step]
        dense = binary[r.ravel()].toarray().reshape(*r.shape, binary.shape[1])
        dense *= ok[..., None]
        inter = np.einsum("uid,ujd->uij", dense, dense)
        size = np.einsum("uii->ui", inter)
        union = size[:, :, None] + size[:, None, :] - inter
        jac = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        pair = ok[:, :, None] & ok[:, None, :] & ~np.eye(width, dtype=bool)[None]
        sums[lo : lo + step] = np.where(pair, jac, 0.0).sum(axis=(1, 2))
    out = np.full(users, np.nan)
    np.divide(sums, n * (n - 1), out=out, where=n >= 2)
    return out


def history_similarity(
    vectors: np.ndarray | sp.csr_matrix,
    rows: np.ndarray,
    valid: np.ndarray,
    history: sp.csr_matrix,
) -> np.ndarray:
    """Mean similarity of each recommended item to the user's history items: ``float[b, c]``.

    ``history`` is the ``users × item rows`` 0/1 selector of each batch user's distinct history
    items; ``v_i · (Σ_h v_h) / |H_u|``. NaN where the user has no history or at padding.
    """
    size = np.asarray(history.sum(axis=1)).ravel()
    users, width = rows.shape
    out = np.full(rows.shape, np.nan)
    if sp.issparse(vectors):
        dots = _sparse_history_dots(sp.csr_matrix(vectors), rows, history)
    else:
        dots = np.empty(rows.shape)
        step = max(1, _CHUNK_CELLS // max(1, width * vectors.shape[1]))
        for lo in range(0, users, step):
            summed = history[lo : lo + step] @ vectors
            dots[lo : lo + step] = np.einsum("ucd,ud->uc", vectors[rows[lo : lo + step]], summed)
    h = size[:, None]
    np.divide(dots, h, out=out, where=(h > 0) & valid)
    return out


def _sparse_history_dots(
    vectors: sp.csr_matrix, rows: np.ndarray, history: sp.csr_matrix
) -> np.ndarray:
    """``v_{rows[u, j]} · Σ_{h ∈ H_u} v_h`` for sparse item vectors (co-occurrence over users).

    Users go in chunks whose summed history vectors fit a dense block of about
    ``_CHUNK_CELLS`` cells; each recommended item's nonzeros look them up directly.
    """
    users, width = rows.shape
    n_cols = vectors.shape[1]
    step = max(1, _CHUNK_CELLS // max(n_cols, width))
    dots = np.zeros(rows.shape)
    for lo in range(0, users, step):
        hi = min(users, lo + step)
        summed = (history[lo:hi] @ vectors).toarray()  # a chunk of users × vector dimensions
        items = vectors[rows[lo:hi].ravel()].tocoo()
        looked = summed[items.row // width, items.col]
        dots[lo:hi] = np.bincount(
            items.row, weights=items.data * looked, minlength=(hi - lo) * width
        ).reshape(hi - lo, width)
    return dots


def unexpectedness(unexpected: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean of ``unexpected[u, j]`` over the list (1/0 for the popularity method, the
    dissimilarity to the history for the history method); NaN for an empty list or where any
    valid entry is NaN (no history).

    >>> unexpectedness(np.array([[1.0, 0.0, 1.0, 9.0]]), np.array([[1, 1, 1, 0]], bool)).tolist()
    [0.6666666666666666]
    """
    return _list_mean(unexpected, valid)


def serendipity(unexpected: np.ndarray, hits: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-user mean over the list of ``unexpected[u, j] · relevant[u, j]`` (NaN where
    unexpectedness is undefined).

    >>> serendipity(np.array([[1.0, 1.0, 0.0]]), np.array([[1, 0, 1]], bool),
    ...             np.ones((1, 3), bool)).tolist()
    [0.3333333333333333]
    """
    return unexpectedness(np.where(hits | np.isnan(unexpected), unexpected, 0.0), valid)


def miscalibration(p: sp.csr_matrix, q: sp.csr_matrix, alpha: float) -> np.ndarray:
    """Per-user ``KL(p ‖ q̃) = Σ_g p_g log(p_g / q̃_g)``, ``q̃ = (1 − α) q + α p`` (Steck 2018).

    ``p`` (history) and ``q`` (list) are ``users × categories`` distributions; a user whose ``p``
    is empty (no categorised history) gets NaN. Natural logarithm.

    >>> p = sp.csr_matrix(np.array([[0.5, 0.5]])); q = sp.csr_matrix(np.array([[1.0, 0.0]]))
    >>> round(float(miscalibration(p, q, 0.01)[0]), 6)
    1.958518
    """
    p, q = sp.csr_matrix(p), sp.csr_matrix(q)
    coo = p.tocoo()
    pg = coo.data
    qg = np.asarray(q[coo.row, coo.col]).ravel()
    mixed = (1.0 - alpha) * qg + alpha * pg
    with np.errstate(divide="ignore"):
        terms = np.where(pg > 0, pg * np.log(pg / mixed), 0.0)
    out = np.bincount(coo.row, weights=terms, minlength=p.shape[0])
    mass = np.asarray(p.sum(axis=1)).ravel()
    return np.where(mass > 0, out, np.nan)


def exposure(in_group: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position-discounted exposure ``Σ_j 1/log2(j + 1)`` of a group's items and of the whole
    list, per user: ``(group exposure, list exposure)``.

    >>> g, t = exposure(np.array([[False, True]]), np.ones((1, 2), bool))
    >>> round(float(g[0] / t[0]), 6)
    0.386853
    """
    width = valid.shape[1]
    disc = 1.0 / np.log2(np.arange(2, width + 2, dtype=np.float64))
    weight = np.where(valid, disc[None, :], 0.0)
    return np.where(in_group, weight, 0.0).sum(axis=1), weight.sum(axis=1)


@dataclass(frozen=True)
class GroupGap:
    """Gap of a metric between user groups: largest minus smallest group mean, the percentile
    bootstrap CI of the difference between those two groups (users resampled within each
    group; it may reach below 0 when the groups are alike), each group's mean and size."""

    metric: str
    gap: float
    ci: tuple[float, float]
    means: dict[str, float]
    sizes: dict[str, int]
    dropped: int
    confidence: float
    n_resamples: int


def group_gap(
    per_user: pd.DataFrame,
    user_groups: pd.Series | pd.DataFrame,
    metric: str,
    *,
    groups: Sequence[str] | None = None,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> GroupGap:
    """Gap ``max_g mean_g − min_g mean_g`` of ``per_user[metric]`` between user groups, with CI.

    ``user_groups`` maps users to groups (a Series indexed by user, or a DataFrame with columns
    ``user, group``); ``groups`` picks which groups to compare (default: all). Users with a NaN
    value or no group are left out (``dropped``). With two groups the gap is ``|mean_a − mean_b|``.

    >>> pu = pd.DataFrame({"ndcg": [1.0, 0.0, 0.5, 0.5]}, index=pd.Index([1, 2, 3, 4], name="user"))
    >>> g = group_gap(pu, pd.Series(["a", "a", "b", "b"], index=[1, 2, 3, 4]), "ndcg")
    >>> g.gap, g.means
    (0.0, {'a': 0.5, 'b': 0.5})
    """
    from metrics import stats

    if metric not in per_user.columns:
        raise ValueError(
            f"per_user has no column {metric!r}; it has {list(map(str, per_user.columns))}"
        )
    if isinstance(user_groups, pd.DataFrame):
        require_columns(user_groups.columns, ("user", "group"), "user_groups")
        user_groups = user_groups.set_index("user")["group"]
    if user_groups.index.has_duplicates:
        user = user_groups.index[user_groups.index.duplicated()][0]
        raise ValueError(f"user_groups has user {user!r} twice")
    label = user_groups.reindex(per_user.index).astype(object)
    values = per_user[metric].to_numpy(dtype=np.float64)
    keep = ~np.isnan(values) & label.notna().to_numpy()
    names = sorted(map(str, pd.unique(label[keep]))) if groups is None else [str(g) for g in groups]
    if len(names) < 2:
        raise ValueError(f"group_gap needs at least two user groups with values (got {names})")
    label_text = label.astype(str).to_numpy()
    columns = []
    for name in names:
        col = values[keep & (label_text == name)]
        if col.size == 0:
            raise ValueError(f"user group {name!r} has no user with a value of {metric!r}")
        columns.append(col)
    means = np.array([c.mean() for c in columns])
    resampled = np.column_stack(
        [
            stats._resample_stats([c], "mean", n_resamples, seed + i)[:, 0]
            for i, c in enumerate(columns)
        ]
    )
    # the CI of the difference between the groups highest and lowest in the data: the
    # resampled max − min is biased upward (the largest of noisy means), so its interval can
    # lie wholly above the estimate when the groups are alike; this one may reach below 0
    high, low = int(np.argmax(means)), int(np.argmin(means))
    spread = resampled[:, high] - resampled[:, low]
    used = keep & np.isin(label_text, names)
    return GroupGap(
        metric=metric,
        gap=float(means.max() - means.min()),
        ci=stats._percentile_ci(spread, confidence),
        means={n: float(m) for n, m in zip(names, means, strict=True)},
        sizes={n: int(c.size) for n, c in zip(names, columns, strict=True)},
        dropped=int(len(values) - used.sum()),
        confidence=confidence,
        n_resamples=n_resamples,
    )
