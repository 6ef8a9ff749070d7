"""The synthetic generator: determinism, exact size, realism properties."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from harness.synthetic import generate

START = int(dt.datetime(2023, 1, 1, tzinfo=dt.UTC).timestamp())
YEAR = 365 * 86_400


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    return generate(n_users=500, n_items=300, n_events=12_000, seed=7)


def test_same_seed_same_frame_other_seed_other_frame() -> None:
    a = generate(n_users=300, n_items=200, n_events=5_000, seed=3)
    b = generate(n_users=300, n_items=200, n_events=5_000, seed=3)
    c = generate(n_users=300, n_items=200, n_events=5_000, seed=4)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_columns_dtypes_and_exact_size(events: pd.DataFrame) -> None:
    assert list(events.columns) == ["user", "item", "timestamp", "rating"]
    assert [str(t) for t in events.dtypes] == ["int64", "int64", "int64", "float64"]
    assert len(events) == 12_000
    assert events["user"].between(0, 499).all()
    assert events["item"].between(0, 299).all()
    assert set(events["rating"].unique()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert events["rating"].nunique() == 5


def test_no_duplicate_pairs_and_every_user_has_history(events: pd.DataFrame) -> None:
    assert not events.duplicated(["user", "item"]).any()
    per_user = events.groupby("user").size()
    assert len(per_user) == 500
    assert per_user.min() >= 3
    assert per_user.max() <= 150  # at most half of the 300 items


def test_timestamps_within_the_year_and_strictly_increasing_per_user(
    events: pd.DataFrame,
) -> None:
    ts = events["timestamp"]
    assert ts.min() >= START
    assert ts.max() < START + YEAR
    assert ts.max() - ts.min() > YEAR // 2  # spread over most of the year
    ordered = events.sort_values(["user", "timestamp"])
    assert not ordered.duplicated(["user", "timestamp"]).any()
    assert events["timestamp"].is_monotonic_increasing  # rows come sorted by time


def test_popularity_is_skewed(events: pd.DataFrame) -> None:
    counts = events["item"].value_counts().to_numpy()
    top_share = counts[: len(counts) // 10].sum() / counts.sum()
    assert top_share > 0.3  # a uniform catalog would give about 0.1
    assert counts.max() > 10 * np.median(counts)


def _hit_rates_pop_and_knn(events: pd.DataFrame, n_users: int, n_items: int) -> list[float]:
    """Leave-last-out hit rate@10 of popularity and of a dense cosine item-kNN (test-only code)."""
    last = events.sort_values(["user", "timestamp"]).groupby("user").tail(1)
    train = events.drop(last.index)
    X = np.zeros((n_users, n_items))
    X[train["user"], train["item"]] = 1.0
    norms = np.sqrt(X.sum(axis=0))
    norms[norms == 0] = 1.0
    S = (X.T @ X) / np.outer(norms, norms)
    np.fill_diagonal(S, 0.0)
    rates = []
    for scores in (np.tile(X.sum(axis=0), (n_users, 1)), X @ S):
        scores = np.where(X > 0, -np.inf, scores)
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        hits = top[last["user"].to_numpy()] == last["item"].to_numpy()[:, None]
        rates.append(float(hits.any(axis=1).mean()))
    return rates


def test_users_have_taste() -> None:
    """Co-occurrence predicts a user's next item far better than popularity; not without taste."""
    pop, knn = _hit_rates_pop_and_knn(generate(500, 300, 12_000, seed=7), 500, 300)
    assert knn > 1.5 * pop
    # control: with taste=0 every user draws from global popularity, so kNN has no edge
    pop0, knn0 = _hit_rates_pop_and_knn(generate(500, 300, 12_000, seed=7, taste=0.0), 500, 300)
    assert knn0 < 1.2 * pop0


def test_larger_catalog_and_invalid_arguments() -> None:
    df = generate(n_users=50, n_items=5000, n_events=1_000, seed=1)
    assert len(df) == 1_000
    assert df["item"].nunique() > 100
    with pytest.raises(ValueError, match="'n_events' must be at most"):
        generate(n_users=2, n_items=10, n_events=11)
    with pytest.raises(ValueError, match="'taste' must be in"):
        generate(taste=1.5)
    with pytest.raises(ValueError, match="'n_users' must be a positive int"):
        generate(n_users=0)


def test_without_ratings() -> None:
    df = generate(n_users=20, n_items=50, n_events=200, ratings=False)
    assert list(df.columns) == ["user", "item", "timestamp"]
