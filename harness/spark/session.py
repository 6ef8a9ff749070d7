"""The SparkSession this project runs on (interpreter, JDK, local binding, Arrow) and the
warning / error plumbing every Spark job here shares."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The JDK the NOTES pin (another JDK may be installed on the same machine).
JAVA17_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"

# PySpark 4.x warns on every pandas conversion that pandas 3 is not "fully supported".
_PANDAS3_WARNING = "PySpark does not yet fully support pandas"


def spark_session(
    master: str = "local[*]",
    app_name: str = "recsys-harness",
    config: dict[str, Any] | None = None,
    session: SparkSession | None = None,
) -> SparkSession:
    """A SparkSession set up for this project, or ``session`` itself, untouched.

    For a new session: ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` point at this interpreter
    (workers need the same packages), ``JAVA_HOME`` is pinned to JDK 17 when unset and present,
    local masters bind to ``127.0.0.1``; Arrow transfers are on, the UI and progress bars off,
    the session time zone is UTC and local masters use 8 shuffle partitions; PySpark's notice
    that pandas 3 is not fully supported is ignored in this process. ``config`` entries
    win over these defaults. ``session=`` (a production cluster's session) is returned as is.
    """
    if session is not None:
        return session
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if not os.environ.get("JAVA_HOME") and os.path.isdir(JAVA17_HOME):
        os.environ["JAVA_HOME"] = JAVA17_HOME
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings: dict[str, Any] = {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYTHONWARNINGS": f"ignore:{_PANDAS3_WARNING}:FutureWarning",
    }
    if local:
        settings["spark.sql.shuffle.partitions"] = "8"
    settings.update(config or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    # the notice says nothing a user can act on, and it came once per pandas conversion
    warnings.filterwarnings("ignore", message=_PANDAS3_WARNING, category=FutureWarning)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _no_task_traces(spark)
    return spark


def _no_task_traces(spark: SparkSession) -> None:
    """Keep the executor and scheduler from logging a failed task's Java stack trace (about 45
    lines) to the console: the job's error reaches Python with the same trace, and a bad CSV
    row is then the one line the CLI prints, not a screen of Java before it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    for logger in (
        "org.apache.spark.executor.Executor",
        "org.apache.spark.scheduler.TaskSetManager",
    ):
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.OFF)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence PySpark's pandas-3 FutureWarning in the driver."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS3_WARNING, category=FutureWarning)
        yield


@contextlib.contextmanager
def _python_errors() -> Iterator[None]:
    """Re-raise a ``ValueError`` raised inside a Python worker as a plain ``ValueError``."""
    from pyspark.errors import PythonException

    try:
        yield
    except PythonException as err:
        found = re.findall(r"^ValueError: (.*)$", str(err), flags=re.MULTILINE)
        if found:
            raise ValueError(found[-1]) from None
        raise
