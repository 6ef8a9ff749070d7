"""``_rank_order`` (the ranked lists of ``PrecomputedScores`` and ``MLflowModel``) against the
plain definition: ``np.lexsort`` by owner, score descending, then item id ascending."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.models.base import _rank_order

# scores that tie, differ only in their last bits (the same key prefix), straddle zero (-0.0
# equals 0.0), and reach the ends of float64
_BASE = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, 1e-300, -1e-300, 5e-324, -5e-324, 1e300, -1e300]
_CLOSE = [np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0), np.nextafter(-1.0, -2.0), 1.0 + 2**-40]
SCORES = st.one_of(
    st.sampled_from(_BASE + _CLOSE + [np.inf, -np.inf]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-3, 3).map(float),
)


@st.composite
def tables(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner codes, item ids, scores) with no repeated (owner, item) pair."""
    top = draw(st.sampled_from([0, 3, 40, 2**40, 2**50]))  # 2**50: too wide for the key
    n = draw(st.integers(1, 60))
    owner = np.array(draw(st.lists(st.integers(0, top), min_size=n, max_size=n)), np.int64)
    kind = draw(st.sampled_from(["codes", "ints", "text"]))
    if kind == "codes":  # 0 .. n-1: taken as codes
        item = np.array(draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n)), np.int64)
    elif kind == "ints":
        item = np.array(draw(st.lists(st.integers(-5, 10**12), min_size=n, max_size=n)))
    else:
        item = np.array(draw(st.lists(st.sampled_from(["9", "10", "a", "b", "é"]), min_size=n,
                                      max_size=n)), dtype=object)  # fmt: skip
    score = np.array(draw(st.lists(SCORES, min_size=n, max_size=n)), np.float64)
    keep = ~pd.DataFrame({"o": owner, "i": item}).duplicated().to_numpy()
    return owner[keep], item[keep], score[keep]


def _reference(owner: np.ndarray, item: np.ndarray, score: np.ndarray) -> np.ndarray:
    ranks = pd.factorize(item, sort=True)[0]
    return np.lexsort((ranks, -score, owner))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_rank_order_is_owner_then_score_descending_then_item(table) -> None:
    owner, item, score = table
    got = _rank_order(owner, item, score)
    want = _reference(owner, item, score)
    assert np.array_equal(got, want), (owner[want], item[want], score[want])


def test_many_rows_with_ties_and_close_scores() -> None:
    """At a size where every path of the key runs at once: grouped and shuffled owners, runs
    of equal scores, scores equal in their key prefix only, and a non-finite score."""
    rng = np.random.default_rng(5)
    n_owners, per = 3_000, 40
    owner = np.repeat(np.arange(n_owners), per)
    item = np.tile(np.arange(per), n_owners) * 7 % 97
    pool = np.array([0.25, -0.0, 0.0, 1.0, np.nextafter(1.0, 2.0), -2.5, 1e-310, 7.0])
    score = np.where(
        rng.random(owner.size) < 0.5, rng.choice(pool, owner.size), rng.random(owner.size)
    )
    for shuffle in (False, True):
        at = rng.permutation(owner.size) if shuffle else np.arange(owner.size)
        o, i, s = owner[at], item[at], score[at]
        assert np.array_equal(_rank_order(o, i, s), _reference(o, i, s))
    score[17] = np.nan  # the plain path, NaN last as lexsort puts it
    assert np.array_equal(_rank_order(owner, item, score), _reference(owner, item, score))
