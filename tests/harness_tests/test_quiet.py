"""The default run's output: status lines and a stage table, no third-party log lines, no bar
updates in a log; MLflow readable at a glance. (A multirun's table and sweep run are checked on
the multirun of ``test_runs_survive.py``, which the same checks would otherwise run again.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from support import LOG_LINE, QuickRun

from harness.progress import Stages

STAGES = ("load", "split", "candidates", "comparison", "report", "logging", "total")


def _stage_rows(stdout: str) -> dict[str, tuple[float, float]]:
    """The printed stage table as {stage: (seconds, peak MB)}."""
    lines = stdout.splitlines()
    start = next(
        i for i, line in enumerate(lines) if re.match(r"^stage\s+seconds\s+peak MB$", line)
    )
    rows = {}
    for line in lines[start + 1 :]:
        m = re.match(r"^(.+?)\s+(\d+\.\d)\s+(\d+)$", line)
        if not m:
            break
        rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return rows


def test_stage_table_lists_steps_in_order_with_a_total() -> None:
    stages = Stages(show=False)
    stages.add("load", 1.25)
    stages.add_model("knn", {"fit": 2.0, "rank": 0.5, "metrics": 0.25})
    rows = _stage_rows(stages.table())
    assert list(rows) == ["load", "knn fit", "knn rank", "knn metrics", "total"]
    assert rows["load"][0] in (1.2, 1.3)  # printed with one decimal
    assert rows["knn fit"][0] == 2.0 and rows["knn metrics"][0] in (0.2, 0.3)
    # peak memory never decreases down the table (ru_maxrss is a running maximum)
    peaks = [mb for _, mb in rows.values()]
    assert peaks == sorted(peaks) and peaks[0] > 0
    saved = stages.as_json()
    assert [r["stage"] for r in saved["stages"]] == ["load", "knn fit", "knn rank", "knn metrics"]


@pytest.mark.slow
def test_default_run_is_quiet_shows_steps_and_is_readable_in_mlflow(
    quick_run: QuickRun, tmp_path: Path
) -> None:
    # output to pipes (not a terminal), a fresh store in its folder, no MLFLOW_LOGGING_LEVEL
    done, cwd = quick_run.proc, quick_run.cwd
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    noisy = [line for line in output.splitlines() if LOG_LINE.search(line)]
    assert noisy == [], noisy
    # not a terminal: one status line per step, no progress-bar updates
    assert "\r" not in done.stderr and "it/s]" not in done.stderr and "%|" not in done.stderr
    for doing in ("loading the dataset", "splitting", "comparing", "writing the report", "logging"):
        assert f"… {doing}" in done.stderr, doing
    rows = _stage_rows(done.stdout)
    assert set(STAGES) <= set(rows), rows
    assert {"item_knn fit", "item_knn rank", "item_knn metrics"} <= set(rows)
    folder = cwd / re.search(r"^results: (.+)$", done.stdout, re.M).group(1).strip()
    saved = json.loads((folder / "stages.json").read_text())
    assert [r["stage"] for r in saved["stages"]] == [s for s in rows if s != "total"]

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd}/runs/mlflow.db")
    exp = client.get_experiment_by_name("offline-eval")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    # the printed link opens the runs table with the shared view the harness saved
    view = json.loads(exp.tags["mlflow.sharedViewState.harness"])
    assert view["selectedColumns"][:2] == ["metrics.`ndcg_at_10`", "tags.`decision`"]
    link = re.search(r"^  runs: (\S+)$", done.stdout, re.M).group(1)
    assert link.endswith(
        f"/#/experiments/{exp.experiment_id}/runs"
        "?workflowType=machine_learning&viewStateShareKey=harness"
    )
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if "model" not in r.data.tags)
    children = {r.data.tags["model"]: r for r in runs if "model" in r.data.tags}
    assert parent.info.run_name == "synthetic · global_time · 3 models"
    assert {r.info.run_name for r in children.values()} == {
        f"{m} · global_time · synthetic" for m in ("random", "popularity", "item_knn")
    }
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("verdict: "))
    note = parent.data.tags["mlflow.note.content"]
    assert note.splitlines()[0] == verdict
    overall = re.search(r"overall gate decision: (\w+)", done.stdout).group(1)
    assert parent.data.tags["decision"] == overall
    assert children["popularity"].data.tags["decision"] == "baseline"
    assert children["random"].data.tags["decision"] == "sanity (not gated)"
    assert {r.data.tags["mlflow.runType"] for r in children.values()} == {"evaluation"}
    assert (
        children["item_knn"].data.tags["decision"]
        == children["item_knn"].data.tags["gate.decision"]
    )
    for run in runs:
        tags = run.data.tags
        assert tags["mlflow.source.name"] == "python -m harness"
        assert tags["mlflow.source.type"] == "LOCAL"
        assert re.fullmatch(r"[0-9a-f]{40}", tags["mlflow.source.git.commit"])
        assert tags.get("mlflow.user")
    knn = children["item_knn"]
    # settings are params, not metrics; the headline metric is there under its short key
    settings = ("confidence", "n_resamples", "higher_is_better", "df")
    assert not [k for k in knn.data.metrics if k.rsplit(".", 1)[-1] in settings]
    assert knn.data.params["compare.confidence"] == "0.95"
    assert "ndcg_at_10" in knn.data.metrics
    assert len(knn.data.metrics) < 250
    # nothing lost: the whole comparison table is the run's comparison.json
    got = client.download_artifacts(knn.info.run_id, "comparison.json", str(tmp_path))
    table = json.loads(Path(got).read_text())
    row = next(r for r in table if r["segment"] == "all" and r["metric"] == "ndcg@10")
    assert row["confidence"] == 0.95 and row["higher_is_better"] in (True, 1)
    assert knn.data.metrics["compare.all.ndcg_at_10.lift"] == pytest.approx(row["lift"])
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "stages.json" in artifacts


@pytest.mark.slow
@pytest.mark.parametrize("progress", ["true", "false"])
def test_a_terminal_sees_a_status_line_before_the_libraries_load(
    harness_cli, tmp_path: Path, progress: str
) -> None:
    """On a terminal the first line says the run is starting (before the imports and Hydra's
    composition, seconds with no output otherwise); ``progress=false`` keeps it quiet."""
    import pty

    master, slave = pty.openpty()
    args = ("experiment=quick", "tracking=none", "compare=none", "model=[popularity]")
    proc = subprocess.Popen(
        harness_cli.command((*args, f"progress={progress}"), False, "harness"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=harness_cli.env(),
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=300) == 0
    os.close(master)
    lines = b"".join(chunks).decode().splitlines()
    starting = "… starting (loading libraries, composing the config)"
    if progress == "true":
        assert lines and lines[0] == starting, lines[:3]
    else:
        assert starting not in lines


def test_a_table_wider_than_the_terminal_has_models_as_columns() -> None:
    """metrics=full's 28 columns made a 300-character line: past the width, metrics are rows."""
    from harness.cli import _fit_table

    table = pd.DataFrame(
        {"ndcg@10": [0.25, 0.5], "coverage@10": [float("nan"), 1.0]}, index=["pop", "knn"]
    )
    wide = "     ndcg@10  coverage@10\npop   0.2500            -\nknn   0.5000       1.0000"
    assert _fit_table(table, width=25) == wide
    assert _fit_table(table, width=24) == (
        "               pop    knn\nndcg@10     0.2500 0.5000\ncoverage@10      - 1.0000"
    )
