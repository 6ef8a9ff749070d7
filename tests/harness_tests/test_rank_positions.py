"""Lists as positions in the model's item ids (``BaseRecommender.rank_positions``, and
``recommend_with_auc(positions=True)``) give the run's long top-k table without a Python object
per list entry: the table must be exactly what ``recommend``'s ids give, built here by a plain
loop, with the same dtypes (text ids as pandas' ``str``). ``PrecomputedScores`` gives positions
in its file's items (``position_ids_``); its lists are checked against a top-k of the file's rows
written here, and ``_rank_catalog`` must take them as positions."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.experiment import MetricSuite, ModelOutcome, _rank_catalog, _recommendations
from harness.models import (
    PAD_ITEM_INT,
    ImplicitItemCosine,
    PopularityModel,
    PrecomputedScores,
    RandomModel,
    padding_mask,
)

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


# ------------------------------------------------------------------ PrecomputedScores


def naive_file_lists(
    rows: list[tuple], seen: set[tuple], users: np.ndarray, k: int, exclude: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each user's top-``k`` of the file ``rows`` (user, item, score): score descending, ties by
    ascending id, training pairs dropped when ``exclude``, padded with the padding id and -inf."""
    text = users.dtype == object
    ids = np.full(
        (len(users), k), None if text else PAD_ITEM_INT, dtype=object if text else np.int64
    )
    scores = np.full((len(users), k), -np.inf)
    for u, user in enumerate(users):
        mine = [(i, s) for (v, i, s) in rows if v == user and not (exclude and (v, i) in seen)]
        for r, (item, score) in enumerate(sorted(mine, key=lambda row: (-row[1], row[0]))[:k]):
            ids[u, r], scores[u, r] = item, score
    return ids, scores


@st.composite
def file_cases(draw: st.DrawFn) -> tuple[list[tuple], list[tuple], np.ndarray, str, list, list]:
    """A file of (user, item, score) rows with tied scores, a training set sharing some of its
    pairs, requested users of which some have no row in the file, integer or text ids (text
    order differs from integer order: "i10" < "i9") or integers on one side only (then both
    are compared as text), CSV or Parquet. Last: the rows and pairs as the reference sees them."""
    n_users, n_items = draw(st.integers(1, 5)), draw(st.integers(1, 12))
    cells = st.tuples(st.integers(0, n_users - 1), st.integers(0, n_items - 1))
    pairs = draw(st.lists(cells, min_size=1, max_size=30, unique=True))
    scores = draw(
        st.lists(st.sampled_from([0.5, 1.0, 2.0, -3.0]), min_size=len(pairs), max_size=len(pairs))
    )
    train = draw(st.lists(st.one_of(st.sampled_from(pairs), cells), min_size=1, max_size=15))
    asked = sorted(draw(st.lists(st.integers(0, n_users + 2), min_size=1, max_size=7, unique=True)))
    rows = [(u, i, s) for (u, i), s in zip(pairs, scores, strict=True)]
    text_rows = [(f"u{u}", f"i{i}", s) for u, i, s in rows]
    text_train = [(f"u{u}", f"i{i}") for u, i in train]
    kind, fmt = draw(st.sampled_from(["int", "text", "file int", "train int"])), draw(FORMAT)
    if kind == "int":
        return rows, train, np.array(asked, dtype=np.int64), fmt, rows, train
    if kind == "text":
        users = np.array([f"u{u}" for u in asked], dtype=object)
        return text_rows, text_train, users, fmt, text_rows, text_train
    as_text = [(str(u), str(i), s) for u, i, s in rows]  # "10" < "9"
    if kind == "file int":
        users = np.array([str(u) for u in asked], dtype=object)
        return rows, text_train, users, fmt, as_text, text_train
    users = np.array([f"u{u}" for u in asked], dtype=object)
    return text_rows, train, users, fmt, text_rows, [(str(u), str(i)) for u, i in train]


FORMAT = st.sampled_from(["csv", "parquet"])


def fitted_file(
    folder: Path, rows: list[tuple], train: list[tuple], fmt: str, exclude: bool
) -> PrecomputedScores:
    """A ``PrecomputedScores`` over ``rows`` written as ``fmt``, fitted on ``train``."""
    table = pd.DataFrame(rows, columns=["user", "item", "score"])
    path = folder / f"scores.{fmt}"
    if fmt == "csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path)
    frame = pd.DataFrame(train, columns=["user", "item"])
    return PrecomputedScores(path, exclude_seen=exclude).fit(frame)


@settings(max_examples=150, deadline=None)
@given(file_cases(), st.integers(1, 9), st.booleans())
def test_precomputed_positions_give_recommends_table(case: tuple, k: int, exclude: bool) -> None:
    rows, train, users, fmt, naive_rows, naive_train = case
    with tempfile.TemporaryDirectory() as folder:
        model = fitted_file(Path(folder), rows, train, fmt, exclude)
    absent = len({u for u in users.tolist()} - {r[0] for r in naive_rows})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids, scores = model.recommend(users, k)
        stats = dict(model.stats_)
        at, at_scores = model.rank_positions(users, k)
    # both warn about users without a list, attributed to their caller (this file)
    assert [w.filename for w in caught] == [__file__] * (2 if absent else 0)
    assert model.stats_ == stats and stats["users_without_list"] == absent

    want_ids, want_scores = naive_file_lists(naive_rows, set(naive_train), users, k, exclude)
    assert ids.dtype == want_ids.dtype and np.array_equal(ids, want_ids)
    assert np.array_equal(scores, want_scores)
    assert at.dtype == np.int64 and np.array_equal(at_scores, scores)
    assert np.array_equal(at < 0, padding_mask(scores))
    assert model.position_ids_.dtype == ids.dtype

    want = naive_table(users, ids, scores)
    pd.testing.assert_frame_equal(_recommendations(users, at, at_scores, model.position_ids_), want)
    # the run's path takes positions (recommend is not called) and gives the same table
    model.recommend = None
    qrels = pd.DataFrame({"user": users, "item": ids[:, 0], "relevance": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table, counts = _rank_catalog(
            model, users, qrels, MetricSuite(k=k, names=("ndcg",)), [], ModelOutcome("m")
        )
    assert counts is None
    pd.testing.assert_frame_equal(table, want)
    if users.dtype == object:
        assert table["user"].dtype == table["item"].dtype == "str"


def test_position_ids_only_where_positions_mean_recommend() -> None:
    train = pd.DataFrame({"user": [1, 1, 2], "item": [10, 20, 30]})
    popularity = PopularityModel().fit(train)
    assert popularity.position_ids_ is popularity.item_ids_

    class Reversed(PopularityModel):
        """A model that ranks its own way: its positions would not be its lists."""

        def recommend(
            self, users: np.ndarray, k: int, *, exclude_seen: bool | None = None
        ) -> tuple[np.ndarray, np.ndarray]:
            ids, scores = super().recommend(users, k, exclude_seen=exclude_seen)
            return ids[:, ::-1], scores[:, ::-1]

    model = Reversed(exclude_seen=False).fit(train)
    assert model.position_ids_ is None
    users = np.array([1, 2])
    qrels = pd.DataFrame({"user": users, "item": [10, 30], "relevance": 1.0})
    table, _ = _rank_catalog(
        model, users, qrels, MetricSuite(k=3, names=("ndcg",)), [], ModelOutcome("m")
    )
    assert table["item"].tolist() == [30, 20, 10] * 2  # recommend's (reversed) lists
