"""PopularityModel ranks from one global order (no score matrix): the lists must be exactly a
naive per-user ranking's — popularity descending, ties by ascending item id, seen items left out,
padding when the catalog runs out, nothing excluded for unknown users."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.models import PAD_ITEM_INT, PopularityModel


def _naive(train: pd.DataFrame, users: list, k: int, exclude: bool) -> tuple[list, list]:
    """Per user, by hand: distinct-user counts, sort by (-count, id), drop seen, pad."""
    pairs = train[["user", "item"]].drop_duplicates()
    counts = pairs.groupby("item")["user"].count()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ids, scores = [], []
    for user in users:
        seen = set(pairs.loc[pairs["user"] == user, "item"]) if exclude else set()
        row = [(item, float(c)) for item, c in ranked if item not in seen][:k]
        ids.append([i for i, _ in row] + [None] * (k - len(row)))
        scores.append([s for _, s in row] + [-np.inf] * (k - len(row)))
    return ids, scores


@pytest.mark.parametrize("text_ids", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_popularity_lists_match_a_naive_ranking(text_ids: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    train = pd.DataFrame({"user": rng.integers(0, 40, n), "item": rng.integers(0, 25, n) * 3 - 20})
    # a heavy user who has seen almost the whole catalog, so padding appears
    heavy = pd.DataFrame({"user": 99, "item": np.arange(24) * 3 - 20})
    train = pd.concat([train, heavy], ignore_index=True)
    if text_ids:
        train = train.assign(
            user="u" + train["user"].astype(str), item="i" + train["item"].astype(str)
        )
    known = [*list(pd.unique(train["user"]))[:15], train["user"].iloc[-1]]
    unknown = ["nobody"] if text_ids else [12345]
    users = np.asarray(known + unknown, dtype=object if text_ids else np.int64)
    model = PopularityModel().fit(train)
    for k in (1, 5, 30):
        for exclude in (True, False):
            ids, scores = model.recommend(users, k, exclude_seen=exclude)
            want_ids, want_scores = _naive(train, list(users), k, exclude)
            pad = None if text_ids else PAD_ITEM_INT
            assert ids.tolist() == [[pad if i is None else i for i in r] for r in want_ids]
            assert np.array_equal(scores, np.asarray(want_scores))
            assert scores.dtype == np.float64


def test_popularity_lists_do_not_depend_on_the_users_asked_with() -> None:
    rng = np.random.default_rng(5)
    train = pd.DataFrame({"user": rng.integers(0, 200, 2000), "item": rng.integers(0, 60, 2000)})
    model = PopularityModel().fit(train)
    users = np.arange(200)
    ids, scores = model.recommend(users, 10)
    ids2, scores2 = model.recommend(users[::-1], 10)
    assert np.array_equal(ids, ids2[::-1]) and np.array_equal(scores, scores2[::-1])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_score_is_refused(bad: float) -> None:
    from harness.models.base import BaseRecommender

    class Broken(BaseRecommender):
        def _score(self, user_codes: np.ndarray) -> np.ndarray:
            out = np.full((user_codes.size, self.item_ids_.size), 1.7e308)  # sum overflows
            out[user_codes == 2, -1] = bad  # user 3 (code 2) only
            return out

    train = pd.DataFrame({"user": [1, 1, 2, 3], "item": [5, 6, 6, 7]})
    model = Broken().fit(train)
    assert model.recommend(np.array([1]), 2)[1].shape == (1, 2)  # user 1's scores are finite
    with pytest.raises(ValueError, match="non-finite scores"):
        model.recommend(np.array([1, 2, 3]), 2)
