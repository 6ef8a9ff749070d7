"""Reference baselines: uniformly random and most-popular recommenders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from harness.models.base import BaseRecommender, _pad_id
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
        self, users: np.ndarray, k: int, exclude: bool, pairs: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
        """Top-k from the one global order, without a score matrix: the same lists as ranking
        each user's score row (``pairs``, the AUC counts, take the general path)."""
        if pairs is not None:
            return super()._rank(users, k, exclude, pairs)
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
        return _lists(self.item_ids_, order, self.item_popularity_, places, k)


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
    item_ids: np.ndarray, order: np.ndarray, scores: np.ndarray, places: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
    """``_rank``'s output from places in the global ``order`` (``len(order)``: padding)."""
    n_users = places.shape[0]
    pad = places >= order.size
    cols = order[np.minimum(places, order.size - 1)]
    ids = np.full((n_users, k), _pad_id(item_ids), dtype=item_ids.dtype)
    out = np.full((n_users, k), -np.inf)
    ids[:, : places.shape[1]] = np.where(pad, ids[:, : places.shape[1]], item_ids[cols])
    out[:, : places.shape[1]] = np.where(pad, -np.inf, scores[cols])
    zeros = np.zeros(n_users)
    return ids, out, AucCounts(zeros, zeros.copy(), zeros.copy()), np.zeros(0)
