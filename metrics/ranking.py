"""Ranking metrics: pure per-user kernels over a :class:`~metrics.judged.Judged` matrix.

Every kernel returns ``float[n_users]``; ``k=None`` means the whole ranked list. Averaging over
users (and the empty-truth policy) is the caller's job, so paired tests keep per-user vectors.
"""

from __future__ import annotations

import numpy as np

from metrics.judged import Judged, discount

__all__ = [
    "arhr",
    "average_precision",
    "cg",
    "dcg",
    "f1",
    "hit_rate",
    "hits_at",
    "idcg",
    "ndcg",
    "num_rel",
    "num_rel_ret",
    "num_ret",
    "precision",
    "r_precision",
    "recall",
    "reciprocal_rank",
]


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` with 0 where ``den == 0``."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.zeros(np.broadcast(num, den).shape)
    np.divide(num, den, out=out, where=den != 0)
    return out


def hits_at(j: Judged, *, k: int | None) -> np.ndarray:
    """Number of relevant items in the top ``k``: ``|R_u@k ∩ T_u|``."""
    return j.hits_at(k)


def num_ret(j: Judged, *, k: int | None = None) -> np.ndarray:
    """Length of the ranked list cut at ``k`` (trec_eval ``num_ret``)."""
    return np.minimum(j.n_ret, j.cut(k)).astype(np.float64)


def num_rel(j: Judged, *, k: int | None = None) -> np.ndarray:
    """Number of relevant test items ``|T_u|`` (trec_eval ``num_rel``); ``k`` is ignored."""
    return j.n_rel.astype(np.float64)


def num_rel_ret(j: Judged, *, k: int | None = None) -> np.ndarray:
    """Relevant items retrieved in the top ``k`` (trec_eval ``num_rel_ret``)."""
    return hits_at(j, k=k)


def precision(j: Judged, *, k: int | None, denominator: str = "k") -> np.ndarray:
    """``hits@k / k``, or ``hits@k / min(k, list length)`` with ``denominator="list"``
    (torchmetrics ``adaptive_k``); the whole-list form divides by the list length.

    >>> precision(Judged.from_lists([[0, 1, 0, 1]]), k=2).tolist()
    [0.5]
    >>> precision(Judged.from_lists([[1, 0]]), k=5, denominator="list").tolist()
    [0.5]
    """
    if denominator not in ("k", "list"):
        raise ValueError(f"'denominator' must be one of 'k', 'list' (got {denominator!r})")
    if k is None:
        den = j.n_ret
    elif denominator == "list":
        den = np.minimum(j.n_ret, k)
    else:
        den = np.full(j.n_users, k)
    return _safe_div(hits_at(j, k=k), den)


def recall(j: Judged, *, k: int | None) -> np.ndarray:
    """``hits@k / |T_u|`` (0 when the user has no relevant item).

    >>> recall(Judged.from_lists([[0, 1, 0, 1]], [[1, 1, 1, 1]]), k=2).tolist()
    [0.25]
    """
    return _safe_div(hits_at(j, k=k), j.n_rel)


def f1(j: Judged, *, k: int | None, denominator: str = "k") -> np.ndarray:
    """Harmonic mean ``2PR / (P + R)`` of precision@k and recall@k, 0 when both are 0."""
    p, r = precision(j, k=k, denominator=denominator), recall(j, k=k)
    return _safe_div(2 * p * r, p + r)


def hit_rate(j: Judged, *, k: int | None) -> np.ndarray:
    """1 if any relevant item is in the top ``k``, else 0 (trec_eval ``success_k``)."""
    return (hits_at(j, k=k) > 0).astype(np.float64)


def reciprocal_rank(j: Judged, *, k: int | None) -> np.ndarray:
    """``1 / rank`` of the first relevant item in the top ``k``, 0 if there is none.

    >>> reciprocal_rank(Judged.from_lists([[0, 0, 1, 1]]), k=None).tolist()
    [0.3333333333333333]
    """
    h = j.hits[:, : j.cut(k)]
    if h.shape[1] == 0:
        return np.zeros(j.n_users)
    first = h.argmax(axis=1)
    return np.where(h.any(axis=1), 1.0 / (first + 1.0), 0.0)


def arhr(j: Judged, *, k: int | None) -> np.ndarray:
    """Average reciprocal hit rank: ``Σ over hits of 1 / rank`` (seed 003: hits at 1 and 3 → 4/3).

    >>> arhr(Judged.from_lists([[1, 0, 1]]), k=None).tolist()
    [1.3333333333333333]
    """
    c = j.cut(k)
    return j.hits[:, :c] @ (1.0 / np.arange(1, c + 1))


def average_precision(
    j: Judged, *, k: int | None, denominator: str = "min_k_relevant"
) -> np.ndarray:
    """``Σ_{i<=k} P@i · rel(i) / D`` with ``D`` = ``|T_u|`` (``relevant``), ``min(k, |T_u|)``
    (``min_k_relevant``), the number of hits in the list (``hits``) or ``k`` (``k``: rectools
    ``divide_by_k``; the list length for the whole list); 0 when there is no hit.

    >>> j = Judged.from_lists([[0, 1, 0, 1, 0]])   # seed 000: list e,b,a,d,c; relevant {b, d}
    >>> average_precision(j, k=5).tolist()
    [0.5]
    """
    c = j.cut(k)
    h = j.hits[:, :c]
    prec_at = j.cum_hits[:, :c] / np.arange(1, c + 1)
    num = np.where(h, prec_at, 0.0).sum(axis=1)
    if denominator == "relevant":
        den = j.n_rel
    elif denominator == "hits":
        den = j.hits_at(k)
    elif denominator == "min_k_relevant":
        den = j.n_rel if k is None else np.minimum(j.n_rel, k)
    elif denominator == "k":
        den = j.n_ret if k is None else np.full(j.n_users, k)
    else:
        raise ValueError(
            "'denominator' must be one of 'min_k_relevant', 'relevant', 'hits', 'k' "
            f"(got {denominator!r})"
        )
    return _safe_div(num, den)


def r_precision(j: Judged, *, k: int | None = None) -> np.ndarray:
    """Precision at rank ``|T_u|`` (trec_eval ``Rprec``); ``k`` is ignored.

    The judged width must cover ``max |T_u|`` (the engine ensures it) or the whole list.
    """
    cols = np.arange(j.width)
    within = cols[None, :] < j.n_rel[:, None]
    return _safe_div((j.hits & within).sum(axis=1), j.n_rel)


def cg(j: Judged, *, k: int | None) -> np.ndarray:
    """Cumulative gain ``Σ_{i<=k} g(rel_i)``."""
    return j.gains[:, : j.cut(k)].sum(axis=1)


def dcg(j: Judged, *, k: int | None) -> np.ndarray:
    """Discounted cumulative gain ``Σ_{i<=k} g(rel_i) / log2(i + 1)``."""
    c = j.cut(k)
    return j.gains[:, :c] @ discount(c)


def idcg(j: Judged, *, k: int | None, ideal: str = "relevant") -> np.ndarray:
    """DCG@k of the ideal ordering of **all** the user's test relevances (``ideal="relevant"``),
    or of a list whose ``k`` positions all have gain 1 (``ideal="k"``: rectools' default
    ``divide_by_achievable=False``; the list length for the whole list).

    >>> idcg(Judged.from_lists([[0, 1, 0]]), k=2, ideal="k").round(6).tolist()
    [1.63093]
    """
    if ideal == "relevant":
        return j.ideal_dcg(k)
    if ideal != "k":
        raise ValueError(f"'ideal' must be one of 'relevant', 'k' (got {ideal!r})")
    if k is None:
        return np.concatenate(([0.0], np.cumsum(discount(j.width))))[j.n_ret]
    return np.full(j.n_users, discount(k).sum())


def ndcg(j: Judged, *, k: int | None, ideal: str = "relevant") -> np.ndarray:
    """``dcg@k / idcg@k``, 0 when the ideal DCG is 0.

    >>> j = Judged.from_lists([[3, 2, 3, 0, 1, 2]], gain="linear")   # seed 002/003
    >>> round(float(ndcg(j, k=6)[0]), 9)
    0.960808194
    """
    return _safe_div(dcg(j, k=k), idcg(j, k=k, ideal=ideal))
