"""A new local sqlite MLflow store is created aside and renamed into place, so a cut-off creation
leaves no half-migrated store; a half-migrated store gets one line; MLflow's error tracebacks stay
off stderr unless debug (audit findings D5, D12). Real MLflow stores in temporary folders."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.tracking import BrokenStoreError, Tracker

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

ROOT = Path(__file__).resolve().parents[2]


def _head_revision() -> str:
    """The schema revision this MLflow expects, read from its alembic scripts (not the harness)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    config: Config = _get_alembic_config("sqlite://")
    heads = ScriptDirectory.from_config(config).get_heads()
    assert len(heads) == 1
    return str(heads[0])


def _schema(db: Path) -> tuple[list[str], list[str]]:
    """The table names and alembic version rows of a sqlite file."""
    with sqlite3.connect(db) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        versions = [r[0] for r in con.execute("SELECT version_num FROM alembic_version")]
    return names, versions


def _usable(uri: str) -> None:
    """A plain MlflowClient (not the harness) can write to and read from the store."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("check-usable")
    run = client.create_run(exp, run_name="r")
    client.log_metric(run.info.run_id, "m", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 0.5}


@pytest.fixture(scope="module")
def valid_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store created by MLflow itself (not through the harness), to copy and damage."""
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("valid") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


@pytest.mark.slow
def test_a_creation_killed_midway_leaves_no_store_and_the_next_run_creates_a_valid_one(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    db = runs / "mlflow.db"
    uri = f"sqlite:///{db}"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from harness.tracking import Tracker
        Tracker({uri!r}, "first")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path)
    try:
        # wait until the creation has written tables (migrations then run for seconds), then kill
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            files = [p for p in runs.glob("mlflow.db*") if not p.name.endswith(".lock")]
            if any(p.stat().st_size > 0 for p in files if p.exists()):
                break
            time.sleep(0.02)
        time.sleep(0.5)
        assert proc.poll() is None, "the creation finished before it could be cut off"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = sorted(p.name for p in runs.iterdir())
    # cut off midway: no store under the real name, only the temporary file
    assert not db.exists(), left
    assert any(name.startswith("mlflow.db.creating-") for name in left), left

    tracker = Tracker(uri, "second", tmp_path / "art")  # a normal use afterwards
    run_id = tracker.start("r")
    tracker.log(run_id, metrics={"ndcg@10": 0.25})
    tracker.finish(run_id)
    assert tracker.client.get_run(run_id).data.metrics == {"ndcg_at_10": 0.25}
    names, versions = _schema(db)
    assert versions == [_head_revision()]
    assert not [n for n in names if n.startswith("_alembic_tmp_")]
    assert sorted(p.name for p in runs.iterdir()) == ["mlflow.db", "mlflow.db.lock"]
    _usable(uri)


@pytest.mark.slow
def test_a_new_store_is_created_complete_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "mlflow.db"
    # a leftover of a killed creation (another pid) is removed, not taken for the store
    db.parent.mkdir()
    (db.parent / "mlflow.db.creating-999999").write_bytes(b"half a database")
    tracker = Tracker(f"sqlite:///{db}", "fresh", tmp_path / "art")
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db", "mlflow.db.lock"]
    names, versions = _schema(db)
    assert versions == [_head_revision()]
    assert {"experiments", "runs", "metrics", "latest_metrics", "params", "tags"} <= set(names)
    assert tracker.client.get_experiment_by_name("fresh") is not None
    _usable(f"sqlite:///{db}")


def test_a_half_migrated_store_gives_one_line_naming_the_file_and_the_remedy(
    valid_store: Path, tmp_path: Path
) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(valid_store, db)
    with sqlite3.connect(db) as con:  # what a migration cut off inside a batch operation leaves
        con.execute("CREATE TABLE _alembic_tmp_latest_metrics (key VARCHAR(250))")
        con.execute("UPDATE alembic_version SET version_num = 'c3d9e7f1a2b4'")
    before = db.read_bytes()
    with pytest.raises(BrokenStoreError) as caught:
        Tracker(f"sqlite:///{db}", "broken")
    message = str(caught.value)
    assert "\n" not in message
    assert str(db) in message
    assert "_alembic_tmp_latest_metrics" in message and "c3d9e7f1a2b4" in message
    assert "half-created or half-migrated" in message and f"mv {db} {db}.broken" in message
    assert _head_revision() in message
    assert "Detected out-of-date" not in message  # not MLflow's text
    assert db.read_bytes() == before  # the store is left as it was, for the user to move


def test_an_older_schema_without_leftovers_points_to_mlflow_db_upgrade(
    valid_store: Path, tmp_path: Path
) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(valid_store, db)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE alembic_version SET version_num = 'c3d9e7f1a2b4'")
    with pytest.raises(BrokenStoreError, match=r"mlflow db upgrade sqlite:///") as caught:
        Tracker(f"sqlite:///{db}", "old")
    assert "\n" not in str(caught.value) and "version c3d9e7f1a2b4" in str(caught.value)


_FAIL_WRITE = """
import logging, sqlite3, sys
sys.path.insert(0, {root!r})
if sys.argv[1] == "harness":
    from harness.progress import quiet
    quiet(False)  # what python -m harness does without debug=true
import mlflow
from harness.tracking import Tracker
quiet_arg = {{"harness": None, "debug": None, "log": True}}[sys.argv[1]]
tracker = Tracker({uri!r}, "e", quiet=quiet_arg)
run_id = tracker.start("r")
with sqlite3.connect({db!r}) as con:
    con.execute("DROP TABLE latest_metrics")  # the next write fails inside MLflow's session
try:
    tracker.log(run_id, metrics={{"m": 1.0}})
except Exception as err:
    print("error: " + type(err).__name__, file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("mode", "tracebacks"), [("harness", False), ("log", False), ("debug", True)]
)
def test_mlflow_error_tracebacks_stay_off_stderr_unless_debug(
    valid_store: Path, tmp_path: Path, mode: str, tracebacks: bool
) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(valid_store, db)
    script = _FAIL_WRITE.format(root=str(ROOT), uri=f"sqlite:///{db}", db=str(db))
    done = subprocess.run(
        [sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: "), done.stderr
    mlflow_error = "ERROR mlflow.store.db.utils" in done.stderr and "Traceback" in done.stderr
    # debug leaves MLflow's own logging as it is (whether it prints depends on MLflow's
    # logging setup in that process, e.g. under pytest-xdist): only the quiet modes are asserted
    if not tracebacks:
        assert not mlflow_error, done.stderr
    if not tracebacks:
        assert lines == [lines[-1]], done.stderr  # only the one error line
