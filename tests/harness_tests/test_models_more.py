"""More models: score_items, ALS (implicit's), BiasRating, PrecomputedScores, MLflowModel and
their configs.

Reference values come from independent code written here (per-user loops, dict look-ups), from
hand computations or from a direct call of ``implicit``; the MLflow test registers a model with
the example script in a subprocess and loads it back in this process from a real sqlite registry.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

from harness.data import _dictionary_stored, _parquet_schema
from harness.models import (
    PAD_ITEM_INT,
    BiasRating,
    ImplicitALS,
    ImplicitItemCosine,
    MLflowModel,
    PopularityModel,
    PrecomputedScores,
    RandomModel,
    Recommender,
    padding_mask,
    without_search_space,
)
from harness.synthetic import generate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "register_model.py"


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return generate(n_users=300, n_items=200, n_events=6_000, seed=11)


@pytest.fixture(scope="module")
def holdout() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave-one-out: each user's last event (by time) is the test event."""
    df = generate(n_users=2000, n_items=1000, n_events=60_000, seed=0)
    last = df.sort_values(["user", "timestamp"]).groupby("user").tail(1)
    return df.drop(last.index), last


def tiny() -> pd.DataFrame:
    """u1 saw a, b; u2 saw a, b, c; u3 saw c; ids are strings; ratings for BiasRating."""
    pairs = [("u1", "a"), ("u1", "b"), ("u2", "a"), ("u2", "b"), ("u2", "c"), ("u3", "c")]
    df = pd.DataFrame(pairs, columns=["user", "item"]).astype("str")
    df["timestamp"] = np.arange(len(df), dtype=np.int64)
    df["rating"] = [5.0, 3.0, 4.0, 2.0, 1.0, 4.0]
    return df


def hit_rate(model: Recommender, train: pd.DataFrame, test: pd.DataFrame, k: int = 10) -> float:
    """Share of test users whose held-out item is in their top-k."""
    ids, _ = model.fit(train).recommend(test["user"].to_numpy(), k)
    return float((ids == test["item"].to_numpy()[:, None]).any(axis=1).mean())


def long_table(users: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> pd.DataFrame:
    """(user, item, score) rows of recommend output, padding dropped."""
    keep = ~padding_mask(scores)
    return pd.DataFrame(
        {
            "user": np.repeat(users, ids.shape[1])[keep.ravel()],
            "item": ids[keep],
            "score": scores[keep],
        }
    )


# ----------------------------------------------------------------------------- score_items


SCORERS = [
    RandomModel,
    PopularityModel,
    ImplicitItemCosine,
    lambda: ImplicitALS(factors=8, iterations=3),
    BiasRating,
]


@pytest.mark.parametrize("make", SCORERS, ids=["random", "popularity", "item_knn", "als", "bias"])
def test_score_items_gathers_the_full_catalog_scores(make, data: pd.DataFrame) -> None:
    model = make().fit(data)
    catalog = np.sort(data["item"].unique())
    users = np.array([0, 17, 299, 5000, 17])  # 5000 is unknown: fallback scores
    # Naive full scores: recommend the whole catalog without exclusion, put scores by item id.
    ids, scores = model.recommend(users, catalog.size, exclude_seen=False)
    full = np.full((users.size, catalog.size), np.nan)
    np.put_along_axis(full, np.searchsorted(catalog, ids), scores, axis=1)
    rng = np.random.default_rng(0)
    cols = rng.integers(0, catalog.size, size=(users.size, 30))
    cand = catalog[cols]
    cand[:, -1] = 10_000  # unknown item
    got = model.score_items(users, cand)
    expected = np.take_along_axis(full, cols, axis=1)
    expected[:, -1] = np.nan
    np.testing.assert_array_equal(got, expected)
    assert np.isnan(got[:, -1]).all() and np.isfinite(got[:, :-1]).all()
    batched = make().fit(data)
    batched.batch_size = 2
    np.testing.assert_array_equal(batched.score_items(users, cand), got)


def test_score_items_does_not_exclude_seen_and_checks_shapes(data: pd.DataFrame) -> None:
    model = ImplicitItemCosine().fit(data)
    seen = data.loc[data["user"] == 3, "item"].to_numpy()[:5]
    got = model.score_items(np.array([3]), seen[None, :])
    assert np.isfinite(got).all()  # seen items are scored like any other
    with pytest.raises(ValueError, match=r"shape \(len\(users\), m\) = \(2, m\)"):
        model.score_items(np.array([1, 2]), np.array([[1, 2]]))
    with pytest.raises(ValueError, match="1-D"):
        model.score_items(np.array([[1]]), np.array([[1]]))
    with pytest.raises(RuntimeError, match="not fitted"):
        ImplicitItemCosine().score_items(np.array([1]), np.array([[1]]))
    assert model.score_items(np.array([1, 2]), np.zeros((2, 0), dtype=np.int64)).shape == (2, 0)


# ------------------------------------------------------------------------------------ ALS


def naive_als_half_step(matrix, other: np.ndarray, reg: float, alpha: float) -> np.ndarray:
    """x_u = (YᵀY + λI + (α - 1) Y_uᵀY_u)⁻¹ α Y_uᵀ1 (confidence α on observed pairs, 1 elsewhere:
    implicit's convention), one row at a time in float64."""
    other = other.astype(np.float64)
    base = other.T @ other + reg * np.eye(other.shape[1])
    out = np.zeros((matrix.shape[0], other.shape[1]))
    for row in range(matrix.shape[0]):
        z = other[matrix.indices[matrix.indptr[row] : matrix.indptr[row + 1]]]
        out[row] = np.linalg.solve(base + (alpha - 1) * z.T @ z, alpha * z.sum(axis=0))
    return out


def test_als_item_factors_solve_the_weighted_least_squares(data: pd.DataFrame) -> None:
    """The last half-step solves the items given the users: near convergence, implicit's
    conjugate-gradient solution equals the exact per-item solve with confidence alpha (the
    1 + alpha convention is off by about 10%, so the check tells the two apart)."""
    model = ImplicitALS(factors=8, regularization=0.1, alpha=3.0, iterations=30, seed=3).fit(data)
    matrix = model.interactions_
    items = naive_als_half_step(matrix.T.tocsr(), model.user_factors_, 0.1, 3.0)
    np.testing.assert_allclose(model.item_factors_, items, atol=1e-2 * abs(items).max())
    x = model.user_factors_.astype(np.float64)
    np.testing.assert_allclose(  # scored as user factors · item factors
        model.score_items(np.array([0, 1]), np.array([[0, 1], [2, 3]])),
        [[x[0] @ items[0], x[0] @ items[1]], [x[1] @ items[2], x[1] @ items[3]]],
        rtol=1e-2,
        atol=1e-2 * abs(x @ items.T).max(),
    )


def test_als_passes_its_parameters_to_implicit(data: pd.DataFrame) -> None:
    """Same factors as implicit's AlternatingLeastSquares built and fitted here directly."""
    from implicit.cpu.als import AlternatingLeastSquares

    model = ImplicitALS(factors=6, regularization=0.3, alpha=7.0, iterations=4, seed=9).fit(data)
    users, items = np.unique(data["user"]), np.unique(data["item"])
    pairs = data.drop_duplicates(["user", "item"])
    matrix = sp.csr_matrix(
        (
            np.ones(len(pairs), dtype=np.float32),
            (np.searchsorted(users, pairs["user"]), np.searchsorted(items, pairs["item"])),
        ),
        shape=(users.size, items.size),
    )
    direct = AlternatingLeastSquares(
        factors=6, regularization=0.3, alpha=7.0, iterations=4, random_state=9, num_threads=1
    )
    direct.fit(matrix, show_progress=False)
    np.testing.assert_allclose(model.user_factors_, direct.user_factors, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.item_factors_, direct.item_factors, rtol=1e-5, atol=1e-6)


def test_als_is_deterministic_for_a_seed(data: pd.DataFrame) -> None:
    a = ImplicitALS(factors=8, iterations=3, seed=1).fit(data)
    b = ImplicitALS(factors=8, iterations=3, seed=1).fit(data)
    c = ImplicitALS(factors=8, iterations=3, seed=2).fit(data)
    np.testing.assert_array_equal(a.user_factors_, b.user_factors_)
    np.testing.assert_array_equal(a.item_factors_, b.item_factors_)
    assert not np.array_equal(a.item_factors_, c.item_factors_)
    users = np.arange(300)
    for x, y in zip(a.recommend(users, 10), b.recommend(users, 10), strict=True):
        np.testing.assert_array_equal(x, y)


def test_als_beats_popularity_on_held_out_events(holdout) -> None:
    train, test = holdout
    pop = hit_rate(PopularityModel(), train, test)
    als = hit_rate(ImplicitALS(factors=32, iterations=8), train, test)
    assert pop > 0.05  # a sane baseline
    assert als > pop + 0.03, (als, pop)


def test_als_output_contract_padding_and_seen_exclusion(data: pd.DataFrame) -> None:
    model = ImplicitALS(factors=8, iterations=3).fit(data)
    users = np.array([0, 5, 299, 10_000])
    ids, scores = model.recommend(users, 20)
    assert ids.shape == scores.shape == (4, 20)
    assert ids.dtype == np.int64 and scores.dtype == np.float64
    assert np.all(np.diff(scores, axis=1) <= 0) and np.isfinite(scores).all()
    for row, user in enumerate(users[:3]):
        assert not set(data.loc[data["user"] == user, "item"]) & set(ids[row].tolist())
    # the unknown user gets the popularity ranking
    np.testing.assert_array_equal(
        ids[3], PopularityModel().fit(data).recommend(users[3:], 20)[0][0]
    )

    small = ImplicitALS(factors=2, iterations=2).fit(tiny())
    ids, scores = small.recommend(np.array(["u1", "u2", "nobody"], dtype=object), 5)
    assert ids.dtype == object
    assert padding_mask(scores).sum(axis=1).tolist() == [4, 5, 2]  # 1, 0 and 3 items left
    assert ids[0, 0] == "c" and all(x is None for x in ids[padding_mask(scores)])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"factors": 0}, "'factors' must be a positive int"),
        ({"iterations": 1.5}, "'iterations' must be a positive int"),
        ({"regularization": 0.0}, "'regularization' must be > 0"),
        ({"alpha": 0.0}, "'alpha' must be > 0"),
        ({"num_threads": 1.5}, "'num_threads' must be an int >= 0"),
    ],
)
def test_als_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ImplicitALS(**kwargs)


# ----------------------------------------------------------------------------- BiasRating


def naive_biases(df: pd.DataFrame, reg_user: float, reg_item: float, iterations: int):
    """The same alternating closed-form updates with dicts and loops."""
    mu = sum(df["rating"]) / len(df)
    rows = list(zip(df["user"], df["item"], df["rating"], strict=True))
    b_u = dict.fromkeys(df["user"], 0.0)
    b_i = dict.fromkeys(df["item"], 0.0)
    for _ in range(iterations):
        for item in b_i:
            resid = [r - mu - b_u[u] for u, i, r in rows if i == item]
            b_i[item] = sum(resid) / (reg_item + len(resid))
        for user in b_u:
            resid = [r - mu - b_i[i] for u, i, r in rows if u == user]
            b_u[user] = sum(resid) / (reg_user + len(resid))
    return mu, b_u, b_i


def test_bias_rating_matches_naive_updates() -> None:
    df = tiny()
    model = BiasRating(reg_user=1.5, reg_item=0.5, iterations=4).fit(df)
    mu, b_u, b_i = naive_biases(df, 1.5, 0.5, 4)
    assert model.global_mean_ == pytest.approx(19 / 6)  # (5 + 3 + 4 + 2 + 1 + 4) / 6
    np.testing.assert_allclose(model.user_bias_, [b_u[u] for u in ("u1", "u2", "u3")], rtol=1e-12)
    np.testing.assert_allclose(model.item_bias_, [b_i[i] for i in ("a", "b", "c")], rtol=1e-12)
    got = model.predict_ratings(
        np.array(["u1", "u3", "new", "new"]), np.array(["c", "a", "b", "z"])
    )
    expected = [mu + b_u["u1"] + b_i["c"], mu + b_u["u3"] + b_i["a"], mu + b_i["b"], mu]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_bias_rating_first_update_by_hand() -> None:
    # one round, no regularization: b_i = mean residual of the item, then b_u given b_i
    model = BiasRating(reg_user=0.0, reg_item=0.0, iterations=1).fit(tiny())
    mu = 19 / 6
    b_a, b_b, b_c = (5 + 4) / 2 - mu, (3 + 2) / 2 - mu, (1 + 4) / 2 - mu
    np.testing.assert_allclose(model.item_bias_, [b_a, b_b, b_c], rtol=1e-12)
    u1 = ((5 - mu - b_a) + (3 - mu - b_b)) / 2  # = 0: u1 rates exactly like the item means
    np.testing.assert_allclose(model.user_bias_[0], u1, atol=1e-12)


def test_bias_rating_beats_the_global_mean_on_held_out_ratings(data: pd.DataFrame) -> None:
    rng = np.random.default_rng(0)
    test_mask = rng.random(len(data)) < 0.2
    train, test = data[~test_mask], data[test_mask]
    model = BiasRating().fit(train)
    pred = model.predict_ratings(test["user"].to_numpy(), test["item"].to_numpy())
    truth = test["rating"].to_numpy()
    rmse_bias = np.sqrt(np.mean((pred - truth) ** 2))
    rmse_mean = np.sqrt(np.mean((train["rating"].mean() - truth) ** 2))
    assert rmse_bias < rmse_mean - 0.05, (rmse_bias, rmse_mean)


def test_bias_rating_ranks_by_predicted_rating(data: pd.DataFrame) -> None:
    model = BiasRating().fit(data)
    ids, scores = model.recommend(np.array([4, 10_000]), 10)
    seen = set(data.loc[data["user"] == 4, "item"])
    bias = pd.Series(model.item_bias_, index=model.item_ids_)
    unseen = bias.drop(list(seen)).sort_values(ascending=False, kind="stable")
    assert ids[0].tolist() == unseen.index[:10].tolist()
    np.testing.assert_allclose(scores[0], model.predict_ratings(np.full(10, 4), ids[0]), rtol=1e-12)
    # an unknown user: global mean + item bias over the whole catalog
    assert ids[1].tolist() == bias.sort_values(ascending=False, kind="stable").index[:10].tolist()
    np.testing.assert_allclose(scores[1], model.global_mean_ + bias.to_numpy()[ids[1]], rtol=1e-12)


def test_bias_rating_needs_ratings(data: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"BiasRating needs a 'rating' column"):
        BiasRating().fit(data.drop(columns="rating"))
    bad = data.assign(rating=data["rating"].where(data.index != 7))
    with pytest.raises(ValueError, match=r"1 missing or non-finite rating\(s\), e.g. nan at row 7"):
        BiasRating().fit(bad)
    assert not hasattr(PopularityModel(), "predict_ratings")  # the capability is duck-typed
    assert callable(BiasRating().predict_ratings)


# ---------------------------------------------------------------------- PrecomputedScores


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".tsv"])
def test_precomputed_reproduces_a_models_lists(suffix: str, data: pd.DataFrame, tmp_path) -> None:
    users = np.arange(300)
    knn = ImplicitItemCosine().fit(data)
    ids, scores = knn.recommend(users, 20)
    table = long_table(users, ids, scores)
    path = tmp_path / f"scores{suffix}"
    if suffix == ".parquet":
        table.to_parquet(path)
    else:
        table.to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    model = PrecomputedScores(path).fit(data)
    got_ids, got_scores = model.recommend(users, 20)
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_scores, scores)
    assert got_ids.dtype == np.int64
    assert model.stats_["rows"] == len(table) and model.stats_["users_in_file"] == 300
    assert model.stats_["users_without_list"] == 0 and model.stats_["items_unknown"] == 0
    # longer k: the file has 20 per user, the rest is padding
    long_ids, long_scores = model.recommend(users[:3], 25)
    assert padding_mask(long_scores)[:, 20:].all() and not padding_mask(long_scores)[:, :20].any()
    assert (long_ids[:, 20:] == PAD_ITEM_INT).all()
    # score_items: the file's score, NaN when the pair is absent
    cand = np.stack([ids[:5, 0], ids[:5, 19], np.full(5, 10_000)], axis=1)
    got = model.score_items(users[:5], cand)
    np.testing.assert_array_equal(got[:, :2], scores[:5, [0, 19]])
    assert np.isnan(got[:, 2]).all()


@pytest.mark.parametrize("pages", ["dictionary", "plain"])
def test_precomputed_text_ids_from_parquet_pages_give_the_int_lists(
    pages: str, data: pd.DataFrame, tmp_path
) -> None:
    # text ids zero-padded (text order = number order), some written with spaces around them,
    # in row groups stored as dictionary indices (read as a categorical) or as plain text
    users = np.arange(300)
    knn = ImplicitItemCosine().fit(data)
    ids, scores = knn.recommend(users, 20)
    table = long_table(users, ids, scores)
    spaced = np.arange(len(table)) % 5 == 0
    text = table.assign(
        user=[f"u{u:03d}" for u in table["user"]],
        item=[
            f" i{i:03d} " if s else f"i{i:03d}" for i, s in zip(table["item"], spaced, strict=True)
        ],
    )
    path = tmp_path / "scores.parquet"
    pq.write_table(
        pa.Table.from_pandas(text, preserve_index=False),
        path,
        row_group_size=1000,
        use_dictionary=pages == "dictionary",
    )
    assert _dictionary_stored(path, _parquet_schema(path), "item") == (pages == "dictionary")
    train = data.assign(
        user=[f"u{u:03d}" for u in data["user"]], item=[f"i{i:03d}" for i in data["item"]]
    )
    model = PrecomputedScores(path, exclude_seen=True).fit(train)
    got_ids, got_scores = model.recommend(np.array([f"u{u:03d}" for u in users]), 20)
    table.to_parquet(tmp_path / "ints.parquet")
    ref = PrecomputedScores(tmp_path / "ints.parquet", exclude_seen=True).fit(data)
    want_ids, want_scores = ref.recommend(users, 20)
    real = ~padding_mask(want_scores)
    np.testing.assert_array_equal(got_scores, want_scores)
    assert got_ids[real].tolist() == [f"i{i:03d}" for i in want_ids[real]]
    assert model.stats_ == ref.stats_


def test_precomputed_exclude_seen_and_ties_by_item_id(data: pd.DataFrame, tmp_path) -> None:
    users = np.arange(0, 300, 7)
    knn = ImplicitItemCosine().fit(data)
    full_ids, full_scores = knn.recommend(users, 200, exclude_seen=False)
    table = long_table(users, full_ids, full_scores).sample(frac=1.0, random_state=0)
    table.to_parquet(tmp_path / "all.parquet")
    model = PrecomputedScores(tmp_path / "all.parquet", exclude_seen=True).fit(data)
    for got, expected in zip(model.recommend(users, 15), knn.recommend(users, 15), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert model.stats_["rows_seen"] == int(data["user"].isin(users).sum())
    # ties: equal scores come back by ascending item id, whatever the file order
    ties = pd.DataFrame({"user": [1, 1, 1, 1], "item": [9, 3, 7, 5], "score": [1.0, 2.0, 1.0, 1.0]})
    ties.to_csv(tmp_path / "ties.csv", index=False)
    ids, scores = PrecomputedScores(tmp_path / "ties.csv").fit(data).recommend(np.array([1]), 4)
    assert ids.tolist() == [[3, 5, 7, 9]] and scores.tolist() == [[2.0, 1.0, 1.0, 1.0]]


def test_precomputed_reads_trec_runs(data: pd.DataFrame, tmp_path) -> None:
    users = np.arange(50)
    ids, scores = ImplicitItemCosine().fit(data).recommend(users, 10)
    table = long_table(users, ids, scores)
    lines = [
        f"{u} Q0 {i} {r} {s!r} knn"
        for r, (u, i, s) in enumerate(table.itertuples(index=False), start=1)
    ]
    (tmp_path / "run.txt").write_text("\n".join(lines) + "\n")
    model = PrecomputedScores(tmp_path / "run.txt").fit(data)
    got_ids, got_scores = model.recommend(users, 10)
    assert got_ids.dtype == np.int64  # TREC ids are text; all parse as int like the training ids
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got_scores, scores)

    # string training ids: compared as strings
    (tmp_path / "tiny.run").write_text("u1 Q0 c 1 0.5 x\nu3 Q0 a 1 2 x\nu3 Q0 zz 2 3 x\n")
    model = PrecomputedScores(tmp_path / "tiny.run", format="trec", exclude_seen=True).fit(tiny())
    ids, scores = model.recommend(np.array(["u3", "u1"], dtype=object), 2)
    assert ids.tolist() == [["zz", "a"], ["c", None]]
    assert scores.tolist() == [[3.0, 2.0], [0.5, -np.inf]]
    assert model.stats_["items_unknown"] == 1  # zz is not in the training catalog (kept)


def test_precomputed_counts_users_without_a_list(data: pd.DataFrame, tmp_path) -> None:
    pd.DataFrame({"user": [1, 2], "item": [5, 6], "score": [0.1, 0.2]}).to_csv(
        tmp_path / "s.csv", index=False
    )
    model = PrecomputedScores(tmp_path / "s.csv").fit(data)
    with pytest.warns(UserWarning, match=r"2 of 4 requested user\(s\) have no list"):
        ids, scores = model.recommend(np.array([1, 3, 2, 4, 3]), 3)
    assert ids.shape == (5, 3)
    assert padding_mask(scores).all(axis=1).tolist() == [False, True, False, True, True]
    assert model.stats_["users_without_list"] == 2 and model.stats_["users_requested"] == 4
    assert ids[0].tolist() == [5, PAD_ITEM_INT, PAD_ITEM_INT]


def test_precomputed_column_mapping(data: pd.DataFrame, tmp_path) -> None:
    frame = pd.DataFrame({"uid": [1, 1], "iid": ["7", "3"], "relevance": [0.5, 0.9]})
    frame.to_parquet(tmp_path / "m.parquet")
    model = PrecomputedScores(
        tmp_path / "m.parquet", columns={"user": "uid", "item": "iid", "score": "relevance"}
    ).fit(data)
    ids, scores = model.recommend(np.array([1]), 2)
    assert ids.tolist() == [[3, 7]] and scores.tolist() == [[0.9, 0.5]]


@pytest.mark.parametrize(
    ("content", "columns", "message"),
    [
        ("user,item\n1,2\n", None, r"missing column 'score'; columns found: \['user', 'item'\]"),
        (
            "u,item,score\n1,2,0.5\n",
            {"user": "uid"},
            r"missing column 'user' \(file column 'uid'\)",
        ),
        ("user,item,score\n1,2,0.5\n1,3,nan\n", None, r"column 'score' has 1 .* e.g. nan at row 1"),
        ("user,item,score\n1,2,inf\n", None, r"column 'score' has 1 .* e.g. inf at row 0"),
        ("user,item,score\n1,2,high\n", None, r"column 'score' has 1 .* e.g. 'high' at row 0"),
        (
            "user,item,rel\n1,2,0.5\n1,3,0.1\n1,2,0.7\n",
            {"score": "rel"},
            r"duplicate \(user, item\) row\(s\), e.g. user=1 item=2 at rows \[0, 2\]",
        ),
        ("user,item,score\n,2,0.5\n", None, r"column 'user' has 1 null id"),
        ("user,item,score\n", None, r"no rows"),
    ],
)
def test_precomputed_bad_files_raise_naming_file_and_column(
    content: str, columns: dict | None, message: str, data: pd.DataFrame, tmp_path
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message):
        PrecomputedScores(path, columns=columns).fit(data)


def test_precomputed_argument_errors(data: pd.DataFrame, tmp_path) -> None:
    with pytest.raises(ValueError, match="'format' must be one of"):
        PrecomputedScores("x.csv", format="xlsx")
    with pytest.raises(ValueError, match="unknown name 'rating'"):
        PrecomputedScores("x.csv", columns={"rating": "r"})
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        PrecomputedScores(tmp_path / "nope.csv").fit(data)
    (tmp_path / "r.run").write_text("1 Q0 2 1 0.5 x\n")
    with pytest.raises(ValueError, match="'columns' does not apply to a TREC run"):
        PrecomputedScores(tmp_path / "r.run", columns={"score": "s"}).fit(data)


# --------------------------------------------------------------------------- MLflowModel


def test_mlflow_model_rejects_bad_uris() -> None:
    for uri in ("runs:/abc/model", "models:/name", "models:/name/latest", "models:/@x"):
        with pytest.raises(ValueError, match="models:/NAME/VERSION or models:/NAME@ALIAS"):
            MLflowModel(uri)
    assert MLflowModel("models:/a/b@champion")._name == "a/b"


def test_a_version_not_in_the_registry_names_the_registry(tmp_path: Path) -> None:
    """An unknown model, version or alias: one line naming the ref and the registry read."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_registered_model("reco")
    cases = {
        "models:/nope/1": "Model Version (name=nope, version=1) not found",
        "models:/nope@x": "Registered Model with name=nope not found",
        "models:/reco/3": "Model Version (name=reco, version=3) not found",
        "models:/reco@champion": "Registered model alias champion not found",
    }
    for ref, message in cases.items():
        with pytest.raises(ValueError) as err:
            MLflowModel(ref, tracking_uri=uri).fit(generate(n_users=5, n_items=10, n_events=20))
        assert str(err.value) == f"{ref}: {message} in the registry at {uri}"


@pytest.mark.slow
def test_the_example_sets_champion_on_the_first_version_only(tmp_path: Path) -> None:
    """Registering must not move production's alias: @champion is set on the first version,
    later versions get only the alias asked for; bad arguments are one line, nothing
    registered."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def register(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(EXAMPLE), "--tracking-uri", uri, "--name", "r", "--n-events"]
        return subprocess.run(
            [*cmd, "3000", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "MLFLOW_TRACKING_URI": "", "PYTHONWARNINGS": "ignore"},
        )

    for args, line in (
        (("--alias", "latest"), "error: '--alias' must be a registry alias such as champion"),
        (("--train-cut", "0"), "error: --train-cut must be in (0, 1] (got 0.0)"),
    ):
        bad = register(*args)
        assert bad.returncode == 2 and bad.stderr.startswith(line), bad.stderr[-2000:]
        assert len(bad.stderr.strip().splitlines()) == 1
    client = MlflowClient(uri)
    assert client.search_registered_models() == []  # nothing registered by a bad call
    first, second = register(), register()
    assert first.stdout.strip().splitlines()[-2:] == ["models:/r/1", "models:/r@champion"]
    assert second.stdout.strip().splitlines()[-1] == "models:/r/2", second.stderr[-2000:]
    third = register("--alias", "challenger")
    assert third.stdout.strip().splitlines()[-1] == "models:/r@challenger", third.stderr[-2000:]
    assert client.get_registered_model("r").aliases == {"champion": 1, "challenger": 3}


@pytest.mark.slow
def test_mlflow_model_end_to_end_with_the_example(tmp_path, monkeypatch) -> None:
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--tracking-uri", uri, "--name", "pop-demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "MLFLOW_TRACKING_URI": "", "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-2:] == ["models:/pop-demo/1", "models:/pop-demo@champion"]
    run_id = re.search(r"\(run (\w+)\)", done.stdout)[1]

    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    train = generate()  # the example's data; by default it fits on the events before the 0.8
    # timestamp quantile (the default split's training part), so the test period stays unseen
    ts = train["timestamp"].to_numpy()
    before = train[ts < np.quantile(ts, 0.8, method="higher")]
    users = np.array([0, 7, 1999, 5, 123_456])  # the last one is unknown
    expected = PopularityModel().fit(before).recommend(users, 10)
    for model_uri in ("models:/pop-demo/1", "models:/pop-demo@champion"):
        model = MLflowModel(model_uri, tracking_uri=uri).fit(train)
        assert isinstance(model, Recommender)
        assert model.info_["version"] == 1 and model.info_["run_id"] == run_id
        assert model.info_["name"] == "pop-demo" and model.info_["model_uri"] == model_uri
        assert model.info_["source"].startswith("models:/")
        for got, want in zip(model.recommend(users, 10), expected, strict=True):
            np.testing.assert_array_equal(got, want)
        assert model.stats_["users_without_list"] == 0
    # exclude_seen: the model asks for k + |seen| and drops the (other) training data's items
    other = generate(n_users=2000, n_items=1000, n_events=20_000, seed=5)
    model = MLflowModel("models:/pop-demo@champion", tracking_uri=uri, exclude_seen=True)
    ids, scores = model.fit(other).recommend(users, 10)
    assert not padding_mask(scores).any()
    for row, user in enumerate(users):
        assert not set(other.loc[other["user"] == user, "item"]) & set(ids[row].tolist())
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    check_contract_violations(uri, tmp_path, monkeypatch)


def check_contract_violations(uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pyfunc breaking the contract (one way per requested k) fails with a clear error."""
    import mlflow

    class BadPyfunc(mlflow.pyfunc.PythonModel):
        def predict(
            self, context: object, model_input: pd.DataFrame, params: dict | None = None
        ) -> pd.DataFrame:
            k = int(model_input["k"].iloc[0])
            n = len(model_input)
            frame = pd.DataFrame(
                {"user": model_input["user"], "item": np.arange(n), "score": np.ones(n)}
            )
            if k == 1:
                return frame.drop(columns="score")
            if k == 2:
                return pd.concat([frame, frame])
            if k == 3:
                return frame.assign(score=np.nan)
            return frame.assign(user=-1)

    client = mlflow.MlflowClient(uri, uri)
    experiment = client.create_experiment("bad", (tmp_path / "bad").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the fluent API's store, for this test only
    assert mlflow.get_tracking_uri() == uri
    with mlflow.start_run(experiment_id=experiment):
        mlflow.pyfunc.log_model(
            name="m", python_model=BadPyfunc(), registered_model_name="bad", pip_requirements=[]
        )
    model = MLflowModel("models:/bad/1", tracking_uri=uri).fit(generate())
    users = np.array([3, 4])
    cases = {
        1: r"missing column 'score'; the contract is columns \['user', 'item', 'score'\]",
        2: r"repeated \(user, item\) row, e.g. item 0",
        3: r"2 missing or non-finite score\(s\) in column 'score', e.g. nan",
        4: r"rows for a user that was not requested, e.g. -1",
    }
    for k, message in cases.items():
        with pytest.raises(ValueError, match=r"models:/bad/1: predict .*" + message):
            model.recommend(users, k)


# ------------------------------------------------------------------------------- configs


def cfg_of(*overrides: str):
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_new_model_configs_build_the_models(data: pd.DataFrame, tmp_path) -> None:
    als = instantiate(without_search_space(cfg_of("model=als", "seed=4").model.als))
    assert isinstance(als, ImplicitALS) and (als.factors, als.iterations, als.seed) == (64, 15, 4)
    bias = instantiate(without_search_space(cfg_of("model=bias").model.bias))
    assert isinstance(bias, BiasRating)
    path = tmp_path / "s.csv"
    pd.DataFrame({"user": [1], "item": [2], "s": [0.5]}).to_csv(path, index=False)
    cfg = cfg_of(
        "model=precomputed", f"model.precomputed.path={path}", "model.precomputed.columns={score:s}"
    )
    model = instantiate(cfg.model.precomputed).fit(data)
    assert model.recommend(np.array([1]), 1)[0].tolist() == [[2]]
    cfg = cfg_of("model=[popularity,mlflow]", "model.mlflow.uri=models:/x@champion")
    mlflow_model = instantiate(cfg.model.mlflow)
    assert mlflow_model.uri == "models:/x@champion"
    assert mlflow_model.tracking_uri == str(cfg.tracking.uri) and not mlflow_model.exclude_seen
