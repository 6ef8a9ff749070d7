"""``python -m harness.compare`` against a real sqlite MLflow store filled by a real run of
``python -m harness experiment=quick``: one-line errors with exit 2 for an unknown run, a parent
run or a binary labels file; the main run's table, verdict and report otherwise; never "nan"."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support import HarnessCli, QuickRun

pytestmark = pytest.mark.slow
CLI = HarnessCli()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, quick_run: QuickRun) -> dict[str, object]:
    """The shared quick run (popularity, item_knn, random) and its sqlite store, copied to a tmp
    folder: the comparisons here log runs and write files, which the run's other readers must
    not see."""
    from mlflow import MlflowClient

    cwd = tmp_path_factory.mktemp("compare-cli") / "run"
    shutil.copytree(quick_run.cwd, cwd)
    done = quick_run.proc
    client = MlflowClient(f"sqlite:///{cwd}/runs/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("offline-eval").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {r.data.tags["model"]: r.info.run_id for r in runs if r is not parent}
    return {"cwd": cwd, "parent": parent.info.run_id, "children": children, "main": done.stdout}


def _compare(store: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    return CLI.run(store["cwd"], *args, timeout=600, module="harness.compare")


def test_unknown_run_id_is_one_line_exit_2(store) -> None:
    pop = store["children"]["popularity"]
    done = _compare(store, pop, "0123456789abcdef0123456789abcdef")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "error: no run with id '0123456789abcdef0123456789abcdef' at sqlite:///runs/mlflow.db"
    ]
    assert done.stdout == ""


def test_parent_run_id_lists_its_model_runs_exit_2(store) -> None:
    done = _compare(store, store["parent"], store["children"]["item_knn"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {store['parent']} is a parent run")
    for model, run_id in store["children"].items():
        assert f"{model} {run_id}" in lines[0]


def test_binary_labels_file_is_named(store) -> None:
    labels = Path(store["cwd"]) / "labels.csv"
    labels.write_bytes(b"unit,label\n\x00\x01\x02binary")
    kids = store["children"]
    done = _compare(store, kids["popularity"], kids["item_knn"], f"compare.human_labels={labels}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(labels) in lines[0] and "not a CSV text file" in lines[0]


def test_compare_prints_the_main_runs_table_and_writes_the_report(store) -> None:
    kids = store["children"]
    out = Path(store["cwd"]) / "cmp-report"
    done = _compare(store, kids["popularity"], kids["item_knn"], "--out", str(out))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "nan" not in text.lower()
    # the head line, gate lines and verdict line are the main run's, word for word
    main = str(store["main"]).splitlines()
    head = next(x for x in main if x.startswith("item_knn vs popularity: ΔGSB"))
    assert head in text.splitlines()
    gate_lines = [x for x in main if x.startswith("    ") and " — " in x]
    assert gate_lines and all(x in text.splitlines() for x in gate_lines)
    verdict = next(x for x in main if x.startswith("verdict: "))
    assert verdict.split(" (random")[0] in text  # the main run also names the sanity baseline
    # the model × metric rows are the main run's rows for these two models
    for model in ("popularity", "item_knn"):
        row = next(x for x in main if x.startswith(model + " "))
        assert row in text.splitlines()
    # lift as a percentage in the per-metric table
    ndcg = next(x for x in text.splitlines() if x.strip().startswith("ndcg@10"))
    assert "%" in ndcg
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert (out / "comparison.csv").is_file()
    assert "item_knn" in (out / "report.md").read_text()


def test_strict_gate_and_whole_run_metric_print_no_nan(store) -> None:
    kids = store["children"]
    done = _compare(store, kids["popularity"], kids["random"], "--gate", "strict")
    assert done.returncode == 0, done.stderr
    assert "nan" not in done.stdout.lower()
    cov = next(x for x in done.stdout.splitlines() if x.strip().startswith("coverage@10"))
    assert cov.split()[-1] == "-"  # a whole-run metric has no ΔGSB, p or CI: a dash
    default_out = Path(store["cwd"]) / "runs" / "results" / "compare"
    assert any((f / "report.html").is_file() for f in default_out.iterdir())


def test_a_run_compared_with_itself_says_so(store) -> None:
    """Two refs resolving to one model (here one run; in the registry, two aliases on one
    version) compare a model with itself: every difference is 0, and the output says why."""
    pop = store["children"]["popularity"]
    done = _compare(store, pop, pop)
    assert done.returncode == 0, done.stderr
    notes = [x for x in done.stdout.splitlines() if x.startswith("note: both sides")]
    assert notes == [f"note: both sides are run {pop}: the model is compared with itself"]


def test_one_registered_version_on_both_sides_is_named() -> None:
    """Two aliases pointing at one version: the note names the version and both URIs."""
    from types import SimpleNamespace

    from harness.compare.__main__ import _same_model

    def run(run_id: str, uri: str, version: str) -> SimpleNamespace:
        tags = {
            "model.info.name": "reco",
            "model.info.version": version,
            "model.info.model_uri": uri,
        }
        return SimpleNamespace(info=SimpleNamespace(run_id=run_id), data=SimpleNamespace(tags=tags))

    champion, challenger = run("a", "models:/reco@champion", "2"), run("b", "models:/reco@x", "2")
    assert _same_model([champion, challenger]) == (
        "both sides evaluated reco version 2 (models:/reco@champion and models:/reco@x): the "
        "model is compared with itself; check which version each alias points to"
    )
    assert _same_model([champion, run("b", "models:/reco@x", "3")]) is None
