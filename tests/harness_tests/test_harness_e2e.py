"""End-to-end: ``python -m harness`` in temporary folders, read back from disk and from MLflow.

Each run is a real subprocess (Hydra, models, metrics, a sqlite MLflow store) on small synthetic
data; independent runs are started concurrently to keep the module fast.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from support import HarnessCli

import harness.configs

SMALL = (
    "dataset.n_users=300",
    "dataset.n_items=200",
    "dataset.n_events=6000",
    "progress=false",
)
MODELS = ("random", "popularity", "item_knn")
ALL_MODELS = "model=[random,popularity,item_knn]"
CONFIG_DIR = Path(harness.configs.__file__).parent
METRICS = tuple(yaml.safe_load((CONFIG_DIR / "metrics" / "default.yaml").read_text())["names"])
EXPERIMENT = "offline-eval"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated"),
]


def run_cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``python -m harness ARGS`` in ``cwd``; output captured as text."""
    return HarnessCli().run(cwd, *args, timeout=timeout, env=env)


def run_many(jobs: dict[str, tuple[Path, Sequence[str]]]) -> dict[str, Any]:
    """Run independent CLI invocations concurrently; return their CompletedProcess by name."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_cli, cwd, *args) for name, (cwd, args) in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def results_folder(proc: subprocess.CompletedProcess[str], cwd: Path) -> Path:
    """The folder the run announced on stdout (``results: PATH``)."""
    found = re.findall(r"^results: (.+)$", proc.stdout, flags=re.MULTILINE)
    assert len(found) == 1, explain(proc)
    folder = cwd / found[0].strip()
    assert folder.is_dir(), folder
    return folder


def parent_id_of(proc: subprocess.CompletedProcess[str]) -> str:
    found = re.findall(r"parent run ([0-9a-f]{32})\b", proc.stdout)
    assert len(found) == 1, explain(proc)
    return found[0]


def key(metric: str) -> str:
    """The MLflow key the harness documents for a metric name: ``ndcg@10`` → ``ndcg_at_10``."""
    return metric.replace("@", "_at_")


def summary(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "summary.csv", index_col="model")


def mlflow_runs(cwd: Path) -> tuple[Any, list[Any], list[Any]]:
    """Client, parent runs and child runs of the experiment in ``cwd/runs/mlflow.db``."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd}/runs/mlflow.db")
    exp = client.get_experiment_by_name(EXPERIMENT)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    # a multirun's sweep run (no results folder) groups the jobs' parents: neither kind here
    parents = [r for r in runs if "results.folder" in r.data.tags and "model" not in r.data.tags]
    children = [r for r in runs if "model" in r.data.tags]
    return client, parents, children


# ------------------------------------------------------------- (a), (b): one folder, two runs


@dataclass
class LocalRuns:
    cwd: Path
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> LocalRuns:
    cwd = tmp_path_factory.mktemp("local")
    first = run_cli(cwd, *SMALL, ALL_MODELS)
    second = run_cli(cwd, *SMALL, ALL_MODELS, "split=leave_one_out")
    return LocalRuns(cwd, first, second)


def test_run_exits_0_and_writes_results(local: LocalRuns) -> None:
    proc = local.first
    assert proc.returncode == 0, explain(proc)
    assert (local.cwd / "runs" / "mlflow.db").is_file()
    folder = results_folder(proc, local.cwd)
    assert folder.is_relative_to(local.cwd / "runs" / "results")
    for name in ("summary.csv", "split_stats.json", "config.yaml", "metric_options.json"):
        assert (folder / name).is_file(), name
    for model in MODELS:
        for name in ("per_user.parquet", "topk.parquet", "result.json"):
            assert (folder / model / name).is_file(), f"{model}/{name}"
    table = summary(folder)
    assert list(table.index) == list(MODELS)
    assert list(table.columns) == list(METRICS)
    assert table.notna().all(axis=None)
    # every pair's comparison table: its means on all users are the summary's numbers
    compared = pd.read_csv(folder / "comparison.csv")
    assert set(compared["baseline"]) == {"popularity"}
    assert set(compared["candidate"]) == {"random", "item_knn"}
    whole = compared[(compared["segment"] == "all") & (compared["dropped"] == 0)]
    assert set(whole["metric"]) >= {"ndcg@10", "recall@10"}
    for _, row in whole[whole["kind"] == "per-user"].iterrows():
        assert row["mean_a"] == pytest.approx(table.loc["popularity", row["metric"]], abs=1e-12)
        assert row["mean_b"] == pytest.approx(table.loc[row["candidate"], row["metric"]], abs=1e-12)
    # the saved config is the composed one, resolved
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert saved["split"]["method"] == "global_time"
    assert saved["dataset"]["n_users"] == 300


def test_run_prints_model_by_metric_table(local: LocalRuns) -> None:
    proc = local.first
    lines = proc.stdout.splitlines()
    header = [i for i, line in enumerate(lines) if line.split() == list(METRICS)]
    assert len(header) == 1, explain(proc)
    table = summary(results_folder(proc, local.cwd))
    rows = lines[header[0] + 1 : header[0] + 1 + len(MODELS)]
    for model, line in zip(MODELS, rows, strict=True):
        name, *cells = line.split()
        assert name == model
        assert len(cells) == len(METRICS)
        for metric, cell in zip(METRICS, cells, strict=True):
            assert float(cell) == pytest.approx(table.loc[model, metric], abs=5.1e-5)


def test_mlflow_parent_and_one_child_per_model(local: LocalRuns) -> None:
    client, parents, children = mlflow_runs(local.cwd)
    parent_id = parent_id_of(local.first)
    assert parent_id in {p.info.run_id for p in parents}
    mine = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent_id]
    assert sorted(c.data.tags["model"] for c in mine) == sorted(MODELS)
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert all(c.info.status == "FINISHED" for c in mine)

    table = summary(results_folder(local.first, local.cwd))
    for child in mine:
        model = child.data.tags["model"]
        assert child.data.tags.get("model") == model
        for metric in METRICS:
            assert key(metric) in child.data.metrics, (model, metric)
            assert child.data.metrics[key(metric)] == pytest.approx(
                table.loc[model, metric], rel=1e-12, abs=1e-15
            ), (model, metric)
            # the parent holds the same summary under model.metric
            assert parent.data.metrics[f"{model}.{key(metric)}"] == pytest.approx(
                table.loc[model, metric], rel=1e-12, abs=1e-15
            )
        assert not any("@" in k for k in child.data.metrics)
        artifacts = {f.path for f in client.list_artifacts(child.info.run_id)}
        assert {"per_user.parquet", "topk.parquet"} <= artifacts, (model, artifacts)
        assert child.data.params.get("model._target_", "").startswith("harness.models.")


def test_mlflow_params_tags_and_dataset_inputs(local: LocalRuns) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{local.cwd}/runs/mlflow.db")
    parent = client.get_run(parent_id_of(local.first))
    params, tags = parent.data.params, parent.data.tags
    # the flattened, resolved config
    assert params["split.method"] == "global_time"
    assert params["split.cut"] == "0.8"
    assert params["dataset.n_users"] == "300"
    assert params["metrics.k"] == "10"
    assert params["model.item_knn.k_neighbors"] == "100"
    assert params["seed"] == "0"
    assert re.fullmatch(r"[0-9a-f]{64}", tags["dataset.sha256"]), tags
    assert re.fullmatch(r"[0-9a-f]{64}", tags["split.sha256"]), tags
    folder = results_folder(local.first, local.cwd)
    assert f"-{tags['split.sha256'][:8]}-" in folder.name
    assert Path(tags["results.folder"]) == folder.resolve()
    assert tags["split.method"] == "global_time"

    stats = json.loads((folder / "split_stats.json").read_text())
    assert parent.data.metrics["split.n_test_events"] == stats["n_test_events"]
    assert parent.data.metrics["split.n_train_events"] == stats["n_train_events"]
    assert stats["n_train_events"] + stats["n_test_events"] <= 6000

    inputs = client.get_run(parent.info.run_id).inputs.dataset_inputs
    contexts = {t.value: i for i in inputs for t in i.tags if t.key == "mlflow.data.context"}
    assert set(contexts) == {"training", "test"}
    for context, n_key in (("training", "n_train_events"), ("test", "n_test_events")):
        dataset = contexts[context].dataset
        assert dataset.name == f"synthetic-{context}"
        assert dataset.digest
        assert json.loads(dataset.profile)["num_rows"] == stats[n_key]


def test_second_run_in_same_folder_is_a_second_parent(local: LocalRuns) -> None:
    proc = local.second
    assert proc.returncode == 0, explain(proc)
    client, parents, _ = mlflow_runs(local.cwd)
    assert len(parents) == 2
    first = client.get_run(parent_id_of(local.first))
    second = client.get_run(parent_id_of(local.second))
    assert second.info.run_id != first.info.run_id
    assert second.data.tags["split.method"] == "leave_one_out"
    assert second.data.params["split.method"] == "leave_one_out"
    # same data, different split
    assert second.data.tags["dataset.sha256"] == first.data.tags["dataset.sha256"]
    assert second.data.tags["split.sha256"] != first.data.tags["split.sha256"]
    children = client.search_runs(
        [second.info.experiment_id], f"tags.mlflow.parentRunId = '{second.info.run_id}'"
    )
    assert sorted(c.data.tags["model"] for c in children) == sorted(MODELS)

    folder = results_folder(proc, local.cwd)
    assert folder != results_folder(local.first, local.cwd)
    stats = json.loads((folder / "split_stats.json").read_text())
    # leave-one-out: exactly one test event per test user
    assert stats["n_test_events"] == stats["n_test_users"] > 0
    m = second.data.metrics
    assert m["split.n_test_events"] == m["split.n_test_users"] == stats["n_test_users"]
    # and per test user, the top-k list and the per-user metrics are there
    per_user = pd.read_parquet(folder / "popularity" / "per_user.parquet")
    assert len(per_user) == stats["n_test_users"]
    # with one relevant item, recall@10 is 0 or 1 and precision@10 is 0 or 0.1
    assert set(per_user["recall@10"].unique()) <= {0.0, 1.0}
    assert set(per_user["precision@10"].round(12).unique()) <= {0.0, 0.1}


def test_popularity_beats_random(local: LocalRuns) -> None:
    table = summary(results_folder(local.first, local.cwd))
    for metric in ("ndcg@10", "recall@10"):
        assert table.loc["popularity", metric] > table.loc["random", metric], table


# ---------------------------------------------------- (c), (g): reproducibility, tracking=none


@pytest.fixture(scope="module")
def untracked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    base = tmp_path_factory.mktemp("untracked")
    # the same config run again is ``local.first`` (tracked): see the two tests below
    jobs = {
        "one": (base / "one", (*SMALL, ALL_MODELS, "tracking=none")),
        "seed1": (base / "seed1", (*SMALL, ALL_MODELS, "tracking=none", "seed=1")),
    }
    procs = run_many(jobs)
    return {name: (jobs[name][0], proc) for name, proc in procs.items()}


def test_same_config_gives_identical_results(
    local: LocalRuns, untracked: dict[str, tuple[Path, Any]]
) -> None:
    """Two processes, two folders, the same config (one tracked, which must not change a number
    either): the same tables, top-k lists and split."""
    (cwd1, p1), (cwd2, p2) = untracked["one"], (local.cwd, local.first)
    assert p1.returncode == 0, explain(p1)
    assert p2.returncode == 0, explain(p2)
    f1, f2 = results_folder(p1, cwd1), results_folder(p2, cwd2)
    pd.testing.assert_frame_equal(summary(f1), summary(f2), check_exact=True)
    for model in MODELS:
        pd.testing.assert_frame_equal(
            pd.read_parquet(f1 / model / "topk.parquet"),
            pd.read_parquet(f2 / model / "topk.parquet"),
            check_exact=True,
        )
    assert json.loads((f1 / "split_stats.json").read_text()) == json.loads(
        (f2 / "split_stats.json").read_text()
    )


def test_tracking_does_not_change_the_numbers(
    local: LocalRuns, untracked: dict[str, tuple[Path, Any]]
) -> None:
    cwd, proc = untracked["one"]
    pd.testing.assert_frame_equal(
        summary(results_folder(proc, cwd)),
        summary(results_folder(local.first, local.cwd)),
        check_exact=True,
    )


def test_another_seed_gives_other_data_and_numbers(
    untracked: dict[str, tuple[Path, Any]],
) -> None:
    (cwd0, p0), (cwd1, p1) = untracked["one"], untracked["seed1"]
    assert p1.returncode == 0, explain(p1)
    a, b = summary(results_folder(p0, cwd0)), summary(results_folder(p1, cwd1))
    assert (a != b).any(axis=None)


def test_tracking_none_writes_results_but_no_store(untracked: dict[str, tuple[Path, Any]]) -> None:
    cwd, proc = untracked["one"]
    assert proc.returncode == 0, explain(proc)
    assert not (cwd / "runs" / "mlflow.db").exists()
    assert not list(cwd.rglob("*.db"))
    assert not (cwd / "runs" / "artifacts").exists()
    assert not (cwd / "mlruns").exists()
    folder = results_folder(proc, cwd)
    assert (folder / "summary.csv").is_file()
    assert "MLflow" not in proc.stdout


# -------------------------------------------------------------------------------- (e) multirun


def test_multirun_creates_one_parent_per_job(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "-m", "split=global_time,leave_one_out", *SMALL, "model=popularity")
    assert proc.returncode == 0, explain(proc)
    _, parents, children = mlflow_runs(tmp_path)
    assert sorted(p.data.tags["split.method"] for p in parents) == ["global_time", "leave_one_out"]
    assert all(p.info.status == "FINISHED" for p in parents)
    assert sorted(c.data.tags["mlflow.parentRunId"] for c in children) == sorted(
        p.info.run_id for p in parents
    )
    assert {c.data.tags["model"] for c in children} == {"popularity"}
    folders = list((tmp_path / "runs" / "results" / EXPERIMENT).iterdir())
    assert len(folders) == 2
    assert all((f / "summary.csv").is_file() for f in folders)


# --------------------------------------------------------------------------- (f) bad input


HEADER = "user,item,timestamp,rating\n"
GOOD = "1,10,1700000000,4\n1,11,1700000100,3\n2,10,1700000200,5\n"
BAD_FILES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # case: (file content, extra overrides, words the one-line message must contain)
    "missing_column": ("user,timestamp,rating\n1,1700000000,4\n", (), ("'item'",)),
    "null_user": (HEADER + GOOD + ",12,1700000300,4\n", (), ("'user'", "null")),
    "bad_timestamp": (HEADER + GOOD + "3,12,not a date,4\n", (), ("'timestamp'", "not a date")),
    "rating_out_of_range": (
        HEADER + GOOD + "3,12,1700000300,7\n",
        ("dataset.rating_range=[1,5]",),
        ("'rating'", "7"),
    ),
    "duplicate_events": (
        HEADER + GOOD + "2,10,1700000200,5\n",
        (),
        ("'user'", "'item'", "'timestamp'", "duplicate"),
    ),
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("bad")
    jobs: dict[str, tuple[Path, Sequence[str]]] = {}
    for case, (content, extra, _) in BAD_FILES.items():
        path = base / f"{case}.csv"
        path.write_text(content)
        args = ("dataset=file", f"dataset.path={path}", *extra, "progress=false")
        jobs[case] = (base / case, args)
    jobs["debug"] = (
        base / "debug",
        ("dataset=file", f"dataset.path={base / 'null_user.csv'}", "debug=true", "progress=false"),
    )
    jobs["missing_file"] = (
        base / "missing_file",
        ("dataset=file", f"dataset.path={base / 'no_such_file.csv'}", "progress=false"),
    )
    jobs["no_path"] = (base / "no_path", ("dataset=file", "progress=false"))
    procs = run_many(jobs)
    procs["base"] = base
    return procs


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, explain(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, explain(proc)
    assert lines[0].startswith("error:"), explain(proc)
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_data_file_is_one_line_error_exit_2(case: str, bad_runs: dict[str, Any]) -> None:
    line = assert_one_line_error(bad_runs[case])
    assert str(bad_runs["base"] / f"{case}.csv") in line
    for word in BAD_FILES[case][2]:
        assert word in line, (word, line)
    # nothing was evaluated
    assert not (bad_runs["base"] / case / "runs" / "results").exists()


def test_missing_file_is_one_line_error_exit_2(bad_runs: dict[str, Any]) -> None:
    line = assert_one_line_error(bad_runs["missing_file"])
    assert str(bad_runs["base"] / "no_such_file.csv") in line


def test_debug_shows_the_traceback(bad_runs: dict[str, Any]) -> None:
    proc = bad_runs["debug"]
    assert proc.returncode != 0, explain(proc)
    assert "Traceback" in proc.stderr, explain(proc)
    assert "DataError" in proc.stderr
    assert "'user'" in proc.stderr


def test_file_dataset_without_path_names_the_setting(bad_runs: dict[str, Any]) -> None:
    line = assert_one_line_error(bad_runs["no_path"])
    assert "dataset.path" in line


# ------------------------------------------------------------- (h) unreachable tracking server


def test_unreachable_tracking_server_keeps_results_exit_3(tmp_path: Path) -> None:
    # A bound socket that never listens: connections to it are refused for the whole test.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        proc = run_cli(
            tmp_path,
            *SMALL,
            "model=popularity",
            "tracking=server",
            f"tracking.uri=http://127.0.0.1:{port}",
            env={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"},
            timeout=120,
        )
    assert proc.returncode == 3, explain(proc)
    folder = results_folder(proc, tmp_path)
    assert (folder / "summary.csv").is_file()
    assert (folder / "popularity" / "per_user.parquet").is_file()
    assert "results are kept" in proc.stderr
    assert str(folder.relative_to(tmp_path)) in proc.stderr
    assert f"127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "mlflow.db").exists()
