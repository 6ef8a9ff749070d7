"""What the tests share, as plain code: the CLI run as a user runs it, a real ``mlflow server``,
Spark's availability, every registered metric. ``conftest.py`` turns them into fixtures; a test
module imports from here only what must be a plain function (a helper used outside a test).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: this folder: on PYTHONPATH for the CLI subprocesses, so ``plugins.models.*`` targets import
TESTS = Path(__file__).resolve().parent
#: the overrides of a small, quick run (``experiment=quick`` and no progress bars)
QUICK = ("experiment=quick", "progress=false")
#: A logging line of a library: "2026/11/23 06:42:52 INFO mlflow.store.db.utils: ..." or
#: "INFO:matplotlib.font_manager:..." (Python's default format); a default run prints none.
LOG_LINE = re.compile(
    r"(^\d{4}[/-]\d\d[/-]\d\d[ T][\d:,.]+\s+(DEBUG|INFO|WARNING)\b)|"
    r"(^(DEBUG|INFO|WARNING):[\w.]+:)|(\b(mlflow|alembic|matplotlib)[\w.]*: )"
)
#: Spark settings of the tests' tiny tables (C1-only JIT, serial GC, no AQE: see the file),
#: read by spark-submit through ``SPARK_CONF_DIR``; a session's explicit settings still win
SPARK_CONF_DIR = TESTS / "spark_conf"
#: ``engine=spark`` overrides of the CLI tests: few shuffle partitions and user buckets (the
#: data has a few hundred users; more buckets are covered by the tests of ``evaluate_spark``)
SPARK_SMALL = ("engine.shuffle_partitions=2", "engine.buckets=4")


# ---------------------------------------------------------------------------- the CLI


@dataclass(frozen=True)
class EngineRun:
    """One engine's finished CLI run: the process, its working folder, its results folder."""

    proc: subprocess.CompletedProcess[str]
    cwd: Path
    folder: Path


class HarnessCli:
    """``python -m harness`` in a subprocess: a fresh interpreter, output to pipes, no test hooks
    (``HARNESS_TEST_*``) unless a test passes them, and ``tests/`` importable for plug-ins."""

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user's shell, plus ``extra``. Bytecode is cached as in a user's
        shell (``PYTHONDONTWRITEBYTECODE`` dropped): else each of the suite's CLI runs, and each
        Spark Python worker it starts, compiles the project's modules again."""
        dropped = ("MLFLOW_LOGGING_LEVEL", "PYTHONDONTWRITEBYTECODE")
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("HARNESS_TEST_") and k not in dropped
        }
        path = os.pathsep.join(p for p in (str(TESTS), base.get("PYTHONPATH", "")) if p)
        fixed = {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "SPARK_CONF_DIR": str(SPARK_CONF_DIR)}
        return {**base, **fixed, **extra}

    def command(self, args: tuple[str, ...], quick: bool, module: str) -> list[str]:
        return [sys.executable, "-m", module, *(QUICK if quick else ()), *args]

    def run(
        self,
        cwd: Path,
        *args: str,
        quick: bool = False,
        timeout: float = 300,
        env: dict[str, str] | None = None,
        module: str = "harness",
    ) -> subprocess.CompletedProcess[str]:
        """Run to the end; ``quick`` prepends :data:`QUICK`."""
        Path(cwd).mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            self.command(args, quick, module),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(**(env or {})),
        )

    def run_engines(
        self, tmp_path: Path, *args: str, master: str = "local[2]", **kw: Any
    ) -> dict[str, EngineRun]:
        """The same command with ``engine=numpy`` and ``engine=spark`` (``master``), each in its
        own folder under ``tmp_path``; both must exit 0. Keyword arguments go to :meth:`run`."""
        found = {}
        for engine in ("numpy", "spark"):
            cwd = tmp_path / engine
            extra = ["engine=spark", f"engine.master='{master}'", *SPARK_SMALL]
            extra = [] if engine == "numpy" else extra
            proc = self.run(cwd, *args, *extra, **kw)
            assert proc.returncode == 0, proc.stderr[-3000:]
            folder = next((cwd / "runs" / "results").rglob("summary.csv")).parent
            found[engine] = EngineRun(proc, cwd, folder)
        return found

    def start(
        self, cwd: Path, *args: str, quick: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start without waiting (to signal it or run two at once)."""
        Path(cwd).mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            self.command(args, quick, "harness"),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(**(env or {})),
        )

    def stopped_at(
        self, cwd: Path, stage: str, sig: int, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run until it pauses at ``stage`` (``HARNESS_TEST_PAUSE_AT``), send ``sig``, and return
        how it ended (stderr: the lines after the pause)."""
        proc = self.start(cwd, *args, env={"HARNESS_TEST_PAUSE_AT": stage})
        assert proc.stderr is not None
        before = []
        for line in proc.stderr:
            before.append(line)
            if line.strip() == f"harness: paused at {stage}":
                break
        else:
            proc.wait()
            raise AssertionError(f"never paused at {stage!r}:\n{''.join(before)}")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@dataclass(frozen=True)
class QuickRun:
    """The finished default quick run (``python -m harness experiment=quick``, output to pipes,
    MLflow to a sqlite store under ``cwd/runs``): read it, never write into ``cwd`` (copy it)."""

    proc: subprocess.CompletedProcess[str]
    cwd: Path
    folder: Path  # the results folder (absolute)


def shared_quick_run(cli: HarnessCli, base: Path) -> QuickRun:
    """Run the default quick run once in ``base/quick-run``, or wait for and read the run that
    another process (an xdist worker of the same session) made there: one run for every test
    that needs it. ``base`` must be private to this pytest session."""
    import fcntl
    import json

    cwd = base / "quick-run"
    saved = base / "quick-run.json"
    with (base / "quick-run.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not saved.exists():
            proc = cli.run(cwd, "experiment=quick", timeout=600)
            done = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            saved.write_text(json.dumps(done))
        done = json.loads(saved.read_text())
    proc = subprocess.CompletedProcess(
        [], done["returncode"], stdout=done["stdout"], stderr=done["stderr"]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(r"^results: (.+)$", proc.stdout, re.M)
    assert found, proc.stdout[-3000:]
    return QuickRun(proc, cwd, cwd / found.group(1).strip())


# ------------------------------------------------------------------- a real mlflow server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200 and resp.read().strip() == b"OK"
    except OSError:
        return False


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a sqlite store and proxied artifacts in ``where``;
    ``stop()`` and ``start()`` again on the same port and store (a server lost mid-run)."""

    def __init__(self, where: Path) -> None:
        self.where, self.port = where, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.where / "server.log").open("a")
        command = [sys.executable, "-m", "mlflow", "server", "--workers", "1"]
        command += ["--backend-store-uri", f"sqlite:///{self.where}/srv.db"]
        command += ["--artifacts-destination", str(self.where / "art")]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            command,
            cwd=self.where,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        log.close()
        deadline = time.monotonic() + 90
        while not _healthy(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.where / "server.log").read_text()[-3000:]
                pytest.fail(f"mlflow server not healthy (exit {self.proc.poll()}):\n{tail}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)


# ------------------------------------------------------------------------------ Spark


def spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    from harness.spark import JAVA17_HOME

    home = os.environ.get("JAVA_HOME") or (JAVA17_HOME if os.path.isdir(JAVA17_HOME) else "")
    if not (home and os.path.exists(os.path.join(home, "bin", "java"))) and not shutil.which(
        "java"
    ):
        return "no Java found (set JAVA_HOME to a JDK 17)"
    return None


# ------------------------------------------------------------------ every registered metric


def every_metric_names(ks: tuple[int, ...] = (5, 10)) -> list[str]:
    """Every registered metric (aliases left out), without a cutoff and at each of ``ks``."""
    import metrics
    from metrics.registry import get

    names = []
    for name in metrics.list_metrics():
        d = get(name)
        if d.name != name:
            continue
        base = "exposure_tail" if name == "exposure" else name  # one name per item group
        # without a cutoff, their popularity top-n depends on the batch of users (and they are
        # refused under serendipity_method='popularity', the default)
        if d.cutoff != "required" and name not in ("unexpectedness", "serendipity"):
            names.append(base)
        if d.cutoff != "none":
            names += [f"{base}@{k}" for k in ks]
    return names


def short_of_negatives() -> tuple[Any, Any]:
    """(train, test) where popularity sampling leaves users short: users 0 and 1 have seen the
    ten items holding all but 2.5e-5 of the training events, so the five others are rarely
    drawn; users 2-11 draw freely (15 items, test item 10 for everyone)."""
    import numpy as np
    import pandas as pd

    heavy = pd.DataFrame(
        {"user": np.repeat(np.arange(1000, 1010), 20_000), "item": np.repeat(np.arange(10), 20_000)}
    )
    light = pd.DataFrame({"user": 2000, "item": np.arange(10, 15)})
    seen = pd.DataFrame({"user": np.repeat([0, 1], 10), "item": np.tile(np.arange(10), 2)})
    normal = pd.DataFrame({"user": np.arange(2, 12), "item": 0})
    train = pd.concat([heavy, light, seen, normal], ignore_index=True)
    return train, pd.DataFrame({"user": np.arange(12), "item": 10})


def nearly_everything_seen() -> tuple[Any, Any]:
    """(train, test): ten users who have seen all but 100 of 20,000 items (test item -5)."""
    import numpy as np
    import pandas as pd

    heavy = np.arange(10)
    train = pd.concat(
        [
            pd.DataFrame({"user": -1, "item": np.arange(20_000)}),
            pd.DataFrame(
                {"user": np.repeat(heavy, 19_900), "item": np.tile(np.arange(100, 20_000), 10)}
            ),
        ],
        ignore_index=True,
    )
    return train, pd.DataFrame({"user": heavy, "item": -5})
