"""The gate cannot be fooled: every rule is evaluated, refused before the run, or inconclusive
with a readable reason; sanity baselines are not gated; the verdict is one line.

Unit tests build comparison rows by hand (the expected statuses follow from the numbers, worked
out in the comments); end-to-end tests launch ``python -m harness`` with real Hydra composition.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support import QuickRun

from harness.compare import PairComparison
from harness.gate import (
    EXIT_CODES,
    GateDecision,
    GateSpec,
    GsbRule,
    GuardrailRule,
    PrimaryRule,
    check_gate,
    check_selection,
    decide,
    dropped_warning,
    verdict_line,
)

SUITE = ("ndcg@10", "map@10", "precision@10", "recall@10", "coverage@10", "novelty@10")
BAD_WORDS = re.compile(r"\bnan\b|\binf\b|nan%|inf%", re.IGNORECASE)


# ---------------------------------------------------------------- before the run: check_gate


def one_line_error(spec: GateSpec | dict, **kw) -> str:
    """The one-line error of building (from rule mappings, as the config gives them) and
    checking the gate."""
    with pytest.raises(ValueError) as err:
        check_gate(
            GateSpec(**spec) if isinstance(spec, dict) else spec, kw.pop("compared", SUITE), **kw
        )
    text = str(err.value)
    assert "\n" not in text
    return text


def test_typo_in_the_primary_metric_is_refused() -> None:
    text = one_line_error(GateSpec(primary={"metric": "ndgc@10"}))
    assert text.startswith("gate.primary.metric='ndgc@10' is not a metric")


def test_a_metric_the_suite_does_not_compute_is_refused() -> None:
    spec = GateSpec(guardrails=[{"metric": "coverage@10"}, {"metric": "recall@50", "margin": 0.1}])
    assert one_line_error(spec).startswith("gate.guardrails[1].metric='recall@50' is not computed")
    # excluded by compare.metrics: the comparison would not have it either
    spec = GateSpec(primary={"metric": "ndcg@10"}, gsb={"metric": "recall@10"})
    text = one_line_error(spec, compared=["ndcg@10"])
    assert text.startswith("gate.gsb.metric='recall@10' is not computed")


def test_gsb_falls_back_to_compare_gsb_metric() -> None:
    text = one_line_error(GateSpec(gsb={"min_delta": 0.0}), gsb_metric="mrr@10")
    assert text.startswith("gate.gsb.metric='mrr@10'")
    got = check_gate(GateSpec(gsb={"min_delta": 0.0}), SUITE, gsb_metric="recall@10").gsb
    assert got == GsbRule(metric="recall@10", min_delta=0.0)


@pytest.mark.parametrize(
    ("rule", "kw", "start"),
    [
        ({"metric": "ndcg@10", "segment": "colt"}, {}, "gate.guardrails[0].segment='colt' is not"),
        ({"metric": "ndcg@10", "segment": "cold"}, {"segments": False}, "gate.guardrails[0].segm"),
        ({"metric": "coverage@10", "segment": "cold"}, {}, "gate.guardrails[0].segment='cold'"),
        ({"metric": "novelty@10", "segment": "items:tail"}, {}, "gate.guardrails[0].segment="),
        ({"metric": "ndcg@10", "margn": 0.1}, {}, "gate.guardrails[0].margn is not a gate"),
        ({"metric": "ndcg@10", "margin": "a lot"}, {}, "gate.guardrails[0].margin must be a"),
        ({"metric": "ndcg@10", "margin": float("nan")}, {}, "gate.guardrails[0].margin must"),
        ({"segment": "all"}, {}, "gate.guardrails[0].metric must be set"),
    ],
)
def test_rules_that_could_never_be_evaluated(rule, kw, start) -> None:
    assert one_line_error({"guardrails": [rule]}, **kw).startswith(start)


def test_gsb_needs_a_per_user_metric_or_human_labels() -> None:
    assert one_line_error(GateSpec(gsb={"metric": "coverage@10"})).startswith("gate.gsb.metric")
    assert "compare.human_labels" in one_line_error(GateSpec(gsb={"metric": "human_labels"}))
    ok = check_gate(GateSpec(gsb={"metric": "human_labels"}), SUITE, human_labels=True)
    assert ok.gsb == GsbRule(metric="human_labels")


def test_aliases_are_spelled_as_in_the_suite() -> None:
    spec = GateSpec(
        primary={"metric": "P_10", "min_lift": 0.01},
        guardrails=[{"metric": "ap@10", "segment": "heavy", "margin": 0.1}],
        promote="champion",
    )
    got = check_gate(spec, SUITE)
    assert got.primary == PrimaryRule(metric="precision@10", min_lift=0.01)
    assert got.guardrails == (GuardrailRule(metric="map@10", segment="heavy", margin=0.1),)
    assert got.promote == "champion" and got.sanity == ("random",)
    assert check_gate(GateSpec(enabled=False, primary={"metric": "nope"}), SUITE).primary


def test_selection_is_checked_before_the_run() -> None:
    gate = GateSpec(primary={"metric": "ndcg@10"})
    models = ["random", "popularity", "item_knn"]
    check_selection(gate, "popularity", models)  # fine
    check_selection(gate, None, models)  # compare=none: nothing to gate, not an error
    check_selection(GateSpec(enabled=False), "als", models)  # no gate: nothing to decide
    with pytest.raises(ValueError, match=r"^compare\.baseline='als' is not among the selected"):
        check_selection(gate, "als", models)
    with pytest.raises(ValueError, match=r"\(random, popularity, item_knn\): add it, e\.g\. "):
        check_selection(gate, "als", models)
    with pytest.raises(ValueError, match=r": did you mean compare\.baseline=popularity\?$"):
        check_selection(gate, "popularty", models)  # a typo: the name it is close to
    enforced = GateSpec(enforce=True, primary={"metric": "ndcg@10"})
    with pytest.raises(ValueError, match=r"^gate\.enforce=true but no candidate to gate"):
        check_selection(enforced, "popularity", ["popularity", "random"])
    check_selection(GateSpec(enforce=True, sanity=()), "popularity", ["popularity", "random"])
    with pytest.raises(ValueError, match=r"^gate\.enforce=true needs a baseline"):
        check_selection(enforced, None, models)
    with pytest.raises(ValueError, match=r"^gate\.enforce=true needs gate\.enabled=true"):
        check_selection(GateSpec(enabled=False, enforce=True), "popularity", models)


# ---------------------------------------------------------------- after the run: decide


def row(segment="all", metric="ndcg@10", **values) -> dict:
    """A per-user comparison row; ``values`` override the defaults."""
    base = {
        "segment": segment,
        "metric": metric,
        "kind": "per-user",
        "higher_is_better": True,
        "n": 100,
        "mean_a": 0.2,
        "mean_b": 0.25,
        "diff": 0.05,
        "diff_ci_low": 0.02,
        "diff_ci_high": 0.08,
        "lift": 0.25,
        "lift_ci_low": 0.10,
        "lift_ci_high": 0.40,
        "gsb_good": 50,
        "gsb_same": 30,
        "gsb_bad": 20,
        "gsb_delta": 0.3,
        "gsb_ci_low": 0.1,
        "gsb_ci_high": 0.5,
        "confidence": 0.95,
    }
    return {**base, **values}


def pair(*rows: dict, segments: dict | None = None) -> PairComparison:
    definitions = segments if segments is not None else {"cold": "users with <= 5 events"}
    return PairComparison("base", "cand", pd.DataFrame(list(rows)), "ndcg@10", segments=definitions)


PRIMARY = {"metric": "ndcg@10", "min_lift": 0.0}


def test_an_empty_segment_is_inconclusive_never_go() -> None:
    # the primary passes (lift CI 10%..40% > 0); the cold guardrail has no row at all
    spec = GateSpec(primary=PRIMARY, guardrails=[{"metric": "recall@10", "segment": "cold"}])
    d = decide(pair(row()), spec)
    assert [r.status for r in d.rules] == ["pass", "inconclusive"]
    assert d.decision == "INCONCLUSIVE"
    assert "segment 'cold' is empty" in d.rules[1].reason
    assert "users with <= 5 events" in d.rules[1].reason
    # a segment that has rows but not this metric: too few users with a value
    d = decide(pair(row(), row(metric="recall@10"), row("cold", "ndcg@10")), spec)
    assert d.decision == "INCONCLUSIVE" and "fewer than 2 users" in d.rules[1].reason
    # segments not compared at all; a metric not compared at all
    d = decide(pair(row(), segments={}), spec)
    assert "segments were not compared" in d.rules[1].reason
    d = decide(pair(row()), GateSpec(guardrails=[{"metric": "mrr@10"}]))
    assert d.rules[0].reason == "mrr@10 was not compared for cand vs base"


def test_a_gate_that_checks_nothing_is_inconclusive() -> None:
    assert decide(pair(row()), GateSpec()).decision == "INCONCLUSIVE"
    assert decide(pair(), GateSpec(primary=PRIMARY)).decision == "INCONCLUSIVE"


def test_statuses_against_the_bars() -> None:
    # primary: lift CI [0.10, 0.40]; min_lift 0.05 → pass, 0.5 → fail, 0.2 → straddles
    for bar, status in ((0.05, "pass"), (0.5, "fail"), (0.2, "inconclusive")):
        d = decide(pair(row()), GateSpec(primary={"metric": "ndcg@10", "min_lift": bar}))
        assert d.rules[0].status == status, bar
        assert d.decision == {"pass": "GO", "fail": "NO_GO", "inconclusive": "INCONCLUSIVE"}[status]
    # a zero-width CI at the bar (a candidate identical to the baseline) does not clear a
    # "better than" rule and does not straddle it either (the reason said so)
    same = row(lift=0.0, lift_ci_low=0.0, lift_ci_high=0.0)
    d = decide(pair(same), GateSpec(primary={"metric": "ndcg@10", "min_lift": 0.0}))
    assert d.rules[0].status == "inconclusive"
    assert d.rules[0].reason.endswith(": the CI's low end is at it (it must be above it)")
    assert d.rules[0].reason.startswith("relative lift +0.00% (95% CI +0.00% to +0.00%)")
    # guardrail: change CI [-0.08, +0.02]; margin 0.10 → -0.10 below the CI → pass;
    # margin 0.05 → straddles; margin 0.01 → still straddles (upper bound 0.02 > -0.01)
    loss = row(lift=-0.03, lift_ci_low=-0.08, lift_ci_high=0.02)
    for margin, status in ((0.10, "pass"), (0.05, "inconclusive"), (0.01, "inconclusive")):
        d = decide(pair(loss), GateSpec(guardrails=[{"metric": "ndcg@10", "margin": margin}]))
        assert d.rules[0].status == status, margin
    clear_loss = row(lift=-0.3, lift_ci_low=-0.4, lift_ci_high=-0.2)
    d = decide(pair(clear_loss), GateSpec(guardrails=[{"metric": "ndcg@10", "margin": 0.1}]))
    assert d.rules[0].status == "fail" and d.decision == "NO_GO"
    # lower is better: a +25% change in gini is a loss of 25%
    gini = row(metric="gini@10", higher_is_better=False)
    d = decide(pair(gini), GateSpec(guardrails=[{"metric": "gini@10", "margin": 0.05}]))
    assert d.rules[0].status == "fail" and d.rules[0].value == pytest.approx(-0.25)
    assert "change (gini@10 is better lower: a fall reads +) -25.00%" in d.rules[0].reason


def test_a_zero_baseline_is_judged_on_the_difference() -> None:
    # popularity scores 0 on tail items: the relative change is unbounded, its sign is the
    # difference's; a difference CI above 0 means "not worse" whatever the margin
    tail = row(
        "items:tail",
        mean_a=0.0,
        mean_b=0.05,
        diff=0.05,
        diff_ci_low=0.02,
        diff_ci_high=0.09,
        lift=math.nan,
        lift_ci_low=math.nan,
        lift_ci_high=math.nan,
    )
    spec = GateSpec(guardrails=[{"metric": "ndcg@10", "segment": "items:tail", "margin": 0.05}])
    rule = decide(pair(tail, segments={"items:tail": "tail"}), spec).rules[0]
    assert rule.status == "pass"
    assert "base scores 0 on ndcg@10 (items:tail)" in rule.reason
    # the margin is relative: the reason compares it with the relative change, not the difference
    assert (
        "difference +0.05 (95% CI +0.02 to +0.09) makes the relative change +∞ over the whole "
        "CI vs non-inferiority margin -5.00%: not worse than the margin"
    ) in rule.reason
    # a CI that straddles 0: the candidate may be no better for the primary rule
    straddles = {**tail, "segment": "all", "diff_ci_low": -0.01}
    primary = decide(pair(straddles), GateSpec(primary=PRIMARY)).rules[0]
    assert primary.status == "inconclusive"
    assert "makes the relative lift −∞ to +∞ vs required +0.00%: the CI straddles it" in (
        primary.reason
    )
    # both zero: no change, so non-inferior; not a lift
    zero = {**tail, "segment": "all", "mean_b": 0.0, "diff": 0.0, "diff_ci_low": 0.0,
            "diff_ci_high": 0.0}  # fmt: skip
    assert decide(pair(zero), GateSpec(primary=PRIMARY)).rules[0].status == "inconclusive"
    guard = GateSpec(guardrails=[{"metric": "ndcg@10", "margin": 0.0}])
    rule = decide(pair(zero), guard).rules[0]
    assert rule.status == "pass" and rule.reason.startswith("both models score 0 on ndcg@10")


def test_whole_run_metric_compares_the_point_value() -> None:
    cov = {
        "segment": "all", "metric": "coverage@10", "kind": "run-level", "higher_is_better": True,
        "mean_a": 0.2, "mean_b": 0.15, "diff": -0.05, "lift": -0.25, "n": math.nan,
    }  # fmt: skip
    # -25% vs margin -10% → fail; vs margin -30% → pass
    for margin, status in ((0.10, "fail"), (0.30, "pass")):
        spec = GateSpec(guardrails=[{"metric": "coverage@10", "margin": margin}])
        rule = decide(pair(cov), spec).rules[0]
        assert rule.status == status
        assert "whole-run metric: no CI" in rule.reason and not BAD_WORDS.search(rule.reason)


@pytest.mark.parametrize(
    "values",
    [
        {"lift_ci_low": math.nan, "lift_ci_high": math.nan},
        {"lift": math.nan, "lift_ci_low": math.nan, "lift_ci_high": math.nan},
        {"mean_a": math.nan},
        {"mean_b": math.nan},
        {"mean_a": 0.0, "diff_ci_low": math.nan, "diff_ci_high": math.nan},
        {"gsb_delta": math.nan},
        {"gsb_ci_low": math.nan, "gsb_ci_high": math.nan},
        {"kind": "run-level", "mean_a": math.nan, "lift": math.nan},
    ],
)
def test_no_value_is_inconclusive_with_a_reason_without_nan(values) -> None:
    spec = GateSpec(
        primary=PRIMARY,
        guardrails=[{"metric": "ndcg@10", "margin": 0.1}],
        gsb={"metric": "ndcg@10", "min_delta": 0.0},
    )
    d = decide(pair(row(**values)), spec)
    assert "inconclusive" in {r.status for r in d.rules}
    assert d.decision == "INCONCLUSIVE"
    for r in d.rules:
        assert r.status in ("pass", "fail", "inconclusive")
        assert not BAD_WORDS.search(r.reason), r.reason


# ---------------------------------------------------------------- verdict and dropped share


def decision(name: str, verdict: str) -> GateDecision:
    return GateDecision(name, "popularity", verdict)


def test_verdict_line() -> None:
    summary = pd.DataFrame(
        {"ndcg@10": [0.07, 0.30, 0.36], "gini@10": [0.1, 0.9, 0.5]},
        index=["random", "popularity", "item_knn"],
    )
    line = verdict_line(
        summary, {"item_knn": decision("item_knn", "GO")}, "GO", metric="ndcg@10",
        sanity=("random",), baseline="popularity",
    )  # fmt: skip
    assert line == (
        "verdict: item_knn is best on ndcg@10 (0.3600); item_knn GO; overall GO "
        "(random: sanity baseline, not gated)"
    )
    # lower is better: the smallest gini wins; no decision says why
    line = verdict_line(summary, {}, None, metric="gini@10", why="the baseline 'x' failed")
    assert (
        line == "verdict: random is best on gini@10 (0.1000); no decision (the baseline 'x' failed)"
    )
    tied = summary.copy()
    tied.loc["popularity", "ndcg@10"] = 0.36
    two = {"item_knn": decision("item_knn", "INCONCLUSIVE"), "b": decision("b", "NO_GO")}
    line = verdict_line(tied, two, "NO_GO", metric="ndcg@10")
    assert line == (
        "verdict: popularity and item_knn tie as best on ndcg@10 (0.3600); "
        "item_knn INCONCLUSIVE; b NO_GO; overall NO_GO"
    )


def test_dropped_warning_counts_and_threshold() -> None:
    # the MovieLens sample of issue 14: 18,140 of 20,001 test events, 125 of 147 test users
    stats = {
        "test_dropped_events": 18140,
        "test_dropped_users": 125,
        "n_test_events": 20001 - 18140,
        "n_test_users": 147 - 125,
    }
    text = dropped_warning(stats, 0.5)
    assert text is not None and text.startswith(
        "the split dropped 18,140 of 20,001 test events (90.7%) and 125 of 147 test users "
        "(85.0%) as unseen in training"
    )
    assert "1,861 events of 22 users" in text
    assert dropped_warning(stats, 0.95) is None  # neither share reaches 95%
    assert dropped_warning(stats, 0.86) is not None  # the events share does
    assert dropped_warning({**stats, "test_dropped_events": 0, "test_dropped_users": 0}, 0) is None


def test_exit_codes_are_distinct() -> None:
    assert EXIT_CODES == {"GO": 0, "NO_GO": 10, "INCONCLUSIVE": 11, "NO_DECISION": 12}


# ---------------------------------------------------------------- end to end


@pytest.fixture
def harness(harness_cli: Any) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``python -m harness experiment=quick tracking=none ...`` in a folder (plug-in models of
    ``tests/plugins`` importable)."""
    return lambda cwd, *overrides: harness_cli.run(cwd, "tracking=none", *overrides, quick=True)


def fitted_anything(cwd: Path) -> bool:
    return any(cwd.rglob("per_user.parquet")) or any(cwd.rglob("summary.csv"))


def gate_lines(stdout: str) -> list[str]:
    return [x for x in stdout.splitlines() if re.match(r"\s+(primary|guardrail|gsb) ", x)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "start"),
    [
        ("gate.primary.metric=ndgc@10", "error: gate.primary.metric='ndgc@10' is not a metric"),
        (
            "gate.guardrails=[{metric:recall@50,margin:0.05}]",
            "error: gate.guardrails[0].metric='recall@50' is not computed",
        ),
        ("compare.baseline=als", "error: compare.baseline='als' is not among the selected"),
    ],
)
def test_config_errors_exit_2_before_any_model_runs(
    harness, tmp_path: Path, override, start
) -> None:
    proc = harness(tmp_path, override)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(start) and len(proc.stderr.strip().splitlines()) == 1
    assert "ndcg@10" not in proc.stdout  # no summary table: nothing was evaluated
    assert not fitted_anything(tmp_path)


@pytest.mark.slow
def test_baseline_that_failed_with_enforce_exits_no_decision(harness, tmp_path: Path) -> None:
    proc = harness(
        tmp_path,
        "model=[popularity]",
        "+model.broken._target_=plugins.models.FailsToFit",
        "compare.baseline=broken",
        "gate.enforce=true",
    )
    assert proc.returncode == 12, proc.stdout + proc.stderr
    assert "verdict: popularity is best on ndcg@10" in proc.stdout
    assert "no decision (the baseline 'broken' failed)" in proc.stdout


@pytest.mark.slow
def test_empty_cold_segment_is_inconclusive_not_go(harness, tmp_path: Path) -> None:
    # every evaluated user has >= 1 training event (unseen users are dropped), so with
    # cold_max_events=0 the cold segment is empty
    proc = harness(
        tmp_path,
        "model=[popularity,item_knn]",
        "gate.gsb=null",
        "gate.guardrails=[{metric:recall@10,segment:cold,margin:0.05}]",
        "compare.cold_max_events=0",
        "gate.enforce=true",
    )
    assert proc.returncode == EXIT_CODES["INCONCLUSIVE"], proc.stdout + proc.stderr
    lines = gate_lines(proc.stdout)
    assert lines[0].strip().startswith("primary ndcg@10 (all): pass")
    assert lines[1].strip().startswith("guardrail recall@10 (cold): inconclusive")
    assert "segment 'cold' is empty" in lines[1]


@pytest.mark.slow
def test_default_run_gates_only_the_candidates(quick_run: QuickRun) -> None:
    proc = quick_run.proc  # random, popularity, item_knn; baseline popularity
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    random_head = next(x for x in out.splitlines() if x.startswith("random vs popularity"))
    assert random_head.endswith("(sanity baseline, not gated)")
    gates = re.findall(r"^  gate: (\w+)$", out, flags=re.MULTILINE)
    assert len(gates) == 1  # item_knn only
    overall = re.search(r"^overall gate decision: (\w+)$", out, flags=re.MULTILINE).group(1)
    assert overall == gates[0]
    summary = pd.read_csv(quick_run.folder / "summary.csv", index_col=0)
    best = summary["ndcg@10"].idxmax()  # independent of the verdict code: pandas on the CSV
    assert (
        f"verdict: {best} is best on ndcg@10 ({summary.loc[best, 'ndcg@10']:.4f}); "
        f"item_knn {gates[0]}; overall {overall} (random: sanity baseline, not gated)"
    ) in out.splitlines()
    report = (quick_run.folder / "report.md").read_text()
    assert f"item_knn {gates[0]}; overall {overall}" in report


@pytest.mark.slow
def test_strict_gate_reasons_have_no_nan(harness, tmp_path: Path) -> None:
    proc = harness(tmp_path, "gate=strict", "gate.sanity=[]")
    assert proc.returncode == 0, proc.stderr
    lines = gate_lines(proc.stdout)
    assert len(lines) == 2 * 5  # random and item_knn, five rules each
    assert any("(items:tail)" in x for x in lines)
    for line in lines:
        assert not BAD_WORDS.search(line), line
        assert re.search(r": (pass|fail|inconclusive) — ", line), line


@pytest.mark.slow
def test_split_that_drops_most_test_users_warns_with_counts(harness, tmp_path: Path) -> None:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from harness.datasets import load_dataset
    from harness.split import make_split

    # users with < 30 training events leave the training set, so most test users are unseen
    overrides = ["split.min_user_interactions=30", "model=[popularity,item_knn]"]
    proc = harness(tmp_path, *overrides)
    assert proc.returncode == 0, proc.stderr
    # the counts, by hand: split with unseen=keep, then count with pandas
    with initialize_config_module(config_module="harness.configs", version_base=None):
        cfg = compose("config", overrides=["experiment=quick", *overrides])
    frame = load_dataset(OmegaConf.to_container(cfg.dataset, resolve=True)).frame
    params = OmegaConf.to_container(cfg.split, resolve=True)
    params.pop("method")
    kept = make_split(frame, "global_time", **{**params, "unseen": "keep"})
    test, train = kept.test, kept.train
    seen = test["user"].isin(set(train["user"])) & test["item"].isin(set(train["item"]))
    events, users = int((~seen).sum()), test["user"].nunique() - test[seen]["user"].nunique()
    n_events, n_users = len(test), test["user"].nunique()
    assert users / n_users > 0.5  # the scenario holds
    expected = (
        f"WARNING: the split dropped {events:,} of {n_events:,} test events "
        f"({events / n_events:.1%}) and {users:,} of {n_users:,} test users "
        f"({users / n_users:.1%}) as unseen in training"
    )
    assert expected in proc.stderr
    report = next(tmp_path.rglob("report.md")).read_text()
    assert expected.removeprefix("WARNING: ") in report
    # the threshold is configurable: above both shares, no warning (the same split; one model
    # and no comparison, which the warning does not depend on)
    (tmp_path / "quiet").mkdir()
    cheap = ("model=[popularity]", "compare=none", "gate=none")
    quiet = harness(tmp_path / "quiet", *overrides, *cheap, "warn_dropped_share=0.99")
    assert quiet.returncode == 0 and "WARNING: the split dropped" not in quiet.stderr


def test_terminal_block_has_no_nan_and_marks_sanity_baselines() -> None:
    from harness.cli import format_verdicts

    zero = row(mean_a=0.0, lift=math.nan, lift_ci_low=math.nan, lift_ci_high=math.nan)
    pairs = [
        PairComparison("base", "cand", pd.DataFrame([zero]), "ndcg@10"),
        PairComparison("base", "random", pd.DataFrame([row()]), "ndcg@10"),
        PairComparison("base", "empty", pd.DataFrame(), "ndcg@10"),
    ]
    decisions = {"cand": decide(pairs[0], GateSpec(primary=PRIMARY))}
    text = format_verdicts(pairs, decisions, "GO", sanity=("random",))
    lines = text.splitlines()
    assert lines[0] == (
        "cand vs base: ΔGSB(ndcg@10) +0.300 [+0.100, +0.500], "
        "lift undefined (the baseline scores 0)"
    )
    # diff CI [0.02, 0.08] > 0 over a zero baseline: an unbounded lift clears any bar
    assert lines[1:3] == ["  gate: GO", lines[2]] and lines[2].startswith(
        "    primary ndcg@10 (all): pass — base scores 0 on ndcg@10 (all)"
    )
    assert lines[3] == (
        "random vs base: ΔGSB(ndcg@10) +0.300 [+0.100, +0.500], lift +25.00% [+10.00%, +40.00%] "
        "(sanity baseline, not gated)"
    )
    assert lines[4] == "empty vs base" and lines[-1] == "overall gate decision: GO"
    assert not BAD_WORDS.search(text)


@pytest.mark.slow
def test_user_group_gap_is_reported_with_its_ci(harness, tmp_path: Path) -> None:
    """compare.user_groups: the printed gap equals the group means recomputed from the saved
    per-user table, for the baseline and the candidate, and lies inside its interval."""
    groups = tmp_path / "groups.csv"
    pd.DataFrame(
        {"user": range(2000), "group": ["even" if u % 2 == 0 else "odd" for u in range(2000)]}
    ).to_csv(groups, index=False)
    proc = harness(
        tmp_path, "gate=none", "model=[popularity,item_knn]", f"compare.user_groups={groups}",
        f"runs_dir={tmp_path / 'runs'}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "user-group gap of ndcg@10" in x)
    for model in ("popularity", "item_knn"):
        table = pd.read_parquet(next((tmp_path / "runs").rglob(f"{model}/per_user.parquet")))
        values = table["ndcg@10"].dropna()
        even = values[values.index % 2 == 0].mean()
        odd = values[values.index % 2 == 1].mean()
        match = re.search(rf"{model} ([0-9.]+) \[(-?[0-9.]+), (-?[0-9.]+)\]", line)
        assert match, line
        gap, low, high = map(float, match.groups())
        assert gap == pytest.approx(abs(even - odd), abs=5e-5), line
        assert low <= gap <= high
        assert f"even {even:.4f}" in line and f"odd {odd:.4f}" in line


def test_a_segment_with_fewer_users_than_min_users_is_inconclusive_never_go() -> None:
    # 4 cold users: the lift CI (10%..40%) would clear the bar, but 4 < gate.min_users (20)
    spec = GateSpec(primary={"metric": "ndcg@10", "segment": "cold"}, gsb={"metric": "ndcg@10"})
    few = pair(row("cold", n=4), row(n=4))
    d = decide(few, spec)
    assert [r.status for r in d.rules] == ["inconclusive", "inconclusive"]
    assert d.decision == "INCONCLUSIVE"
    assert d.rules[0].reason == (
        "ndcg@10: only 4 users with a value for both models on 'cold' (fewer than "
        "gate.min_users=20): too few for a sound interval"
    )
    assert d.rules[1].reason.startswith("ΔGSB: only 4 users")
    # at the bar the rules are judged; min_users=1 judges any number of users
    assert decide(pair(row("cold", n=20), row(n=20)), spec).decision == "GO"
    assert decide(few, GateSpec(**{**spec.__dict__, "min_users": 1})).decision == "GO"
    # a failing guardrail on too few users is inconclusive too (no decision on 3 users)
    guard = GateSpec(guardrails=[{"metric": "recall@10", "segment": "cold", "margin": 0.05}])
    bad = row("cold", "recall@10", n=3, lift=-0.5, lift_ci_low=-0.7, lift_ci_high=-0.3)
    assert decide(pair(bad), guard).decision == "INCONCLUSIVE"
    assert decide(pair({**bad, "n": 30}), guard).decision == "NO_GO"


@pytest.mark.parametrize(
    ("spec", "start"),
    [
        (
            {"guardrails": [{"metric": "recall@10", "margin": -0.1}]},
            "gate.guardrails[0].margin must",
        ),
        ({"gsb": {"metric": "ndcg@10", "min_delta": 2}}, "gate.gsb.min_delta must lie in [-1, 1]"),
        ({"min_users": 0}, "'gate.min_users' must be"),
    ],
)
def test_bars_out_of_range_are_refused(spec: dict, start: str) -> None:
    assert one_line_error(spec).startswith(start)
