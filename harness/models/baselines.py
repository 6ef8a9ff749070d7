"""Reference baselines: uniformly random and most-popular recommenders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from harness.models.base import BaseRecommender
from metrics.scores import AucCounts

__all__ = ["PopularityModel", "RandomModel"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_USER_BATCH = 2**15  # users per pass of the popularity ranking (bounds the seen-item rows held)


class RandomModel(BaseRecommender):
    """Random ranking: each (user, item) gets a fixed pseudo-random score in [0, 1).

    Scores are a hash of (seed, user id, item id code), so a user's list does not depend on
    batching, on the other users requested or on call order. Unknown users get random lists too.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(exclude_seen=exclude_seen, batch_size=batch_size, progress=progress)
        self.seed = seed

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return self._uniform(self.user_ids_[user_codes])

    def _score_unknown(self, users: np.ndarray) -> np.ndarray:
        return self._uniform(users)

    def _uniform(self, users: np.ndarray) -> np.ndarray:
        """Counter-based uniforms (splitmix64 finalizer) over user-id hash × item code."""
        ids = np.asarray(users)
        if ids.dtype.kind not in "iu":
            ids = ids.astype(object)
        user_key = pd.util.hash_array(ids) ^ _mix(np.asarray([self.seed], dtype=np.uint64))
        items = np.arange(self.item_ids_.size, dtype=np.uint64)
        x = _mix(user_key)[:, None] + items[None, :] * _GOLDEN
        return (_mix(x) >> np.uint64(11)).astype(np.float64) * 2.0**-53


class PopularityModel(BaseRecommender):
    """Most popular first: score = number of distinct training users of the item.

    Every user, known or not, gets the same ranking minus their seen items.
    """

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return np.tile(self.item_popularity_, (user_codes.size, 1))

    def _rank(
        self,
        users: np.ndarray,
        k: int,
        exclude: bool,
        pairs: np.ndarray | None,
        seen: sp.csr_matrix | None = None,
    ) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
        """Top-k from the one global order, without a score matrix: the same lists as ranking
        each user's score row; with ``pairs``, the AUC counts from the integer score histogram
        (``_popularity_auc``), equal to the dense path's. Items ``seen`` besides the fitted
        rows take the dense path."""
        if seen is not None:
            return super()._rank(users, k, exclude, pairs, seen)
        order = np.argsort(-self.item_popularity_, kind="stable")  # ties: ascending id
        codes = self._user_index.get_indexer(users)
        position = np.empty(order.size, dtype=np.int64)
        position[order] = np.arange(order.size)
        places = np.empty((users.size, min(k, order.size)), dtype=np.int64)
        for start in range(0, users.size, _USER_BATCH):
            part = codes[start : start + _USER_BATCH]
            places[start : start + part.size] = _first_unseen(
                self.interactions_, part if exclude else np.full_like(part, -1), position, k
            )
        at, scores, counts, relevant = _lists(order, self.item_popularity_, places, k)
        if pairs is not None:
            counts, relevant = _popularity_auc(
                self.interactions_, self.item_popularity_, codes, exclude, pairs
            )
        return at, scores, counts, relevant

    def _pooled_wins(
        self,
        users: np.ndarray,
        exclude: bool,
        pairs: np.ndarray,
        relevant: np.ndarray,
        seen: sp.csr_matrix | None = None,
    ) -> float:
        """``global_auc``'s pooled wins from score histograms, exact (no score matrix): every
        user's negatives are the catalog minus their relevant and excluded items (the dense
        path with items ``seen`` besides the fitted rows)."""
        if seen is not None:
            return super()._pooled_wins(users, exclude, pairs, relevant, seen)
        values, level = np.unique(self.item_popularity_, return_inverse=True)
        taken = np.zeros(values.size, dtype=np.int64)  # excluded rows of all users, per score
        if exclude:
            codes = self._user_index.get_indexer(users)
            codes = codes[codes >= 0]
            for start in range(0, codes.size, _USER_BATCH):
                rows = self.interactions_[codes[start : start + _USER_BATCH]]
                taken += np.bincount(level[rows.indices], minlength=values.size)
        pos = np.bincount(np.searchsorted(values, relevant), minlength=values.size)
        catalog = np.bincount(level, minlength=values.size)
        return pooled_popularity_wins(catalog, pos, taken + pos, users.size)


def pooled_popularity_wins(
    catalog: np.ndarray, pos: np.ndarray, taken: np.ndarray, n_users: int
) -> float:
    """``global_auc``'s pooled wins when every user scores items by the same integers, exact:
    per score level, ascending, ``catalog`` items, ``pos`` relevant candidates of all users and
    ``taken`` rows of all users not among their negatives (relevant or excluded); every user's
    negatives are the catalog minus their taken rows, ties count 1/2. The in-process model and
    the Spark engine (which counts the same arrays in Spark) both finish here."""
    # Python integers (object arrays): users x items x relevant pairs can pass 2**63
    neg = int(n_users) * catalog.astype(object) - taken.astype(object)
    below = np.cumsum(neg) - neg
    return int((pos.astype(object) * (2 * below + neg)).sum()) / 2


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on uint64 (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


def _first_unseen(
    seen: sp.csr_matrix, codes: np.ndarray, position: np.ndarray, k: int
) -> np.ndarray:
    """Per user (a row of ``seen``, or ``-1``: nothing excluded), the places in the global order
    (``position[item]``) of the first ``min(k, n_items)`` items not in the row; ``n_items`` when
    fewer are left (padding).

    With the user's seen places sorted, ``q_0 < q_1 < ...``, ``r_i = q_i - i`` items are unseen
    before ``q_i``, so the ``j``-th unseen place is ``j + #{i : r_i <= j}``: one sort and one
    ``searchsorted`` for every user at once.
    """
    n_items = position.size
    width = min(k, n_items)
    known = codes >= 0
    rows = seen[codes[known]]
    counts = np.zeros(codes.size, dtype=np.int64)
    counts[known] = np.diff(rows.indptr)
    owner = np.repeat(np.arange(codes.size, dtype=np.int64), counts)
    stride = n_items + 1
    key = np.sort(owner * stride + position[rows.indices])
    starts = np.zeros(codes.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    r = key - (np.arange(key.size) - starts[owner])  # owner * stride + r_i, still sorted
    j = np.arange(width, dtype=np.int64)
    query = (np.arange(codes.size, dtype=np.int64) * stride)[:, None] + j
    before = np.searchsorted(r, query.ravel(), side="right").reshape(query.shape)
    return np.minimum(j + before - starts[:-1, None], n_items)


def _lists(
    order: np.ndarray, scores: np.ndarray, places: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
    """``_rank``'s output from places in the global ``order`` (``len(order)``: padding)."""
    n_users = places.shape[0]
    pad = places >= order.size
    cols = order[np.minimum(places, order.size - 1)]
    at = np.full((n_users, k), -1, dtype=np.int64)
    out = np.full((n_users, k), -np.inf)
    at[:, : places.shape[1]] = np.where(pad, -1, cols)
    out[:, : places.shape[1]] = np.where(pad, -np.inf, scores[cols])
    zeros = np.zeros(n_users)
    return at, out, AucCounts(zeros, zeros.copy(), zeros.copy()), np.zeros(0)


def _popularity_auc(
    seen: sp.csr_matrix,
    popularity: np.ndarray,
    codes: np.ndarray,
    exclude: bool,
    pairs: np.ndarray,
) -> tuple[AucCounts, np.ndarray]:
    """Each user's AUC counts over the catalog when every user's scores are ``popularity``
    (integers), and the scores of the relevant candidates in ``pairs`` order.

    ``codes``: the users' rows of ``seen`` (``-1``: unknown, nothing excluded), whose items are
    excluded when ``exclude``; ``pairs``: distinct relevant ``[user row; item code]`` sorted by
    row. Relevant pairs of seen items are not candidates. With ``C`` the catalog's score
    histogram and ``X`` a user's relevant and excluded items, twice the user's wins are the sum
    over relevant ``p`` of ``2·C(<s_p) + C(=s_p) - 2·X(<s_p) - X(=s_p)``; ``X(<s)``, ``X(=s)``
    are found by binary search in the sorted (user, score level) keys of ``X``, a batch of users
    at a time (no score matrix, no loop over users)."""
    n_users = codes.size
    values, level = np.unique(popularity, return_inverse=True)
    n_levels, n_items = values.size, popularity.size
    catalog = np.bincount(level, minlength=n_levels)
    lt2 = 2 * (np.cumsum(catalog) - catalog) + catalog  # twice the wins over the whole catalog
    wins2, n_pos, n_seen = np.zeros(n_users), np.zeros(n_users), np.zeros(n_users)
    candidate = np.ones(pairs.shape[1], dtype=bool)
    for start in range(0, n_users, _USER_BATCH):
        stop = min(start + _USER_BATCH, n_users)
        lo, hi = np.searchsorted(pairs[0], [start, stop])
        prow, pitem = pairs[0, lo:hi] - start, pairs[1, lo:hi]
        counts = np.zeros(stop - start, dtype=np.int64)
        if exclude:
            part = codes[start:stop]
            rows = seen[part[part >= 0]]
            counts[part >= 0] = np.diff(rows.indptr)
            sowner = np.repeat(np.arange(stop - start, dtype=np.int64), counts)
            sitem = rows.indices.astype(np.int64)
            skey = np.sort(sowner * n_items + sitem)
            pkey = prow * n_items + pitem
            at = np.minimum(np.searchsorted(skey, pkey), max(skey.size - 1, 0))
            is_seen = skey[at] == pkey if skey.size else np.zeros(pkey.size, dtype=bool)
            candidate[lo:hi] = ~is_seen
            prow, pitem = prow[~is_seen], pitem[~is_seen]
        else:
            sowner = sitem = np.zeros(0, dtype=np.int64)
        plevel = level[pitem]
        xkey = np.sort(np.concatenate([sowner * n_levels + level[sitem], prow * n_levels + plevel]))
        query = prow * n_levels + plevel
        left = np.searchsorted(xkey, query, side="left")
        right = np.searchsorted(xkey, query, side="right")
        first = np.searchsorted(xkey, prow * n_levels, side="left")
        twice = lt2[plevel] - 2 * (left - first) - (right - left)
        wins2[start:stop] = np.bincount(prow, weights=twice, minlength=stop - start)
        n_pos[start:stop] = np.bincount(prow, minlength=stop - start)
        n_seen[start:stop] = counts
    counts_out = AucCounts(wins2 / 2, n_pos, n_items - n_seen - n_pos)
    return counts_out, popularity[pairs[1][candidate]]
