"""Registry promotion on GO and the history of a registered model, against a real `mlflow server`.

Two versions of ``reco`` are registered with examples/register_model.py: v1 popularity and v2
item-kNN, both fitted on the training part of the split the harness evaluates on. v2 is evaluated
against the champion (v1, by alias) with a gate it cannot pass (NO_GO: the alias stays, the
refusal is printed), then with the default gate (GO: the alias moves to v2); the history lists
both evaluations in order.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from support import HarnessCli, MlflowServer

from harness.gate import GateDecision, RuleResult
from harness.history import format_history, history_frame, version_labels
from harness.promote import Promotion, alias_version, format_promotion, plan_promotions

ROOT = Path(__file__).resolve().parents[2]
DATA = {"n_users": 500, "n_items": 250, "n_events": 12000, "seed": 0}

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


# --------------------------------------------------------------------- pure planning rules


def _decision(cand: str, decision: str, status: str = "pass") -> GateDecision:
    nan = float("nan")
    rule = RuleResult("primary", "ndcg@10", "all", status, 0.1, (nan, nan), 0.0, "lift +10%")
    return GateDecision(cand, "base", decision, [rule])


def test_plan_promotes_go_only_and_never_two_versions_at_once() -> None:
    decisions = {
        "v2": _decision("v2", "GO"),
        "v3": _decision("v3", "NO_GO", "fail"),
        "v4": _decision("v4", "INCONCLUSIVE", "inconclusive"),
        "plain": _decision("plain", "GO"),  # not a registry model: nothing to promote
    }
    registered = {"v2": ("reco", "2"), "v3": ("reco", "3"), "v4": ("reco", "4")}
    plans = {p.candidate: p for p in plan_promotions(decisions, registered, "champion")}
    assert set(plans) == {"v2", "v3", "v4"}
    assert plans["v2"].action == "promote"
    assert plans["v3"].action == "refuse"
    assert plans["v3"].reason == "NO_GO against base: primary ndcg@10 (all): fail"
    assert plans["v4"].action == "refuse" and "inconclusive" in plans["v4"].reason

    both = {"a": _decision("a", "GO"), "b": _decision("b", "GO")}
    plans = plan_promotions(both, {"a": ("reco", "5"), "b": ("reco", "6")}, "champion")
    assert [p.action for p in plans] == ["refuse", "refuse"]
    assert "b (another version of reco) is GO too" in plans[0].reason


def test_the_promotion_line_says_where_the_alias_was(tmp_path: Path) -> None:
    """The alias's version read from a real sqlite registry (an int there, text from a server)
    compares with the candidate's: already there reads so, not 'version 2 (was version 2)'."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'r.db'}")
    client.create_registered_model("reco")
    for _ in range(2):
        client.create_model_version("reco", source=str(tmp_path))
    client.set_registered_model_alias("reco", "champion", "2")
    before = alias_version(client, "reco", "champion")
    assert before == "2" and alias_version(client, "reco", "nope") is None
    go = Promotion("v2", "reco", "2", "GO", "promote", "GO against base")
    no = Promotion("v2", "reco", "2", "GO", "refuse", "GO, but v3 is GO too")
    assert format_promotion(go, "champion", before) == (
        "promotion: models:/reco@champion -> version 2 (it already was): GO against base"
    )
    assert format_promotion(go, "champion", "1") == (
        "promotion: models:/reco@champion -> version 2 (was version 1): GO against base"
    )
    assert format_promotion(no, "champion", before) == (
        "promotion REFUSED: models:/reco@champion stays on version 2 (as it was): GO, but v3 is "
        "GO too"
    )
    assert format_promotion(no, "champion", None) == (
        "promotion REFUSED: models:/reco@champion is not set, not moved to version 2: GO, but v3 "
        "is GO too"
    )


def test_the_headline_says_when_its_metric_is_better_lower() -> None:
    """The registry's headline shows the lift as the metric moved (not oriented as the gate's
    rules are): for a lower-is-better metric it says so, so a fall reads as the gain it is."""
    from harness.promote import headline_text

    entry = {"value": 0.8, "ci": [0.7, 0.9], "lift": -0.2, "lift_ci": [-0.3, -0.1]}
    record = {"headline": "rmse", "baseline": "pop", "metrics": {"rmse": entry, "ndcg@10": entry}}
    assert headline_text(record) == (
        "rmse (lower is better) 0.8000 [0.7000, 0.9000], lift -20.00% [-30.00%, -10.00%] vs pop"
    )
    assert headline_text(record, "ndcg@10").startswith("ndcg@10 0.8000 [")


def test_history_frame_orders_versions_then_dates() -> None:
    def rec(run: str, date: str, decision: str, value: float) -> str:
        return json.dumps(
            {
                "date": date,
                "run": run,
                "decision": decision,
                "baseline": "champion",
                "headline": "ndcg@10",
                "metrics": {"ndcg@10": {"value": value, "ci": [value - 0.01, value + 0.01]}},
                "action": "refused",
                "alias": "champion",
            }
        )

    versions = [
        {"version": "10", "created": 0, "aliases": [], "tags": {}},
        {
            "version": "2",
            "created": 0,
            "aliases": ["champion"],
            "tags": {
                "harness.eval.r2": rec("r2", "2026-01-02 00:00:00 UTC", "GO", 0.3),
                "harness.eval.r1": rec("r1", "2026-01-01 00:00:00 UTC", "NO_GO", 0.3),
                "harness.latest.decision": "GO",
                "harness.eval.junk": "not json",
            },
        },
    ]
    frame = history_frame(versions)
    assert list(frame["version"]) == [2, 2, 10]  # numeric order, not "10" < "2"
    assert list(frame["run"]) == ["r1", "r2", ""]
    assert list(frame["decision"]) == ["NO_GO", "GO", "not evaluated"]
    assert list(frame["alias_action"]) == ["refused @champion", "refused @champion", ""]
    assert version_labels(frame["version"]) == ["v2 #1", "v2 #2", "v10"]
    assert frame["ci_low"].iloc[0] == pytest.approx(0.29)
    text = format_history(frame, "reco")
    assert "2 @champion" in text and "not evaluated" in text


# ------------------------------------------------------------------ against a real server


def _register(url: str, work: Path, *args: str) -> str:
    """``examples/register_model.py`` on the harness's data (fitted on the training period of
    the default split), in a subprocess so this process's MLflow settings stay untouched;
    returns the new version."""
    cut = yaml.safe_load((ROOT / "harness/configs/split/global_time.yaml").read_text())["cut"]
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "register_model.py"),
            "--tracking-uri",
            url,
            "--name",
            "reco",
            *(f"--{k.replace('_', '-')}={v}" for k, v in DATA.items()),
            f"--train-cut={cut}",
            *args,
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return re.search(r"^registered reco version (\d+)", proc.stdout, re.MULTILINE).group(1)


CLI = HarnessCli()


def _evaluate(url: str, work: Path, *overrides: str) -> subprocess.CompletedProcess:
    """The harness on the same data: v2 (models:/reco/2) against the champion alias."""
    return CLI.run(
        work,
        *(f"dataset.{k}={v}" for k, v in DATA.items()),
        "progress=false",
        "model=[mlflow]",
        "model.mlflow.uri=models:/reco/2",
        "+model.champion._target_=harness.models.MLflowModel",
        "+model.champion.uri=models:/reco@champion",
        f"+model.champion.tracking_uri={url}",
        "compare.baseline=champion",
        "compare.n_resamples=300",
        "tracking=server",
        f"tracking.uri={url}",
        "gate.promote=champion",
        *overrides,
        timeout=400,
        env={"MLFLOW_HTTP_REQUEST_TIMEOUT": "60"},
    )


def _history(url: str, work: Path, *args: str) -> subprocess.CompletedProcess:
    return CLI.run(work, *args, "--tracking-uri", url, timeout=120, module="harness.history")


def _parent(stdout: str) -> str:
    return re.search(r"parent run ([0-9a-f]{32})", stdout).group(1)


@pytest.mark.slow
def test_promotion_moves_the_alias_on_go_only_and_history_lists_it(
    mlflow_server: MlflowServer,
    tmp_path: Path,
) -> None:
    from mlflow import MlflowClient

    url = mlflow_server.url
    work = tmp_path / "work"
    work.mkdir()
    assert _register(url, work) == "1"  # popularity, @champion
    assert _register(url, work, "--model=item_knn", "--alias=challenger") == "2"
    client = MlflowClient(tracking_uri=url, registry_uri=url)

    # 1. a gate v2 cannot pass (a +500% lift required): NO_GO, the alias stays on v1
    refused = _evaluate(url, work, "gate.primary.min_lift=5.0")
    assert refused.returncode == 0, refused.stderr[-3000:]
    assert "gate: NO_GO" in refused.stdout
    line = next(x for x in refused.stdout.splitlines() if x.startswith("promotion REFUSED"))
    assert line.startswith(
        "promotion REFUSED: models:/reco@champion stays on version 1, not moved to version 2: "
        "NO_GO against champion: primary ndcg@10 (all): fail"
    )
    assert client.get_model_version_by_alias("reco", "champion").version == "1"
    first_run = _parent(refused.stdout)
    mv = client.get_model_version("reco", "2")
    assert mv.tags["harness.latest.decision"] == "NO_GO"
    assert mv.tags["harness.latest.run"] == first_run
    assert "not moved" in mv.tags["harness.latest.promotion"]
    assert "NO_GO" in mv.description and first_run in mv.description
    assert client.get_run(first_run).data.tags["registry.promotion"] == (
        "models:/reco/2 @champion: refused (NO_GO)"
    )

    # 2. the default gate: GO, the alias moves to v2
    promoted = _evaluate(url, work)
    assert promoted.returncode == 0, promoted.stderr[-3000:]
    assert "gate: GO" in promoted.stdout
    assert "promotion: models:/reco@champion -> version 2 (was version 1)" in promoted.stdout
    assert client.get_model_version_by_alias("reco", "champion").version == "2"
    second_run = _parent(promoted.stdout)
    # the report says which versions were compared and what the promotion is to do
    for proc, expected in (
        (refused, "promotion refused: models:/reco@champion is not moved to version 2: NO_GO"),
        (promoted, "promotion: models:/reco@champion is to move to version 2 (GO against"),
    ):
        report = re.search(r"^report:\s+(\S+)", proc.stdout, re.MULTILINE).group(1)
        page = (work / report).read_text()
        assert expected in page
        assert "mlflow: models:/reco/2 is reco version 2" in page
        assert "champion: models:/reco@champion is reco version 1" in page
    mv = client.get_model_version("reco", "2")
    assert mv.tags["harness.latest.decision"] == "GO"
    assert mv.tags["harness.latest.run"] == second_run
    assert mv.tags["harness.latest.promotion"] == "@champion: moved here (was version 1)"
    assert mv.description.startswith("**Offline evaluation ") and ": GO** against" in mv.description
    assert "against `models:/reco/1`" in mv.description  # the baseline, the version it was

    # the registry record carries the numbers the run logged on the candidate's child run
    record = json.loads(mv.tags[f"harness.eval.{second_run}"])
    assert record["decision"] == "GO" and record["run"] == second_run
    assert [r.split(":")[0] for r in record["rules"]] == [
        "primary ndcg@10 (all)",
        "guardrail coverage@10 (all)",
        "guardrail recall@10 (cold)",
        "gsb ndcg@10 (all)",
    ]
    assert all(r.split(": ")[1].startswith("pass") for r in record["rules"])
    child = next(
        r
        for r in client.search_runs(
            [client.get_run(second_run).info.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{second_run}'",
        )
        if r.data.tags.get("model") == "mlflow"
    )
    logged = child.data.metrics
    ndcg = record["metrics"]["ndcg@10"]
    assert ndcg["value"] == pytest.approx(logged["ndcg_at_10"], rel=1e-12)
    for stat, key in (("lift", "lift"), ("baseline", "mean_a")):
        got = [v for k, v in logged.items() if k.startswith("compare.all.ndcg") and k.endswith(key)]
        assert got and ndcg[stat] == pytest.approx(got[0], rel=1e-12), (stat, got)
    # the CI of the value: mean ± z·sd/√n over the candidate's per-user values
    per_user = pd.read_parquet(
        client.download_artifacts(child.info.run_id, "per_user.parquet", str(tmp_path))
    )["ndcg@10"].dropna()
    half = 1.959963984540054 * per_user.std(ddof=1) / np.sqrt(len(per_user))
    assert ndcg["ci"] == pytest.approx([per_user.mean() - half, per_user.mean() + half], rel=1e-9)

    # a later comparison by registry refs: an alias is the version it points to now
    def compare(*refs: str) -> subprocess.CompletedProcess:
        return CLI.run(
            work,
            *refs,
            "--tracking-uri",
            url,
            "compare.n_resamples=200",
            timeout=300,
            module="harness.compare",
        )

    both = compare("models:/reco@champion", "models:/reco@challenger")  # both on v2 now
    assert both.returncode == 0, both.stderr
    assert (
        "note: both sides are reco version 2 (models:/reco@champion and models:/reco@challenger): "
        "the model is compared with itself" in both.stdout
    )
    by_version = compare("models:/reco/1", "models:/reco/2")  # v1 was evaluated as @champion
    assert by_version.returncode == 0, by_version.stderr
    assert (
        f"note: models:/reco/2 is reco version 2: its latest evaluation, run {child.info.run_id}"
        in by_version.stdout
    )
    ndcg_row = next(
        x.split() for x in by_version.stdout.splitlines() if x.strip().startswith("ndcg@10 ")
    )
    assert ndcg_row[2] == f"{logged['ndcg_at_10']:.4f}"

    # 3. the history: v1 (never a candidate), then v2's two evaluations in order
    hist = _history(url, work, "reco", "--plot", str(tmp_path / "history.png"))
    assert hist.returncode == 0, hist.stderr
    rows = [x for x in hist.stdout.splitlines()[2:] if x.strip() and not x.startswith("plot:")]
    assert hist.stdout.splitlines()[0] == "reco: 3 row(s)"
    assert len(rows) == 3, hist.stdout
    assert rows[0].split()[0] == "1" and "not evaluated" in rows[0]
    assert rows[1].split()[:3] == ["2", "@challenger", "@champion"] and "NO_GO" in rows[1]
    assert rows[1].rstrip().endswith(first_run) and "refused @champion" in rows[1]
    assert "GO" in rows[2].split() and rows[2].rstrip().endswith(second_run)
    assert f"ndcg@10 {ndcg['value']:.4f}" in rows[2] and rows[2].count("vs models:/reco/1") == 1
    png = (tmp_path / "history.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"

    recall = _history(url, work, "reco", "--metric", "recall@10")
    assert recall.returncode == 0 and "recall@10 0." in recall.stdout
    unknown = _history(url, work, "no-such-model")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        f"error: no registered model 'no-such-model' at {url}"
    ]
    bad_metric = _history(url, work, "reco", "--metric", "nope@3")
    assert bad_metric.returncode == 2 and len(bad_metric.stderr.strip().splitlines()) == 1
    recorded = bad_metric.stderr.split("; recorded: ")[1].strip().split(", ")
    assert {"ndcg@10", "recall@10"} <= set(recorded) and recorded == sorted(recorded)


def test_a_bad_alias_is_a_one_line_error_before_any_model_runs(tmp_path: Path) -> None:
    proc = CLI.run(tmp_path, "tracking=none", "gate.promote=latest", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: 'gate.promote' must be a registry alias such as champion (letters, digits, _ "
        "and -; not 'latest' or vN) (got 'latest')"
    ]
    assert "dataset" not in proc.stdout  # nothing was loaded or fitted


def test_a_promotion_that_could_not_act_is_one_line_before_any_model_runs(tmp_path: Path) -> None:
    """No store, no registered candidate, another registry, or an alias that is not set (a typo
    would create a new alias on GO): one line, exit 2, nothing loaded or fitted."""
    from mlflow import MlflowClient

    (tmp_path / "runs").mkdir()
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")  # tracking=local's
    client.create_registered_model("reco")
    client.create_model_version("reco", source=str(tmp_path), run_id=None)
    client.set_registered_model_alias("reco", "champion", "1")
    client.set_registered_model_alias("reco", "challenger", "1")
    registered = ["model=[popularity,mlflow]", "model.mlflow.uri=models:/reco/1"]

    def error(*overrides: str) -> str:
        proc = CLI.run(tmp_path, *overrides, timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "dataset" not in proc.stdout  # nothing was loaded or fitted
        (line,) = proc.stderr.strip().splitlines()
        return line

    assert error("tracking=none", "gate.promote=champion") == (
        "error: gate.promote=champion moves an alias in the tracking store's registry, but "
        "tracking is off (tracking=none): use tracking=local or tracking=server, or drop "
        "gate.promote"
    )
    assert error("gate.promote=champion").startswith(
        "error: gate.promote=champion: no gated candidate is a registered model version"
    )
    assert error(*registered, "gate.promote=champoin") == (
        "error: gate.promote=champoin: models:/reco@champoin is not set (aliases of reco: "
        "@challenger (version 1), @champion (version 1)); the promotion moves an alias that "
        "exists: set it once in MLflow (MlflowClient().set_registered_model_alias('reco', "
        "'champoin', VERSION)) or fix the name"
    )
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert error(*registered, f"model.mlflow.tracking_uri={other}", "gate.promote=champion") == (
        f"error: gate.promote=champion: model mlflow is read from the registry at {other}, but "
        f"the promotion moves aliases in the tracking store's registry (sqlite:///runs/mlflow.db)"
    )
    assert client.get_registered_model("reco").aliases == {"champion": 1, "challenger": 1}

    # the gate must compare with the version the alias points to, and the candidate be another
    client.create_model_version("reco", source=str(tmp_path), run_id=None)  # version 2
    client.set_registered_model_alias("reco", "champion", "2")
    v2 = ["model=[popularity,mlflow]", "model.mlflow.uri=models:/reco/1"]
    assert error(*v2, "gate.promote=champion") == (
        "error: gate.promote=champion: the baseline popularity is not a version of reco, but a "
        "promotion replaces models:/reco@champion (version 2): compare against it, e.g. "
        "+model.champion._target_=harness.models.MLflowModel "
        "+model.champion.uri=models:/reco@champion compare.baseline=champion"
    )
    base = [
        "+model.base._target_=harness.models.MLflowModel",
        "+model.base.tracking_uri=${tracking.uri}",
        "compare.baseline=base",
        "gate.promote=champion",
    ]
    assert error(*v2, *base, "+model.base.uri=models:/reco/1") == (
        "error: gate.promote=champion: the baseline base (models:/reco/1) is reco version 1, but "
        "models:/reco@champion is version 2, the one a promotion replaces: compare against "
        "models:/reco@champion"
    )
    same = ["model=[mlflow]", "model.mlflow.uri=models:/reco/2"]
    assert error(*same, *base, "+model.base.uri=models:/reco@champion") == (
        "error: gate.promote=champion: candidate mlflow (models:/reco/2) is reco version 2, which "
        "models:/reco@champion already points to: nothing to promote (it would be compared with "
        "itself)"
    )


def test_history_without_evaluations_says_no_plot_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow import MlflowClient

    from harness.history import main

    uri = f"sqlite:///{tmp_path / 'r.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("reco")
    client.create_model_version("reco", source=str(tmp_path))
    png = tmp_path / "h.png"
    assert main(["reco", "--tracking-uri", uri, "--plot", str(png)]) == 0
    err = capsys.readouterr().err.splitlines()[-1]  # after MLflow's set-up lines in-process
    assert err.startswith(f"note: no plot written to {png}: 'reco' has no evaluation yet")
    assert not png.exists()


def test_a_go_against_a_version_the_alias_has_left_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gate compared v3 with v1, @champion's version when the run started; the alias moved
    to v2 meanwhile: the GO says nothing about replacing v2, so the alias stays (real sqlite
    registry); with the alias still on v1 the same GO promotes."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from harness.compare import CompareSpec, compare_pair
    from harness.promote import apply_promotion, promotion_requests

    uri = f"sqlite:///{tmp_path / 'r.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("reco")
    for _ in range(3):
        client.create_model_version("reco", source=str(tmp_path))
    parent = client.create_run(client.create_experiment("e")).info.run_id
    rng = np.random.default_rng(0)
    users = pd.Index(np.arange(300), name="user")
    base = pd.DataFrame({"ndcg@10": rng.uniform(0, 0.5, 300)}, index=users)
    cand = base + 0.1
    pair = compare_pair("base", "cand", (base, cand), ["ndcg@10"], CompareSpec(n_resamples=200))
    result = SimpleNamespace(
        outcomes={
            "base": SimpleNamespace(info={"info.name": "reco", "info.version": 1}, evaluation=None),
            "cand": SimpleNamespace(info={"info.name": "reco", "info.version": 3}, evaluation=None),
        }
    )
    decisions = {"cand": _decision("cand", "GO")}

    def promote() -> str:
        spec = promotion_requests(
            "champion", result, [pair], decisions, experiment="e", headline="ndcg@10"
        )
        code = apply_promotion(spec, uri, parent)
        assert code == 0
        return capsys.readouterr().out.strip()

    client.set_registered_model_alias("reco", "champion", "2")  # moved during the run
    assert promote() == (
        "promotion REFUSED: models:/reco@champion stays on version 2, not moved to version 3: GO "
        "against base (version 1), but @champion is version 2 now: evaluate against "
        "models:/reco@champion again"
    )
    assert client.get_model_version_by_alias("reco", "champion").version == 2
    client.set_registered_model_alias("reco", "champion", "1")
    assert promote() == (
        "promotion: models:/reco@champion -> version 3 (was version 1): GO against base"
    )
    assert client.get_model_version_by_alias("reco", "champion").version == 3


def test_a_run_whose_logging_failed_is_promoted_when_harness_log_logs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GO whose MLflow logging failed keeps its promotion in the results folder
    (``promotion.json``); ``python -m harness.log`` logs the run, then moves the alias and writes
    the record onto the version, once: a second call finds the parent's tag and does nothing.
    Applying the same promotion again (a retry after a registry failure) leaves the alias where
    the first one put it instead of refusing because it moved. A real run (tracking off, as a
    run whose logging failed leaves it) and a real sqlite registry."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from harness.compare import CompareSpec, compare_pair
    from harness.promote import DONE_TAG, PROMOTION_FILE, apply_promotion, promotion_requests

    work = tmp_path / "work"
    work.mkdir()
    done = CLI.run(work, "experiment=quick", "progress=false", "compare=none", "tracking=none")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = work / re.search(r"^results: (.+)$", done.stdout, re.MULTILINE).group(1).strip()

    uri = f"sqlite:///{tmp_path / 'r.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("reco")
    for _ in range(3):
        client.create_model_version("reco", source=str(tmp_path))
    client.set_registered_model_alias("reco", "champion", "1")
    rng = np.random.default_rng(0)
    users = pd.Index(np.arange(300), name="user")
    base = pd.DataFrame({"ndcg@10": rng.uniform(0, 0.5, 300)}, index=users)
    pair = compare_pair(
        "base", "cand", (base, base + 0.1), ["ndcg@10"], CompareSpec(n_resamples=200)
    )
    result = SimpleNamespace(
        outcomes={
            "base": SimpleNamespace(info={"info.name": "reco", "info.version": 1}),
            "cand": SimpleNamespace(info={"info.name": "reco", "info.version": 3}),
        }
    )
    spec = promotion_requests(
        "champion", result, [pair], {"cand": _decision("cand", "GO")}, experiment="quick"
    )
    (folder / PROMOTION_FILE).write_text(json.dumps(spec))

    logged = CLI.run(work, str(folder), "--uri", uri, module="harness.log", timeout=300)
    assert logged.returncode == 0, logged.stderr[-3000:]
    parent = _parent(logged.stdout)
    assert (
        "promotion: models:/reco@champion -> version 3 (was version 1): GO against base"
        in logged.stdout.splitlines()
    )
    assert client.get_model_version_by_alias("reco", "champion").version == 3
    record = json.loads(client.get_model_version("reco", "3").tags[f"harness.eval.{parent}"])
    assert record["run"] == parent and record["action"] == "promoted" and record["date"]
    assert record["metrics"]["ndcg@10"]["lift"] == pytest.approx(
        0.1 / base["ndcg@10"].mean(), rel=1e-12
    )
    assert client.get_run(parent).data.tags[DONE_TAG] == "models:/reco/3 @champion: promoted"

    again = CLI.run(work, str(folder), "--uri", uri, module="harness.log", timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already logged" in again.stdout
    assert "promotion: already applied (models:/reco/3 @champion: promoted)" in again.stdout

    assert apply_promotion(json.loads((folder / PROMOTION_FILE).read_text()), uri, parent) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "promotion: models:/reco@champion -> version 3 (it already was): GO against base"
    )
    assert client.get_model_version_by_alias("reco", "champion").version == 3
    assert client.get_model_version("reco", "3").tags["harness.latest.promotion"] == (
        "@champion: already here"
    )
