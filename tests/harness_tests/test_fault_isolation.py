"""Plug-in classes by dotted path, and failing models that must not take the others down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from mlflow import MlflowClient


@pytest.fixture(scope="module")
def mixed(harness_cli, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """One quick run of popularity, two plug-ins by dotted path with parameters (``mine``:
    MostRecent over 60 days, ``year``: over 365 days) and two failing models; its process and
    working folder."""
    cwd = tmp_path_factory.mktemp("mixed")
    proc = harness_cli.run(
        cwd,
        "model=[popularity]",
        "+model.mine._target_=plugins.models.MostRecent",
        "+model.mine.window_days=60",
        "+model.year._target_=plugins.models.MostRecent",
        "+model.year.window_days=365",
        "+model.bad_fit._target_=plugins.models.FailsToFit",
        "+model.bad_build._target_=plugins.models.FailsToBuild",
        "+model.nothing._target_=plugins.models.RecommendsNothing",
        quick=True,
    )
    return proc, cwd


@pytest.mark.slow
def test_failing_models_leave_the_others_logged(mixed: tuple[Any, Path]) -> None:
    proc, tmp_path = mixed
    assert proc.returncode == 1, proc.stderr
    assert "model 'bad_fit' FAILED" in proc.stdout and "deliberate failure in fit" in proc.stdout
    assert (  # one line: the model's own error, not Hydra's wrapper around it
        "model 'bad_build' FAILED: could not build plugins.models.FailsToBuild (model.bad_build): "
        "ValueError: deliberate failure in __init__\n" in proc.stdout
    )
    # all padding: said in words, not as metrics.evaluate's "run is empty"
    assert "model 'nothing' FAILED" in proc.stdout
    assert "the model recommended no item to any of the " in proc.stdout
    assert "test users (every list was empty or padding): nothing to evaluate" in proc.stdout
    summary = pd.read_csv(next((tmp_path / "runs" / "results").rglob("summary.csv")), index_col=0)
    assert summary.loc["popularity"].notna().all() and summary.loc["mine"].notna().all()
    assert summary.loc["bad_fit"].isna().all()
    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    exp = client.get_experiment_by_name("offline-eval")
    runs = {r.data.tags.get("model", "parent"): r for r in client.search_runs([exp.experiment_id])}
    assert runs["popularity"].info.status == "FINISHED"
    assert runs["mine"].data.metrics["ndcg_at_10"] == pytest.approx(summary.loc["mine", "ndcg@10"])
    for bad in ("bad_fit", "bad_build"):
        assert runs[bad].info.status == "FAILED"
        assert (
            runs[bad].data.tags["status"] == "failed"
            and "deliberate" in runs[bad].data.tags["error"]
        )
    parents = [r for r in runs.values() if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FAILED"


@pytest.mark.slow
def test_plugin_class_from_a_package_with_parameters(mixed: tuple[Any, Path]) -> None:
    """The same run as above (the failing models beside it do not matter here): ``year`` is a
    plug-in class built with ``window_days=365``, fitted and evaluated."""
    proc, tmp_path = mixed
    assert "model 'year' FAILED" not in proc.stdout, proc.stdout
    summary = pd.read_csv(next((tmp_path / "runs" / "results").rglob("summary.csv")), index_col=0)
    assert summary.loc["year"].notna().all()
    # over a year-long window MostRecent is the global popularity ranking without exclusion of
    # seen items, so it can only do as well as or worse than popularity with exclusion
    assert summary.loc["year", "recall@10"] <= summary.loc["popularity", "recall@10"] + 1e-12
    assert summary.loc["year", "recall@10"] > 0
    # each plug-in kept its own parameter in the run's saved config
    saved = (next((tmp_path / "runs" / "results").rglob("config.yaml"))).read_text()
    assert "window_days: 365" in saved and "window_days: 60" in saved


def test_every_model_failing_ends_with_their_errors_not_a_traceback(
    harness_cli, tmp_path: Path
) -> None:
    proc = harness_cli.run(
        tmp_path,
        "model=[]",
        "+model.bad_fit._target_=plugins.models.FailsToFit",
        "compare=none",
        quick=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert "model 'bad_fit' FAILED" in proc.stdout and "Traceback" not in proc.stderr
    summary = pd.read_csv(next((tmp_path / "runs" / "results").rglob("summary.csv")), index_col=0)
    assert list(summary.index) == ["bad_fit"] and summary.loc["bad_fit"].isna().all()
    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    exp = client.get_experiment_by_name("offline-eval")
    (run,) = client.search_runs([exp.experiment_id], "tags.model = 'bad_fit'")
    assert run.info.status == "FAILED"


@pytest.mark.slow
def test_the_baseline_is_tagged_baseline_when_every_candidate_failed(
    harness_cli, tmp_path: Path
) -> None:
    """No pair was compared, yet the runs table still says which run is the baseline."""
    proc = harness_cli.run(
        tmp_path,
        "model=[popularity]",
        "+model.bad_fit._target_=plugins.models.FailsToFit",
        quick=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert "no gate decision: every candidate failed" in proc.stdout
    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    exp = client.get_experiment_by_name("offline-eval")
    runs = {r.data.tags.get("model"): r for r in client.search_runs([exp.experiment_id])}
    assert runs["popularity"].data.tags["decision"] == "baseline"
    assert runs["bad_fit"].data.tags["decision"] == "failed"
