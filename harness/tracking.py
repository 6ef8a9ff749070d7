"""A thin MLflow adapter: names made MLflow-safe, batched logging, runs created explicitly.

``metrics/`` never imports MLflow; this module is the only place that does (lazily: importing
MLflow costs seconds, and a run with tracking disabled should not pay for it).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import re
import sqlite3
import subprocess
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "BrokenStoreError",
    "Tracker",
    "check_store_uri",
    "configure_http",
    "flatten",
    "git_state",
    "metric_key",
    "metric_keys",
]

_MAX_METRICS, _MAX_PARAMS, _MAX_PARAM_VALUE = 1000, 100, 6000
#: MLflow 3's UI opens an experiment on its runs (not the GenAI overview) with this tag.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
#: the runs table view the harness shares (``?viewStateShareKey=harness`` in the printed link)
VIEW_KEY = "harness"
#: Tag key prefix naming the source of a key :func:`metric_keys` made distinct (``age<30``).
KEY_TAG = "harness.key."


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


def metric_keys(names: Iterable[str]) -> dict[str, str]:
    """Name → MLflow key for names logged to one run: :func:`metric_key`'s, made distinct where
    two names clean to one key (``age<30``, ``age>30``), so no value silently replaces another.

    A name that is its own key keeps it; the others of a clash get ``_`` and a stable hash of
    the name (sha256, 8 hex digits); a key no other name shares stays as :func:`metric_key` has it.

    >>> metric_keys(["ndcg@10", "g.age<30", "g.age>30", "g.age_30"])["ndcg@10"]
    'ndcg_at_10'
    >>> sorted(metric_keys(["g.age<30", "g.age>30", "g.age_30"]).values())
    ['g.age_30', 'g.age_30_30caf70c', 'g.age_30_b6efa6c3']
    """
    unique = list(dict.fromkeys(str(n) for n in names))
    cleaned = {name: metric_key(name) for name in unique}
    sharing: dict[str, list[str]] = {}
    for name, key in cleaned.items():
        sharing.setdefault(key, []).append(name)
    out: dict[str, str] = {}
    taken = set(cleaned.values())
    for name, key in cleaned.items():
        if len(sharing[key]) == 1 or name == key:
            out[name] = key
            continue
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        for size in range(8, len(digest) + 1):  # longer only if the short one is taken
            suffix = f"_{digest[:size]}"
            distinct = key[: 250 - len(suffix)] + suffix
            if distinct not in taken:
                break
        out[name] = distinct
        taken.add(distinct)
    return out


def _key_tag(key: str) -> str:
    """The tag that names the source of a distinct key: :data:`KEY_TAG` and the key, its middle
    cut when that is longer than MLflow's 250 characters (the hash at its end is kept)."""
    tag = KEY_TAG + key
    if len(tag) <= 250:
        return tag
    end = key.rsplit("_", 1)[-1]
    return KEY_TAG + key[: 250 - len(KEY_TAG) - len(end) - 1] + "_" + end


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


def check_store_uri(uri: str) -> None:
    """Refuse MLflow's filesystem store (``file:`` or a plain path) before a run, as the
    installed MLflow would after it: it only writes there with ``MLFLOW_ALLOW_FILE_STORE``."""
    scheme = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", uri)
    if uri in ("databricks", "databricks-uc", "uc"):  # MLflow's names without a scheme
        return
    local = scheme is None or scheme.group(1).lower() == "file" or len(scheme.group(1)) == 1
    allowed = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true", "yes")
    if local and not allowed:
        raise ValueError(
            f"tracking.uri {uri!r} is MLflow's filesystem store, which MLflow 3 refuses to write; "
            "use a database store such as tracking.uri=sqlite:///runs/mlflow.db (or set "
            "MLFLOW_ALLOW_FILE_STORE=true)"
        )


def configure_http(retries: int | None, timeout: float | None) -> None:
    """Set MLflow's HTTP retry count and per-request timeout (``tracking.retries`` / ``.timeout``).

    MLflow's defaults (7 retries with exponential back-off) make a refused connection take
    minutes; ``None`` leaves MLflow's own setting (its environment variables) untouched.
    """
    # urllib3 logs every retry as a warning: the one error line at the end says it all
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    for var, value, least in (
        ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", retries, 0),
        ("MLFLOW_HTTP_REQUEST_TIMEOUT", timeout, 1),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(
                f"'tracking.{var.rsplit('_', 1)[1].lower()}' must be a number >= 0 (got {value!r})"
            )
        os.environ[var] = str(max(int(value), least))  # MLflow reads both as integers


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<db>.lock`` for a local sqlite store (else no-op), so
    only one process at a time creates or migrates the store and its experiment."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class BrokenStoreError(RuntimeError):
    """A local sqlite store MLflow cannot open (its schema is not the one MLflow expects)."""


def require_store(uri: str) -> None:
    """Refuse a local sqlite store that does not exist, for commands that only read from it:
    MLflow would create an empty store there (seconds of migrations) and then find nothing."""
    db = _sqlite_path(uri)
    if db is not None and not db.is_file():
        raise ValueError(
            f"no MLflow store at {db} ({uri}); give the store the runs were logged to "
            "(--tracking-uri; a run logs to runs/mlflow.db under the folder it ran in)"
        )


def _sqlite_path(uri: str) -> Path | None:
    """The file of a local ``sqlite:///`` store URI (None for any other URI)."""
    if not uri.startswith("sqlite:///") or "?" in uri:
        return None
    return Path(uri.removeprefix("sqlite:///"))


def _create_store_atomically(db: Path) -> None:
    """Create and migrate a new sqlite store at ``<db>.creating-<pid>``, then rename it to ``db``.

    MLflow's migrations take seconds; cut off (disk full, a signal) they leave a half-migrated
    store that every later run refuses. Built aside, a cut-off creation leaves no store, and its
    leftover temporary file is removed by the next creation (called under :func:`_store_lock`).
    """
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    for left in db.parent.glob(f"{glob.escape(db.name)}.creating-*"):  # from a killed creation
        left.unlink(missing_ok=True)
    tmp = db.with_name(f"{db.name}.creating-{os.getpid()}")
    tmp_uri = f"sqlite:///{tmp}"
    try:
        store = _get_sqlalchemy_store(tmp_uri, None)  # as MlflowClient would build it
        SqlAlchemyStore._engine_map.pop(tmp_uri, None)
        store.engine.dispose()  # close the file before it moves
        os.replace(tmp, db)
    finally:
        for left in db.parent.glob(f"{glob.escape(tmp.name)}*"):  # a failed try, its journal
            left.unlink(missing_ok=True)


def _diagnose(db: Path, uri: str, err: Exception) -> BrokenStoreError | None:
    """One line for a store MLflow refused because of its schema (None for another failure)."""
    try:
        with contextlib.closing(sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)) as c:
            names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            version = (
                ", ".join(r[0] for r in c.execute("SELECT version_num FROM alembic_version"))
                if "alembic_version" in names
                else "none"
            )
    except sqlite3.Error:
        return None
    tmp = sorted(n for n in names if n.startswith("_alembic_tmp_"))
    expected = re.search(r"but expected (\w+)", str(err))
    wanted = f", MLflow expects {expected.group(1)}" if expected else ""
    if tmp:
        return BrokenStoreError(
            f"the MLflow store {db} was left half-created or half-migrated by a run that was cut "
            f"off (leftover table {tmp[0]}; schema version {version or 'none'}{wanted}); "
            f"move it aside (mv {db} {db}.broken) and run again to start a new store"
        )
    if "out-of-date database schema" in str(err):
        return BrokenStoreError(
            f"the MLflow store {db} has schema version {version or 'none'}{wanted}: back it up "
            f"and run 'mlflow db upgrade {uri}', or move it aside (mv {db} {db}.broken) and run "
            "again to start a new store"
        )
    return None


def _hush_mlflow() -> None:
    """MLflow's loggers to CRITICAL: a failed write (disk full) makes ``mlflow.store.db.utils``
    print tracebacks before the harness's own one-line error."""
    logging.getLogger("mlflow").setLevel(logging.CRITICAL)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("mlflow.") and isinstance(logger, logging.Logger) and logger.level:
            logger.setLevel(logging.CRITICAL)


def _quoted(value: str) -> str:
    """A string literal for an MLflow search filter (which has no escapes: pick the quote)."""
    text = str(value)
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    raise ValueError(f"cannot search MLflow for a tag value with both quote kinds: {text!r}")


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Tracker:
    """Logs one experiment's parent and child runs to an MLflow tracking URI.

    ``artifacts`` (a folder) is used as the artifact location when this creates the experiment
    on a local store; with a server, the server's artifact destination applies.
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        artifacts: str | Path | None = None,
        *,
        quiet: bool | None = None,
    ) -> None:
        """``quiet`` silences MLflow's log lines below CRITICAL from here on; by default when
        MLflow's logger is already at WARNING or above (the harness without ``debug=true``)."""
        import mlflow
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        if quiet if quiet is not None else logging.getLogger("mlflow").level >= logging.WARNING:
            _hush_mlflow()
        self.uri = uri
        self._mlflow = mlflow
        #: Runs started and not yet finished: what :meth:`abort` ends.
        self.open_runs: list[str] = []
        db = _sqlite_path(uri)
        with _store_lock(uri):  # first use creates the sqlite store: one process at a time
            if db is not None and (not db.exists() or db.stat().st_size == 0):
                _create_store_atomically(db)
            try:
                self.client = MlflowClient(tracking_uri=uri)
            except Exception as err:
                broken = _diagnose(db, uri, err) if db is not None and db.exists() else None
                if broken is None:
                    raise
                raise broken from None
            for attempt in range(3):
                found = self.client.get_experiment_by_name(experiment)
                if found is not None:
                    self.experiment_id = found.experiment_id
                    break
                location = Path(artifacts).resolve().as_uri() if artifacts else None
                try:
                    self.experiment_id = self.client.create_experiment(experiment, location)
                    break
                except MlflowException as err:  # created meanwhile by another run (a server)
                    if attempt == 2 or "RESOURCE_ALREADY_EXISTS" not in str(err.error_code):
                        raise
            self._mark_kind(found)

    def _mark_kind(self, found: Any) -> None:
        """Set ``mlflow.experimentKind`` unless the experiment already has a kind (a user's)."""
        if found is not None and "mlflow.experimentKind" in (found.tags or {}):
            return
        for key, value in EXPERIMENT_KIND.items():
            self.client.set_experiment_tag(self.experiment_id, key, value)

    def share_view(self, headline: str | None) -> None:
        """Save the runs table view the printed link opens: the headline metric, the decision
        and the source as columns. MLflow 3.17's UI ignores the experiment's kind and shows only
        Source, Models and Dataset to a fresh browser; a shared view (an experiment tag the link
        names) is the one server-side way to show more without ticking columns by hand."""
        columns = [f"metrics.`{metric_key(headline)}`"] if headline else []
        columns += ["tags.`decision`", "attributes.`Source`"]
        name, decision = "attributes.`Run Name`", "tags.`decision`"
        state = {
            "selectedColumns": columns,
            "columnOrder": [name, "runDateAndNestInfo", "duration", *columns],
            "columnWidths": {name: 330, decision: 150},
            "orderByKey": "attributes.start_time",
        }
        self.client.set_experiment_tag(
            self.experiment_id, f"mlflow.sharedViewState.{VIEW_KEY}", json.dumps(state)
        )

    def runs_link(self, base: str) -> str:
        """The runs page of this experiment at ``base``, in the model-training view (MLflow 3
        remembers the GenAI switch per browser and opens a fresh one on GenAI) with the view of
        :meth:`share_view`."""
        return (
            f"{base.rstrip('/')}/#/experiments/{self.experiment_id}/runs"
            f"?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
        )

    def start(
        self, name: str, tags: Mapping[str, str] | None = None, parent: str | None = None
    ) -> str:
        """Create a run (a child when ``parent`` is given) and return its id."""
        all_tags = dict(tags or {})
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        self.open_runs.append(run.info.run_id)
        return run.info.run_id

    def log(
        self,
        run_id: str,
        *,
        metrics: Mapping[str, float] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
        step: int = 0,
        among: Iterable[str] = (),
    ) -> None:
        """Log metrics (keys made MLflow-safe and distinct by :func:`metric_keys`; NaN skipped;
        at ``step``), params (keys likewise) and tags in batches.

        ``among``: the run's other metric names, when its metrics are logged in parts, so a key
        is made distinct from theirs too. A key made distinct gets a tag naming its source
        (``harness.key.<key>``), logged before the metric or param so a retry finds it.
        """
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        metrics, params = metrics or {}, params or {}
        mkeys = metric_keys([*among, *(str(k) for k in metrics)])
        pkeys = metric_keys(str(k) for k in params)
        logged = [(str(k), mkeys[str(k)]) for k in metrics] + list(pkeys.items())
        sources = {_key_tag(key): name for name, key in logged if key != metric_key(name)}
        ms = [
            Metric(mkeys[str(k)], float(v), now, step)
            for k, v in metrics.items()
            if v is not None and v == v
        ]
        ps = [Param(pkeys[str(k)], str(v)[:_MAX_PARAM_VALUE]) for k, v in params.items()]
        ts = [RunTag(k, str(v)[:_MAX_PARAM_VALUE]) for k, v in (tags or {}).items()]
        named = [RunTag(k, v[:_MAX_PARAM_VALUE]) for k, v in sources.items()]
        for chunk in _chunks(named, _MAX_PARAMS):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)
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
        dtypes = {str(c): str(df[c].dtype) for c in df.columns}
        self.log_input_described(
            run_id,
            name=name,
            context=context,
            digest=digest,
            source=source,
            num_rows=len(df),
            dtypes=dtypes,
        )

    def log_input_described(
        self,
        run_id: str,
        *,
        name: str,
        context: str,
        digest: str,
        source: str | None,
        num_rows: int,
        dtypes: Mapping[str, str],
    ) -> None:
        """Record a dataset input from its description (row count and column dtypes): the same
        schema and profile MLflow derives from the frame, without needing the data."""
        from mlflow.data.pandas_dataset import from_pandas
        from mlflow.entities import Dataset, DatasetInput, InputTag

        def empty(dtype: str) -> pd.Series:
            try:
                return pd.Series([], dtype=dtype)
            except (TypeError, ValueError):
                return pd.Series([], dtype=object)

        frame = pd.DataFrame({c: empty(d) for c, d in dtypes.items()})
        # MLflow resolves `source` to a known kind (a path, a URI); other origins go in the name.
        where = {"source": source} if source is not None and Path(source).exists() else {}
        with warnings.catch_warnings():  # MLflow's schema hint about integer columns: not ours
            warnings.simplefilter("ignore", UserWarning)
            dataset = from_pandas(frame, name=name, digest=digest[:36], **where)
            entity = dataset._to_mlflow_entity()
        profile = {"num_rows": int(num_rows), "num_elements": int(num_rows) * len(dtypes)}
        entity = Dataset(
            name=entity.name,
            digest=entity.digest,
            source_type=entity.source_type,
            source=entity.source,
            schema=entity.schema,
            profile=json.dumps(profile),
        )
        self.client.log_inputs(
            run_id, [DatasetInput(entity, [InputTag("mlflow.data.context", context)])]
        )

    def log_artifacts(self, run_id: str, folder: str | Path, path: str | None = None) -> None:
        """Upload every file of ``folder`` under the run's artifact ``path``."""
        self.client.log_artifacts(run_id, str(folder), path)

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        """Close a run as ``FINISHED``, ``FAILED`` or ``KILLED``."""
        self.client.set_terminated(run_id, status)
        if run_id in self.open_runs:
            self.open_runs.remove(run_id)

    def abort(self, status: str = "KILLED") -> list[str]:
        """End every run this tracker left open (children first) as ``status``; best effort.

        Returns the ids that could not be ended (e.g. the server is gone).
        """
        pending = list(reversed(self.open_runs))
        for i, run_id in enumerate(pending):
            try:
                self.finish(run_id, status)
            except Exception:  # the store is unreachable: do not wait on every run, do not raise
                return pending[i:]
        return []

    def find(self, tags: Mapping[str, str], parent: str | None = None) -> list[Any]:
        """Runs of the experiment (active, any status) carrying every tag in ``tags`` (and whose
        parent run is ``parent``, when given), oldest first."""
        wanted = dict(tags)
        if parent is not None:
            wanted["mlflow.parentRunId"] = parent
        clauses = " and ".join(f"tags.`{k}` = {_quoted(v)}" for k, v in wanted.items())
        runs = self.client.search_runs([self.experiment_id], clauses, max_results=1000)
        return sorted(runs, key=lambda r: r.info.start_time or 0)
