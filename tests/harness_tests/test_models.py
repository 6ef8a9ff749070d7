"""Models: output contract, seen-item exclusion, determinism, top-k ties, and quality ordering."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from harness.models import (
    PAD_ITEM_INT,
    ImplicitItemCosine,
    PopularityModel,
    RandomModel,
    Recommender,
    padding_mask,
    topk_rows,
)
from harness.split import make_split
from harness.synthetic import generate

MODELS = [RandomModel, PopularityModel, ImplicitItemCosine]  # the random, popularity, item_knn


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return generate(n_users=300, n_items=200, n_events=6_000, seed=11)


@pytest.fixture(scope="module")
def loo() -> tuple[pd.DataFrame, pd.DataFrame]:
    split = make_split(generate(seed=0), "leave_one_out")
    return split.train, split.test


def tiny() -> pd.DataFrame:
    """u1 saw a, b; u2 saw a, b, c; u3 saw c; ids are strings."""
    pairs = [("u1", "a"), ("u1", "b"), ("u2", "a"), ("u2", "b"), ("u2", "c"), ("u3", "c")]
    df = pd.DataFrame(pairs, columns=["user", "item"]).astype("str")
    df["timestamp"] = np.arange(len(df), dtype=np.int64)
    return df


# ---------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("model_cls", MODELS)
def test_output_shape_dtype_order_and_seen_exclusion(model_cls: type, data: pd.DataFrame) -> None:
    model = model_cls().fit(data)
    assert isinstance(model, Recommender)
    users = np.array([0, 5, 7, 299, 5])
    ids, scores = model.recommend(users, 20)
    assert ids.shape == scores.shape == (5, 20)
    assert ids.dtype == np.int64 and scores.dtype == np.float64
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    assert np.isfinite(scores).all()
    for row, user in enumerate(users):
        seen = set(data.loc[data["user"] == user, "item"])
        assert not seen & set(ids[row].tolist())
        assert len(set(ids[row].tolist())) == 20  # no repeats
    np.testing.assert_array_equal(ids[1], ids[4])  # same user, same list


@pytest.mark.parametrize("model_cls", MODELS)
def test_exclude_seen_false_can_return_seen_items(model_cls: type, data: pd.DataFrame) -> None:
    heavy = data["user"].value_counts().index[0]
    model = model_cls().fit(data)
    ids, _ = model.recommend(np.array([heavy]), 200, exclude_seen=False)
    assert set(ids[0].tolist()) == set(data["item"])  # the whole catalog, seen items included
    ids2, _ = model_cls(exclude_seen=False).fit(data).recommend(np.array([heavy]), 200)
    np.testing.assert_array_equal(ids, ids2)


@pytest.mark.parametrize("model_cls", MODELS)
def test_padding_when_catalog_runs_out(model_cls: type) -> None:
    model = model_cls().fit(tiny())
    ids, scores = model.recommend(np.array(["u1", "u2", "nobody"], dtype=object), 5)
    assert ids.dtype == object and ids.shape == (3, 5)
    pad = padding_mask(scores)
    # u1 has 1 unseen item (c), u2 none, an unknown user all 3
    assert pad.sum(axis=1).tolist() == [4, 5, 2]
    assert ids[0, 0] == "c"
    assert all(x is None for x in ids[pad])
    assert set(ids[2, :3]) == {"a", "b", "c"}

    int_train = tiny().assign(
        item=lambda d: d["item"].map({"a": 1, "b": 2, "c": 3}).astype("int64")
    )
    ids, scores = model_cls().fit(int_train).recommend(np.array(["u2"]), 2)
    assert ids.tolist() == [[PAD_ITEM_INT, PAD_ITEM_INT]]
    assert np.isneginf(scores).all()


@pytest.mark.parametrize("model_cls", MODELS)
def test_determinism_and_batching_do_not_change_results(
    model_cls: type, data: pd.DataFrame
) -> None:
    users = np.concatenate([np.arange(300), [1000, 1001]])  # two unknown users at the end
    ids_a, scores_a = model_cls().fit(data).recommend(users, 10)
    ids_b, scores_b = model_cls(batch_size=7).fit(data).recommend(users[::-1], 10)
    np.testing.assert_array_equal(ids_a, ids_b[::-1])
    np.testing.assert_array_equal(scores_a, scores_b[::-1])


def test_random_model_seed_changes_lists(data: pd.DataFrame) -> None:
    users = np.arange(50)
    a, _ = RandomModel(seed=1).fit(data).recommend(users, 10)
    b, _ = RandomModel(seed=2).fit(data).recommend(users, 10)
    assert (a != b).mean() > 0.9


def test_unknown_users_fall_back(data: pd.DataFrame) -> None:
    pop_ids, pop_scores = PopularityModel().fit(data).recommend(np.array([10_000]), 10)
    counts = data.groupby("item")["user"].nunique()
    expected = counts.sort_index().sort_values(ascending=False, kind="stable").index[:10]
    assert pop_ids[0].tolist() == expected.tolist()
    assert pop_scores[0].tolist() == counts[expected].astype(float).tolist()
    knn_ids, _ = ImplicitItemCosine().fit(data).recommend(np.array([10_000]), 10)
    np.testing.assert_array_equal(knn_ids, pop_ids)
    rnd_ids, rnd_scores = RandomModel().fit(data).recommend(np.array([10_000, 10_001]), 10)
    assert (rnd_ids[0] != rnd_ids[1]).any()  # random lists, not a shared ranking
    assert ((rnd_scores >= 0) & (rnd_scores < 1)).all()


# ------------------------------------------------------------------------- item-kNN maths


def test_item_knn_cosine_reference_values() -> None:
    # users of a: {u1, u2}, of b: {u1, u2}, of c: {u2, u3}
    # cos(a, b) = 2 / sqrt(2 * 2) = 1;  cos(a, c) = cos(b, c) = 1 / sqrt(2 * 2) = 0.5
    model = ImplicitItemCosine().fit(tiny())
    ids, scores = model.recommend(np.array(["u3"]), 2)
    # u3 saw c: score(a) = cos(c, a) = 0.5, score(b) = cos(c, b) = 0.5; tie -> ascending id
    assert ids.tolist() == [["a", "b"]]
    np.testing.assert_allclose(scores, [[0.5, 0.5]], rtol=1e-6)
    ids, scores = model.recommend(np.array(["u1"]), 1)
    # u1 saw a, b: score(c) = cos(a, c) + cos(b, c) = 0.5 + 0.5
    assert ids.tolist() == [["c"]]
    np.testing.assert_allclose(scores, [[1.0]], rtol=1e-6)
    # seen items kept: an item's own similarity counts (cos(c, c) = 1), as implicit keeps it
    ids, scores = model.recommend(np.array(["u3"]), 3, exclude_seen=False)
    assert ids.tolist() == [["c", "a", "b"]]
    np.testing.assert_allclose(scores, [[1.0, 0.5, 0.5]], rtol=1e-6)


def naive_cosine(train: pd.DataFrame) -> np.ndarray:
    """Item × item cosine of the binary item columns (ids sorted), dense numpy."""
    users, items = np.unique(train["user"]), np.unique(train["item"])
    x = np.zeros((users.size, items.size))
    x[np.searchsorted(users, train["user"]), np.searchsorted(items, train["item"])] = 1.0
    norms = np.sqrt(x.sum(axis=0))
    return (x.T @ x) / np.outer(norms, norms)


def test_item_knn_keeps_only_top_neighbors(data: pd.DataFrame) -> None:
    model = ImplicitItemCosine(k_neighbors=5).fit(data)
    sim = model.similarity_.toarray()
    per_item = np.diff(model.similarity_.indptr)
    assert per_item.max() <= 5
    # each item keeps its 5 most similar items (itself among them, cosine 1), cosine values
    cosine = naive_cosine(data)
    np.testing.assert_allclose(np.diag(sim), 1.0, rtol=1e-6)
    for item in range(sim.shape[0]):
        kept = np.sort(sim[item][sim[item] > 0])[::-1]
        expected = np.sort(cosine[item][cosine[item] > 0])[::-1][:5]
        np.testing.assert_allclose(kept, expected, rtol=1e-5)
    rows, cols = np.nonzero(sim)
    np.testing.assert_allclose(sim[rows, cols], cosine[rows, cols], rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k_neighbors": 0}, "'k_neighbors' must be a positive int"),
        ({"num_threads": -1}, r"'num_threads' must be an int >= 0 \(got -1\)"),
        ({"batch_size": 0}, "'batch_size' must be a positive int"),
    ],
)
def test_item_knn_rejects_bad_params(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ImplicitItemCosine(**kwargs)


def test_recommend_rejects_bad_calls(data: pd.DataFrame) -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        PopularityModel().recommend(np.array([1]), 10)
    model = PopularityModel().fit(data)
    with pytest.raises(ValueError, match=r"'k' must be a positive int \(got 0\)"):
        model.recommend(np.array([1]), 0)
    with pytest.raises(ValueError, match="'users' must be a 1-D array"):
        model.recommend(np.array([[1]]), 3)


# ---------------------------------------------------------------------------------- top-k


def reference_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Test-only reference: sort each row by (-score, column) with Python's sorted."""
    cols = []
    for row in scores:
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
        cols.append(order)
    c = np.array(cols, dtype=np.int64).reshape(scores.shape[0], min(k, scores.shape[1]))
    return c, np.take_along_axis(scores, c, axis=1)


score_values = st.sampled_from([0.0, 0.0, 0.0, 1.0, 2.0, 0.5, -np.inf, 3.25])


@settings(max_examples=200, deadline=None)
@given(
    scores=hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.integers(1, 1200)),
        elements=score_values,
    ),
    k=st.integers(1, 30),
)
def test_topk_rows_matches_reference_with_heavy_ties(scores: np.ndarray, k: int) -> None:
    cols, vals = topk_rows(scores, k)
    ref_cols, ref_vals = reference_topk(scores, k)
    np.testing.assert_array_equal(cols, ref_cols)
    np.testing.assert_array_equal(vals, ref_vals)


def test_topk_rows_on_large_random_rows() -> None:
    rng = np.random.default_rng(0)
    scores = np.round(rng.random((20, 5000)), 2)  # many ties
    scores[:, ::7] = -np.inf
    cols, vals = topk_rows(scores, 50)
    ref_cols, ref_vals = reference_topk(scores, 50)
    np.testing.assert_array_equal(cols, ref_cols)
    np.testing.assert_array_equal(vals, ref_vals)


# -------------------------------------------------------------------------------- quality


def hit_rate_at_10(model: Recommender, train: pd.DataFrame, test: pd.DataFrame) -> float:
    """Share of test users whose held-out item is in their top 10 (pandas, no metrics package)."""
    users = test["user"].to_numpy()
    ids, _ = model.fit(train).recommend(users, 10)
    recs = pd.DataFrame({"user": np.repeat(users, 10), "item": ids.ravel()})
    hits = recs.merge(test[["user", "item"]], on=["user", "item"])
    return hits["user"].nunique() / test["user"].nunique()


def test_popularity_beats_random_and_item_knn_beats_popularity(
    loo: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    train, test = loo
    assert len(test) == 2000
    random_hr = hit_rate_at_10(RandomModel(), train, test)
    pop_hr = hit_rate_at_10(PopularityModel(), train, test)
    knn_hr = hit_rate_at_10(ImplicitItemCosine(), train, test)
    # about 2000 test users: a standard error of about 0.01 on each rate
    assert random_hr < 0.03  # 10 of ~1000 items
    assert pop_hr > 3 * random_hr
    assert knn_hr > pop_hr + 0.04
