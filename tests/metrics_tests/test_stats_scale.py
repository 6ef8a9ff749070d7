"""The comparison at scale: shared resamples (bit for bit the plain path), normal / delta-method
intervals that agree with the plain paired bootstrap within its Monte-Carlo error, their
coverage on simulated data with a known difference, and the guard that keeps skewed or sparse
data on the bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

import metrics
from harness.compare import CompareSpec, compare_pair, segment_data
from metrics import stats


def _hits(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Binary per-user hit rates: baseline 10%, candidate 11%, correlated through the users."""
    u = rng.random(n)
    return (u < 0.10).astype(float), ((u < 0.09) | (rng.random(n) < 0.025)).astype(float)


def _ndcg_like(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Skewed values in [0, 1] with many zeros (about 70%); B keeps A for 80% of users."""
    a = np.where(rng.random(n) < 0.3, rng.beta(2, 5, n), 0.0)
    fresh = np.where(rng.random(n) < 0.35, rng.beta(2, 5, n), 0.0)
    return a, np.where(rng.random(n) < 0.8, a, fresh)


def _endpoint_se(low: float, high: float, confidence: float, resamples: int) -> float:
    """Monte-Carlo standard error of a percentile-bootstrap endpoint: sqrt(p(1−p)/R) / density
    at the quantile, the bootstrap distribution taken as normal with the sd its interval implies."""
    tail = (1 - confidence) / 2
    z = st.norm.ppf(1 - tail)
    sd = (high - low) / (2 * z)
    return math.sqrt(tail * (1 - tail) / resamples) * sd / st.norm.pdf(z)


def test_shared_resamples_equal_the_plain_functions_bit_for_bit() -> None:
    """Below the threshold compare_many draws once per n, and each metric's numbers equal the
    stand-alone paired bootstrap, GSB bootstrap and randomization test exactly."""
    rng = np.random.default_rng(11)
    n = 3000
    cols = {
        "hits": (*_hits(rng, n), True),
        "ndcg": (*_ndcg_like(rng, n), True),
        "rmse": (rng.random(n) * 2, rng.random(n) * 2, False),
    }
    cols["ndcg"][0][:7] = np.nan  # another n: its own draw
    out = stats.compare_many(cols, n_resamples=400, seed=3)
    for name, (a, b, hib) in cols.items():
        got = out[name]
        boot = stats.paired_bootstrap(a, b, n_resamples=400, seed=3)
        flip = stats.randomization_test(a, b, n_resamples=400, seed=3)
        g = stats.gsb_bootstrap(a, b, higher_is_better=hib, n_resamples=400, seed=3)
        assert got.method == "bootstrap" and got.n_resamples == 400
        assert got.diff_ci == boot.diff_ci and got.lift_ci == boot.lift_ci
        assert got.p_randomization == flip.pvalue
        assert got.gsb_ci == g.ci and got.gsb == g.gsb


@pytest.mark.parametrize("make", [_hits, _ndcg_like], ids=["binary", "ndcg-like"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normal_intervals_agree_with_the_plain_bootstrap(make, seed: int) -> None:
    """At the threshold the normal diff and delta-method lift intervals sit within 4 Monte-Carlo
    standard errors of the percentile bootstrap's endpoints on the same data."""
    rng = np.random.default_rng(100 + seed)
    a, b = make(rng, stats.NORMAL_MIN_N)
    resamples = 2000
    boot = stats.paired_bootstrap(a, b, n_resamples=resamples, seed=seed)
    auto = stats.compare(a, b, n_resamples=resamples, seed=seed)
    assert auto.method == "normal" and auto.n_resamples == 0
    for name in ("diff_ci", "lift_ci"):
        ref, got = getattr(boot, name), getattr(auto, name)
        tol = 4 * _endpoint_se(*ref, 0.95, resamples)
        assert abs(got[0] - ref[0]) <= tol and abs(got[1] - ref[1]) <= tol, (name, ref, got)
    assert stats.normal_interval(a, b).diff_ci == auto.diff_ci
    # the sign-flip p-value: its normal approximation against 2000 sampled flips
    flip = stats.randomization_test(a, b, n_resamples=resamples, seed=seed).pvalue
    se = math.sqrt(max(flip * (1 - flip), 1 / resamples) / resamples)
    assert abs(auto.p_randomization - flip) <= 4 * se + 1 / resamples


def test_delta_method_lift_by_the_covariance_formula() -> None:
    """The lift interval equals the textbook delta method for a ratio of means, written with
    variances and the covariance of (d, a)."""
    rng = np.random.default_rng(5)
    a, b = _ndcg_like(rng, 5000)
    d = b - a
    ma, md = a.mean(), d.mean()
    cov = np.cov(d, a)  # ddof=1
    var = (cov[0, 0] / ma**2 - 2 * md * cov[0, 1] / ma**3 + md**2 * cov[1, 1] / ma**4) / a.size
    half = st.norm.ppf(0.975) * math.sqrt(var)
    low, high = stats.normal_interval(a, b).lift_ci
    assert low == pytest.approx(md / ma - half, rel=1e-9)
    assert high == pytest.approx(md / ma + half, rel=1e-9)
    half_d = st.norm.ppf(0.975) * d.std(ddof=1) / math.sqrt(d.size)
    assert stats.normal_interval(a, b).diff_ci == pytest.approx((md - half_d, md + half_d))


def test_coverage_on_simulated_data_with_a_known_difference() -> None:
    """200 datasets of NORMAL_MIN_N users, true difference +0.02 and lift +10%: the 95% intervals
    cover the truth 91-99% of the time; with no true difference the p-value rejects at 5% about
    5% of the time."""
    rng = np.random.default_rng(2024)
    n, runs = stats.NORMAL_MIN_N, 200
    covered = {"diff": 0, "lift": 0}
    rejected = 0
    for _ in range(runs):
        u = rng.random(n)
        a = (u < 0.2).astype(float)
        b = ((u < 0.18) | ((u >= 0.2) & (u < 0.24))).astype(float)  # P(b) = 0.22, paired
        res = stats.compare(a, b, method="normal")
        covered["diff"] += res.diff_ci[0] <= 0.02 <= res.diff_ci[1]
        covered["lift"] += res.lift_ci[0] <= 0.1 <= res.lift_ci[1]
        null = np.where(rng.random(n) < 0.5, a, (rng.random(n) < 0.2).astype(float))
        rejected += stats.compare(a, null, method="normal").p_randomization < 0.05
    for name, count in covered.items():
        assert 0.91 <= count / runs <= 0.99, (name, count)
    assert 0.01 <= rejected / runs <= 0.10, rejected


def test_sparse_or_skewed_differences_stay_on_the_bootstrap() -> None:
    """Where the CLT is not to be trusted, auto keeps the bootstrap even above the threshold:
    50 units carry every difference (each over 1% of Σd²), or a few huge values skew the mean."""
    n = stats.NORMAL_MIN_N
    a = np.zeros(n)
    b = np.zeros(n)
    b[:50] = 1.0
    assert not stats.normal_ok(a, b)
    assert stats.compare(a, b, n_resamples=50).method == "bootstrap"
    rng = np.random.default_rng(9)
    skewed = np.where(rng.random(n) < 0.002, rng.pareto(1.1, n) * 50, 0.0)
    c = rng.random(n)
    assert not stats.normal_ok(c, c + skewed)
    assert stats.compare(c, c + skewed, n_resamples=50).method == "bootstrap"
    # identical models: every difference 0, the normal path gives the bootstrap's exact answer
    same = stats.compare(c, c.copy())
    assert same.method == "normal" and same.diff_ci == (0.0, 0.0) and same.p_randomization == 1.0


def test_method_is_checked() -> None:
    with pytest.raises(ValueError, match="'method' must be one of"):
        stats.compare([1.0, 2.0], [2.0, 3.0], method="fast")


def test_item_buckets_equal_a_naive_evaluation() -> None:
    """compare_pair's head/mid/tail rows: each bucket's means equal metrics.evaluate of every
    list of the model against that bucket's test items alone."""
    rng = np.random.default_rng(1)
    n_users, n_items = 300, 60
    train = pd.DataFrame(
        {"user": rng.integers(0, n_users, 3000), "item": rng.zipf(1.5, 3000) % n_items}
    )
    qrels = (
        pd.DataFrame({"user": rng.integers(0, n_users, 900), "item": rng.integers(0, 80, 900)})
        .drop_duplicates()
        .assign(relevance=1.0)
    )
    recs = [
        pd.DataFrame(
            {
                "user": np.repeat(np.arange(n_users), 5),
                "item": rng.permuted(np.tile(np.arange(n_items), (n_users, 1)), axis=1)[
                    :, :5
                ].ravel(),
                "rank": np.tile(np.arange(1, 6), n_users),
            }
        )
        for _ in range(2)
    ]
    names = ["ndcg@5", "recall@5", "hit_rate@5"]
    spec = CompareSpec(baseline="a", n_resamples=50)
    per_user = [metrics.evaluate(qrels, r.assign(score=-r["rank"]), names).per_user for r in recs]
    segments = segment_data(train, np.sort(qrels["user"].unique()), spec)
    pair = compare_pair(
        "a", "b", (per_user[0], per_user[1]), names, spec,
        segments=segments, qrels=qrels, recs=(recs[0], recs[1]),
    )  # fmt: skip
    bucket_of = segments.item_bucket.reindex(qrels["item"]).fillna("tail").to_numpy()
    for bucket in ("head", "mid", "tail"):
        truth = qrels[bucket_of == bucket]
        for side, r in zip(("mean_a", "mean_b"), recs, strict=True):
            want = metrics.evaluate(truth, r.assign(score=-r["rank"]), names).per_user.mean()
            for name in names:
                row = pair.row(name, f"items:{bucket}")
                assert row is not None
                assert row[side] == pytest.approx(want[name], abs=1e-12)
