"""PopularityModel's catalog AUC counts come from the integer score histogram, not a score matrix:
they must be exactly (==) the dense general path's (``BaseRecommender._rank`` /
``BaseRecommender._pooled_wins`` on the same model), and a tiny case is counted by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.models import PopularityModel
from harness.models.base import BaseRecommender
from metrics.scores import AucCounts


def _pairs(model: PopularityModel, users: np.ndarray, ru: np.ndarray, ri: np.ndarray) -> np.ndarray:
    """``recommend_with_auc``'s relevant pairs (``[row; item code]``, distinct, sorted)."""
    rows = pd.Index(users).get_indexer(ru)
    cols = model._item_index.get_indexer(ri)
    return np.unique(np.stack([rows, cols])[:, (rows >= 0) & (cols >= 0)], axis=1)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray, bool]:
    """Small training sets with many popularity ties, known and unknown users, relevant pairs
    of seen items, of unknown items, of users not requested, duplicated ones, and users without
    any."""
    n_users = draw(st.integers(1, 8))
    n_items = draw(st.integers(1, 9))
    cells = st.tuples(st.integers(0, n_users - 1), st.integers(0, n_items - 1))
    train = draw(st.lists(cells, min_size=1, max_size=30))
    frame = pd.DataFrame(train, columns=["user", "item"])
    asked = draw(st.lists(st.integers(0, n_users + 2), min_size=0, max_size=10, unique=True))
    relevant = draw(
        st.lists(st.tuples(st.integers(0, n_users + 3), st.integers(0, n_items + 1)), max_size=25)
    )
    relevant += relevant[: draw(st.integers(0, 3))]  # duplicates
    relevant += train[: draw(st.integers(0, 3))]  # seen items
    ru = np.array([u for u, _ in relevant], dtype=np.int64)
    ri = np.array([i for _, i in relevant], dtype=np.int64)
    return frame, np.array(asked, dtype=np.int64), ru, ri, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(_cases(), st.integers(1, 12))
def test_histogram_counts_equal_the_dense_path(case: tuple, k: int) -> None:
    train, users, ru, ri, exclude = case
    model = PopularityModel().fit(train)
    pairs = _pairs(model, users, ru, ri)
    ids, scores, counts, relevant = model._rank(users, k, exclude, pairs)
    want_ids, want_scores, want, want_relevant = BaseRecommender._rank(
        model, users, k, exclude, pairs
    )
    assert np.array_equal(ids, want_ids)
    assert np.array_equal(scores, want_scores)
    for name in ("wins", "n_pos", "n_neg"):
        got, ref = getattr(counts, name), getattr(want, name)
        assert got.dtype == ref.dtype == np.float64
        assert np.array_equal(got, ref), name
    assert np.array_equal(relevant, want_relevant)  # same order too (pairs order)
    pooled = model._pooled_wins(users, exclude, pairs, relevant)
    assert pooled == BaseRecommender._pooled_wins(model, users, exclude, pairs, want_relevant)
    # the order of the relevant scores does not matter to the pooled wins
    assert pooled == model._pooled_wins(users, exclude, pairs, relevant[::-1].copy())


@pytest.mark.parametrize("exclude", [True, False])
def test_recommend_with_auc_pooled_counted_by_hand(exclude: bool) -> None:
    # popularity: a=3 (users 1,2,3), b=2 (1,2), c=2 (3,4), d=1 (4)
    train = pd.DataFrame(
        {
            "user": [1, 1, 2, 2, 3, 3, 4, 4],
            "item": ["a", "b", "a", "b", "a", "c", "c", "d"],
        }
    )
    model = PopularityModel().fit(train)
    users = np.array([1, 4, 9])  # 9: unknown, nothing excluded
    # user 1: c relevant (and a, seen); user 4: a relevant and unknown item z; user 9: b and d;
    # user 3 is not asked for
    ru = np.array([1, 1, 4, 4, 9, 9, 9, 3])
    ri = np.array(["c", "a", "a", "z", "b", "d", "b", "d"])
    ids, scores, counts = model.recommend_with_auc(
        users, 2, ru, ri, pooled=True, exclude_seen=exclude
    )
    if exclude:
        # user 1: candidates c(2), d(1); relevant c; negatives d -> wins 1
        # user 4: candidates a(3), b(2); relevant a; negatives b -> wins 1
        # user 9: candidates a3 b2 c2 d1; relevant b, d; negatives a, c
        #   b beats none of a, ties c: 0.5; d: 0 -> 0.5
        wins, n_pos, n_neg = [1.0, 1.0, 0.5], [1.0, 1.0, 2.0], [1.0, 1.0, 2.0]
        # pooled negatives: d(1) from user 1, b(2) from user 4, a(3), c(2) from user 9
        # relevant scores: c=2, a=3, b=2, d=1
        # c=2: > d, = b, = c -> 1 + 0.5 + 0.5 = 2; a=3: > d, b, c, = a -> 3.5; b=2: 2; d=1: 0.5
        pooled = 8.0
        assert ids.tolist() == [["c", "d"], ["a", "b"], ["a", "b"]]
    else:
        # user 1: candidates a3 b2 c2 d1; relevant a, c; negatives b, d
        #   a: 2, c: 0.5 + 1 -> 3.5
        # user 4: relevant a; negatives b, c, d -> 3
        # user 9: relevant b, d; negatives a, c -> 0.5
        wins, n_pos, n_neg = [3.5, 3.0, 0.5], [2.0, 1.0, 2.0], [2.0, 3.0, 2.0]
        # pooled negatives: b2 d1 (user 1), b2 c2 d1 (user 4), a3 c2 (user 9)
        # relevant: a3 -> 6 (all but a3) + 0.5 = 6.5 each (two of them): 13
        #   c2 -> d, d: 2; b, b, c, c tied: 2 -> 4; b2 -> 4; d1 -> d, d tied: 1
        pooled = 13.0 + 4.0 + 4.0 + 1.0
        assert ids.tolist() == [["a", "b"]] * 3
    assert isinstance(counts, AucCounts)
    assert counts.wins.tolist() == wins
    assert counts.n_pos.tolist() == n_pos
    assert counts.n_neg.tolist() == n_neg
    assert counts.pooled_wins == pooled
    assert scores[0, 0] == (2.0 if exclude else 3.0)


def test_many_users_and_ties_match_the_dense_path() -> None:
    """500 users (200 unknown), 4000 relevant draws: the same counts as the dense path."""
    rng = np.random.default_rng(3)
    train = pd.DataFrame({"user": rng.integers(0, 300, 3000), "item": rng.integers(0, 400, 3000)})
    model = PopularityModel().fit(train)
    users = np.arange(-200, 300)  # 200 unknown users
    ru = rng.integers(-200, 300, 4000)
    ri = rng.integers(0, 400, 4000)
    pairs = _pairs(model, users, ru, ri)
    for exclude in (True, False):
        _, _, counts, relevant = model._rank(users, 10, exclude, pairs)
        _, _, want, want_relevant = BaseRecommender._rank(model, users, 10, exclude, pairs)
        assert np.array_equal(counts.wins, want.wins)
        assert np.array_equal(counts.n_neg, want.n_neg)
        assert model._pooled_wins(users, exclude, pairs, relevant) == (
            BaseRecommender._pooled_wins(model, users, exclude, pairs, want_relevant)
        )
