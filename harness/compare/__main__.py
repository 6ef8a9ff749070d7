"""``python -m harness.compare BASELINE CANDIDATE``: compare two logged evaluations again.

BASELINE and CANDIDATE are MLflow run ids of model (child) runs, or registered versions
evaluated earlier, ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` (an alias is the version
it points to now, read from ``--registry-uri``, by default the tracking store's). A version's
run is its latest successful evaluation, under any URI that named it, on the other side's split
when there is one; a note says which run it was.
The comparison is recomputed from the runs' per-user artifacts, without re-running any model,
with the ``compare`` and ``gate`` settings of the candidate's evaluation (its parent run's
``config.yaml``) under ``--gate`` and the command's overrides,
printed like the main run's (the model × metric table, the comparison per metric, each
candidate's gate lines and the verdict), written as a report (``report.html``, ``report.md``)
into ``--out`` (default: a new folder under ``runs/results/compare/``) and logged as a new run.
Runs evaluated on different splits are refused, and so are runs on one split whose numbers
measure different things: other candidates (``candidates.*``), metric conventions
(``metrics.option.*``), truth (``metrics.relevance``) or, for a metric without a cutoff, list
length (``metrics.k``). A parent run id (one whole evaluation) is
refused too, with its model runs listed: pass two of them.

Runs of ``engine=spark`` name their per-user table and top-k lists (Parquet folders with a
``user`` column) by the tags ``model.per_user_uri`` / ``model.topk_uri``: they are read from there
(a local path or any URI pyarrow opens), else from the run's artifacts when it logged a copy; a
table in neither place is one error line. ``--engine auto`` (the default) compares on the driver
with pandas, as for in-process runs, unless a per-user table has more than ``--driver-rows`` rows
(row counts from the Parquet footers; default 2,000,000, as ``engine.driver_rows``) or sits at a
URI only Spark reads (``s3a://``, ``hdfs://``): then the tables stay in Spark
(:func:`harness.spark.compare.compare_spark`, a session on ``--spark-master``). Both give the same
numbers. Segments need the split cached under ``RUNS_DIR/splits/<split.sha256>/`` (as in-process
runs leave it); without it they are skipped with a note.

Exit codes: 0 done (or GO with ``--enforce``), 2 bad input (unknown run, parent run, different
splits or settings, bad labels file, bad option), 3 MLflow unreachable or logging failed, 10 NO_GO,
11 INCONCLUSIVE and 12 no decision (``--gate none``) with ``--enforce``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from harness.compare import (
    CompareSpec,
    PairComparison,
    compare_pair,
    labels_row,
    read_labels,
    segment_data,
)
from harness.compare.sizing import format_sizing, sizing_notes, sizing_rows
from harness.data import _first_line
from harness.experiment import qrels_from_test
from harness.folders import safe_component
from harness.gate import (
    EXIT_CODES,
    EXIT_NO_DECISION,
    GateDecision,
    GateSpec,
    check_gate,
    decide,
    verdict_line,
)
from harness.progress import help_text
from harness.tracking import require_store

EXIT_BAD_INPUT, EXIT_TRACKING_FAILED = 2, 3


class TrackingError(Exception):
    """The tracking server or store could not be read (exit 3)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.compare",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "baseline", help="run id, models:/NAME/VERSION or models:/NAME@ALIAS of the baseline"
    )
    p.add_argument(
        "candidate", help="run id, models:/NAME/VERSION or models:/NAME@ALIAS of the candidate"
    )
    p.add_argument("--tracking-uri", default="sqlite:///runs/mlflow.db")
    p.add_argument(
        "--registry-uri",
        default=None,
        help="the model registry aliases are read from (default: the tracking store's)",
    )
    p.add_argument("--runs-dir", default="runs", help="where cached splits are (for segments)")
    p.add_argument(
        "--out",
        default=None,
        help="folder for report.html, report.md and comparison.csv "
        "(default: RUNS_DIR/results/compare/<time>-<candidate>-vs-<baseline>)",
    )
    p.add_argument(
        "--gate",
        default=None,
        help="a gate/ config option (default, strict, none); default: the gate the candidate's "
        "run was evaluated with (else default)",
    )
    p.add_argument("--enforce", action="store_true", help="exit code reflects the gate decision")
    p.add_argument(
        "--engine",
        choices=("auto", "driver", "spark"),
        default="auto",
        help="where engine=spark runs' per-user tables are compared: auto (Spark above "
        "--driver-rows rows or for a URI only Spark reads, else pandas), driver, spark",
    )
    p.add_argument(
        "--driver-rows",
        type=int,
        default=2_000_000,
        help="largest per-user table compared on the driver by --engine auto (default 2000000)",
    )
    p.add_argument(
        "--spark-master", default="local[*]", help="Spark master of --engine spark (local[*])"
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. compare.n_resamples=2000")
    return p


def _registered_version(client: Any, ref: str, uri: str) -> tuple[str, str]:
    """(name, version) of a ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` ref; an alias is
    resolved in the registry now (where it points today, not where it pointed when evaluated)."""
    from mlflow.exceptions import MlflowException

    from harness.models.mlflow_model import _URI, aliases_text

    match = _URI.fullmatch(ref)
    if match is None:
        raise ValueError(
            f"{ref}: a registered version is models:/NAME/VERSION or models:/NAME@ALIAS"
        )
    if match["alias"] is None:
        return match["name"], match["version"]
    name = match["name"]
    try:
        mv = client.get_model_version_by_alias(name, match["alias"])
    except MlflowException as err:
        if err.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise
        try:
            aliases = client.get_registered_model(name).aliases
        except MlflowException:
            raise ValueError(_no_model(ref, name, uri)) from None
        raise ValueError(
            f"{ref} is not set in the registry at {uri} (aliases of {name}: "
            f"{aliases_text(aliases)})"
        ) from None
    return str(mv.name), str(mv.version)


def _no_model(ref: str, name: str, at: str) -> str:
    return f"{ref}: no registered model {name!r} in the registry at {at}"


def _not_evaluated(client: Any, ref: str, name: str, version: str, uri: str, at: str) -> str:
    """Why no run of ``ref`` was found: the registry (at ``at``) has no such model or version,
    or the version exists and no successful evaluation of it was logged at ``uri``."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_model_version(name, version)
    except MlflowException as err:
        if err.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise
        try:
            versions = client.search_model_versions(f"name = '{name}'")
        except MlflowException:
            versions = []
        if not versions:
            return _no_model(ref, name, at)
        numbers = sorted(int(v.version) for v in versions)
        known = (
            ", ".join(map(str, numbers))
            if len(numbers) <= 10
            else f"{len(numbers)} versions, latest {numbers[-1]}"
        )
        return f"{ref}: {name} has no version {version} in the registry at {at} (it has {known})"
    return f"no evaluation of {name} version {version} ({ref}) was logged at {uri}"


def _resolve(
    client: Any,
    ref: str,
    uri: str,
    other: Any = None,
    registry: str | None = None,
) -> tuple[Any, str | None]:
    """The model run for a run id or a ``models:/`` ref, and a note saying which run a ref
    resolved to. A ref is the version it names (an alias: the version it points to now); its
    run is the latest successful evaluation of that version, preferably on the split and the
    candidates of ``other`` (the other side's run) when there is one; ``registry``: where
    aliases are read (default ``uri``).
    An unknown id or a parent run (a whole evaluation, whose children are the model runs) is a
    ValueError."""
    from mlflow.exceptions import MlflowException

    try:
        if ref.startswith("models:/"):
            name, version = _registered_version(client, ref, registry or uri)
            where = (
                f"tags.`model.info.name` = '{name}' and tags.`model.info.version` = '{version}' "
                "and tags.status = 'ok'"
            )
            experiments = [e.experiment_id for e in client.search_experiments()]
            found = []
            tags = other.data.tags if other is not None else {}
            same = [
                f" and tags.`{k}` = '{tags[k]}'"
                for k in ("split.sha256", "candidates.kind")
                if k in tags
            ]
            for extra in ["".join(same[:i]) for i in range(len(same), 0, -1)] + [""]:
                found = client.search_runs(
                    experiments,
                    filter_string=where + extra,
                    order_by=["attributes.start_time DESC"],
                    max_results=1,
                )
                if found:
                    break
            if not found:
                raise ValueError(_not_evaluated(client, ref, name, version, uri, registry or uri))
            run = found[0]
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(run.info.start_time / 1000))
            return run, (
                f"{ref} is {name} version {version}: its latest evaluation, run "
                f"{run.info.run_id} ({run.data.tags.get('model', run.info.run_name)}, {when} UTC)"
            )
        try:
            run = client.get_run(ref)
        except MlflowException as err:
            if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise ValueError(f"no run with id {ref!r} at {uri}") from None
            raise
        kind = run.data.tags.get("harness.kind", "")
        children = (
            []
            if kind.startswith("tuning")
            else client.search_runs(
                [run.info.experiment_id],
                filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}'",
                order_by=["attributes.start_time ASC"],
            )
        )
    except ValueError:
        raise
    except Exception as err:  # MlflowException, a database or connection error
        raise TrackingError(f"MLflow at {uri} could not be read ({_first_line(err)})") from None
    if children:
        listing = ", ".join(
            f"{c.data.tags.get('model', c.info.run_name)} {c.info.run_id}" for c in children
        )
        raise ValueError(
            f"{ref} is a parent run (one whole evaluation), not a model run; compare two of its "
            f"model runs: {listing}"
        )
    if kind.startswith("tuning") or "split.sha256" not in run.data.tags:
        raise ValueError(
            f"run {ref} ({run.info.run_name}) is not a model evaluation"
            + (f" but a {kind} run" if kind else "")
            + ": compare two model runs of python -m harness (the child runs of an evaluation, "
            "e.g. of a tuning's final test run)"
        )
    return run, None


def _both(
    client: Any, refs: Sequence[str], uri: str, registry: str | None = None
) -> tuple[list[Any], list[str]]:
    """The two model runs (baseline, candidate) and the notes on resolved refs: run ids first,
    then ``models:/`` refs, each preferring an evaluation on the split of a side already found.
    Two ``models:/`` refs whose latest runs differ in split: the first found is looked up again
    on the other's split, so the order of the arguments does not decide whether a pair exists."""

    def split_of(run: Any) -> tuple[str | None, ...]:
        tags = run.data.tags if run is not None else {}
        return tuple(tags.get(k) for k in ("split.sha256", "candidates.kind"))

    runs: list[Any] = [None, None]
    notes: list[str | None] = [None, None]
    order = sorted((1, 0), key=lambda i: refs[i].startswith("models:/"))
    for i in order:
        runs[i], notes[i] = _resolve(client, refs[i], uri, runs[1 - i], registry)
    first = order[0]
    if refs[first].startswith("models:/") and split_of(runs[0]) != split_of(runs[1]):
        runs[first], notes[first] = _resolve(client, refs[first], uri, runs[1 - first], registry)
    return runs, [n for n in notes if n]


#: A sampled or file candidate set's parent params: what was ranked besides the split.
_CANDIDATE_PARAMS = {"sampled": ("n_negatives", "sampling", "seed"), "file": ("path",)}


def _settings(client: Any, run: Any) -> dict[str, str]:
    """What decides a model run's numbers besides its split (``split.sha256``): the candidates
    it ranked, the metric conventions (``metrics.option.*``), how its truth was built
    (``metrics.relevance``, and the threshold of ratings) and the list length ``metrics.k``
    (which metrics without a cutoff read to); the parent's config for what the child lacks."""
    out = {k: v for k, v in run.data.params.items() if k.startswith("metrics.option.")}
    kind = run.data.tags.get("candidates.kind", "full")
    out["candidates.kind"] = kind
    parent = run.data.tags.get("mlflow.parentRunId")
    params = client.get_run(parent).data.params if parent else {}
    keys = [f"candidates.{k}" for k in _CANDIDATE_PARAMS.get(kind, ())]
    keys += ["metrics.relevance", "metrics.k"]
    if params.get("metrics.relevance") == "rating":
        keys.append("metrics.relevance_threshold")
    out |= {k: params[k] for k in keys if k in params}
    return out


def _different_settings(
    client: Any, runs: Sequence[Any], metric_names: Sequence[str]
) -> str | None:
    """Why the two runs' numbers measure different things though their split is the same (other
    candidates, conventions or truth), or None. ``metrics.k`` counts only when a compared
    metric has no cutoff (``mrr``, ``map``, ``r_precision``: they read the whole list)."""
    import metrics

    a, b = (_settings(client, r) for r in runs)
    specs = [metrics.parse(n) for n in metric_names]
    uncut = any(s.k is None and s.definition.kind == "ranking" for s in specs)
    keys = sorted(k for k in a.keys() | b.keys() if k != "metrics.k" or uncut)
    differ = [f"{k} {a.get(k, '-')} vs {b.get(k, '-')}" for k in keys if a.get(k) != b.get(k)]
    if not differ:
        return None
    return (
        f"the runs were evaluated under different settings ({'; '.join(differ)}): their numbers "
        "measure different things, so they cannot be compared; evaluate both the same way"
    )


def _labels(runs: list[Any], refs: Sequence[str]) -> list[str]:
    """The two sides' names in the tables: a ``models:/`` ref is its registered version
    (``reco v2``), a run id the model name it was run under; equal names get the run id, then
    the side (one run on both sides)."""

    def label(run: Any, ref: str) -> str:
        tags = run.data.tags
        if ref.startswith("models:/"):
            return f"{tags['model.info.name']} v{tags['model.info.version']}"
        return str(tags.get("model", run.info.run_name))

    names = [label(r, ref) for r, ref in zip(runs, refs, strict=True)]
    if names[0] == names[1]:
        names = [f"{n} ({r.info.run_id[:8]})" for n, r in zip(names, runs, strict=True)]
    if names[0] == names[1]:
        names = [f"{names[0]} as baseline", f"{names[1]} as candidate"]
    return names


def _same_model(runs: list[Any], refs: Sequence[str]) -> str | None:
    """A note when both sides evaluated one model (one registered version, as two aliases
    pointing at the same version do, or one run): every difference is then 0 by construction."""
    a, b = (r.data.tags for r in runs)
    keys = ("model.info.name", "model.info.version")
    if all(a.get(k) is not None and a.get(k) == b.get(k) for k in keys):
        return (
            f"both sides are {a['model.info.name']} version {a['model.info.version']} "
            f"({refs[0]} and {refs[1]}): the model is compared with itself; check which version "
            "each alias points to"
        )
    if runs[0].info.run_id == runs[1].info.run_id:
        return f"both sides are run {runs[0].info.run_id}: the model is compared with itself"
    return None


def _artifacts(client: Any, run: Any, folder: Path) -> tuple[pd.DataFrame, dict[str, Any], Any]:
    """Per-user table, result.json and top-k lists (or None) of an in-process model run."""
    local = Path(client.download_artifacts(run.info.run_id, "", str(folder)))
    if not (local / "per_user.parquet").is_file() or not (local / "result.json").is_file():
        raise ValueError(
            f"run {run.info.run_id} ({run.info.run_name}) has no per_user.parquet and "
            "result.json: not a model run of the harness"
        )
    per_user = pd.read_parquet(local / "per_user.parquet")
    result = json.loads((local / "result.json").read_text())
    topk = pd.read_parquet(local / "topk.parquet") if (local / "topk.parquet").exists() else None
    return per_user, result, topk


@dataclass
class _Logged:
    """One model run as read here: its ``result.json``, and its per-user table and top-k lists
    as pandas frames (in-process runs: artifacts) or Parquet locations (``engine=spark`` runs:
    the tags' URIs or the artifacts' copy), with the per-user row count (None: unknown, a URI
    only Spark reads)."""

    result: dict[str, Any]
    per_user: pd.DataFrame | str
    topk: pd.DataFrame | str | None
    rows: int | None
    notes: list[str] = field(default_factory=list)


def _arrow(uri: str) -> tuple[Any, str] | None:
    """(pyarrow filesystem, path) of a local path or a URI pyarrow opens (``file://``, ``s3://``,
    ``gs://``…); None for one only Spark reads (``s3a://``, ``hdfs://`` without libhdfs)."""
    import pyarrow.fs as pafs

    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    try:
        return pafs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]
    except Exception:  # pyarrow's ArrowInvalid (unknown scheme), OSError (no libhdfs/credentials)
        return None


def _there(uri: str) -> bool | None:
    """Whether a Parquet folder or file exists at ``uri`` (None: only Spark can tell)."""
    import pyarrow.fs as pafs

    where = _arrow(uri)
    if where is None:
        return None
    fs, path = where
    try:
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)
    except OSError:
        return None


def _parquet_rows(uri: str) -> int | None:
    """Rows of a Parquet folder or file from its footers (None: a URI only Spark reads)."""
    import pyarrow.dataset as ds

    where = _arrow(uri)
    if where is None:
        return None
    fs, path = where
    return int(ds.dataset(path, filesystem=fs, format="parquet").count_rows())


def _located(client: Any, run: Any, tag: str, listed: set[str], folder: Path) -> str | None:
    """Where an ``engine=spark`` run's table is: the tag's URI, else the copy among the run's
    artifacts (downloaded into ``folder``); None when gone from both."""
    uri = run.data.tags[tag]
    if _there(uri) is not False:  # there, or a URI only Spark reads (it says when it is gone)
        return str(uri)
    artifact = tag.removeprefix("model.").removesuffix("_uri") + ".parquet"
    if artifact in listed:
        return str(client.download_artifacts(run.info.run_id, artifact, str(folder)))
    return None


def _logged(client: Any, run: Any, folder: Path) -> _Logged:
    """What the comparison needs of a model run, from its artifacts (in-process runs) or from
    the Parquet tables its tags name (``engine=spark`` runs)."""
    if "model.per_user_uri" not in run.data.tags:
        per_user, result, topk = _artifacts(client, run, folder)
        return _Logged(result, per_user, topk, len(per_user))
    listed = {a.path for a in client.list_artifacts(run.info.run_id)}
    if "result.json" not in listed:
        raise ValueError(
            f"run {run.info.run_id} ({run.info.run_name}) has no result.json: not a model run "
            "of the harness"
        )
    folder.mkdir(parents=True, exist_ok=True)
    local = Path(client.download_artifacts(run.info.run_id, "result.json", str(folder)))
    result = json.loads(local.read_text())
    per_user = _located(client, run, "model.per_user_uri", listed, folder)
    if per_user is None:
        raise ValueError(
            f"run {run.info.run_id} ({run.info.run_name}): its per-user table "
            f"{run.data.tags['model.per_user_uri']} (tag model.per_user_uri) is gone and the run "
            "logged no copy; restore that folder or evaluate the model again"
        )
    topk = None
    notes = []
    if "model.topk_uri" in run.data.tags:
        topk = _located(client, run, "model.topk_uri", listed, folder)
        if topk is None:
            notes.append(
                f"item-bucket segments skipped: the top-k lists of {run.info.run_name} "
                f"({run.data.tags['model.topk_uri']}) are gone"
            )
    return _Logged(result, per_user, topk, _parquet_rows(per_user), notes)


def _engine(choice: str, logged: Sequence[_Logged], driver_rows: int) -> str:
    """``driver`` or ``spark``: ``auto`` is Spark when a per-user table is a Parquet location
    with more than ``driver_rows`` rows or at a URI only Spark reads, else the driver."""
    if choice != "auto":
        return choice
    for x in logged:
        if isinstance(x.per_user, str) and (x.rows is None or x.rows > driver_rows):
            return "spark"
    return "driver"


def _driver_frame(table: pd.DataFrame | str, order: Sequence[str]) -> pd.DataFrame:
    """A table on the driver: as logged (in-process runs), or read from its Parquet location
    with the in-process id types (``int64`` or ``object``) and rows sorted by ``order``."""
    import pyarrow.dataset as ds

    if isinstance(table, pd.DataFrame):
        return table
    where = _arrow(table)
    if where is None:
        raise ValueError(f"{table}: only Spark reads this URI (use --engine spark)")
    fs, path = where
    frame = ds.dataset(path, filesystem=fs, format="parquet").to_table().to_pandas()
    for column in ("user", "item"):
        if column in frame.columns and frame[column].dtype != np.int64:
            frame[column] = frame[column].astype(object)
    return frame.sort_values(list(order), kind="stable").reset_index(drop=True)


def _on_driver(
    names: Sequence[str],
    logged: Sequence[_Logged],
    cspec: CompareSpec,
    split_dir: Path,
    options: dict[str, Any],
    relevance: str,
    candidates: str = "full",
) -> tuple[list[str], Any]:
    """The compared metrics and a function comparing them in-process
    (:func:`harness.compare.compare_pair`, metric ``options`` as :func:`_options`, the truth
    by ``relevance``, what was ranked: ``candidates.kind``), with segments when the split is
    cached."""
    pu_a, pu_b = (
        p if isinstance(p, pd.DataFrame) else _driver_frame(p, ["user"]).set_index("user")
        for p in (logged[0].per_user, logged[1].per_user)
    )
    top_a, top_b = (
        None if t is None else _driver_frame(t, ["user", "rank"])
        for t in (logged[0].topk, logged[1].topk)
    )
    columns = [str(c) for c in pu_a.columns]

    def run(metric_names: Sequence[str]) -> tuple[PairComparison, bool]:
        segments = qrels = None
        if cspec.segments and (split_dir / "train.parquet").exists():
            train = pd.read_parquet(split_dir / "train.parquet")
            test = pd.read_parquet(split_dir / "test.parquet")
            qrels = qrels_from_test(test, relevance)
            segments = segment_data(train, pu_a.index.to_numpy(), cspec)
        pair = compare_pair(
            names[0],
            names[1],
            (pu_a, pu_b),
            metric_names,
            cspec,
            summaries=(logged[0].result.get("summary", {}), logged[1].result.get("summary", {})),
            segments=segments,
            qrels=qrels,
            recs=(top_a, top_b) if top_a is not None and top_b is not None else None,
            options=options,
            candidates=candidates,
        )
        return pair, segments is not None

    return columns, run


@contextlib.contextmanager
def _session(master: str) -> Iterator[Any]:
    """A Spark session on ``master``, stopped afterwards when this command started it."""
    try:
        from pyspark.sql import SparkSession

        from harness.spark import spark_session

        before = SparkSession.getActiveSession()
        spark = spark_session(master, app_name="harness.compare")
    except Exception as err:  # no PySpark, no Java, a bad master
        raise ValueError(f"--engine spark: Spark could not start ({_first_line(err)})") from None
    try:
        yield spark
    finally:
        if before is None:
            spark.stop()


def _on_spark(
    spark: Any,
    names: Sequence[str],
    logged: Sequence[_Logged],
    cspec: CompareSpec,
    split_dir: Path,
    scratch: Path,
    options: dict[str, Any],
    relevance: str,
    candidates: str = "full",
) -> tuple[list[str], Any]:
    """The compared metrics and a function comparing them with the per-user tables kept in
    Spark (:func:`harness.spark.compare.compare_spark`; segments from the cached split;
    metric ``options`` as :func:`_options`, the truth by ``relevance``, what was ranked:
    ``candidates.kind``)."""
    from harness.compare import bucket_metrics
    from harness.spark.compare import bucket_tables_spark, compare_spark, segments_spark
    from harness.spark.io import _frame
    from harness.spark.pipeline import qrels_spark

    def table(data: pd.DataFrame | str, what: str) -> Any:
        if isinstance(data, pd.DataFrame):  # an in-process run's table (user as the index)
            return _frame(spark, data if "user" in data.columns else data.reset_index(), what)
        try:
            return spark.read.parquet(data)
        except Exception as err:  # AnalysisException: PATH_NOT_FOUND, not Parquet
            raise ValueError(f"{what} {data} could not be read ({_first_line(err)})") from None

    pu = [
        table(x.per_user, f"the per-user table of {n}") for x, n in zip(logged, names, strict=True)
    ]
    tops = [
        None if x.topk is None else table(x.topk, f"the top-k lists of {n}")
        for x, n in zip(logged, names, strict=True)
    ]
    columns = [c for c in pu[0].columns if c != "user"]

    def run(metric_names: Sequence[str]) -> tuple[PairComparison, bool]:

        segments = buckets = None
        if cspec.segments and (split_dir / "train.parquet").exists():
            train = spark.read.parquet(str(split_dir / "train.parquet"))
            test = spark.read.parquet(str(split_dir / "test.parquet"))
            qrels = qrels_spark(test, relevance)
            segments = segments_spark(train, qrels.select("user").distinct(), cspec)
            if tops[0] is not None and tops[1] is not None and segments.item_bucket is not None:
                ranked = bucket_metrics([n for n in metric_names if n in columns], candidates)[0]
                buckets = bucket_tables_spark(
                    qrels,
                    (tops[0], tops[1]),
                    ranked,
                    segments.item_bucket,
                    scratch / "buckets",
                    options,
                )
        pair = compare_spark(
            pu[0],
            pu[1],
            metric_names,
            cspec,
            baseline=names[0],
            candidate=names[1],
            summaries=(logged[0].result.get("summary", {}), logged[1].result.get("summary", {})),
            segments=segments,
            buckets=buckets,
            options=options,
            candidates=candidates,
        )
        return pair, segments is not None

    return columns, run


def _options(runs: Sequence[Any], logged: Sequence[_Logged]) -> dict[str, Any]:
    """The metric options the baseline run was evaluated with (its ``result.json``; the
    item-bucket segments are judged with them, as the run judged its own), with ``user_set``
    ``intersection`` when either run was evaluated so (its table holds only the users it gave
    a list; the pair is compared on the users both tables hold)."""
    options = dict(logged[0].result.get("options") or {})
    user_sets = {r.data.params.get("metrics.option.user_set") for r in runs}
    user_sets |= {x.result.get("options", {}).get("user_set") for x in logged}
    if "intersection" in user_sets:
        options["user_set"] = "intersection"
    return options


def _relevance(client: Any, run: Any) -> str:
    """``metrics.relevance`` (binary or rating) the baseline ``run`` was evaluated with: how its
    truth was built from the test events, for the item-bucket segments. A model run's parent
    holds the experiment's config as params."""
    found = run.data.params.get("metrics.relevance")
    parent = run.data.tags.get("mlflow.parentRunId")
    if found is None and parent:
        found = client.get_run(parent).data.params.get("metrics.relevance")
    return str(found or "binary")


def _run_settings(client: Any, run: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The ``compare`` and ``gate`` config of the evaluation ``run`` was part of (its parent's
    ``config.yaml``) and that parent's id; (None, None) for a run without one."""
    parent = run.data.tags.get("mlflow.parentRunId")
    if not parent:
        return None, None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(parent, "config.yaml", tmp)
            config = yaml.safe_load(Path(path).read_text()) or {}
    except Exception:  # logged otherwise (or the artifact store cannot say now): the defaults
        return None, None
    return {k: config.get(k) for k in ("compare", "gate")}, str(parent)


def _specs(
    gate: str | None,
    baseline: str,
    overrides: Sequence[str],
    logged: Mapping[str, Any] | None = None,
) -> tuple[CompareSpec, GateSpec, dict[str, Any]]:
    """The comparison and gate settings: the evaluation's own (``logged``: its ``compare`` and
    ``gate`` config, so the pair is compared as its run compared it), under the command's
    overrides and ``--gate``; the defaults for what no run recorded."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from harness.schema import config_error, register

    register()  # the schemas: an unknown key is named with the keys its group takes

    try:
        with initialize_config_module(config_module="harness.configs", version_base=None):
            cfg = compose("config", overrides=[f"gate={gate or 'default'}", *overrides])
    except (HydraException, OmegaConfBaseException) as err:  # as the main run says it
        raise ValueError(config_error(err)) from None
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}

    def settled(group: str, fields: Any, explicit: bool) -> dict[str, Any]:
        composed: dict[str, Any] = OmegaConf.to_container(cfg[group], resolve=True)  # type: ignore[assignment]
        recorded = (logged or {}).get(group)
        if not isinstance(recorded, dict) or explicit:
            return {k: v for k, v in composed.items() if k in fields}
        mine = {
            k
            for k in composed
            if any(g == f"{group}.{k}" or g.startswith(f"{group}.{k}.") for g in given)
        }
        out = {k: v for k, v in recorded.items() if k in fields}
        out.update({k: composed[k] for k in mine if k in fields})
        return out

    node = settled("compare", CompareSpec.__dataclass_fields__, False)
    node["baseline"] = baseline
    if node.get("metrics") is not None:
        node["metrics"] = tuple(node["metrics"])
    gate_node = settled("gate", GateSpec.__dataclass_fields__, gate is not None)
    return CompareSpec(**node), GateSpec(**gate_node), {"compare": node, "gate": gate_node}


def _summary(names: Sequence[str], results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The model × metric means of both runs (as the main run's table; the header line starts
    with "model", so no line but the comparison rows starts with a metric name)."""
    frame = pd.DataFrame([r.get("summary", {}) for r in results], index=list(names))
    frame.columns.name = "model"
    return frame.astype(float)


def main(argv: Sequence[str] | None = None) -> int:
    """Recompute, print, report and log the comparison; return the exit code."""
    args = _parser().parse_intermixed_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    try:
        require_store(args.tracking_uri)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    client = MlflowClient(args.tracking_uri, args.registry_uri or args.tracking_uri)
    try:
        runs, resolved = _both(
            client, (args.baseline, args.candidate), args.tracking_uri, args.registry_uri
        )
        hashes = [r.data.tags.get("split.sha256") for r in runs]
        if None in hashes or hashes[0] != hashes[1]:
            raise ValueError(
                f"the runs were evaluated on different splits (split.sha256 {hashes[0]} vs "
                f"{hashes[1]}); a comparison needs the same split"
            )
        names = _labels(runs, (args.baseline, args.candidate))
        recorded, source = _run_settings(client, runs[1])  # the candidate's evaluation
        cspec, gspec, cfg = _specs(args.gate, names[0], args.overrides, recorded)
        if source:
            resolved.append(
                f"settings: compare and gate as the evaluation run {source} recorded them"
                + (
                    " (--gate and the overrides given here replace theirs)"
                    if args.gate or args.overrides
                    else ""
                )
            )
        split_dir = Path(args.runs_dir) / "splits" / str(hashes[0])
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            logged = [_logged(client, r, Path(tmp) / str(i)) for i, r in enumerate(runs)]
            res_a, res_b = logged[0].result, logged[1].result
            options, relevance = _options(runs, logged), _relevance(client, runs[0])
            kind = str(runs[0].data.tags.get("candidates.kind", "full"))  # both: else refused
            if _engine(args.engine, logged, args.driver_rows) == "spark":
                rows = ", ".join(
                    f"{n} {'?' if x.rows is None else f'{x.rows:,}'}"
                    for n, x in zip(names, logged, strict=True)
                )
                print(f"comparing in Spark (--engine {args.engine}; per-user rows: {rows})")
                spark = stack.enter_context(_session(args.spark_master))
                columns, compare = _on_spark(
                    spark, names, logged, cspec, split_dir, Path(tmp), options, relevance, kind
                )
            else:
                columns, compare = _on_driver(
                    names, logged, cspec, split_dir, options, relevance, kind
                )
            metric_names = list(cspec.metrics or columns)
            gspec = check_gate(  # a rule on a metric these runs lack: one line, exit 2
                gspec,
                metric_names,
                segments=cspec.segments,
                gsb_metric=cspec.gsb_metric,
                human_labels=bool(cspec.human_labels),
                options=options,
            )
            labels = read_labels(cspec.human_labels) if cspec.human_labels else None
            different = _different_settings(client, runs, metric_names)
            if different:
                raise ValueError(different)
            pair, segmented = compare(metric_names)
        same = _same_model(runs, (args.baseline, args.candidate))
        pair.notes = [
            *resolved,
            *([same] if same else []),
            *pair.notes,
            *(n for x in logged for n in x.notes),
        ]
        if labels is not None:
            if "candidate" in labels.columns:
                labels = labels[labels["candidate"].astype(str) == names[1]]
            if len(labels):
                row = pd.DataFrame([labels_row(labels["label"], cspec)])
                pair.table = pd.concat([pair.table, row], ignore_index=True)
    except ValueError as err:
        print(f"error: {_first_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (TrackingError, OSError) as err:
        print(f"error: {_first_line(err)}", file=sys.stderr)
        return EXIT_TRACKING_FAILED
    if not segmented and cspec.segments:
        pair.notes.append(f"segments skipped: split {hashes[0]} is not cached under {split_dir}")
    decision = decide(pair, gspec) if gspec.enabled else None
    decisions = {pair.candidate: decision} if decision is not None else {}
    overall = decision.decision if decision is not None else None
    summary = _summary(names, (res_a, res_b))
    headline = (gspec.primary.metric if gspec.primary else None) or cspec.gsb_metric
    verdict = verdict_line(
        summary,
        decisions,
        overall,
        metric=headline if headline in summary.columns else None,
        baseline=names[0],
        why=None if decision is not None else "the gate is off",
    )
    print(format_comparison(pair, summary, decisions, overall, verdict))
    segment = gspec.primary.segment if gspec.primary else "all"
    sizing, sized = _sizing(pair, cspec, headline, decision, segment)
    if not sizing.empty:
        print(format_sizing(sizing, cspec))
    out = Path(args.out) if args.out else _default_out(Path(args.runs_dir), pair)
    try:
        experiment = _experiment_name(client, runs[1])
        report = _report(
            out, pair, summary, decisions, overall, verdict, runs, cfg, cspec, experiment, sized
        )
    except OSError as err:
        print(f"error: could not write the report into {out} ({_first_line(err)})", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"\nreport:  {report}")
    try:
        _log(args.tracking_uri, client, runs, pair, decision, out)
    except Exception as err:  # the comparison was printed; say why it was not logged
        print(
            f"error: could not log the comparison run ({type(err).__name__}: {_first_line(err)})",
            file=sys.stderr,
        )
        return EXIT_TRACKING_FAILED
    if args.enforce:
        return EXIT_NO_DECISION if decision is None else EXIT_CODES[decision.decision]
    return 0


def format_comparison(
    pair: PairComparison,
    summary: pd.DataFrame,
    decisions: dict[str, GateDecision],
    overall: str | None,
    verdict: str,
) -> str:
    """The terminal output, as the main run's: the model × metric table, the comparison per
    metric (all users; lift in percent, "-" where there is no value), the candidate's head
    and gate lines and notes (:func:`harness.cli.format_verdicts`) and the verdict line."""
    from harness.cli import format_verdicts

    lines = [
        summary.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-"),
        "",
        f"{pair.candidate} vs {pair.baseline}, all users:",
        comparison_table(pair),
        "",
        format_verdicts([pair], decisions, overall),
    ]
    lines.append(verdict)  # the pair's notes are under its block, in format_verdicts
    return "\n".join(lines)


def comparison_table(pair: PairComparison, segment: str = "all") -> str:
    """One line per metric of ``segment``: means, difference and lift with their CIs, p-value
    (raw and adjusted) and ΔGSB; "-" where a value does not exist (e.g. no CI of a whole-run
    metric, no lift over a zero baseline)."""
    from harness.report import fmt_ci, fmt_lift, fmt_p, fmt_value

    def dash(text: str) -> str:
        return "-" if text in ("", "—") else text

    def signed(x: Any) -> str:
        return fmt_value(x, 4, sign=True)

    table = pair.table[pair.table["segment"] == segment] if len(pair.table) else pair.table
    rows = []
    for _, r in table.iterrows():
        get = r.get
        rows.append(
            {
                "metric": r["metric"],
                pair.baseline: dash(fmt_value(get("mean_a"))),
                pair.candidate: dash(fmt_value(get("mean_b"))),
                "diff [CI]": dash(
                    fmt_ci(get("diff"), get("diff_ci_low"), get("diff_ci_high"), signed)
                ),
                "lift [CI]": dash(
                    fmt_ci(get("lift"), get("lift_ci_low"), get("lift_ci_high"), fmt_lift)
                ),
                "p": dash(fmt_p(get("p_randomization"))),
                "p adj.": dash(fmt_p(get("p_adjusted"))),
                "ΔGSB": dash(fmt_value(get("gsb_delta"), 3, sign=True)),  # as everywhere
            }
        )
    if not rows:
        return "(no metric to compare)"
    text = pd.DataFrame(rows).to_string(index=False)
    hib = table["higher_is_better"] if "higher_is_better" in table else [True] * len(table)
    lower = [str(m) for m, h in zip(table["metric"], hib, strict=True) if not bool(h)]
    return text + (f"\n(lower is better: {', '.join(lower)})" if lower else "")


def _default_out(runs_dir: Path, pair: PairComparison) -> Path:
    """A new folder under ``runs/results/compare/`` named by time and the two models."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe, base = safe_component(pair.candidate), safe_component(pair.baseline)
    folder = runs_dir / "results" / "compare" / f"{stamp}-{safe}-vs-{base}"
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{stamp}-{safe}-vs-{base}-{n}")
    return folder


def _sizing(
    pair: PairComparison,
    cspec: CompareSpec,
    metric: str,
    decision: GateDecision | None,
    segment: str = "all",
) -> tuple[pd.DataFrame, list[str]]:
    """The online A/B test sizing of the pair, as the main run gives it (its rows and report
    notes), from the comparison's own means and spreads (either engine)."""
    decisions = {pair.candidate: decision.decision} if decision is not None else None
    frame = sizing_rows([pair], cspec, metric=metric, decisions=decisions, segment=segment)
    return frame, sizing_notes(frame, cspec)


def _experiment_name(client: Any, run: Any) -> str:
    """The experiment of the candidate's run, where the comparison is logged (its id when the
    store cannot say now: the logging step reports that)."""
    try:
        return str(client.get_experiment(run.info.experiment_id).name)
    except Exception:
        return f"experiment id {run.info.experiment_id}"


def _report(
    out: Path,
    pair: PairComparison,
    summary: pd.DataFrame,
    decisions: dict[str, GateDecision],
    overall: str | None,
    verdict: str,
    runs: Sequence[Any],
    cfg: Any,
    cspec: CompareSpec,
    experiment: str,
    more_notes: Sequence[str] = (),
) -> Path:
    """Write report.html, report.md and comparison.csv into ``out``; the HTML path."""
    from omegaconf import OmegaConf

    from harness.report import ReportContext, write_report
    from harness.report.context import now

    ctx = ReportContext(
        title=f"Comparison: {pair.candidate} vs {pair.baseline}",
        experiment=experiment,
        created=now(),
        dataset=f"split {runs[0].data.tags.get('split.sha256', '-')[:12]} (from the logged runs)",
        split=str(runs[0].data.tags.get("split", runs[0].data.tags.get("split.method", "-"))),
        split_stats={},
        candidates={},
        metric_options={},
        config_yaml=OmegaConf.to_yaml(cfg),
        summary=summary,
        pairs=[pair],
        decisions=decisions,
        overall=overall,
        segment_definitions=pair.segments,
        notes=[verdict, *pair.notes, *more_notes],
        run_ids={pair.baseline: runs[0].info.run_id, pair.candidate: runs[1].info.run_id},
        verdict_text=verdict,
    )
    return Path(write_report(ctx, out)["html"])


def _log(
    uri: str,
    client: Any,
    runs: Sequence[Any],
    pair: PairComparison,
    decision: Any,
    out: Path,
) -> None:
    from harness.tracking import Tracker

    tracker = Tracker(uri, client.get_experiment(runs[1].info.experiment_id).name)
    tags = {
        "compare.baseline_run": runs[0].info.run_id,
        "compare.candidate_run": runs[1].info.run_id,
        "compare.baseline": pair.baseline,
        "compare.candidate": pair.candidate,
        "split.sha256": runs[0].data.tags.get("split.sha256", ""),
    }
    run_id = tracker.start(
        f"compare-{pair.candidate}-vs-{pair.baseline}-{time.strftime('%Y%m%d-%H%M%S')}", tags
    )
    tracker.log(
        run_id, metrics=pair.metrics_dict(), tags=decision.as_tags() if decision is not None else {}
    )
    tracker.log_artifacts(run_id, out)
    tracker.finish(run_id)
    print(f"logged comparison run {run_id}")


if __name__ == "__main__":
    from harness.shutdown import run_and_leave

    run_and_leave(main)
