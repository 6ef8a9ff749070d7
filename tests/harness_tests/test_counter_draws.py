"""The counter-based draws both engines share keep their statistics: sampled negatives are a
uniform subset of the unseen items (or popularity-weighted, without replacement), and the random
split holds out a uniform subset of exactly ``round(n * test_ratio)`` events.

Expected values come from the sampling model, by hand (binomial / multinomial, and for weighted
sampling without replacement the two-draw inclusion formula), not from the code.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import stats

from harness.candidates import sample_negatives
from harness.split import random_split
from harness.synthetic import generate

N_USERS = 4000
CATALOG = 10  # items 0..9: test users trained on 0 and test on 1, so 2..9 are unseen


def _data() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Test users u0.. with train item 0 and test item 1; a filler user gives item k (1..9)
    k training events, so popularity weights of the unseen items 2..9 are 2..9."""
    users = [f"u{i}" for i in range(N_USERS)]
    filler = [("filler", k) for k in range(1, CATALOG) for _ in range(k)]
    train = pd.DataFrame([(u, 0) for u in users] + filler, columns=["user", "item"]).assign(
        timestamp=0
    )
    test = pd.DataFrame({"user": users, "item": 1, "timestamp": 1})
    return train, test


def _negatives(cand: pd.DataFrame) -> pd.DataFrame:
    return cand[cand["item"] != 1]


def test_uniform_negatives_are_a_uniform_subset_of_the_unseen_items() -> None:
    train, test = _data()
    neg = _negatives(sample_negatives(train, test, 3, "uniform", seed=7))
    assert set(neg["item"]) <= set(range(2, CATALOG))
    sets = neg.groupby("user")["item"].apply(lambda s: tuple(sorted(s)))
    assert len(sets) == N_USERS and (sets.map(len) == 3).all()
    # each of the C(8, 3) = 56 subsets equally likely: chi-square goodness of fit
    subsets = list(itertools.combinations(range(2, CATALOG), 3))
    observed = sets.value_counts().reindex(subsets, fill_value=0).to_numpy()
    assert stats.chisquare(observed).pvalue > 1e-3
    # and each item is in it with probability 3/8 (5 binomial sigmas)
    freq = neg["item"].value_counts().reindex(range(2, CATALOG)).to_numpy() / N_USERS
    sigma = np.sqrt(3 / 8 * 5 / 8 / N_USERS)
    assert np.abs(freq - 3 / 8).max() < 5 * sigma


def test_popularity_negatives_follow_the_weights_without_replacement() -> None:
    train, test = _data()
    w = np.arange(2, CATALOG, dtype=float)  # items 2..9 weigh 2..9
    p = w / w.sum()
    one = _negatives(sample_negatives(train, test, 1, "popularity", seed=3))
    observed = one["item"].value_counts().reindex(range(2, CATALOG), fill_value=0).to_numpy()
    assert stats.chisquare(observed, p * N_USERS).pvalue > 1e-3
    # two without replacement: P(i in set) = p_i + sum_{k != i} p_k p_i / (1 - p_k)
    two = _negatives(sample_negatives(train, test, 2, "popularity", seed=3))
    assert (two.groupby("user").size() == 2).all()
    inclusion = p + np.array(
        [sum(p[k] * p[i] / (1 - p[k]) for k in range(len(p)) if k != i) for i in range(len(p))]
    )
    freq = two["item"].value_counts().reindex(range(2, CATALOG), fill_value=0) / N_USERS
    sigma = np.sqrt(inclusion * (1 - inclusion) / N_USERS)
    assert (np.abs(freq.to_numpy() - inclusion) < 5 * sigma).all()


def test_candidates_do_not_depend_on_row_order_or_other_users() -> None:
    train, test = _data()
    a = sample_negatives(train, test, 3, "popularity", seed=1)
    b = sample_negatives(
        train.sample(frac=1.0, random_state=2), test.iloc[::-1], 3, "popularity", 1
    )
    pd.testing.assert_frame_equal(a, b)
    few = sample_negatives(train, test.iloc[:10], 3, "popularity", seed=1)
    pd.testing.assert_frame_equal(
        few, a[a["user"].isin(set(test["user"].iloc[:10]))].reset_index(drop=True)
    )


def test_random_split_is_a_uniform_draw() -> None:
    """Each event is test with probability test_ratio, whoever and whenever: over 400 seeds each
    row's test frequency is within 5 sigma of 0.2 and every split holds exactly 100 of 500."""
    df = generate(n_users=60, n_items=40, n_events=500, seed=11)
    hits = np.zeros(len(df))
    for seed in range(400):
        test = random_split(df, test_ratio=0.2, seed=seed).test
        assert len(test) == 100
        hits[test.index.to_numpy()] += 1
    freq = hits / 400
    assert np.abs(freq - 0.2).max() < 5 * np.sqrt(0.2 * 0.8 / 400)
    early = df["timestamp"].to_numpy() <= np.median(df["timestamp"])
    assert abs(freq[early].mean() - freq[~early].mean()) < 0.01
