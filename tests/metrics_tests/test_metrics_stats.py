"""Paired comparison statistics (``metrics.stats``) against scipy, hand-worked values and naive
test-only implementations."""

from __future__ import annotations

import itertools
import math
import statistics
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

import metrics
from metrics import stats
from metrics.stats import (
    adjust,
    benjamini_hochberg,
    compare,
    effect_size,
    gsb_bootstrap,
    holm,
    minimum_detectable_effect,
    paired_bootstrap,
    paired_t_test,
    randomization_test,
    sign_test,
)

SETTINGS = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def naive_flip_p(d, alternative="two-sided"):
    """Exact sign-flip p-value by enumerating every sign pattern in exact rational arithmetic."""
    d = [Fraction(x) for x in d]
    observed = sum(d)
    count = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        s = sum(si * di for si, di in zip(signs, d, strict=True))
        if alternative == "two-sided":
            count += abs(s) >= abs(observed)
        elif alternative == "greater":
            count += s >= observed
        else:
            count += s <= observed
    return count / 2 ** len(d)


def naive_holm(p):
    """Holm by the definition: adj_(i) = min(1, max_{j <= i} (m − j + 1)·p_(j)), 1-based ranks."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    for rank, i in enumerate(order, start=1):
        out[i] = min(1.0, max((m - j + 1) * p[order[j - 1]] for j in range(1, rank + 1)))
    return out


# ---------------------------------------------------------------------------------------------
# t-test, sign test, effect size, MDE
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "seed"), [(2, 0), (5, 1), (30, 2), (1000, 3)])
def test_t_test_matches_scipy_ttest_rel(n, seed):
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    b = a + rng.normal(0.05, 0.2, n)
    ours = paired_t_test(a, b)
    ref = sps.ttest_rel(b, a)  # ours is signed b − a
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-10)
    assert ours.pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    assert ours.df == int(ref.df) == n - 1
    assert (ours.n, ours.dropped) == (n, 0)


def test_t_test_zero_variance_and_too_few_pairs():
    certain = paired_t_test([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])  # every difference is 0.5
    assert (certain.statistic, certain.pvalue) == (math.inf, 0.0)
    worse = paired_t_test([1.0, 2.0], [0.0, 1.0])
    assert (worse.statistic, worse.pvalue) == (-math.inf, 0.0)
    same = paired_t_test([0.1, 0.7, 0.3], [0.1, 0.7, 0.3])
    assert (same.statistic, same.df, same.pvalue) == (0.0, 2, 1.0)
    tenth = paired_t_test([0.0, 0.0, 0.0], [0.1, 0.1, 0.1])  # mean(d) is 0.1 + 2e-17, sd is 0
    assert (tenth.statistic, tenth.pvalue) == (math.inf, 0.0)
    assert effect_size([0.0, 0.0, 0.0], [0.1, 0.1, 0.1]) == math.inf
    tiny = paired_t_test(
        [0.0, 0.0], [5e-324, 0.0]
    )  # variance underflows to 0 (found by Hypothesis)
    assert tiny.pvalue in (0.0, 1.0) and effect_size([0.0, 0.0], [5e-324, 0.0]) in (0.0, math.inf)
    one = paired_t_test([0.1], [0.2])
    assert math.isnan(one.statistic) and math.isnan(one.pvalue) and one.df == 0


@pytest.mark.parametrize(
    ("good", "bad"),
    [(0, 1), (1, 0), (1, 1), (5, 5), (9, 1), (1, 9), (3, 4), (10, 30), (0, 40), (17, 3),
     (500, 450), (1234, 1300), (50_000, 50_600)],
)  # fmt: skip
def test_sign_test_matches_scipy_binomtest(good, bad):
    assert sign_test(good, bad) == pytest.approx(
        sps.binomtest(good, good + bad, 0.5).pvalue, rel=1e-9, abs=1e-300
    )


def test_sign_test_hand_values():
    assert sign_test(9, 1) == pytest.approx(2 * (1 + 10) / 2**10, rel=1e-12)  # P(X<=1), doubled
    assert sign_test(0, 0) == 1.0  # nothing to test: documented convention
    assert sign_test(np.int64(2), np.int64(2)) == 1.0


def test_effect_size_and_mde_match_hand_formulas():
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = [1.5, 2.1, 3.3, 4.2, 5.4]
    d = [0.5, 0.1, 0.3, 0.2, 0.4]  # b − a
    sd = statistics.stdev(d)  # 0.1·sqrt(2.5)
    assert effect_size(a, b) == pytest.approx(statistics.mean(d) / sd, rel=1e-9)  # 0.3/0.158

    z = statistics.NormalDist().inv_cdf
    mde = minimum_detectable_effect(a, b)
    expected = (z(0.975) + z(0.8)) * sd / math.sqrt(5)  # 2.8016 · 0.1581 / 2.2361 = 0.1981
    assert mde.absolute == pytest.approx(expected, rel=1e-9)
    assert mde.absolute == pytest.approx(0.19810, abs=1e-5)
    assert mde.relative == pytest.approx(expected / 3.0, rel=1e-9)  # mean a = 3
    assert mde.sd_diff == pytest.approx(sd, rel=1e-12)
    strict = minimum_detectable_effect(a, b, alpha=0.01, power=0.9)
    assert strict.absolute == pytest.approx((z(0.995) + z(0.9)) * sd / math.sqrt(5), rel=1e-9)


def test_effect_size_edge_cases():
    assert effect_size([0.0, 0.0], [1.0, 1.0]) == math.inf
    assert effect_size([0.2, 0.4], [0.2, 0.4]) == 0.0
    assert math.isnan(effect_size([0.2, np.nan], [0.3, 0.5]))  # one pair left
    assert minimum_detectable_effect([1.0, 0.0], [1.0, 1.0]).relative > 0  # over |mean a| = 0.5
    assert math.isnan(minimum_detectable_effect([0.0, 0.0], [1.0, 2.0]).relative)  # mean a = 0


# ---------------------------------------------------------------------------------------------
# Randomization test
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([0, 0, 0, 0, 0], [1, 2, 3, 4, 5]),
        ([3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]),  # integer differences: exact ties
        ([1, 2, 2, 0, 1, 3], [2, 1, 3, 0, 2, 2]),  # d = 1, −1, 1, 0, 1, −1
    ],
)
def test_exact_randomization_matches_enumeration(a, b, alternative):
    d = [y - x for x, y in zip(a, b, strict=True)]
    res = randomization_test(a, b, exact=True, alternative=alternative)
    assert res.pvalue == naive_flip_p(d, alternative)
    assert res.exact and res.n_resamples == 2 ** len(a)


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_randomization_on_continuous_data(seed):
    rng = np.random.default_rng(seed)
    a = rng.random(10)
    b = a + rng.normal(0.1, 0.3, 10)
    for alternative in ("two-sided", "greater", "less"):
        res = randomization_test(a, b, exact=True, alternative=alternative)
        assert res.pvalue == pytest.approx(naive_flip_p(b - a, alternative), abs=1e-15)


def test_naive_enumeration_oracle_hand_value():
    assert naive_flip_p([1, 2, 3, 4, 5]) == 2 / 32  # only all-plus and all-minus reach |15|


def test_sampled_randomization_within_monte_carlo_error():
    rng = np.random.default_rng(8)
    a = rng.random(12)
    b = a + rng.normal(0.1, 0.3, 12)
    R = 20_000
    for alternative in ("two-sided", "greater", "less"):
        exact = naive_flip_p(b - a, alternative)
        sampled = randomization_test(a, b, n_resamples=R, seed=3, alternative=alternative).pvalue
        assert abs(sampled - exact) <= 5 * math.sqrt(exact * (1 - exact) / R) + 1 / R


def test_randomization_p_formula_on_an_extreme_effect():
    a = np.zeros(40)
    b = np.linspace(1.0, 2.0, 40)  # all positive: no random flip comes near the observed sum
    res = randomization_test(a, b, n_resamples=999)
    assert res.pvalue == (0 + 1) / (999 + 1)
    assert res.statistic == pytest.approx(1.5)


def test_randomization_chunking_does_not_change_exact_p(monkeypatch):
    rng = np.random.default_rng(5)
    a, b = rng.random(11), rng.random(11)
    full = randomization_test(a, b, exact=True).pvalue
    monkeypatch.setattr(stats, "_MEMORY_BUDGET", 2000)  # many small chunks
    assert randomization_test(a, b, exact=True).pvalue == full
    sampled = randomization_test(a, b, n_resamples=3000, seed=1).pvalue
    assert abs(sampled - full) <= 5 * math.sqrt(full * (1 - full) / 3000) + 1 / 3000


# ---------------------------------------------------------------------------------------------
# Multiple comparisons
# ---------------------------------------------------------------------------------------------
def test_holm_hand_worked_example():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    # capped at 1: 0.5·2 = 1.0, 0.6·1 = 0.6 → running max 1.0
    np.testing.assert_allclose(holm([0.6, 0.5]), [1.0, 1.0])


@pytest.mark.parametrize("seed", range(5))
def test_holm_and_bh_against_references(seed):
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.random(20) ** 3, [0.01, 0.01, 0.2, 0.2, 1.0, 0.0]])
    rng.shuffle(p)
    np.testing.assert_allclose(holm(p), naive_holm(list(p)), rtol=1e-12)
    np.testing.assert_allclose(
        benjamini_hochberg(p), sps.false_discovery_control(p, method="bh"), rtol=1e-12
    )
    np.testing.assert_array_equal(adjust(p, "none"), p)
    np.testing.assert_array_equal(adjust(p, "bh"), benjamini_hochberg(p))
    np.testing.assert_array_equal(adjust(p), holm(p))


def test_adjust_keeps_series_index_and_passes_nan_through():
    p = pd.Series([0.04, np.nan, 0.01], index=["ndcg@10", "auc", "recall@20"])
    out = holm(p)
    assert isinstance(out, pd.Series) and list(out.index) == list(p.index)
    np.testing.assert_allclose(out.to_numpy(), [0.04, np.nan, 0.02])  # family of 2, not 3
    bh = benjamini_hochberg(p)
    np.testing.assert_allclose(bh.to_numpy(), [0.04, np.nan, 0.02])
    assert holm([]).shape == (0,)


@SETTINGS
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30), st.sampled_from(["holm", "bh"]))
def test_adjusted_pvalues_monotone_bounded(p, method):
    adj = adjust(p, method)
    p = np.asarray(p)
    assert ((adj >= p - 1e-15) & (adj <= 1.0)).all()
    order = np.argsort(p, kind="stable")
    assert (np.diff(adj[order]) >= -1e-15).all()  # same order as the raw p-values


# ---------------------------------------------------------------------------------------------
# Bootstrap and GSB
# ---------------------------------------------------------------------------------------------
def test_candidate_identical_to_baseline():
    rng = np.random.default_rng(0)
    a = pd.Series(rng.random(300), index=[f"u{i}" for i in range(300)])
    res = compare(a, a.copy(), n_resamples=500)
    assert res.diff == 0.0 and res.diff_ci == (0.0, 0.0)
    assert res.lift == 0.0 and res.lift_ci == (0.0, 0.0)
    assert res.p_randomization == 1.0
    assert res.gsb.delta == 0.0 and res.gsb_ci == (0.0, 0.0)
    assert (res.gsb.good, res.gsb.same, res.gsb.bad) == (0, 300, 0)
    assert (res.t, res.p_t, res.p_sign, res.effect_size, res.mde) == (0.0, 1.0, 1.0, 0.0, 0.0)
    assert paired_bootstrap(a, a, statistic="median").diff_ci == (0.0, 0.0)


def test_clearly_better_candidate():
    rng = np.random.default_rng(1)
    a = rng.random(500)
    b = a + 0.1 + rng.normal(0, 0.01, 500)
    res = compare(a, b, n_resamples=1000)
    low, high = res.diff_ci
    assert 0 < low <= res.diff <= high
    assert abs(res.diff - 0.1) < 0.005
    assert res.p_randomization == 1 / 1001
    assert res.p_t < 1e-12 and res.p_sign < 1e-12
    assert res.gsb.delta == 1.0 and res.gsb_ci == (1.0, 1.0)
    assert res.lift_ci[0] > 0
    assert res.effect_size > 5


def test_bootstrap_ci_coverage():
    covered = 0
    for seed in range(50):
        rng = np.random.default_rng(1000 + seed)
        a = rng.normal(1.0, 1.0, 150)
        b = a + rng.normal(0.3, 1.0, 150)  # true mean difference 0.3
        low, high = paired_bootstrap(a, b, n_resamples=1000, seed=seed).diff_ci
        covered += low <= 0.3 <= high
    assert covered >= 42  # nominal 95%: about 47 of 50; 42 is > 3 sd below


def test_bootstrap_ci_agrees_with_scipy_bootstrap():
    rng = np.random.default_rng(3)
    a = rng.exponential(1.0, 400)
    b = a + rng.normal(0.1, 0.5, 400)
    ours = paired_bootstrap(a, b, n_resamples=4000, seed=1).diff_ci
    ref = sps.bootstrap(
        (a, b), lambda x, y: np.mean(y - x), paired=True, n_resamples=4000, method="percentile",
        random_state=np.random.default_rng(2),
    ).confidence_interval  # fmt: skip
    width = ref.high - ref.low
    assert abs(ours[0] - ref.low) < 0.1 * width
    assert abs(ours[1] - ref.high) < 0.1 * width
    se = np.std(b - a, ddof=1) / math.sqrt(400)  # normal theory: width ≈ 2·1.96·se
    assert (ours[1] - ours[0]) == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_bootstrap_lift_and_median():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    res = paired_bootstrap(a, a + 2, statistic="median", n_resamples=300)
    assert (res.value_a, res.value_b, res.diff, res.diff_ci) == (4.0, 6.0, 2.0, (2.0, 2.0))
    assert res.lift == 0.5
    mean = paired_bootstrap(a, 2 * a, n_resamples=300)
    assert mean.lift == pytest.approx(1.0) and mean.lift_ci == pytest.approx((1.0, 1.0))
    zero = paired_bootstrap([0.0, 0.0, 0.0], [0.0, 1.0, 1.0], n_resamples=50)
    assert math.isnan(zero.lift) and all(math.isnan(x) for x in zero.lift_ci)


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_median_from_counts_matches_numpy(n):
    rng = np.random.default_rng(n)
    values = np.sort(rng.normal(size=n))
    counts = rng.multinomial(n, np.full(n, 1 / n), size=30)
    expected = [np.median(np.repeat(values, row)) for row in counts]
    np.testing.assert_allclose(stats._median_from_counts(values, counts), expected, rtol=1e-15)


def test_gsb_bootstrap_seed_001_example():
    res = gsb_bootstrap([0.5, 0.5, 0.5, 0.5], [0.9, 0.5, 0.1, 0.2], n_resamples=500)
    assert res.delta == -0.25  # good, same, bad, bad
    assert (res.gsb.good, res.gsb.same, res.gsb.bad) == (1, 1, 2)
    assert -1.0 <= res.ci[0] <= -0.25 <= res.ci[1] <= 1.0


@SETTINGS
@given(
    values=st.lists(
        st.tuples(st.floats(0, 1), st.one_of(st.floats(0, 1), st.just(math.nan))),
        min_size=1, max_size=25,
    ).filter(lambda v: any(not math.isnan(y) for _, y in v)),
    tolerance=st.sampled_from([0.0, 0.01, 0.1]),
    relative=st.booleans(),
    higher_is_better=st.booleans(),
)  # fmt: skip
def test_gsb_bootstrap_point_equals_metrics_gsb(values, tolerance, relative, higher_is_better):
    a = [x for x, _ in values]
    b = [y for _, y in values]
    kwargs = {"tolerance": tolerance, "relative": relative, "higher_is_better": higher_is_better}
    ref = metrics.gsb(a, b, **kwargs)
    res = gsb_bootstrap(a, b, n_resamples=50, **kwargs)
    assert res.delta == ref.delta and res.gsb == ref
    assert -1.0 <= res.ci[0] <= res.ci[1] <= 1.0
    assert compare(a, b, n_resamples=20, **kwargs).gsb == ref


# ---------------------------------------------------------------------------------------------
# compare: inputs, consistency, determinism, output
# ---------------------------------------------------------------------------------------------
def test_nan_pairs_dropped_and_counted():
    rng = np.random.default_rng(4)
    a, b = rng.random(60), rng.random(60)
    a[[3, 10]] = np.nan
    b[[10, 20, 30]] = np.nan  # pair 10 is NaN on both sides: dropped once
    ok = ~(np.isnan(a) | np.isnan(b))
    res = compare(a, b, n_resamples=200)
    assert (res.n, res.dropped, res.gsb.excluded) == (56, 4, 4)
    clean = compare(a[ok], b[ok], n_resamples=200)
    assert res.as_dict() | {"dropped": 0} == clean.as_dict()
    ref = sps.ttest_rel(b[ok], a[ok])
    assert res.t == pytest.approx(ref.statistic, rel=1e-10)
    assert res.mean_a == pytest.approx(np.mean(a[ok]))
    assert paired_t_test(a, b).dropped == 4 and randomization_test(a, b).dropped == 4


def test_compare_matches_component_functions():
    rng = np.random.default_rng(9)
    a = rng.random(200)
    b = np.clip(a + rng.normal(0.02, 0.1, 200), 0, 1)
    kw = {"n_resamples": 700, "seed": 5}
    res = compare(a, b, tolerance=0.05, **kw)
    boot = paired_bootstrap(a, b, **kw)
    assert (res.diff_ci, res.lift_ci) == (boot.diff_ci, boot.lift_ci)  # the same resamples
    assert res.gsb_ci == gsb_bootstrap(a, b, tolerance=0.05, **kw).ci
    assert res.p_randomization == randomization_test(a, b, **kw).pvalue
    assert res.p_sign == sign_test(res.gsb.good, res.gsb.bad)
    assert res.effect_size == effect_size(a, b)
    assert res.mde == minimum_detectable_effect(a, b).absolute
    assert res.lift == pytest.approx((b.mean() - a.mean()) / a.mean(), rel=1e-12)


def test_same_seed_same_result_other_seed_other_result():
    rng = np.random.default_rng(11)
    a, b = rng.random(300), rng.random(300)
    first = compare(a, b, n_resamples=400, seed=3).as_dict()
    assert compare(a, b, n_resamples=400, seed=3).as_dict() == first
    other = compare(a, b, n_resamples=400, seed=4).as_dict()
    assert other["diff_ci_low"] != first["diff_ci_low"]
    assert other["diff"] == first["diff"]


def test_series_are_aligned_on_the_index():
    rng = np.random.default_rng(12)
    users = [f"u{i}" for i in range(50)]
    a = pd.Series(rng.random(50), index=users)
    b = pd.Series(rng.random(50), index=users)
    shuffled = b.sample(frac=1.0, random_state=0)
    assert (
        compare(a, shuffled, n_resamples=100).as_dict()
        == compare(a.to_numpy(), b.to_numpy(), n_resamples=100).as_dict()
    )
    with pytest.raises(ValueError, match=r"different units .*'u9'"):
        compare(a, b.drop("u9"))


def test_as_dict_is_flat_numbers():
    res = compare([0.5, 0.5, 0.5, 0.5], [0.9, 0.5, 0.1, 0.2], n_resamples=100)
    flat = res.as_dict()
    assert all(type(v) in (int, float) for v in flat.values())
    assert {"diff_ci_low", "diff_ci_high", "gsb_delta", "p_sign", "mde_rel", "n"} <= set(flat)
    assert flat["gsb_delta"] == -0.25 and flat["n"] == 4 and flat["gsb_bad"] == 2
    assert all(k.replace("_", "").isalnum() for k in flat)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------
A, B = [0.1, 0.2, 0.3], [0.2, 0.2, 0.5]


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: paired_bootstrap(A, B, n_resamples=0),
         r"'n_resamples' must be a positive int \(got 0\)"),
        (lambda: paired_bootstrap(A, B, confidence=1.0),
         r"'confidence' must be in \(0, 1\) \(got 1.0\)"),
        (lambda: paired_bootstrap(A, B, statistic="trimmed"),
         r"'statistic' must be one of 'mean', 'median' \(got 'trimmed'\)"),
        (lambda: paired_bootstrap(A, B, seed=-1), r"'seed' must be an int >= 0 \(got -1\)"),
        (lambda: compare(A, B, seed=1.5), r"'seed' must be an int >= 0 \(got 1.5\)"),
        (lambda: randomization_test(A, B, alternative="bigger"),
         r"'alternative' must be one of 'two-sided', 'greater', 'less' \(got 'bigger'\)"),
        (lambda: randomization_test(np.zeros(25), np.ones(25), exact=True),
         r"'exact' needs n <= 24 .*\(got n=25\)"),
        (lambda: sign_test(-1, 2), r"'good' must be an int >= 0 \(got -1\)"),
        (lambda: sign_test(2, 1.5), r"'bad' must be an int >= 0 \(got 1.5\)"),
        (lambda: adjust([0.1], "bonferroni"),
         r"'method' must be one of 'holm', 'bh', 'none' \(got 'bonferroni'\)"),
        (lambda: holm([0.5, 1.2]),
         r"'pvalues' must lie in \[0, 1\] or be NaN \(got 1.2 at position 1\)"),
        (lambda: benjamini_hochberg([[0.1]]), r"'pvalues' must be 1-D"),
        (lambda: minimum_detectable_effect(A, B, alpha=0),
         r"'alpha' must be in \(0, 1\) \(got 0\)"),
        (lambda: compare(A, B, power=1.0), r"'power' must be in \(0, 1\) \(got 1.0\)"),
        (lambda: compare([np.nan, 1.0], [1.0, np.nan]), r"no unit with a value on both sides"),
        (lambda: compare(A, [0.1, np.inf, 0.2]),
         r"'b' must hold finite values or NaN \(got inf at position 1\)"),
        (lambda: effect_size(A, B[:2]), r"equal length"),
        (lambda: gsb_bootstrap(A, B, tolerance=-1.0), r"'tolerance' must be >= 0"),
    ],
)  # fmt: skip
def test_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
