"""Rating-prediction baseline: global mean + user bias + item bias (regularized, alternating)."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

from harness.data import ITEM, RATING, USER
from harness.models.base import BaseRecommender

__all__ = ["BiasRating"]


class BiasRating(BaseRecommender):
    """Predict ``r̂(u, i) = μ + b_u + b_i`` from the ``rating`` column; rank by it.

    ``μ`` is the mean training rating. Starting from zero biases, each of ``iterations`` rounds
    sets, in closed form (the exact minimizer of the regularized squared error given the other
    biases), first every item bias, then every user bias::

        b_i = Σ_{u ∈ U(i)} (r_ui − μ − b_u) / (reg_item + |U(i)|)
        b_u = Σ_{i ∈ I(u)} (r_ui − μ − b_i) / (reg_user + |I(u)|)

    Every training row counts as one observation (repeated (user, item) events each count).
    Unknown users or items have bias 0. As a ranker the score is the predicted rating, so a user's
    list is the items by item bias (the user's bias is the same for all items); unknown users get
    ``μ + b_i`` too (not the popularity fallback).

    This model *can predict ratings*: ``predict_ratings(users, items)``.
    """

    def __init__(
        self,
        reg_user: float = 10.0,
        reg_item: float = 10.0,
        iterations: int = 10,
        *,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(exclude_seen=exclude_seen, batch_size=batch_size, progress=progress)
        for name, value in (("reg_user", reg_user), ("reg_item", reg_item)):
            if not value >= 0.0:
                raise ValueError(f"'{name}' must be >= 0 (got {value!r})")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"'iterations' must be a positive int (got {iterations!r})")
        self.reg_user = float(reg_user)
        self.reg_item = float(reg_item)
        self.iterations = iterations

    def fit(self, train: pd.DataFrame) -> Self:
        """Check the ratings, encode ids (``BaseRecommender.fit``), then fit the biases."""
        if RATING not in train.columns:
            raise ValueError(
                f"{type(self).__name__} needs a {RATING!r} column in the training data "
                f"(got columns {[str(c) for c in train.columns]}); use a dataset with ratings"
            )
        ratings = pd.to_numeric(train[RATING], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(ratings)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            value = train[RATING].iloc[first]
            shown = repr(value.item() if isinstance(value, np.generic) else value)
            raise ValueError(
                f"training column {RATING!r} has {int(bad.sum())} missing or non-finite "
                f"rating(s), e.g. {shown} at row {first}"
            )
        super().fit(train)
        users = self._user_index.get_indexer(train[USER])
        items = self._item_index.get_indexer(train[ITEM])
        n_users, n_items = self.user_ids_.size, self.item_ids_.size
        n_u = np.bincount(users, minlength=n_users)
        n_i = np.bincount(items, minlength=n_items)
        mu = float(ratings.mean())
        resid = ratings - mu
        b_u = np.zeros(n_users)
        b_i = np.zeros(n_items)
        for _ in range(self.iterations):
            b_i = np.bincount(items, resid - b_u[users], n_items) / (self.reg_item + n_i)
            b_u = np.bincount(users, resid - b_i[items], n_users) / (self.reg_user + n_u)
        self.global_mean_ = mu
        self.user_bias_ = b_u
        self.item_bias_ = b_i
        return self

    def predict_ratings(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """``float64[n]`` predicted ratings of ``n`` (user, item) pairs; unknown ids: bias 0."""
        if not hasattr(self, "item_bias_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(train) first")
        users, items = np.asarray(users), np.asarray(items)
        if users.ndim != 1 or users.shape != items.shape:
            raise ValueError(
                f"'users' and 'items' must be 1-D arrays of equal length "
                f"(got shapes {users.shape} and {items.shape})"
            )
        u = self._user_index.get_indexer(users)
        i = self._item_index.get_indexer(items)
        b_u = np.where(u >= 0, self.user_bias_[np.maximum(u, 0)], 0.0)
        b_i = np.where(i >= 0, self.item_bias_[np.maximum(i, 0)], 0.0)
        return self.global_mean_ + b_u + b_i

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return self.global_mean_ + self.user_bias_[user_codes][:, None] + self.item_bias_[None, :]

    def _score_unknown(self, users: np.ndarray) -> np.ndarray:
        return np.tile(self.global_mean_ + self.item_bias_, (len(users), 1))
