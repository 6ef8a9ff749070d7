"""Runs never collide, survive interruption and can be logged later (issue 14).

Real components: the CLI in subprocesses, a real sqlite MLflow store, a real ``mlflow server``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from support import LOG_LINE, HarnessCli, MlflowServer, free_port

from harness.folders import (
    COMPLETE,
    INCOMPLETE,
    allocate,
    is_complete,
    mark_complete,
    safe_component,
    usable_runs_dir,
)
from harness.split import load_or_make_split, split_cache_key

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

QUICK = ["experiment=quick", "progress=false", "compare=none"]


CLI = HarnessCli()


def _log(folder: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return CLI.run(cwd, str(folder), *args, module="harness.log")


def _folder_of(stdout: str, cwd: Path) -> Path:
    return cwd / re.search(r"^results: (.+)$", stdout, re.MULTILINE).group(1).strip()


def _wait_paused(proc: subprocess.Popen[str], stage: str) -> list[str]:
    """Read the child's stderr until it says it paused at ``stage``; return the lines read."""
    lines = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if line.strip() == f"harness: paused at {stage}":
            return lines
    proc.wait()
    pytest.fail(f"never paused at {stage!r} (exit {proc.returncode}):\n{''.join(lines)}")


def _interrupted(
    cwd: Path, stage: str, sig: signal.Signals, exit_code: int, *overrides: str
) -> tuple[str, str]:
    """Run the quick experiment (local tracking) with ``overrides``, send ``sig`` once it pauses
    at ``stage``, check it exits with ``exit_code``; return its stdout and its one error line."""
    stopped = CLI.stopped_at(cwd, stage, sig, *QUICK, "tracking=local", *overrides)
    assert stopped.returncode == exit_code, stopped.stderr
    return stopped.stdout, _one_error_line(stopped.stderr)


def _one_error_line(stderr: str) -> str:
    """The only ``error:`` line; no traceback anywhere."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def _runs(uri: str, experiment: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


def _parents(runs: list) -> list:
    return [r for r in runs if "results.folder" in r.data.tags and "model" not in r.data.tags]


# -------------------------------------------------------------------------- fast, in-process


def test_safe_component_never_leaves_the_parent(tmp_path: Path) -> None:
    cases = {
        "offline-eval": "offline-eval",
        "../../x": "x",
        "/abs/path/exp": "abs_path_exp",
        "..": "run",
        ".hidden": "hidden",
        "a\\b": "a_b",
        "": "run",
        "exp v2": "exp_v2",
    }
    for name, expected in cases.items():
        got = safe_component(name)
        assert got == expected, name
        assert (tmp_path / got).resolve().parent == tmp_path.resolve()


def test_allocate_gives_distinct_folders_in_the_same_second(tmp_path: Path) -> None:
    got = {allocate(tmp_path, "exp", "a" * 64, "20240101-000000") for _ in range(50)}
    assert len(got) == 50
    for folder in got:
        assert folder.parent == tmp_path / "results" / "exp"
        assert folder.name.startswith("20240101-000000-aaaaaaaa-")
        assert (folder / INCOMPLETE).read_text() == "stage: starting\n"
        assert not is_complete(folder)
    one = sorted(got)[0]
    mark_complete(one)
    assert is_complete(one) and not (one / INCOMPLETE).exists() and (one / COMPLETE).is_file()


@pytest.mark.parametrize("name", ["../../x", "/tmp/elsewhere", "../..", "a/../../b"])
def test_allocate_stays_inside_runs_dir(tmp_path: Path, name: str) -> None:
    runs = tmp_path / "deep" / "runs"
    folder = allocate(runs, name, "b" * 64, "20240101-000000")
    assert folder.resolve().is_relative_to((runs / "results").resolve())
    assert folder.parent.parent == runs / "results"
    assert sorted(p for p in tmp_path.rglob("*") if p.is_dir()) == sorted(
        [tmp_path / "deep", runs, runs / "results", folder.parent, folder]
    )


def test_usable_runs_dir_names_the_path(tmp_path: Path) -> None:
    assert usable_runs_dir(tmp_path / "new") is None
    (tmp_path / "afile").write_text("x")
    problem = usable_runs_dir(tmp_path / "afile")
    assert problem is not None and str(tmp_path / "afile") in problem
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results").write_text("x")
    problem = usable_runs_dir(tmp_path / "r")
    assert problem is not None and str(tmp_path / "r" / "results") in problem


def _frame() -> pd.DataFrame:
    users = [u for u in range(40) for _ in range(5)]
    return pd.DataFrame(
        {
            "user": users,
            "item": [(u * 7 + i) % 30 for u, i in zip(users, range(200), strict=True)],
            "timestamp": range(200),
        }
    )


def test_split_cache_keeps_a_complete_folder_another_run_published(tmp_path: Path) -> None:
    df = _frame()
    params = {"test_ratio": 0.2}
    first = load_or_make_split(df, "user_time", params, tmp_path)
    key = split_cache_key(df, "user_time", params)
    target = tmp_path / key
    before = {p.name: p.stat().st_ino for p in target.iterdir()}
    # Another run that did not see the cache yet publishes its own copy: ours must stay.
    from harness.split import _publish

    tmp = tmp_path / ".tmp-other"
    tmp.mkdir()
    (tmp / "split.json").write_text("{}")
    _publish(tmp, target)
    assert {p.name: p.stat().st_ino for p in target.iterdir()} == before
    again = load_or_make_split(df, "user_time", params, tmp_path)
    pd.testing.assert_frame_equal(again.test, first.test)
    # A stale folder without split.json (an older version's leftover) is replaced.
    (target / "split.json").unlink()
    third = load_or_make_split(df, "user_time", params, tmp_path)
    pd.testing.assert_frame_equal(third.train, first.train)
    assert not list(tmp_path.glob(".stale-*"))


def test_store_created_by_several_processes_at_once(tmp_path: Path) -> None:
    """Three processes open the same empty sqlite store and experiment together."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from harness.tracking import Tracker\n"
        "Path(sys.argv[3]).write_text('')\n"
        "while not Path(sys.argv[2]).exists(): time.sleep(0.01)\n"
        "t = Tracker(sys.argv[1], 'race')\n"
        "print(t.experiment_id)\n"
    )
    uri = f"sqlite:///{tmp_path}/store/m.db"
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, uri, str(go), str(flag)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    # once every process has imported MLflow (or one has died), release them together
    while not all(f.exists() for f in ready) and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    go.write_text("")
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 3, outs
    assert len({out.strip() for out, _ in outs}) == 1
    from mlflow import MlflowClient

    names = [e.name for e in MlflowClient(uri).search_experiments()]
    assert sorted(names) == ["Default", "race"]


# ------------------------------------------------------------------------------ the CLI


def test_a_sweep_exits_with_its_most_serious_job_code() -> None:
    """NO_GO (10) outranks no decision (12) and INCONCLUSIVE (11) though its number is lower
    (the largest number made a NO_GO + INCONCLUSIVE sweep exit 11); the gate's codes outrank a
    failed model (1), a bad setting (2) and a failed logging (3), as in one run."""
    from harness.cli import severity

    def worst(*codes: int) -> int:
        return max(codes, key=severity)

    assert worst(10, 11) == worst(11, 10) == 10
    assert worst(12, 11) == 12 and worst(10, 12) == 10
    assert worst(0, 1) == 1 and worst(1, 2) == 2 and worst(2, 3) == 3
    assert worst(3, 11) == 11 and worst(2, 10) == 10 and worst(10, 130) == 130


@pytest.mark.slow
def test_a_failed_multirun_job_is_a_row_of_the_table(tmp_path: Path) -> None:
    """A job stopped by a bad setting is listed with its error and exit code (it was left out,
    and the table said "1 jobs"); the sweep exits with the worst code."""
    proc = CLI.run(
        tmp_path, "-m", "experiment=quick", "tracking=none", "compare.segments=true,false"
    )
    assert proc.returncode == 2, proc.stderr
    table = proc.stdout.split("multirun: 2 jobs\n", 1)[1].splitlines()
    ok, failed = table[1], table[2]
    assert "compare.segments=true" in ok and re.search(r" (GO|NO_GO|INCONCLUSIVE) ", ok), ok
    assert re.search(r"\s0\s+\S*results", ok), ok
    assert "compare.segments=false" in failed
    assert (
        "error: gate.guardrails[1].segment='cold' needs compare.segments=true (or drop the rule)"
        "  FAILED  2" in re.sub(r" {2,}", "  ", failed)
    ), failed


@pytest.mark.slow
def test_multirun_jobs_get_their_own_folders_and_log_their_own_files(tmp_path: Path) -> None:
    """Three jobs: their own folders and logged files; no library log lines (output to pipes,
    progress left at its default), one table at the end and one sweep run grouping the jobs."""
    proc = CLI.run(
        tmp_path,
        "-m",
        "experiment=quick",
        "compare=none",
        "tracking=local",
        "name=multi",
        "model=popularity,random,item_knn",
        "debug=false",  # shown as typed, not as Hydra re-writes it for a job (debug=False)
    )
    assert proc.returncode == 0, proc.stderr
    assert not [line for line in (proc.stdout + proc.stderr).splitlines() if LOG_LINE.search(line)]
    lines = [p.strip() for p in re.findall(r"^results: (.+)$", proc.stdout, re.M)]
    printed = [tmp_path / p for p in lines]
    assert len(set(printed)) == 3
    table = proc.stdout.split("multirun: 3 jobs\n", 1)[1].splitlines()
    assert table[0].split() == ["job", "overrides", "headline", "decision", "exit", "results"]
    for row, model, folder in zip(
        table[1:4], ("popularity", "random", "item_knn"), lines, strict=True
    ):
        assert f"model={model}" in row and folder in row, row
        assert "debug=false" in row, row
    folders = sorted((tmp_path / "runs" / "results" / "multi").iterdir())
    assert sorted(printed) == folders
    by_model = {}
    for folder in folders:
        assert is_complete(folder)
        summary = pd.read_csv(folder / "summary.csv", index_col="model")
        assert len(summary) == 1
        by_model[summary.index[0]] = folder
    assert set(by_model) == {"popularity", "random", "item_knn"}

    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/runs/mlflow.db"
    client = MlflowClient(uri)
    runs = _runs(uri, "multi")
    parents = _parents(runs)
    assert len(parents) == 3
    (sweep,) = [r for r in runs if "results.folder" not in r.data.tags]
    assert all(j.data.tags["mlflow.parentRunId"] == sweep.info.run_id for j in parents)
    assert {j.data.tags["harness.sweep_id"] for j in parents} == {
        sweep.data.tags["harness.sweep_id"]
    }
    assert sweep.info.run_id in proc.stdout
    assert "model=random" in sweep.data.tags["mlflow.note.content"]
    for parent in parents:
        folder = Path(parent.data.tags["results.folder"])
        dst = tmp_path / "dl" / parent.info.run_id
        dst.mkdir(parents=True)
        logged = client.download_artifacts(parent.info.run_id, "summary.csv", str(dst))
        assert Path(logged).read_text() == (folder / "summary.csv").read_text()
        (model,) = pd.read_csv(logged, index_col="model").index
        assert by_model[model] == folder
        config = client.download_artifacts(parent.info.run_id, "config.yaml", str(dst))
        assert Path(config).read_text() == (folder / "config.yaml").read_text()
        assert f"model:\n  {model}:" in Path(config).read_text()
    # a job's results folder logged again later still finds its (now nested) parent run
    again = _log(printed[0], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(_runs(uri, "multi")) == len(runs)


@pytest.mark.slow
def test_two_runs_at_once_on_an_empty_folder(tmp_path: Path) -> None:
    args = [*QUICK, "tracking=local", "name=same"]
    procs = [
        CLI.start(tmp_path, *args, "model=[popularity,item_knn]"),
        CLI.start(tmp_path, *args, "model=[popularity,random]"),
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    folders = [_folder_of(out, tmp_path) for out, _ in outs]
    assert folders[0] != folders[1]
    assert sorted((tmp_path / "runs" / "results" / "same").iterdir()) == sorted(folders)
    expected = [{"popularity", "item_knn"}, {"popularity", "random"}]
    for folder, models in zip(folders, expected, strict=True):
        assert set(pd.read_csv(folder / "summary.csv", index_col="model").index) == models
    assert [p.name for p in (tmp_path / "runs").glob("*.db")] == ["mlflow.db"]
    assert len([p for p in (tmp_path / "runs" / "splits").iterdir()]) == 1  # one shared split

    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/runs/mlflow.db"
    client = MlflowClient(uri)
    parents = _parents(_runs(uri, "same"))
    assert len(parents) == 2
    for parent in parents:
        folder = Path(parent.data.tags["results.folder"])
        dst = tmp_path / "dl" / parent.info.run_id
        dst.mkdir(parents=True)
        logged = client.download_artifacts(parent.info.run_id, "summary.csv", str(dst))
        assert Path(logged).read_text() == (folder / "summary.csv").read_text()


@pytest.mark.slow
def test_sigterm_while_models_run_marks_the_folder_incomplete(tmp_path: Path) -> None:
    _, line = _interrupted(
        tmp_path, "models", signal.SIGTERM, 143, "name=../../escape", "model=[popularity]"
    )
    assert "interrupted by SIGTERM during models" in line and "INCOMPLETE" in line
    (folder,) = (tmp_path / "runs" / "results" / "escape").iterdir()  # inside runs_dir
    assert (folder / INCOMPLETE).read_text() == ("stage: models\nreason: interrupted by SIGTERM\n")
    assert not (folder / COMPLETE).exists()
    assert not list(tmp_path.parent.glob("escape")) and not (tmp_path / "escape").exists()
    refused = _log(folder, cwd=tmp_path)
    assert refused.returncode == 2
    assert _one_error_line(refused.stderr).startswith(f"error: {folder} is INCOMPLETE")
    assert f"finish it with the same command and resume={folder}" in refused.stderr


@pytest.mark.slow
def test_sigint_while_logging_ends_runs_killed_and_harness_log_completes(tmp_path: Path) -> None:
    out, line = _interrupted(
        tmp_path, "logging random", signal.SIGINT, 130, "name=intr", "model=[popularity,random]"
    )
    assert "interrupted by SIGINT during logging random" in line
    assert "2 MLflow run(s) ended as KILLED" in line
    folder = _folder_of(out, tmp_path)
    assert is_complete(folder)

    uri = f"sqlite:///{tmp_path}/runs/mlflow.db"
    runs = {r.data.tags.get("model", r.info.run_name): r for r in _runs(uri, "intr")}
    assert len(runs) == 3
    (parent,) = _parents(list(runs.values()))
    assert parent.info.status == "KILLED"
    assert runs["random"].info.status == "KILLED"
    assert runs["popularity"].info.status == "FINISHED"

    logged = _log(folder, cwd=tmp_path)
    assert logged.returncode == 0, logged.stderr
    assert "completed the partly logged run" in logged.stdout
    _assert_logged_once(uri, "intr", folder, parent.info.run_id)
    again = _log(folder, cwd=tmp_path)
    assert again.returncode == 0 and "already logged, nothing to do" in again.stdout
    _assert_logged_once(uri, "intr", folder, parent.info.run_id)


def _assert_logged_once(uri: str, experiment: str, folder: Path, parent_id: str) -> None:
    """One parent (the given one) and one finished child per model, metrics equal to the
    folder's summary.csv."""
    runs = _runs(uri, experiment)
    (parent,) = _parents(runs)
    assert parent.info.run_id == parent_id
    assert parent.info.status == "FINISHED"
    assert (
        parent.data.tags["harness.folder_id"] == json.loads((folder / "run.json").read_text())["id"]
    )
    summary = pd.read_csv(folder / "summary.csv", index_col="model")
    children = {r.data.tags["model"]: r for r in runs if r is not parent}
    assert set(children) == set(summary.index)
    for name, child in children.items():
        assert child.info.status == "FINISHED"
        assert child.data.tags["mlflow.parentRunId"] == parent_id
        for metric, value in summary.loc[name].items():
            assert child.data.metrics[metric.replace("@", "_at_")] == pytest.approx(value, 1e-12)
            assert parent.data.metrics[f"{name}.{metric}".replace("@", "_at_")] == pytest.approx(
                value, 1e-12
            )


def test_unusable_runs_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder")
    proc = CLI.run(tmp_path, *QUICK, "tracking=none", "runs_dir=afile")
    assert proc.returncode == 2
    assert "afile" in _one_error_line(proc.stderr)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "results").write_text("not a folder")
    proc = CLI.run(tmp_path, *QUICK, "tracking=none")
    assert proc.returncode == 2
    assert "runs/results" in _one_error_line(proc.stderr)
    (tmp_path / "runs" / "results").unlink()
    (tmp_path / "runs" / "results").mkdir()
    (tmp_path / "runs" / "results" / "blocked").write_text("a file where the name folder goes")
    proc = CLI.run(tmp_path, *QUICK, "tracking=none", "name=blocked", "model=[popularity]")
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    assert "runs/results/blocked" in line and "a file is in the way" in line


def test_full_disk_is_one_line(tmp_path: Path) -> None:
    """Writes fail as on a full disk: a file-size limit (EFBIG, like ENOSPC an OSError on write;
    Python ignores SIGXFSZ) stops the split cache from being written."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    proc = subprocess.run(
        CLI.command((*QUICK, "tracking=none", "model=[popularity]"), False, "harness"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=CLI.env(),
        preexec_fn=limit,
    )
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert line.startswith("error: cannot write under runs:") and "File too large" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_runs_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        proc = CLI.run(tmp_path, *QUICK, "tracking=none", "runs_dir=ro")
    finally:
        (tmp_path / "ro").chmod(0o755)
    assert proc.returncode == 2
    assert "ro" in _one_error_line(proc.stderr)


# ------------------------------------------------------------------- a real tracking server


@pytest.mark.slow
def test_server_stopped_mid_logging_then_harness_log_recovers(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    server = mlflow_server
    work, resume = tmp_path / "work", tmp_path / "resume"
    work.mkdir()
    proc = CLI.start(
        work,
        *QUICK,
        "tracking=server",
        f"tracking.uri={server.url}",
        "name=lost",
        "model=[popularity,random]",
        env={
            "HARNESS_TEST_PAUSE_AT": "logging random",
            "HARNESS_TEST_RESUME_FILE": str(resume),
            # the same retries, without urllib3's 2 s and 4 s sleeps between them (idle time:
            # what is checked is the exit code, the error line and the recovery, not the wait)
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
        },
    )
    _wait_paused(proc, "logging random")
    server.stop()
    resume.write_text("")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 3, err
    line = _one_error_line(err)
    folder = _folder_of(out, work)
    assert f"python -m harness.log {folder.relative_to(work)}" in line
    assert is_complete(folder)

    server.start()
    before = _runs(server.url, "lost")
    assert len(_parents(before)) == 1 and _parents(before)[0].info.status == "RUNNING"
    parent_id = _parents(before)[0].info.run_id
    logged = _log(folder, cwd=work)
    assert logged.returncode == 0, logged.stderr
    _assert_logged_once(server.url, "lost", folder, parent_id)
    again = _log(folder, cwd=work)
    assert again.returncode == 0 and "already logged" in again.stdout
    assert len(_runs(server.url, "lost")) == 3


@pytest.mark.slow
def test_refused_tracking_connection_fails_fast_with_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = CLI.run(
        tmp_path,
        *QUICK,
        "tracking=server",
        f"tracking.uri={url}",
        "model=[popularity]",
        timeout=200,
    )
    assert proc.returncode == 3
    line = _one_error_line(proc.stderr)
    assert url in line and "python -m harness.log" in line
