"""Lists as positions in the model's item ids (``BaseRecommender.rank_positions``, and
``recommend_with_auc(positions=True)``) give the run's long top-k table without a Python object
per list entry: the table must be exactly what ``recommend``'s ids give, built here by a plain
loop, with the same dtypes (text ids as pandas' ``str``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.experiment import _recommendations
from harness.models import ImplicitItemCosine, PopularityModel, RandomModel, padding_mask

MODELS = [RandomModel, PopularityModel, ImplicitItemCosine]


def naive_table(users: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> pd.DataFrame:
    """The long table (user, rank, item, score) from ``recommend``'s output, row by row."""
    rows = [
        (users[u], r + 1, ids[u, r], scores[u, r])
        for u in range(len(users))
        for r in range(ids.shape[1])
        if not padding_mask(scores[u : u + 1, r : r + 1]).item()
    ]
    columns = list(zip(*rows, strict=True)) if rows else [[]] * 4
    kinds = ["str" if users.dtype == object else np.int64, np.int64]
    kinds += ["str" if ids.dtype == object else np.int64, np.float64]
    names = ["user", "rank", "item", "score"]
    return pd.DataFrame(
        {n: pd.Series(c, dtype=t) for n, c, t in zip(names, columns, kinds, strict=True)}
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[pd.DataFrame, np.ndarray]:
    """Small training sets (few items, so lists pad when seen items are excluded) with text or
    integer ids, and requested users that include unknown ones."""
    n_users, n_items = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    cells = st.tuples(st.integers(0, n_users - 1), st.integers(0, n_items - 1))
    train = pd.DataFrame(draw(st.lists(cells, min_size=1, max_size=25)), columns=["user", "item"])
    asked = np.array(
        draw(st.lists(st.integers(0, n_users + 2), min_size=1, max_size=8, unique=True))
    )
    if draw(st.booleans()):  # text ids whose order differs from the integers' ("u10" < "u9")
        train = train.assign(
            user="u" + train["user"].astype(str), item="i" + train["item"].astype(str)
        )
        asked = np.array([f"u{u}" for u in asked], dtype=object)
    return train, np.sort(asked)


@settings(max_examples=150, deadline=None)
@given(cases(), st.integers(1, 9), st.booleans(), st.sampled_from(MODELS))
def test_positions_give_recommends_table(case: tuple, k: int, exclude: bool, cls: type) -> None:
    train, users = case
    model = cls(exclude_seen=exclude).fit(train)
    ids, scores = model.recommend(users, k)
    want = naive_table(users, ids, scores)
    at, got_scores = model.rank_positions(users, k)
    assert np.array_equal(got_scores, scores)
    assert np.array_equal(at < 0, padding_mask(scores))
    got = _recommendations(users, at, got_scores, model.item_ids_)
    pd.testing.assert_frame_equal(got, want)
    # the ids path gives the same table (an empty one has object columns there)
    pd.testing.assert_frame_equal(
        _recommendations(users, ids, scores), got, check_dtype=len(got) > 0
    )
    if users.dtype == object:
        assert got["user"].dtype == got["item"].dtype == "str"


@pytest.mark.parametrize("pooled", [False, True])
@pytest.mark.parametrize("cls", MODELS)
def test_recommend_with_auc_positions_are_its_lists(cls: type, pooled: bool) -> None:
    train = pd.DataFrame({"user": list("aabbbcd"), "item": ["x", "y", "x", "z", "w", "y", "v"]})
    model = cls().fit(train)
    users = np.array(["a", "b", "c", "e"], dtype=object)  # "e" is unknown
    ru, ri = np.array(["a", "b", "c", "e"], dtype=object), np.array(["z", "y", "x", "w"])
    ids, scores, counts = model.recommend_with_auc(users, 4, ru, ri, pooled=pooled)
    at, at_scores, at_counts = model.recommend_with_auc(
        users, 4, ru, ri, pooled=pooled, positions=True
    )
    assert np.array_equal(at_scores, scores)
    for name in ("wins", "n_pos", "n_neg"):
        assert np.array_equal(getattr(at_counts, name), getattr(counts, name))
    assert np.array_equal([at_counts.pooled_wins], [counts.pooled_wins], equal_nan=True)
    listed = np.where(at >= 0, model.item_ids_[np.maximum(at, 0)], None)
    assert (listed == ids).all()
    assert (at < 0).sum() > 0  # a, b and c have seen items excluded: their lists pad
