"""Online A/B test sizing: the two-sample formula against statsmodels' power solver, the sizing
table of a comparison, and the line the main run prints."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from support import HarnessCli

from harness.compare import CompareSpec, compare_pair
from harness.compare.sizing import format_sizing, sizing_notes, sizing_rows
from metrics.stats import NORMAL_MIN_N, ab_test_size

power_mod = pytest.importorskip("statsmodels.stats.power")

CASES = [
    # mean_a, var_a, var_b, relative_lift, alpha, power
    (0.1, 0.01, 0.01, 0.1, 0.05, 0.8),
    (0.3, 0.04, 0.05, 0.02, 0.05, 0.9),
    (0.05, 0.002, 0.0035, 0.25, 0.01, 0.8),
    (2.0, 1.5, 0.7, 0.005, 0.1, 0.95),
    (0.2, 0.03, 0.03, -0.1, 0.05, 0.8),  # a drop is as detectable as a gain, two-sided
]


def _cohen_d(mean_a: float, var_a: float, var_b: float, lift: float) -> float:
    """statsmodels' standardized effect for equal arms: Δ / sqrt((σ²_a + σ²_b) / 2)."""
    return abs(lift * mean_a) / math.sqrt((var_a + var_b) / 2)


@pytest.mark.parametrize(("mean_a", "var_a", "var_b", "lift", "alpha", "power"), CASES)
def test_one_sided_size_matches_statsmodels_solver(mean_a, var_a, var_b, lift, alpha, power):
    got = ab_test_size(mean_a, var_a, var_b, lift, alpha=alpha, power=power, two_sided=False)
    ref = power_mod.NormalIndPower().solve_power(
        effect_size=_cohen_d(mean_a, var_a, var_b, lift),
        alpha=alpha,
        power=power,
        ratio=1.0,
        alternative="larger",
    )
    assert got == pytest.approx(float(ref), rel=1e-6)


@pytest.mark.parametrize(("mean_a", "var_a", "var_b", "lift", "alpha", "power"), CASES)
def test_two_sided_size_matches_statsmodels_power(mean_a, var_a, var_b, lift, alpha, power):
    n = ab_test_size(mean_a, var_a, var_b, lift, alpha=alpha, power=power)
    d = _cohen_d(mean_a, var_a, var_b, lift)
    solver = power_mod.NormalIndPower()
    # statsmodels' two-sided power also counts rejections in the wrong tail; the standard
    # formula leaves out exactly that term, Φ(−z_{1−α/2} − δ), with δ = z_{1−α/2} + z_power.
    wrong_tail = norm.cdf(-2 * norm.ppf(1 - alpha / 2) - norm.ppf(power))
    got_power = solver.power(effect_size=d, nobs1=n, alpha=alpha, ratio=1.0)
    assert got_power == pytest.approx(power + wrong_tail, rel=1e-9)
    # so its root is a hair smaller, at most a few 1e-6 relative, never larger
    ref = float(solver.solve_power(effect_size=d, alpha=alpha, power=power, ratio=1.0))
    assert ref <= n * (1 + 1e-9)
    assert n == pytest.approx(ref, rel=1e-4)


def test_size_by_hand_and_edge_cases() -> None:
    # (1.959964 + 0.841621)² · (0.01 + 0.03) / (0.1 · 0.2)² = 7.848880 · 0.04 / 0.0004
    assert ab_test_size(0.2, 0.01, 0.03, 0.1) == pytest.approx(784.88797, rel=1e-7)
    assert ab_test_size(0.2, 0.01, 0.03, 0.0) == math.inf
    assert ab_test_size(0.0, 0.01, 0.03, 0.1) == math.inf
    assert ab_test_size(0.2, 0.0, 0.0, 0.1) == 0.0
    for kwargs, message in [
        ({"var_a": -0.1}, "'var_a' must be >= 0"),
        ({"relative_lift": float("nan")}, "'relative_lift' must be finite"),
        ({"mean_a": "0.2"}, "'mean_a' must be a number"),
        ({"alpha": 1.0}, "'alpha' must be in \\(0, 1\\)"),
        ({"power": 0.0}, "'power' must be in \\(0, 1\\)"),
    ]:
        args = {"mean_a": 0.2, "var_a": 0.01, "var_b": 0.03, "relative_lift": 0.1} | kwargs
        with pytest.raises(ValueError, match=message):
            ab_test_size(**args)


# ------------------------------------------------------------------------- the sizing table


def _tables(seed: int, shift: float, n: int = 800) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    users = pd.Index(np.arange(n), name="user")
    a = rng.beta(2, 5, n)
    b = np.clip(a + shift + rng.normal(0, 0.1, n), 0, 1)
    a[:7] = np.nan  # users a model has no value for are left out of both arms
    return pd.DataFrame({"ndcg@10": a}, index=users), pd.DataFrame({"ndcg@10": b}, index=users)


def _expected(a: pd.Series, b: pd.Series, lift: float, spec: CompareSpec) -> tuple[float, float]:
    """Users per arm and days, straight from the formula with numpy's variances."""
    ok = a.notna() & b.notna()
    z = norm.ppf(1 - spec.alpha / 2) + norm.ppf(spec.power)
    delta = lift * a[ok].mean()
    n = z**2 * (np.var(a[ok], ddof=1) + np.var(b[ok], ddof=1)) / delta**2
    users = math.ceil(n)
    return users, math.ceil(2 * users / spec.daily_users)


def test_sizing_rows_size_go_and_inconclusive_pairs_only() -> None:
    spec = CompareSpec(n_resamples=300, seed=3, daily_users=1500, alpha=0.05, power=0.8)
    base, better = _tables(0, 0.03)
    _, tiny = _tables(1, 0.002)
    _, worse = _tables(2, -0.05)
    tables = {"base": base, "better": better, "tiny": tiny, "worse": worse}
    pairs = [
        compare_pair("base", name, (base, tables[name]), ["ndcg@10"], spec)
        for name in ("better", "tiny", "worse")
    ]
    decisions = {"better": "GO", "tiny": "INCONCLUSIVE", "worse": "NO_GO"}
    frame = sizing_rows(pairs, spec, metric="ndcg@10", decisions=decisions)
    assert list(frame["candidate"]) == ["better", "tiny"]  # NO_GO is not worth a test

    better_row = frame.iloc[0]
    a, b = base["ndcg@10"], better["ndcg@10"]
    lift = b[a.notna()].mean() / a.mean() - 1  # measured lift, computed here independently
    assert better_row["lift"] == pytest.approx(lift, rel=1e-12)
    assert (better_row["users_per_arm"], better_row["days"]) == _expected(a, b, lift, spec)
    low = pairs[0].row("ndcg@10")["lift_ci_low"]
    assert 0 < low < lift
    assert (better_row["users_per_arm_ci_low"], better_row["days_ci_low"]) == _expected(
        a, b, low, spec
    )

    tiny_row = frame.iloc[1]
    assert tiny_row["lift_ci_low"] <= 0  # its CI reaches 0: the low end is not detectable
    assert np.isnan(tiny_row["users_per_arm_ci_low"]) and np.isnan(tiny_row["days_ci_low"])
    text = format_sizing(frame, spec)
    lines = text.strip().splitlines()
    assert lines[0].startswith("online A/B test sizing (estimate; two-sided α=0.05, power 0.8")
    assert "1,500 users/day over 2 arms" in lines[0]
    users, days = _expected(a, b, lift, spec)
    head = f"better vs base (GO): ndcg@10 lift {lift:+.2%}: {users:,} users per arm, {days} day"
    assert lines[1].strip().startswith(head)
    assert lines[2].strip().endswith("not detectable")
    heading = lines[0].strip()
    assert sizing_notes(frame, spec) == [f"{heading}: {line.strip()}" for line in lines[1:]]

    # no gate: every pair is sized; no traffic configured: no days
    plain = CompareSpec(n_resamples=300, seed=3)
    frame = sizing_rows(pairs, plain, metric="ndcg@10")
    assert list(frame["candidate"]) == ["better", "tiny", "worse"]
    assert frame["days"].isna().all()
    assert np.isnan(frame.iloc[2]["users_per_arm"])  # a drop is never a reason to launch
    assert "days: set compare.daily_users" in format_sizing(frame, plain)
    assert format_sizing(frame.iloc[:0], plain) == "" and sizing_notes(frame.iloc[:0], plain) == []


def test_lower_is_better_metric_is_oriented() -> None:
    spec = CompareSpec(n_resamples=300, seed=0, daily_users=100)
    rng = np.random.default_rng(5)
    users = pd.Index(np.arange(500), name="user")
    name = "popularity@10"  # lower is better, a mean of per-user values
    a = pd.DataFrame({name: rng.gamma(4, 0.25, 500)}, index=users)
    b = pd.DataFrame({name: a[name] * 0.9 + rng.normal(0, 0.05, 500)}, index=users)
    pair = compare_pair("a", "b", (a, b), [name], spec)
    frame = sizing_rows([pair], spec, metric=name, decisions={"b": "GO"})
    row = frame.iloc[0]
    raw = pair.row(name)
    assert raw["lift"] < 0 and row["lift"] == pytest.approx(-raw["lift"])  # lower: better
    assert row["lift_ci_low"] == pytest.approx(-raw["lift_ci_high"])
    assert row["users_per_arm"] == _expected(a[name], b[name], row["lift"], spec)[0]
    # printed as the metric moved, as the comparison and the report print it, and marked
    line = format_sizing(frame, spec).strip().splitlines()[1].strip()
    assert line.startswith(f"b vs a (GO): {name} (lower is better) lift {raw['lift']:+.2%}: ")
    assert f"; CI high end {raw['lift_ci_high']:+.2%}: " in line


def test_a_zero_baseline_is_sized_on_the_difference() -> None:
    """A baseline scoring 0 for every user has no relative lift (it was printed as +nan%): the
    pair is sized on the difference, n = z² · (σ²_a + σ²_b) / Δ²."""
    spec = CompareSpec(n_resamples=300, seed=0, daily_users=100)
    rng = np.random.default_rng(9)
    users = pd.Index(np.arange(2000), name="user")
    a = pd.DataFrame({"ndcg@10": np.zeros(2000)}, index=users)
    hit = rng.random(2000) < 0.05  # a few users gain
    b = pd.DataFrame({"ndcg@10": np.where(hit, rng.random(2000), 0.0)}, index=users)
    pair = compare_pair("zero", "cand", (a, b), ["ndcg@10"], spec)
    frame = sizing_rows([pair], spec, metric="ndcg@10", decisions=None)
    row = frame.iloc[0]
    z = norm.ppf(0.975) + norm.ppf(0.8)
    diff = b["ndcg@10"].mean()
    users_ = math.ceil(z**2 * np.var(b["ndcg@10"], ddof=1) / diff**2)
    assert row["diff"] == pytest.approx(diff, rel=1e-12)
    assert (row["users_per_arm"], row["days"]) == (users_, math.ceil(2 * users_ / 100))
    low = pair.row("ndcg@10")["diff_ci_low"]
    assert 0 < low < diff
    assert row["users_per_arm_ci_low"] == math.ceil(z**2 * np.var(b["ndcg@10"], ddof=1) / low**2)
    (line,) = format_sizing(frame, spec).strip().splitlines()[1:]
    assert line.strip() == (
        f"cand vs zero: ndcg@10 difference {diff:+.4g} (the baseline scores 0): {users_:,} users "
        f"per arm, {math.ceil(2 * users_ / 100)} days; CI low end {low:+.4g}: "
        f"{int(row['users_per_arm_ci_low']):,} users per arm, {int(row['days_ci_low'])} days"
    )
    assert "nan" not in format_sizing(frame, spec)


def test_a_pair_compared_on_the_normal_path_is_sized_from_its_sums() -> None:
    """At NORMAL_MIN_N pairs the comparison keeps no per-user arrays (its intervals come from
    sums, as on Spark): the sizing still equals the formula on numpy's variances."""
    spec = CompareSpec(seed=1, daily_users=5000)
    base, better = _tables(4, 0.01, n=NORMAL_MIN_N + 100)
    pair = compare_pair("base", "better", (base, better), ["ndcg@10"], spec)
    assert pair.row("ndcg@10")["method"] == "normal"
    row = sizing_rows([pair], spec, metric="ndcg@10").iloc[0]
    a, b = base["ndcg@10"], better["ndcg@10"]
    lift = b[a.notna()].mean() / a.mean() - 1
    assert (row["users_per_arm"], row["days"]) == _expected(a, b, lift, spec)
    assert row["var_a"] == pytest.approx(np.var(a.dropna(), ddof=1), rel=1e-12)


def test_bad_sizing_settings_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"'compare.daily_users' must be > 0 \(got 0\)"):
        CompareSpec(daily_users=0)
    with pytest.raises(ValueError, match=r"'compare\.alpha' and 'compare\.power' must lie in"):
        CompareSpec(power=1.5)


@pytest.mark.slow
def test_main_run_prints_the_sizing_of_its_go_candidate(tmp_path: Path) -> None:
    proc = HarnessCli().run(
        tmp_path,
        "dataset.n_users=600",
        "dataset.n_items=300",
        "dataset.n_events=15000",
        "progress=false",
        "model=[popularity,item_knn]",
        "tracking=none",
        "compare.daily_users=300",
        "compare.power=0.9",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gate: GO" in proc.stdout
    folder = tmp_path / re.search(r"^results: (.+)$", proc.stdout, re.MULTILINE).group(1)
    a = pd.read_parquet(folder / "popularity" / "per_user.parquet")["ndcg@10"]
    b = pd.read_parquet(folder / "item_knn" / "per_user.parquet")["ndcg@10"]
    lift = b.mean() / a.mean() - 1
    users, days = _expected(a, b, lift, CompareSpec(daily_users=300, power=0.9))
    line = f"item_knn vs popularity (GO): ndcg@10 lift {lift:+.2%}: {users:,} users per arm, {days}"
    assert "online A/B test sizing (estimate; two-sided α=0.05, power 0.9" in proc.stdout
    assert line in proc.stdout
    report = (folder / "report.md").read_text()
    (note,) = [x for x in report.splitlines() if "online A/B test sizing" in x]
    assert note.startswith("- online A/B test sizing (estimate;") and line in note  # one bullet


def test_a_sanity_baseline_gets_no_sizing_even_with_the_gate_off(tmp_path: Path) -> None:
    """``random`` (gate.sanity) is compared and shown, never a launch candidate: sizing an A/B
    test for it ("lift -90%: not detectable") would only mislead; the real candidate is sized."""
    proc = HarnessCli().run(
        tmp_path, "model=[random,popularity,item_knn]", "gate=none", "tracking=none", quick=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    block = proc.stdout.split("online A/B test sizing", 1)[1].split("\n\n", 1)[0]
    sized = [x.strip() for x in block.splitlines()[1:] if x.strip()]
    assert len(sized) == 1 and sized[0].startswith("item_knn vs popularity:"), block
    assert "random vs" not in proc.stdout.split("online A/B test sizing", 1)[1]


def test_a_primary_rule_on_a_segment_is_sized_on_that_segment() -> None:
    """The gate's primary rule on ``cold`` decides on the cold users' lift: the test is sized
    on their values (checked by hand from their rows), and the line names the segment."""
    from types import SimpleNamespace

    from harness.compare import SegmentData
    from harness.compare.sizing import sizing_of

    spec = CompareSpec(n_resamples=300, seed=3, daily_users=1500)
    base, better = _tables(0, 0.03)
    cold = base.index.to_numpy()[:400]
    segments = SegmentData({"cold": cold}, pd.Series(dtype=object), {"cold": "few events"})
    pair = compare_pair("base", "better", (base, better), ["ndcg@10"], spec, segments=segments)
    primary = SimpleNamespace(metric="ndcg@10", segment="cold")
    gspec = SimpleNamespace(enabled=True, primary=primary, sanity=())
    frame = sizing_of([pair], {"better": SimpleNamespace(decision="GO")}, spec, gspec)
    a, b = base["ndcg@10"].loc[cold], better["ndcg@10"].loc[cold]
    lift = b[a.notna()].mean() / a.mean() - 1  # paired: users the baseline has a value for
    assert frame.iloc[0]["segment"] == "cold"
    assert frame.iloc[0]["lift"] == pytest.approx(lift, rel=1e-12)
    assert (frame.iloc[0]["users_per_arm"], frame.iloc[0]["days"]) == _expected(a, b, lift, spec)
    line = format_sizing(frame, spec).strip().splitlines()[1].strip()
    assert line.startswith(
        "better vs base (GO): ndcg@10 on segment cold (its users only; compare.daily_users "
        f"taken as its users per day) lift {lift:+.2%}: "
    )
