"""A thin MLflow adapter: names made MLflow-safe, batched logging, runs created explicitly.

``metrics/`` never imports MLflow; this module is the only place that does (lazily: importing
MLflow costs seconds, and a run with tracking disabled should not pay for it).
"""

from __future__ import annotations

import re
import subprocess
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["Tracker", "flatten", "git_state", "metric_key"]

_MAX_METRICS, _MAX_PARAMS, _MAX_PARAM_VALUE = 1000, 100, 6000


def metric_key(name: str) -> str:
    """MLflow-safe key for a metric name: ``ndcg@10`` → ``ndcg_at_10``.

    MLflow accepts letters, digits and ``_ - . / space :``; anything else, and ``/`` (a path
    separator to MLflow), becomes ``_``.

    >>> metric_key("ndcg@10"), metric_key("P_5"), metric_key("gsb.delta(ndcg@10)")
    ('ndcg_at_10', 'P_5', 'gsb.delta_ndcg_at_10_')
    """
    key = re.sub(r"@(\d+)", r"_at_\1", name.strip()).replace("@", "_at_")
    # `/` would make MLflow treat the key as a path (no `//`, no leading or trailing `/`).
    return re.sub(r"[^\w\-. :]", "_", key)[:250]


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping → ``{"a.b.c": value}`` (lists kept whole), for MLflow params.

    >>> flatten({"split": {"method": "loo", "valid": False}, "k": [5, 10]})
    {'split.method': 'loo', 'split.valid': False, 'k': [5, 10]}
    """
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def git_state(where: str | Path = ".") -> dict[str, str]:
    """Commit and dirty flag of the git work tree at ``where`` (empty when not in a repository)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {}
    return {
        "git.commit": commit,
        "git.dirty": str(dirty).lower(),
        "mlflow.source.git.commit": commit,
    }


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Tracker:
    """Logs one experiment's parent and child runs to an MLflow tracking URI.

    ``artifacts`` (a folder) is used as the artifact location when this creates the experiment
    on a local store; with a server, the server's artifact destination applies.
    """

    def __init__(self, uri: str, experiment: str, artifacts: str | Path | None = None) -> None:
        import mlflow
        from mlflow import MlflowClient

        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self._mlflow = mlflow
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            self.experiment_id = found.experiment_id
        else:
            location = Path(artifacts).resolve().as_uri() if artifacts else None
            self.experiment_id = self.client.create_experiment(experiment, location)

    def start(
        self, name: str, tags: Mapping[str, str] | None = None, parent: str | None = None
    ) -> str:
        """Create a run (a child when ``parent`` is given) and return its id."""
        all_tags = dict(tags or {})
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        return run.info.run_id

    def log(
        self,
        run_id: str,
        *,
        metrics: Mapping[str, float] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        """Log metrics (keys made MLflow-safe; NaN skipped), params and tags in batches."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        ms = [
            Metric(metric_key(k), float(v), now, 0)
            for k, v in (metrics or {}).items()
            if v is not None and v == v
        ]
        ps = [Param(metric_key(k), str(v)[:_MAX_PARAM_VALUE]) for k, v in (params or {}).items()]
        ts = [RunTag(k, str(v)[:_MAX_PARAM_VALUE]) for k, v in (tags or {}).items()]
        for chunk in _chunks(ms, _MAX_METRICS):
            self.client.log_batch(run_id, metrics=chunk, synchronous=True)
        for chunk in _chunks(ps, _MAX_PARAMS):
            self.client.log_batch(run_id, params=chunk, synchronous=True)
        for chunk in _chunks(ts, _MAX_PARAMS):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)

    def log_input(
        self, run_id: str, df: pd.DataFrame, *, name: str, context: str, digest: str, source: str
    ) -> None:
        """Record a dataset (schema, size, content digest) as an input of the run."""
        from mlflow.entities import DatasetInput, InputTag

        # MLflow resolves `source` to a known kind (a path, a URI); other origins go in the name.
        where = source if Path(source).exists() else None
        with warnings.catch_warnings():  # MLflow's schema hint about integer columns: not ours
            warnings.simplefilter("ignore", UserWarning)
            dataset = self._mlflow.data.from_pandas(df, source=where, name=name, digest=digest[:36])
            entity = dataset._to_mlflow_entity()
        self.client.log_inputs(
            run_id, [DatasetInput(entity, [InputTag("mlflow.data.context", context)])]
        )

    def log_artifacts(self, run_id: str, folder: str | Path, path: str | None = None) -> None:
        """Upload every file of ``folder`` under the run's artifact ``path``."""
        self.client.log_artifacts(run_id, str(folder), path)

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        """Close a run as ``FINISHED`` or ``FAILED``."""
        self.client.set_terminated(run_id, status)
