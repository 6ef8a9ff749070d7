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


# --------------------------------------------------------------- the normal path from sums
def _reference(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """The normal-path numbers computed the textbook way, two passes over the arrays (numpy's
    std and cov, scipy's t-test and binomial test): independent of metrics.stats."""
    d = b - a
    n = d.size
    z = st.norm.ppf(0.5 + confidence / 2)
    sd = d.std(ddof=1)
    lift = d.mean() / a.mean()
    cov = np.cov(d, a)  # ddof=1
    var_lift = cov[0, 0] - 2 * lift * cov[0, 1] + lift**2 * cov[1, 1]
    half_lift = z * math.sqrt(var_lift) / (math.sqrt(n) * abs(a.mean()))
    signs = np.sign(d)
    tt = st.ttest_rel(b, a)
    z_mde = st.norm.ppf(0.975) + st.norm.ppf(0.8)
    return {
        "mean_a": a.mean(),
        "mean_b": b.mean(),
        "sd_a": a.std(ddof=1),
        "sd_b": b.std(ddof=1),
        "diff": d.mean(),
        "diff_ci_low": d.mean() - z * sd / math.sqrt(n),
        "diff_ci_high": d.mean() + z * sd / math.sqrt(n),
        "lift": lift,
        "lift_ci_low": lift - half_lift,
        "lift_ci_high": lift + half_lift,
        "gsb_ci_low": signs.mean() - z * signs.std(ddof=1) / math.sqrt(n),
        "gsb_ci_high": signs.mean() + z * signs.std(ddof=1) / math.sqrt(n),
        "p_randomization": 2 * st.norm.sf(abs(d.sum()) / math.sqrt((d * d).sum())),
        "t": tt.statistic,
        "p_t": tt.pvalue,
        "effect_size": d.mean() / sd,
        "mde": z_mde * sd / math.sqrt(n),
        "p_sign": st.binomtest(int((d > 0).sum()), int((d != 0).sum())).pvalue,
    }


def _raw_sums(a: np.ndarray, b: np.ndarray) -> stats.PairMoments:
    """The sums one aggregation pass gives (centres 0), as an engine such as Spark sums them."""
    d = b - a
    return stats.PairMoments(
        n=a.size, sum_a=a.sum(), sum_b=b.sum(), sum_d=d.sum(), min_d=d.min(), max_d=d.max(),
        good=int((d > 0).sum()), bad=int((d < 0).sum()), sum_aa=(a * a).sum(),
        sum_dd=(d * d).sum(), sum_ad=(a * d).sum(), sum_aaa=(a**3).sum(), sum_ddd=(d**3).sum(),
        sum_dda=(d * d * a).sum(), sum_daa=(d * a * a).sum(),
    )  # fmt: skip


@pytest.mark.parametrize("make", [_hits, _ndcg_like], ids=["binary", "ndcg-like"])
def test_the_normal_path_from_sums_equals_compare_many_and_the_textbook(make) -> None:
    """compare_many(method="normal") on the arrays, compare_from_moments on one pass of raw
    sums (what Spark aggregates) and the textbook two-pass numbers agree to 1e-12 (relative)."""
    rng = np.random.default_rng(21)
    a, b = make(rng, 50_000)
    many = stats.compare_many({"m": (a, b, True)}, method="normal")["m"]
    from_raw = stats.compare_from_moments(_raw_sums(a, b))
    want = _reference(a, b)
    for got in (many, from_raw):
        flat = got.as_dict()
        assert got.method == "normal" and got.n_resamples == 0 and got.n == a.size
        for key, value in want.items():
            assert flat[key] == pytest.approx(value, rel=1e-12, abs=1e-300), key
        g = metrics.gsb(a, b)
        assert (got.gsb.good, got.gsb.same, got.gsb.bad) == (g.good, g.same, g.bad)
    # the sums of disjoint parts add up: two engines' partial aggregates give the same answer
    half = a.size // 2
    parts = [_raw_sums(a[:half], b[:half]), _raw_sums(a[half:], b[half:])]
    merged = stats.PairMoments(
        **{
            f: getattr(parts[0], f) + getattr(parts[1], f)
            for f in ("n", "sum_a", "sum_b", "sum_d", "good", "bad", "sum_aa", "sum_dd",
                      "sum_ad", "sum_aaa", "sum_ddd", "sum_dda", "sum_daa")
        },
        min_d=min(p.min_d for p in parts), max_d=max(p.max_d for p in parts),
    )  # fmt: skip
    assert stats.compare_from_moments(merged).diff_ci == pytest.approx(many.diff_ci, rel=1e-12)


def test_normal_ok_from_sums_decides_as_on_the_arrays() -> None:
    """The CLT check from raw sums takes the decision the arrays give, on data that passes and
    on sparse or skewed data that fails (one unit owns the difference; a heavy tail)."""
    rng = np.random.default_rng(4)
    n = stats.NORMAL_MIN_N
    sparse_b = np.zeros(n)
    sparse_b[:50] = 1.0
    c = rng.random(n)
    skewed = np.where(rng.random(n) < 0.002, rng.pareto(1.1, n) * 50, 0.0)
    cases = [_hits(rng, n), _ndcg_like(rng, n), (np.zeros(n), sparse_b), (c, c + skewed)]
    decisions = []
    for a, b in cases:
        sums = _raw_sums(a, b)
        decision = stats.normal_ok_from_moments(sums)
        assert decision == stats.normal_ok(a, b)
        # by hand: the largest unit's share of Σd² and the skewness of the mean of d
        d = b - a
        skew_d = abs(st.skew(d)) / math.sqrt(n) if d.std() > 0 else 0.0
        if (d * d).max() > 0.01 * (d * d).sum() or skew_d > 0.05:
            assert not decision
        decisions.append(decision)
    assert decisions == [True, True, False, False]
    # identical models: every difference is 0, exactly as the bootstrap gives it
    same = stats.compare_from_moments(_raw_sums(c, c.copy()))
    assert same.diff_ci == (0.0, 0.0) and same.p_randomization == 1.0 and same.t == 0.0


def test_side_sds_are_numpys_on_both_paths() -> None:
    """The per-unit sd of each side (what sizes an online test) is numpy's over the pairs both
    sides hold, on the bootstrap path, the normal path and from sums centred anywhere (values
    far from 0 included); exactly 0 for a constant side; NaN below 2 pairs."""
    rng = np.random.default_rng(8)
    a, b = rng.random(300), rng.random(300)
    a[:5], b[5:9] = np.nan, np.nan
    ok = ~(np.isnan(a) | np.isnan(b))
    want = (np.std(a[ok], ddof=1), np.std(b[ok], ddof=1))
    boot = stats.compare(a, b, n_resamples=50)
    assert boot.method == "bootstrap" and boot.n == ok.sum()
    assert (boot.sd_a, boot.sd_b) == pytest.approx(want, rel=1e-12)
    normal = stats.compare(a, b, method="normal")
    assert (normal.sd_a, normal.sd_b) == pytest.approx(want, rel=1e-12)
    far_a, far_b = 1e6 + rng.random(5000), 1e6 + rng.random(5000)
    centred = stats.pair_moments(far_a, far_b).side_sds()
    assert centred == pytest.approx((far_a.std(ddof=1), far_b.std(ddof=1)), rel=1e-9)
    flat = stats.compare(np.zeros(10), rng.random(10), n_resamples=20)
    assert flat.sd_a == 0.0
    one = stats.compare([0.5], [0.7], n_resamples=20)
    assert np.isnan(one.sd_a) and np.isnan(one.sd_b)


def test_moments_need_a_pair() -> None:
    with pytest.raises(ValueError, match="'n' must be"):
        stats.compare_from_moments(stats.PairMoments(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))


# ----------------------------------------------------------- item buckets in one pass
def _bucket_inputs(text_ids: bool, seed: int = 3):
    """Graded truth (some rows below the threshold, users with no list, listed users without
    truth), two models' lists of uneven length in shuffled row order, and a bucket per item."""
    rng = np.random.default_rng(seed)
    n_users, n_items = 120, 40
    qrels = (
        pd.DataFrame({"user": rng.integers(0, n_users, 500), "item": rng.integers(0, 50, 500)})
        .drop_duplicates(["user", "item"])
        .assign(relevance=lambda f: rng.integers(0, 4, len(f)).astype(float))
    )
    recs = []
    for _ in range(2):
        lists = [
            pd.DataFrame(
                {"user": u, "item": rng.permutation(n_items)[:m], "rank": np.arange(1, m + 1)}
            )
            for u in range(10, n_users + 15)  # users 0-9 have no list; 120-134 have no truth
            for m in [int(rng.integers(1, 9))]
        ]
        recs.append(pd.concat(lists).sample(frac=1.0, random_state=seed).reset_index(drop=True))
    items = np.arange(50)
    bucket_of = pd.Series(rng.choice(["head", "mid", "tail"], 45), index=items[:45])  # 45-49 unseen
    if text_ids:

        def as_text(f):
            return f.assign(user="u" + f["user"].astype(str), item="i" + f["item"].astype(str))

        qrels, recs = as_text(qrels), [as_text(r) for r in recs]
        bucket_of.index = "i" + bucket_of.index.astype(str)
    return qrels, (recs[0], recs[1]), bucket_of


@pytest.mark.parametrize("text_ids", [False, True], ids=["int ids", "string ids"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"preset": "trec_eval"},
        {"gain": "linear", "empty_users": "one", "user_set": "intersection",
         "relevance_threshold": 2},
        {"ap_denominator": "relevant", "precision_denominator": "list", "ideal_dcg": "k",
         "empty_users": "zero", "ndcg_ties": "average"},
    ],
    ids=["default", "trec_eval", "graded-one-intersection", "other-conventions"],
)  # fmt: skip
def test_item_buckets_in_one_pass_equal_metrics_evaluate_per_bucket(
    every_metric, monkeypatch, text_ids: bool, options: dict
) -> None:
    """Every registered ranking metric: the one-pass bucket tables equal the straightforward
    path (metrics.evaluate of each bucket's truth rows) to 1e-12, index and NaNs included."""
    from harness.compare import buckets
    from harness.compare.buckets import bucket_tables, bucket_tables_by_engine

    names = [n for n in every_metric(ks=(3, 5)) if metrics.parse(n).definition.kind == "ranking"]
    qrels, recs, bucket_of = _bucket_inputs(text_ids)
    with monkeypatch.context() as m:  # the one-pass path itself, not a fallback to the engine
        m.setattr(buckets, "bucket_tables_by_engine", None)
        fast = bucket_tables(qrels, recs, names, bucket_of, options)
    slow = bucket_tables_by_engine(qrels, recs, names, bucket_of, options)
    for bucket in ("head", "mid", "tail"):
        for got, want in zip(fast[bucket], slow[bucket], strict=True):
            assert len(want) > 10
            pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=0, atol=1e-12)
    # and by hand for one user: recall@5 of the first tail user is their listed tail hits
    truth = qrels.assign(b=bucket_of.reindex(qrels["item"]).fillna("tail").to_numpy())
    thr = options.get("relevance_threshold", 1)
    user = fast["tail"][0].index[0]
    mine = truth[(truth["user"] == user) & (truth["b"] == "tail") & (truth["relevance"] >= thr)]
    top = recs[0][recs[0]["user"] == user].nsmallest(5, "rank")["item"]
    if len(mine):
        want_recall = top.isin(mine["item"]).sum() / len(mine)
        assert fast["tail"][0].loc[user, "recall@5"] == pytest.approx(want_recall, abs=1e-12)


def test_item_buckets_with_tied_ranks_take_the_engine_path() -> None:
    """Two items at one rank: the engine's tie rule decides, so the engine path runs."""
    from harness.compare.buckets import bucket_tables, bucket_tables_by_engine

    qrels, recs, bucket_of = _bucket_inputs(False)
    tied = recs[0].copy()
    tied.loc[tied["rank"] == 2, "rank"] = 1
    got = bucket_tables(qrels, (tied, recs[1]), ["ndcg@5"], bucket_of, {"tie_break": "item_desc"})
    want = bucket_tables_by_engine(
        qrels, (tied, recs[1]), ["ndcg@5"], bucket_of, {"tie_break": "item_desc"}
    )
    for bucket in ("head", "mid", "tail"):
        pd.testing.assert_frame_equal(got[bucket][0], want[bucket][0], check_exact=True)


def test_item_buckets_cut_lists_at_the_deepest_cutoff(monkeypatch) -> None:
    """Lists longer than every cutoff are judged to the deepest one, as the engine does."""
    from harness.compare import buckets

    names = ["ndcg@3", "precision@3", "recall@2", "map@3", "mrr@3", "num_ret@3", "r_precision"]
    qrels, recs, bucket_of = _bucket_inputs(False, seed=8)
    want = buckets.bucket_tables_by_engine(qrels, recs, names[:-1], bucket_of, {})
    with monkeypatch.context() as m:
        m.setattr(buckets, "bucket_tables_by_engine", None)
        got = buckets.bucket_tables(qrels, recs, names[:-1], bucket_of, {})
        with_rprec = buckets.bucket_tables(qrels, recs, names, bucket_of, {})
    rprec = buckets.bucket_tables_by_engine(qrels, recs, names, bucket_of, {})
    for bucket in ("head", "mid", "tail"):
        for x, y in zip(
            got[bucket] + with_rprec[bucket], want[bucket] + rprec[bucket], strict=True
        ):
            pd.testing.assert_frame_equal(x, y, check_exact=False, rtol=0, atol=1e-12)
