"""Reference baselines: uniformly random and most-popular recommenders."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.models.base import BaseRecommender

__all__ = ["PopularityModel", "RandomModel"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


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


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on uint64 (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x
