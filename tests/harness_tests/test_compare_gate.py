"""Comparisons between model versions and the launch gate."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from support import HarnessCli

import metrics
from harness.compare import CompareSpec, SegmentData, compare_models, compare_pair
from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.gate import GateSpec, check_gate, decide, worst
from harness.models import ImplicitItemCosine, PopularityModel, RandomModel
from harness.split import make_split
from harness.synthetic import generate

SPEC = CompareSpec(n_resamples=400, seed=1)
PRIMARY = GateSpec(
    primary={"metric": "ndcg@10", "min_lift": 0.0}, gsb={"metric": "ndcg@10", "min_delta": 0.0}
)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    frame = generate(n_users=400, n_items=250, n_events=9000, seed=2)
    split = make_split(frame, "global_time", cut=0.8)
    suite = MetricSuite(k=10, names=("ndcg@10", "recall@10", "precision@10", "coverage@10"))
    models = {
        "popularity": PopularityModel(),
        "item_knn": ImplicitItemCosine(),
        "random": RandomModel(seed=0),
        "popularity_again": PopularityModel(),
    }
    return run_models(
        Dataset("s", frame, "s"),
        split,
        models,
        suite,
        tmp_path_factory.mktemp("out"),
        progress=False,
    )


@pytest.fixture(scope="module")
def pairs(result):
    found, notes = compare_models(result, SPEC)
    assert not notes
    return {p.candidate: p for p in found}


def test_pair_numbers_match_independent_computations(result, pairs) -> None:
    pair = pairs["item_knn"]
    a = result.outcomes["popularity"].evaluation.per_user["ndcg@10"]
    b = result.outcomes["item_knn"].evaluation.per_user["ndcg@10"]
    row = pair.row("ndcg@10")
    assert row["mean_a"] == pytest.approx(a.mean()) and row["mean_b"] == pytest.approx(b.mean())
    assert row["diff"] == pytest.approx((b - a).mean())
    assert row["lift"] == pytest.approx((b.mean() - a.mean()) / a.mean())
    # GSB by hand: strictly better / equal / worse users
    d = (b - a).to_numpy()
    good, same, bad = (d > 0).sum(), (d == 0).sum(), (d < 0).sum()
    assert (row["gsb_good"], row["gsb_same"], row["gsb_bad"]) == (good, same, bad)
    assert row["gsb_delta"] == pytest.approx((good - bad) / len(d))
    # the paired t-test equals scipy's
    from scipy.stats import ttest_rel

    assert row["p_t"] == pytest.approx(ttest_rel(b, a).pvalue)
    # Holm across the family of the "all" segment
    fam = pair.table[(pair.table["segment"] == "all") & (pair.table["kind"] == "per-user")]
    p = fam["p_randomization"].to_numpy()
    order = np.argsort(p)
    holm = np.maximum.accumulate(np.minimum(1, (len(p) - np.arange(len(p))) * p[order]))
    expected = np.empty_like(p)
    expected[order] = holm
    assert fam["p_adjusted"].to_numpy() == pytest.approx(expected)


def test_coverage_is_a_run_level_row(result, pairs) -> None:
    row = pairs["item_knn"].row("coverage@10")
    summary = result.table()
    assert row["kind"] == "run-level"
    assert row["mean_b"] == pytest.approx(summary.loc["item_knn", "coverage@10"])
    assert np.isnan(row.get("lift_ci_low", np.nan))


def test_segments_are_compared(pairs) -> None:
    segs = set(pairs["item_knn"].table["segment"])
    assert {"all", "cold", "heavy", "items:head", "items:tail"} <= segs


def test_baseline_against_itself_is_no_difference(pairs) -> None:
    row = pairs["popularity_again"].row("ndcg@10")
    assert row["gsb_delta"] == 0 and row["gsb_good"] == 0 and row["gsb_bad"] == 0
    assert row["diff_ci_low"] == 0 and row["diff_ci_high"] == 0
    assert row["p_randomization"] == 1.0
    assert decide(pairs["popularity_again"], PRIMARY).decision == "INCONCLUSIVE"


def test_clearly_better_is_go_and_clearly_worse_is_no_go(pairs) -> None:
    better = decide(pairs["item_knn"], PRIMARY)
    worse = decide(pairs["random"], PRIMARY)
    assert better.decision == "GO", better.rules
    assert worse.decision == "NO_GO", worse.rules
    assert all(r.status == "fail" for r in worse.rules)
    assert worst([better.decision, worse.decision]) == "NO_GO"
    assert worst(["GO", "INCONCLUSIVE"]) == "INCONCLUSIVE" and worst([]) == "GO"


def test_guardrail_non_inferiority_and_missing_metric(pairs) -> None:
    spec = GateSpec(
        guardrails=[{"metric": "coverage@10", "margin": 0.1}, {"metric": "mrr@10", "margin": 0.1}]
    )
    d = decide(pairs["random"], spec)
    # random recommends far more distinct items: coverage is no loss
    assert d.rules[0].status == "pass"
    # not compared: never skipped (check_gate refuses it before a run), here inconclusive
    assert d.rules[1].status == "inconclusive" and "mrr@10 was not compared" in d.rules[1].reason
    assert d.decision == "INCONCLUSIVE"
    nothing = decide(pairs["random"], GateSpec(guardrails=[{"metric": "mrr@10", "margin": 0.1}]))
    assert nothing.decision == "INCONCLUSIVE"


def test_different_users_are_refused() -> None:
    a = pd.DataFrame({"ndcg@10": [0.1, 0.2]}, index=pd.Index([1, 2], name="user"))
    b = pd.DataFrame({"ndcg@10": [0.1, 0.3]}, index=pd.Index([1, 3], name="user"))
    with pytest.raises(ValueError, match="different users"):
        compare_pair("a", "b", (a, b), ["ndcg@10"], SPEC)


def test_users_without_a_value_for_one_model_are_counted_and_noted() -> None:
    """Found by a walkthrough: ``dropped`` was always 0 and the pair's baseline mean differed
    from the summary's without a word. Reference by hand: users 3 and 4 lack a value for one
    model, so 3 pairs remain; the baseline's paired mean is (1 + 2 + 3) / 3 = 2."""
    idx = pd.Index([1, 2, 3, 4, 5], name="user")
    a = pd.DataFrame({"novelty@10": [1.0, 2.0, np.nan, 4.0, 3.0]}, index=idx)
    b = pd.DataFrame({"novelty@10": [2.0, 2.0, 5.0, np.nan, 4.0]}, index=idx)
    spec = CompareSpec(n_resamples=400, seed=1, gsb_metric="novelty@10")
    pair = compare_pair("a", "b", (a, b), ["novelty@10"], spec)
    row = pair.row("novelty@10")
    assert (row["n"], row["dropped"], row["mean_a"], row["mean_b"]) == (3, 2, 2.0, 8 / 3)
    assert pair.notes == [
        "novelty@10: compared on the 3 of 5 users with a value for both models; 2 have none for "
        "one or both (no relevant test item, or no list) and are left out, so these rows' means "
        "can differ from the summary table's"
    ]


def test_seed_001_gsb_through_a_pair() -> None:
    idx = pd.Index(["q1", "q2", "q3", "q4"], name="user")
    a = pd.DataFrame({"ndcg@10": [0.5, 0.5, 0.5, 0.5]}, index=idx)
    b = pd.DataFrame({"ndcg@10": [0.9, 0.5, 0.1, 0.2]}, index=idx)  # good, same, bad, bad
    pair = compare_pair("a", "b", (a, b), ["ndcg@10"], SPEC)
    assert pair.row("ndcg@10")["gsb_delta"] == pytest.approx(-0.25)
    assert metrics.gsb(a["ndcg@10"], b["ndcg@10"]).delta == pytest.approx(-0.25)


def test_missing_baseline_is_a_note(result) -> None:
    pairs, notes = compare_models(result, CompareSpec(baseline="nope"))
    assert pairs == [] and "nope" in notes[0]


CLI = HarnessCli()


def _harness(cwd, *overrides):
    return CLI.run(cwd, *overrides, quick=True)


def _child_runs(cwd):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd}/runs/mlflow.db")
    exp = client.get_experiment_by_name("offline-eval")
    return client, client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


# random is gated here on purpose (gate.sanity=[]): by default it is a sanity baseline
ONLY_PRIMARY = ("gate.guardrails=[]", "gate.gsb=null", "compare.segments=false", "gate.sanity=[]")


def _parent_id(proc) -> str:
    """The parent run id the harness printed."""
    return re.search(r"parent run ([0-9a-f]{32})", proc.stdout).group(1)


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """Four quick runs with an enforced gate (only the primary rule) logged to one sqlite store:
    NO_GO (popularity vs random, beside a model that fails to fit), INCONCLUSIVE (popularity vs
    itself), GO (popularity vs item_knn) and the NO_GO one again without enforcing. The compare
    CLI test reads the GO run's popularity and item_knn runs from the same store."""
    cwd = tmp_path_factory.mktemp("gated")
    procs = {
        "no_go": _harness(
            cwd,
            "model=[popularity,random]",
            "+model.bad_fit._target_=plugins.models.FailsToFit",
            "gate.enforce=true",
            *ONLY_PRIMARY,
        ),
        "same": _harness(
            cwd,
            "model=[popularity]",
            "+model.again._target_=harness.models.PopularityModel",
            "gate.enforce=true",
            *ONLY_PRIMARY,
        ),
        "go": _harness(cwd, "model=[popularity,item_knn]", "gate.enforce=true", *ONLY_PRIMARY),
        "not_enforced": _harness(cwd, "model=[popularity,random]", *ONLY_PRIMARY),
    }
    return cwd, procs


@pytest.mark.slow
def test_gate_enforce_exit_codes_and_tags(gated) -> None:
    cwd, procs = gated
    no_go, same, go = procs["no_go"], procs["same"], procs["go"]
    # the decision's code, not the failed model's 1 (an audit found 1 hiding the NO_GO)
    assert no_go.returncode == 10, no_go.stderr
    assert "bad_fit" in no_go.stdout + no_go.stderr
    assert "overall gate decision: NO_GO" in no_go.stdout
    assert same.returncode == 11, same.stderr  # identical to the baseline: INCONCLUSIVE
    assert go.returncode == 0, go.stdout + go.stderr
    assert procs["not_enforced"].returncode == 0  # the run itself succeeded
    client, runs = _child_runs(cwd)
    # the store may also hold the compare CLI test's runs: these four parents are ours, in order
    by_id = {r.info.run_id: r for r in runs}
    parents = [by_id[_parent_id(procs[k])] for k in ("no_go", "same", "go", "not_enforced")]
    assert all("mlflow.parentRunId" not in p.data.tags for p in parents)
    assert [p.data.tags.get("gate.decision") for p in parents] == [
        "NO_GO",
        "INCONCLUSIVE",
        "GO",
        "NO_GO",
    ]
    first = parents[0].info.run_id
    random_run = next(
        r
        for r in runs
        if r.data.tags.get("model") == "random" and r.data.tags.get("mlflow.parentRunId") == first
    )
    assert random_run.data.tags["gate.decision"] == "NO_GO"
    assert "compare.all.ndcg@10.gsb_delta".replace("@", "_at_") in random_run.data.metrics
    artifacts = {a.path for a in client.list_artifacts(first)}
    assert {"report.html", "report.md"} <= artifacts


@pytest.mark.slow
def test_compare_cli_recomputes_from_logged_runs_and_refuses_other_splits(gated) -> None:
    """``python -m harness.compare`` on the GO run's popularity and item_knn runs (the store of
    the gate test), and on a popularity run of another split added to that store here."""
    tmp_path, procs = gated
    other = _harness(tmp_path, "model=[popularity]", "split=leave_one_out")
    assert other.returncode == 0, other.stderr
    _, runs = _child_runs(tmp_path)

    def child(parent: str, model: str):
        (found,) = [
            r
            for r in runs
            if r.data.tags.get("model") == model and r.data.tags.get("mlflow.parentRunId") == parent
        ]
        return found

    go_parent = _parent_id(procs["go"])
    pop, knn = child(go_parent, "popularity"), child(go_parent, "item_knn")
    other_split_pop = child(_parent_id(other), "popularity")

    def cli(*args):
        return CLI.run(tmp_path, *args, module="harness.compare")

    done = cli(pop.info.run_id, knn.info.run_id, "--enforce", "gate.guardrails=[]", "gate.gsb=null")
    assert done.returncode == 0, done.stderr
    assert "item_knn vs popularity" in done.stdout and "gate: GO" in done.stdout
    # the recomputed ΔGSB equals the one logged during the run
    logged = knn.data.metrics["compare.all.ndcg_at_10.gsb_delta"]
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("ndcg@10"))
    assert float(line.split()[-1]) == pytest.approx(logged, abs=5e-4)  # printed to 3 decimals
    typo = cli(pop.info.run_id, knn.info.run_id, "gate.primary.metric=ndgc@10")
    assert typo.returncode == 2 and typo.stderr.startswith("error: gate.primary.metric='ndgc@10'")
    undecided = cli(pop.info.run_id, knn.info.run_id, "--enforce", "--gate", "none")
    assert undecided.returncode == 12, undecided.stderr  # no gate, no decision: never a pass
    refused = cli(other_split_pop.info.run_id, knn.info.run_id)
    assert refused.returncode == 2 and "different splits" in refused.stderr
    # the same split, ranked and judged otherwise: a random model among 5 sampled negatives
    # "beats" popularity over the whole catalog, and other conventions move ndcg by themselves
    sampled = _harness(
        tmp_path,
        "model=[popularity,random]",
        "candidates=sampled",
        "candidates.n_negatives=5",
        "metrics.options.ideal_dcg=k",
    )
    assert sampled.returncode == 0, sampled.stderr
    _, runs = _child_runs(tmp_path)
    sampled_random = child(_parent_id(sampled), "random")
    assert sampled_random.data.tags["split.sha256"] == pop.data.tags["split.sha256"]
    refused = cli(pop.info.run_id, sampled_random.info.run_id, "--enforce")
    assert refused.returncode == 2, refused.stdout
    assert refused.stderr.startswith("error: the runs were evaluated under different settings")
    assert "candidates.kind full vs sampled" in refused.stderr
    assert "candidates.n_negatives - vs 5" in refused.stderr
    assert "metrics.option.ideal_dcg relevant vs k" in refused.stderr
    _, after = _child_runs(tmp_path)
    assert any(r.data.tags.get("compare.candidate_run") == knn.info.run_id for r in after)


def test_gsb_from_human_labels_file(result, tmp_path) -> None:
    from dataclasses import replace

    path = tmp_path / "labels.csv"
    pd.DataFrame(
        {
            "unit": ["q1", "q2", "q3", "q4", "q1"],
            "label": ["good", "same", "bad", "BAD", "good"],
            "candidate": ["item_knn"] * 4 + ["random"],
        }
    ).to_csv(path, index=False)
    found, _ = compare_models(result, replace(SPEC, segments=False, human_labels=str(path)))
    pairs = {p.candidate: p for p in found}
    row = pairs["item_knn"].row("human_labels")
    assert (row["gsb_good"], row["gsb_same"], row["gsb_bad"]) == (1, 1, 2)
    assert row["gsb_delta"] == pytest.approx(-0.25)  # seed 001
    assert row["gsb_ci_low"] <= -0.25 <= row["gsb_ci_high"]
    assert pairs["random"].row("human_labels")["gsb_delta"] == 1.0
    assert pairs["popularity_again"].row("human_labels") is None  # no labels for it
    gate = decide(pairs["item_knn"], GateSpec(gsb={"metric": "human_labels", "min_delta": 0.0}))
    assert gate.rules[0].metric == "human_labels" and gate.decision in ("NO_GO", "INCONCLUSIVE")
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"unit": [1], "label": ["better"]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="label"):
        compare_models(result, replace(SPEC, human_labels=str(bad)))


@pytest.mark.slow
def test_compare_cli_accepts_a_registered_model_version_evaluated_earlier(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "register_model.py"
    reg = subprocess.run(
        [
            sys.executable,
            str(example),
            "--tracking-uri",
            "sqlite:///runs/mlflow.db",
            "--name",
            "demo",
            "--n-users",
            "300",
            "--n-items",
            "200",
            "--n-events",
            "6000",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert reg.returncode == 0, reg.stderr[-2000:]
    run = _harness(
        tmp_path,
        "model=[popularity,mlflow]",
        "model.mlflow.uri=models:/demo/1",
        "compare.segments=false",
        "gate.guardrails=[]",  # the default cold guardrail needs segments
    )
    assert run.returncode == 0, run.stderr[-2000:]
    _, runs = _child_runs(tmp_path)
    pop = next(r for r in runs if r.data.tags.get("model") == "popularity")
    shipped = next(r for r in runs if r.data.tags.get("model") == "mlflow")
    assert shipped.data.tags["model.info.model_uri"] == "models:/demo/1"
    assert shipped.data.tags["model.info.version"] == "1"
    done = CLI.run(tmp_path, pop.info.run_id, "models:/demo/1", module="harness.compare")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "demo v1 vs popularity" in done.stdout  # a models:/ side is named by its version
    missing = CLI.run(tmp_path, pop.info.run_id, "models:/demo/7", module="harness.compare")
    assert missing.returncode == 2
    assert missing.stderr == (
        "error: models:/demo/7: demo has no version 7 in the registry at "
        "sqlite:///runs/mlflow.db (it has 1)\n"
    )
    alias = CLI.run(tmp_path, pop.info.run_id, "models:/demo@champion", module="harness.compare")
    assert alias.returncode == 0, alias.stderr[-2000:]  # the example sets @champion on version 1
    assert (
        "note: models:/demo@champion is demo version 1: its latest evaluation, run "
        f"{shipped.info.run_id}" in alias.stdout
    )


def test_pooled_metrics_are_compared_on_their_summaries() -> None:
    """Found by an audit: rmse's row was the mean of per-user RMSEs, not the pooled RMSE the
    summary reports, and the gate judged that. Reference by hand: every user's RMSE is lower
    for ``b`` (means 0.9 and 0.8125), yet pooled over the pairs ``b`` is worse (1.2 → 1.5, as
    the summaries say): the row and the gate must follow the summaries, on segment ``all``."""
    idx = pd.Index([1, 2, 3, 4], name="user")
    a = pd.DataFrame({"rmse": [0.5, 1.0, 2.0, 0.1], "ndcg@10": [0.1, 0.2, 0.3, 0.4]}, index=idx)
    b = pd.DataFrame({"rmse": [0.4, 0.9, 1.9, 0.05], "ndcg@10": [0.2, 0.2, 0.4, 0.4]}, index=idx)
    summaries = ({"rmse": 1.2, "ndcg@10": 0.25}, {"rmse": 1.5, "ndcg@10": 0.3})
    cold = SegmentData({"cold": np.array([1, 2])}, pd.Series(dtype=object), {})
    pair = compare_pair(
        "a", "b", (a, b), ["rmse", "ndcg@10"], SPEC, summaries=summaries, segments=cold
    )
    row = pair.row("rmse")
    assert row["kind"] == "run-level"
    assert (row["mean_a"], row["mean_b"]) == (1.2, 1.5)
    assert row["diff"] == pytest.approx(0.3) and row["lift"] == pytest.approx(0.25)
    assert np.isnan(row.get("lift_ci_low", np.nan))
    assert pair.row("rmse", "cold") is None and pair.row("ndcg@10", "cold") is not None
    assert pair.row("ndcg@10")["kind"] == "per-user"
    rule = decide(pair, GateSpec(guardrails=[{"metric": "rmse", "margin": 0.1}])).rules[0]
    assert rule.status == "fail", rule.reason  # 25% worse, beyond the 10% margin

    # micro averages are pooled too (a ratio of sums), macro ones are per-user means
    p_a, p_b = (
        a.rename(columns={"ndcg@10": "precision@10"}),
        b.rename(columns={"ndcg@10": "precision@10"}),
    )
    sums = ({"precision@10": 0.3}, {"precision@10": 0.2})
    micro = compare_pair(
        "a", "b", (p_a, p_b), ["precision@10"], SPEC, summaries=sums, options={"average": "micro"}
    )
    assert micro.row("precision@10")["kind"] == "run-level"
    assert micro.row("precision@10")["mean_b"] == 0.2
    macro = compare_pair("a", "b", (p_a, p_b), ["precision@10"], SPEC, summaries=sums)
    assert macro.row("precision@10")["mean_b"] == pytest.approx(0.3)  # (0.2+0.2+0.4+0.4) / 4


def test_gate_refuses_a_pooled_metric_on_a_segment() -> None:
    compared = ["rmse", "precision@10", "ndcg@10"]
    on_cold = GateSpec(guardrails=[{"metric": "rmse", "margin": 0.1, "segment": "cold"}])
    with pytest.raises(ValueError, match=r"gate.guardrails\[0\].segment='cold': rmse is pooled"):
        check_gate(on_cold, compared)
    micro = GateSpec(primary={"metric": "precision@10", "min_lift": 0.0, "segment": "heavy"})
    check_gate(micro, compared)  # macro: a per-user mean, compared per segment
    with pytest.raises(ValueError, match="precision@10 is pooled over the run"):
        check_gate(micro, compared, options={"average": "micro"})
    gsb = GateSpec(gsb={"metric": "rmse", "min_delta": 0.0})
    with pytest.raises(ValueError, match=r"gate.gsb.metric='rmse' is pooled over the run: GSB"):
        check_gate(gsb, compared)


def test_gauc_row_equals_the_summaries_through_a_run(tmp_path) -> None:
    """gauc weighs each user's AUC by their candidates: its comparison row is the two models'
    summary values (which differ from the plain mean of per-user AUCs)."""
    frame = generate(n_users=150, n_items=120, n_events=3000, seed=5)
    split = make_split(frame, "global_time", cut=0.8)
    suite = MetricSuite(k=10, names=("ndcg@10", "gauc"))
    models = {"popularity": PopularityModel(), "item_knn": ImplicitItemCosine()}
    result = run_models(Dataset("s", frame, "s"), split, models, suite, tmp_path, progress=False)
    (pair,), _ = compare_models(result, SPEC)
    summary = result.table()
    row = pair.row("gauc")
    assert row["kind"] == "run-level"
    assert row["mean_a"] == pytest.approx(summary.loc["popularity", "gauc"], abs=1e-12)
    assert row["mean_b"] == pytest.approx(summary.loc["item_knn", "gauc"], abs=1e-12)
    per_user = result.outcomes["item_knn"].evaluation.per_user["gauc"]
    assert abs(per_user.mean() - row["mean_b"]) > 1e-6  # (so the plain mean would show)


def test_the_mde_uses_the_configured_level_and_power() -> None:
    """Found by an audit: the MDE column ignored compare.alpha / compare.power (always 0.05 and
    0.8). By hand: (z_{1−α/2} + z_power) · sd(b − a) / √n."""
    from scipy.stats import norm

    rng = np.random.default_rng(3)
    idx = pd.Index(np.arange(300), name="user")
    a = pd.DataFrame({"ndcg@10": rng.random(300)}, index=idx)
    b = pd.DataFrame({"ndcg@10": a["ndcg@10"] + rng.normal(0.02, 0.1, 300)}, index=idx)
    spec = CompareSpec(n_resamples=100, alpha=0.01, power=0.9)
    row = compare_pair("a", "b", (a, b), ["ndcg@10"], spec).row("ndcg@10")
    d = (b - a)["ndcg@10"]
    z = norm.ppf(1 - 0.01 / 2) + norm.ppf(0.9)
    assert row["mde"] == pytest.approx(z * d.std(ddof=1) / np.sqrt(300), rel=1e-9)
