"""Fixtures shared by the test folders (``metrics_tests``, ``harness_tests``, ``spark_tests``: one
per package): the CLI run as a user runs it, a real ``mlflow server``, a Spark session, every
registered metric. The folders are not named after the packages, which they would shadow on the
``PYTHONPATH`` of the CLI subprocesses. The code behind the fixtures is in ``support.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    SPARK_CONF_DIR,
    HarnessCli,
    MlflowServer,
    QuickRun,
    every_metric_names,
    shared_quick_run,
    spark_missing,
)

# metrics_tests/reference/make_*.py import rectools, torchmetrics and recommenders, which live in
# scratch environments (see the README there), not in the test environment.
collect_ignore_glob = ["metrics_tests/reference/make_*.py"]


#: fixtures of the long tests (a JVM, CLI subprocesses, an mlflow server): their files go first
LONG_FIXTURES = frozenset({"spark", "harness_cli", "quick_run", "mlflow_server"})


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: the marks added here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``spark`` every test in ``spark_tests`` or using the ``spark`` fixture (so
    ``-m "not spark"`` leaves out every test that needs Java), and order the files longest
    first, each file's tests kept in its order: files with Spark tests, then files with other
    long tests (marked ``slow`` or using a fixture of :data:`LONG_FIXTURES`), then the rest;
    within a group, the files with most tests first (pytest-xdist's own order). Under
    ``--dist loadfile`` (two workers, README's command) the long files then start early instead
    of last (pytest-xdist ordered them by test count only, so the one-test Spark files came at
    the end), and the run ends on short files."""
    group: dict[Path, int] = {}
    count: dict[Path, int] = {}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "spark" in names or item.path.parent.name == "spark_tests":
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark"):
            rank = 0
        elif names & LONG_FIXTURES or item.get_closest_marker("slow"):
            rank = 1
        else:
            rank = 2
        group[item.path] = min(group.get(item.path, 2), rank)
        count[item.path] = count.get(item.path, 0) + 1
    items.sort(key=lambda item: (group[item.path], -count[item.path]))  # stable: file order kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` in the collection's order (:func:`pytest_collection_modifyitems`)
    rather than re-sorted by test count; other modes as pytest-xdist makes them."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # pytest-xdist's --no-loadscope-reorder
    return LoadFileScheduling(config, log)


@pytest.fixture(scope="session")
def harness_cli() -> HarnessCli:
    return HarnessCli()


@pytest.fixture(scope="session")
def quick_run(harness_cli: HarnessCli, tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    """The default ``python -m harness experiment=quick`` run (MLflow in a sqlite store under
    ``cwd/runs``), made once per test session and shared by the tests that only read it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the session's workers (each has its own basetemp below)
    return shared_quick_run(harness_cli, base)


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[MlflowServer]:
    where = tmp_path / "server"
    where.mkdir()
    server = MlflowServer(where)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2]`` session. Skips without PySpark or Java, except under ``CI=true`` where it
    fails: a CI run must not pass by skipping the engine it is meant to check."""
    reason = spark_missing()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Spark tests cannot run under CI=true: {reason}")
        pytest.skip(reason)
    from harness.spark import spark_session

    # the JVM settings of tests/spark_conf; of two pairs of modes, the CLI runs (separate
    # processes) take one and this session the other, so both are tested: AQE off there, on
    # here; expressions compiled to Java there (Spark's default), interpreted here, since on
    # these tiny tables compiling each new plan is much of a job's time (test_spark.py and
    # test_spark_catalog_auc.py: 176 -> 143 s wall, measured); both modes give the same rows.
    # Two shuffle partitions, as the CLI tests' engine.shuffle_partitions=2: still more than
    # one part to merge, a quarter of the tasks (a Spark tie test: 37-39 -> 29.4 s, measured)
    os.environ["SPARK_CONF_DIR"] = str(SPARK_CONF_DIR)
    session = spark_session(
        "local[2]",
        app_name="recsys-harness-tests",
        config={
            "spark.sql.adaptive.enabled": "true",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def every_metric() -> Callable[..., list[str]]:
    """``every_metric(ks=(5, 10))``: the names that run every registered metric once."""
    return every_metric_names


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sqlite MLflow store with its tables created and nothing logged: creating the tables
    (MLflow's schema migrations) takes seconds, so a test copies this file instead."""
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("template") / "t.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def store_uri(empty_store: Path, tmp_path: Path) -> str:
    """The URI of this test's own fresh store (a copy of :func:`empty_store`)."""
    import shutil

    shutil.copyfile(empty_store, tmp_path / "t.db")
    return f"sqlite:///{tmp_path}/t.db"
