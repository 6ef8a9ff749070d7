"""Plug-in models for the tests: a user's own class, and deliberately broken ones."""

from __future__ import annotations

import numpy as np
import pandas as pd


class MostRecent:
    """A user's own recommender (no harness base class): the k most recently popular items."""

    def __init__(self, window_days: int = 30) -> None:
        self.window_days = window_days

    def fit(self, train: pd.DataFrame) -> MostRecent:
        """Count items in the last ``window_days`` of training."""
        recent = train[train["timestamp"] >= train["timestamp"].max() - self.window_days * 86400]
        counts = recent["item"].value_counts()
        order = np.lexsort((counts.index.to_numpy(), -counts.to_numpy()))
        self.items_ = counts.index.to_numpy()[order]
        self.scores_ = counts.to_numpy()[order].astype(np.float64)
        return self

    def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The same top-k for everyone (seen items are not excluded: the user's choice)."""
        n = min(k, len(self.items_))
        ids = np.full((len(users), k), np.iinfo(np.int64).min, dtype=np.int64)
        scores = np.full((len(users), k), -np.inf)
        ids[:, :n] = self.items_[:n]
        scores[:, :n] = self.scores_[:n]
        return ids, scores


class RecommendsNothing(MostRecent):
    """Fits, then gives every user a list of padding only."""

    def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids = np.full((len(users), k), np.iinfo(np.int64).min, dtype=np.int64)
        return ids, np.full((len(users), k), -np.inf)


class FailsToFit:
    """Raises during fit."""

    def fit(self, train: pd.DataFrame) -> FailsToFit:
        raise RuntimeError("deliberate failure in fit")

    def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise AssertionError("never reached")


class FailsToBuild:
    """Raises in its constructor."""

    def __init__(self) -> None:
        raise ValueError("deliberate failure in __init__")


class NanSecond(MostRecent):
    """Breaks the contract: every list's second score is NaN."""

    def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = super().recommend(users, k)
        scores[:, 1] = np.nan
        return ids, scores
