"""The judged form of ranked lists that every ranking metric is computed from."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["Judged", "discount"]


def discount(n: int) -> np.ndarray:
    """``1 / log2(rank + 1)`` for ranks 1..n."""
    return 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))


@dataclass(frozen=True)
class Judged:
    """Ranked lists of ``n`` users cut at width ``K``, judged against the truth.

    ``hits[u, j]`` says whether the item at rank ``j + 1`` is relevant (relevance >= threshold);
    ``gains[u, j]`` is its gain (0 at misses and padding); ``n_ret[u]`` is the list length
    (positions at and after it are padding); ``n_rel[u]`` is ``|T_u|``. The ideal ordering of each
    user's positive gains is kept flat, sorted by user then by gain descending, so ideal DCG at any
    cutoff is one weighted ``bincount`` and no user's truth is padded.
    """

    hits: np.ndarray
    gains: np.ndarray
    n_ret: np.ndarray
    n_rel: np.ndarray
    ideal_user: np.ndarray
    ideal_rank: np.ndarray
    ideal_gain: np.ndarray

    @property
    def n_users(self) -> int:
        """Number of users (rows)."""
        return int(self.hits.shape[0])

    @property
    def width(self) -> int:
        """Judged list width ``K``."""
        return int(self.hits.shape[1])

    @cached_property
    def cum_hits(self) -> np.ndarray:
        """``cum_hits[u, j]`` = hits in the top ``j + 1``; computed once, shared by all cutoffs."""
        return np.cumsum(self.hits, axis=1, dtype=np.int32)

    def hits_at(self, k: int | None) -> np.ndarray:
        """Hits in the top ``k`` as float64."""
        c = self.cut(k)
        if c == 0:
            return np.zeros(self.n_users)
        return self.cum_hits[:, c - 1].astype(np.float64)

    def cut(self, k: int | None) -> int:
        """Effective column count for cutoff ``k`` (``None`` = whole list)."""
        return self.width if k is None else min(k, self.width)

    def ideal_dcg(self, k: int | None) -> np.ndarray:
        """DCG of the ideal ordering of all the user's gains, cut at ``k`` (``None`` = all)."""
        keep = self.ideal_rank < (np.iinfo(np.int64).max if k is None else k)
        weights = self.ideal_gain[keep] / np.log2(self.ideal_rank[keep] + 2.0)
        return np.bincount(self.ideal_user[keep], weights=weights, minlength=self.n_users)

    @classmethod
    def from_lists(
        cls,
        relevance: np.ndarray,
        truth: list[np.ndarray] | None = None,
        *,
        threshold: float = 1.0,
        gain: str = "exponential",
        n_rel: np.ndarray | None = None,
    ) -> Judged:
        """Build from a dense ``relevance[u, j]`` matrix of the listed items (NaN = padding).

        ``truth[u]`` holds all relevance values of user ``u``'s test items (default: the relevant
        values in the list itself). Meant for small inputs, doctests and tests.
        """
        rel = np.atleast_2d(np.asarray(relevance, dtype=np.float64))
        pad = np.isnan(rel)
        n_ret = np.where(pad.any(axis=1), pad.argmax(axis=1), rel.shape[1]).astype(np.int64)
        rel = np.where(pad, 0.0, rel)
        if truth is None:
            truth = [row[row > 0] for row in rel]
        truth_rel = [np.asarray(t, dtype=np.float64) for t in truth]
        ideal = [np.sort(gain_of(t, gain, threshold)[t > 0])[::-1] for t in truth_rel]
        counts = np.array([len(g) for g in ideal], dtype=np.int64)
        ideal_user = np.repeat(np.arange(len(ideal), dtype=np.int64), counts)
        ideal_rank = np.arange(counts.sum(), dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        if n_rel is None:
            n_rel = np.array([(t >= threshold).sum() for t in truth_rel], dtype=np.int64)
        return cls(
            hits=rel >= threshold,
            gains=gain_of(rel, gain, threshold),
            n_ret=n_ret,
            n_rel=np.asarray(n_rel, dtype=np.int64),
            ideal_user=ideal_user,
            ideal_rank=ideal_rank,
            ideal_gain=np.concatenate(ideal) if ideal else np.zeros(0),
        )


def gain_of(relevance: np.ndarray, gain: str, threshold: float = 1.0) -> np.ndarray:
    """Gain of graded relevance: ``rel`` (linear), ``2**rel - 1`` (exponential), 0 for rel <= 0;
    or 1 when ``rel >= threshold`` else 0 (binary: RecBole, Microsoft Recommenders, rectools).

    Linear and exponential gains use the graded value whatever the relevance threshold, as
    trec_eval's ``ndcg`` does.
    """
    rel = np.asarray(relevance, dtype=np.float64)
    if gain == "binary":
        return (rel >= threshold).astype(np.float64)
    rel = np.maximum(rel, 0.0)
    return rel if gain == "linear" else np.exp2(rel) - 1.0
