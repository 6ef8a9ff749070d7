"""The ``implicit`` models behind the harness protocol: they fit and rank, exclude seen items, and
rank exactly as their fitted factors / similarity scored by hand, and as ``implicit`` itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from harness.models import (
    PAD_ITEM_INT,
    ImplicitALS,
    ImplicitBM25,
    ImplicitBPR,
    ImplicitItemCosine,
    ImplicitItemTFIDF,
    ImplicitLMF,
    Recommender,
)
from harness.synthetic import generate

pytest.importorskip("implicit")

FACTOR_MODELS = {
    "als": lambda: ImplicitALS(factors=8, iterations=5, seed=1),
    "bpr": lambda: ImplicitBPR(factors=8, iterations=30, learning_rate=0.05, seed=1),
    "lmf": lambda: ImplicitLMF(factors=8, iterations=10, seed=1),
}
ITEM_MODELS = {
    "cosine": lambda k=500: ImplicitItemCosine(k_neighbors=k),
    "tfidf": lambda k=500: ImplicitItemTFIDF(k_neighbors=k),
    "bm25": lambda k=500: ImplicitBM25(k_neighbors=k, k1=1.2, b=0.75),
}
ALL = {**FACTOR_MODELS, **{n: (lambda f=f: f()) for n, f in ITEM_MODELS.items()}}


@pytest.fixture(scope="module")
def train() -> pd.DataFrame:
    frame = generate(n_users=150, n_items=90, n_events=3000, seed=5)
    return frame.drop_duplicates(["user", "item"]).reset_index(drop=True)


def binary(train: pd.DataFrame) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """The user × item 0/1 matrix, built here from the frame (ids sorted)."""
    users, items = np.unique(train["user"]), np.unique(train["item"])
    rows = np.searchsorted(users, train["user"])
    cols = np.searchsorted(items, train["item"])
    m = sp.csr_matrix((np.ones(len(train)), (rows, cols)), shape=(len(users), len(items)))
    m.data[:] = 1.0
    return m, users, items


def ranked_by_hand(
    scores: np.ndarray, seen: sp.csr_matrix, items: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k per row: seen items removed, score descending, ties by ascending item id."""
    scores = scores.copy()
    scores[seen.toarray() > 0] = -np.inf
    ids, vals = [], []
    for row in scores:  # the naive reference: one full sort per user
        order = np.lexsort((items, -row))[:k]
        ids.append(items[order])
        vals.append(row[order])
    return np.array(ids), np.array(vals)


@pytest.mark.parametrize("name", list(ALL))
def test_fits_recommends_and_excludes_seen_items(name: str, train: pd.DataFrame) -> None:
    model = ALL[name]().fit(train)
    assert isinstance(model, Recommender)
    users = np.unique(train["user"])
    ids, scores = model.recommend(users, 10)
    assert ids.shape == scores.shape == (len(users), 10) and ids.dtype == np.int64
    assert np.isfinite(scores).all()
    assert (np.diff(scores, axis=1) <= 0).all()
    seen = set(zip(train["user"], train["item"], strict=True))
    assert not any((u, i) in seen for u, row in zip(users, ids, strict=True) for i in row)
    again = ALL[name]().fit(train).recommend(users, 10)[0]  # deterministic for a seed
    np.testing.assert_array_equal(ids, again)


@pytest.mark.parametrize("name", list(FACTOR_MODELS))
def test_factor_models_rank_by_the_dot_product(name: str, train: pd.DataFrame) -> None:
    model = FACTOR_MODELS[name]().fit(train)
    matrix, users, items = binary(train)
    scores = model.user_factors_.astype(np.float64) @ model.item_factors_.astype(np.float64).T
    ids_ref, vals_ref = ranked_by_hand(scores.astype(np.float32), matrix, items, 10)
    ids, vals = model.recommend(users, 10)
    np.testing.assert_array_equal(ids, ids_ref)
    np.testing.assert_allclose(vals, vals_ref, rtol=1e-6)


@pytest.mark.parametrize("name", list(ALL))
def test_same_lists_as_implicit_itself(name: str, train: pd.DataFrame) -> None:
    """implicit's own recommend (its top-k and its seen-item filter) gives the same lists."""
    model = ALL[name]().fit(train)
    matrix, users, items = binary(train)
    estimator = model.estimator_
    ref_codes, ref_scores = estimator.recommend(
        np.arange(len(users)), matrix.astype(np.float32), N=10, filter_already_liked_items=True
    )
    ids, scores = model.recommend(users, 10)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)
    distinct = np.abs(np.diff(ref_scores, axis=1)) > 1e-5  # positions not tied with the next
    left = np.concatenate([np.ones((len(users), 1), bool), distinct], axis=1)
    right = np.concatenate([distinct, np.ones((len(users), 1), bool)], axis=1)
    untied = left & right
    np.testing.assert_array_equal(ids[untied], items[ref_codes][untied])


def test_item_cosine_is_the_cosine_of_item_columns(train: pd.DataFrame) -> None:
    """With every neighbour kept, score(u, j) = Σ_{i seen by u} cos(i, j) (cos(i, i) = 1)."""
    model = ImplicitItemCosine(k_neighbors=10_000).fit(train)
    matrix, users, items = binary(train)
    x = matrix.toarray()
    norms = np.sqrt(x.sum(axis=0))
    cosine = (x.T @ x) / np.outer(norms, norms)
    ids_ref, vals_ref = ranked_by_hand(x @ cosine, matrix, items, 10)
    ids, vals = model.recommend(users, 10)
    np.testing.assert_allclose(vals, vals_ref, rtol=1e-6)
    np.testing.assert_array_equal(ids, ids_ref)


def test_item_tfidf_weights_users_by_idf(train: pd.DataFrame) -> None:
    """TF-IDF: user u's weight in an item column is log(n_items / (1 + items of u)), then
    cosine of the weighted columns."""
    model = ImplicitItemTFIDF(k_neighbors=10_000).fit(train)
    matrix, users, items = binary(train)
    x = matrix.toarray()
    idf = np.log(x.shape[1]) - np.log1p(x.sum(axis=1))
    w = x * idf[:, None]
    w = w / np.linalg.norm(w, axis=0)
    ids_ref, vals_ref = ranked_by_hand(x @ (w.T @ w), matrix, items, 10)
    ids, vals = model.recommend(users, 10)
    np.testing.assert_allclose(vals, vals_ref, rtol=1e-6)
    np.testing.assert_array_equal(ids, ids_ref)


def test_few_items_left_are_padded_and_unknown_users_get_popularity() -> None:
    train = pd.DataFrame({"user": [1, 1, 2, 3], "item": [10, 11, 10, 12], "timestamp": 0})
    model = ImplicitItemCosine(k_neighbors=5).fit(train)
    ids, scores = model.recommend(np.array([1, 99]), 3)
    assert list(ids[0]) == [12, PAD_ITEM_INT, PAD_ITEM_INT]
    assert np.isneginf(scores[0, 1:]).all()
    assert list(ids[1]) == [10, 11, 12]  # unknown user: popularity (10 twice), then item id


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: ImplicitALS(factors=0), "'factors' must be a positive int"),
        (lambda: ImplicitALS(regularization=-1.0), "'regularization' must be > 0"),
        (lambda: ImplicitBPR(learning_rate=0.0), "'learning_rate' must be > 0"),
        (lambda: ImplicitLMF(neg_prop=0), "'neg_prop' must be a positive int"),
        (lambda: ImplicitItemCosine(k_neighbors=0), "'k_neighbors' must be a positive int"),
        (lambda: ImplicitBM25(b=1.5), "'b' must be in"),
        (lambda: ImplicitALS(num_threads=-1), "'num_threads' must be an int"),
    ],
)
def test_bad_parameters_are_one_line_errors(build, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as err:
        build()
    assert "\n" not in str(err.value)
