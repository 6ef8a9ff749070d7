"""The Spark engine: the numpy metric kernels run per bucket of users, aggregated exactly.

Nothing here defines a metric. ``evaluate_spark`` hashes every user to one of ``B`` buckets,
co-groups the run and the truth by bucket and calls :func:`metrics.evaluate` on each bucket's
rows (``applyInPandas``), so every per-user value comes from the same kernels, options and tie
rules as the numpy engine. A user's rows never span two buckets, so per-user values are those
the numpy engine computes; what remains is the global aggregation, done as
``metrics.evaluate`` does it:

- means over non-NaN per-user values, ``aggregation="sum"`` metrics as sums, micro averages
  from pooled hits / list lengths / relevant counts (hidden ``num_rel_ret@k``, ``num_ret@k``,
  ``num_rel`` columns requested from the same bucket call), ``gauc`` weighted by each user's
  number of scored candidates;
- ``rmse`` / ``mae``: per-user sums of squared / absolute errors and pair counts, pooled;
- ``global_auc``: each bucket reduces its pooled (score, relevant) pairs to a histogram per
  distinct score; Spark sums the histograms by score, range-partitions them by score and each
  partition returns (lowest score, #relevant, #irrelevant, its own wins); the driver adds the
  cross-partition wins. Counts are integers, so the AUC numerator is exact and the division is
  the one numpy does;
- ``coverage`` / ``gini``: each bucket returns how often each item appears in its users' top-k;
  Spark sums them by item; the driver gets one row per distinct recommended item and calls
  :func:`metrics.beyond.coverage` / :func:`metrics.beyond.gini`;
- ``novelty`` / ``popularity``: the training item counts are computed once (Spark
  ``groupBy(item).count()``, or ``value_counts`` of a pandas frame), shipped to every bucket
  and handed to ``metrics.evaluate`` through a stand-in for its ``train`` argument.

What reaches the driver: one JSON row of counts per bucket, the per-user table (the
``Evaluation`` contract holds it as pandas; pass ``collect_per_user=False`` to keep it in Spark,
then the summary is aggregated in Spark and the table can go to ``per_user_path``), one row per
distinct recommended item when coverage/gini are asked, one row per range partition for
``global_auc``, and the training item counts for novelty/popularity.

Exactness: per-user values are equal to the numpy engine's up to floating-point summation
order inside a user's row (observed differences ~1e-16; the tests demand 1e-9); with the
per-user table collected, summaries are computed with the same numpy expressions in the same
user order; ``global_auc``, ``coverage`` and ``gini`` are exact; counts are sums of integers.

Row order: the numpy engine's ``tie_break="input_order"`` and the summation order of a user's
rating errors follow the run's row order. Here that order is Spark's
``monotonically_increasing_id`` (partition, then position), which is the file order of a single
Parquet file and the pandas order of a frame made with ``createDataFrame``.

The split helpers (``global_time_spark``, ``leave_one_out_spark``) and ``topk_spark`` give the
same rows as :mod:`harness.split` and a pandas sort. PySpark is imported lazily, so this module
imports without it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import metrics
from metrics import beyond, rating
from metrics import scores as score_metrics
from metrics.engine import batches, prepare, validate_qrels, validate_run
from metrics.options import CHOICES, Options, resolve_options
from metrics.registry import MetricSpec, parse

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "JAVA17_HOME",
    "SparkSplit",
    "evaluate_spark",
    "global_time_spark",
    "leave_one_out_spark",
    "spark_session",
    "topk_spark",
]

#: The JDK the NOTES pin (another JDK may be installed on the same machine).
JAVA17_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"

_MICRO = {"precision", "recall", "f1"}
_POOLED_RUN = {"coverage", "gini"}
# PySpark 4.x warns on every pandas conversion that pandas 3 is not "fully supported".
_PANDAS3_WARNING = "PySpark does not yet fully support pandas"

# Row kinds of the bucket function's output (one schema, four kinds of rows).
_USER, _COUNTS, _ITEMS, _SCORES = 0, 1, 2, 3


# --------------------------------------------------------------------------------- session


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
    the session time zone is UTC and local masters use 8 shuffle partitions. ``config`` entries
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
    with _quiet():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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


# ---------------------------------------------------------------------------------- inputs


def _frame(spark: SparkSession, data: Any, what: str) -> DataFrame:
    """A Spark DataFrame from a Spark DataFrame, a Parquet path or a pandas DataFrame."""
    if isinstance(data, str | os.PathLike):
        return spark.read.parquet(os.fspath(data))
    if isinstance(data, pd.DataFrame):
        plain = data.reset_index(drop=True)
        for c in plain.columns:  # pandas 3 `str` columns: hand Arrow plain Python strings
            if isinstance(plain[c].dtype, pd.StringDtype):
                plain[c] = plain[c].astype(object)
        with _quiet():
            return spark.createDataFrame(plain)
    if hasattr(data, "schema") and hasattr(data, "select"):
        return data
    raise ValueError(
        f"{what} must be a Spark DataFrame, a Parquet path or a pandas DataFrame "
        f"(got {type(data).__name__})"
    )


def _check_columns(df: DataFrame, needed: tuple[str, ...], what: str) -> None:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ValueError(
            f"{what} is missing column {missing[0]!r}; it needs {list(needed)}, "
            f"found {list(df.columns)}"
        )


def _id_kind(df: DataFrame, column: str) -> str:
    """``"bigint"`` for integer ids, ``"string"`` for text ids (the numpy engine's two kinds)."""
    from pyspark.sql import types as st

    dtype = df.schema[column].dataType
    if isinstance(dtype, st.ByteType | st.ShortType | st.IntegerType | st.LongType):
        return "bigint"
    if isinstance(dtype, st.StringType):
        return "string"
    raise ValueError(
        f"ids in column {column!r} must be integers or strings (got {dtype.simpleString()})"
    )


def _common_kind(a: DataFrame, b: DataFrame, column: str) -> str:
    ka, kb = _id_kind(a, column), _id_kind(b, column)
    if ka != kb:
        raise ValueError(
            f"column {column!r} holds integers in one table and strings in the other "
            f"(qrels {ka}, run {kb}); convert both to the same type"
        )
    return ka


# ------------------------------------------------------------------------------ evaluation


@dataclass(frozen=True)
class _Plan:
    """Everything a bucket needs; pickled once into the bucket function."""

    names: tuple[str, ...]  # requested names, output order
    specs: tuple[MetricSpec, ...]
    local: tuple[str, ...]  # names metrics.evaluate computes in each bucket
    micro_ks: tuple[int | None, ...]  # cutoffs whose hits / list lengths are pooled
    run_ks: tuple[int | None, ...]  # cutoffs of coverage / gini
    need_nrel: bool
    need_cand: bool  # gauc weights
    need_scores: bool  # global_auc histogram
    need_errors: bool  # rmse / mae sums
    preset: str | None
    overrides: dict[str, Any]
    batch_cells: int
    user_kind: str
    item_kind: str
    popularity: pd.Series | None = field(default=None, compare=False)

    @property
    def options(self) -> Options:
        return resolve_options(self.preset, **self.overrides)

    @property
    def second_pass(self) -> bool:
        return bool(self.run_ks) or self.need_scores or self.need_errors

    def columns(self) -> list[tuple[str, str]]:
        """The bucket function's output columns (one row kind per ``_kind``) and Spark types."""
        cols = [("_kind", "int"), ("user", self.user_kind)]
        cols += [(f"m{i}", "double") for i in range(len(self.names))]
        cols += [(c, "double") for c in self.helper_columns()]
        cols += [("item", self.item_kind), ("k", "bigint"), ("freq", "bigint")]
        cols += [("score", "double"), ("pos", "bigint"), ("neg", "bigint"), ("counts", "string")]
        return cols

    def schema(self) -> str:
        """The output columns as a Spark DDL schema."""
        return ", ".join(f"{name} {kind}" for name, kind in self.columns())

    def helper_columns(self) -> list[str]:
        cols = ["n_rel"] if self.need_nrel else []
        for j in range(len(self.micro_ks)):
            cols += [f"hits{j}", f"nret{j}"]
        cols += ["cand"] if self.need_cand else []
        cols += ["sse", "sae", "npairs"] if self.need_errors else []
        return cols


class _TrainCounts:
    """Stands in for ``train`` inside a bucket: ``metrics.evaluate`` reads only
    ``train["item"].value_counts()`` (item popularity), here precomputed over the whole table."""

    columns = ("item",)

    def __init__(self, counts: pd.Series):
        self.counts = counts

    def __getitem__(self, key: str) -> _TrainCounts:
        if key != "item":
            raise KeyError(key)
        return self

    def value_counts(self) -> pd.Series:
        """The global item counts."""
        return self.counts

    def to_numpy(self) -> np.ndarray:
        """Distinct training items (all that a catalog-size computation needs)."""
        return self.counts.index.to_numpy()


def _named(names: Iterable[str] | str | MetricSpec) -> dict[str, MetricSpec]:
    """Requested names → parsed specs, de-duplicated as ``metrics.evaluate`` does."""
    items = [names] if isinstance(names, str | MetricSpec) else list(names)
    if not items:
        raise ValueError("no metric requested: pass at least one name, e.g. ['ndcg@10']")
    return {str(n): parse(n) for n in items}


def _make_plan(
    named: dict[str, MetricSpec],
    opts: Options,
    preset: str | None,
    overrides: dict[str, Any],
    batch_cells: int,
    user_kind: str,
    item_kind: str,
    popularity: pd.Series | None,
) -> _Plan:
    specs = list(named.values())
    micro_ks = tuple(
        dict.fromkeys(s.k for s in specs if opts.average == "micro" and s.metric in _MICRO)
    )
    run_ks = tuple(dict.fromkeys(s.k for s in specs if s.metric in _POOLED_RUN))
    local = [n for n, s in named.items() if s.metric not in _POOLED_RUN | {"global_auc"}]
    helpers: list[str] = []
    if "global_auc" in {s.metric for s in specs}:
        helpers.append("auc")  # keeps the per-user AUC (and its count) of every bucket
    need_nrel = bool(micro_ks)
    if need_nrel:
        helpers.append("num_rel")
    for k in micro_ks:
        helpers += [str(MetricSpec("num_rel_ret", k)), str(MetricSpec("num_ret", k))]
    if not local and not helpers:
        helpers.append("num_rel")  # coverage / gini only: one cheap metric for the counts
    local += [h for h in helpers if h not in local]
    return _Plan(
        names=tuple(named),
        specs=tuple(specs),
        local=tuple(local),
        micro_ks=micro_ks,
        run_ks=run_ks,
        need_nrel=need_nrel,
        need_cand=any(s.metric == "gauc" for s in specs),
        need_scores=any(s.metric == "global_auc" for s in specs),
        need_errors=any(s.definition.kind == "rating" for s in specs),
        preset=preset,
        overrides=overrides,
        batch_cells=batch_cells,
        user_kind=user_kind,
        item_kind=item_kind,
        popularity=popularity,
    )


def _count_keys(specs: Iterable[MetricSpec]) -> list[str]:
    """Keys of ``Evaluation.counts`` in the order ``metrics.evaluate`` writes them."""
    keys = [
        "users",
        "users_without_relevant",
        "users_missing_from_run",
        "truth_users_not_evaluated",
        "run_users_not_in_truth",
    ]
    for s in specs:
        extra = {"score": "auc_undefined_users", "rating": "rating_pairs"}.get(s.definition.kind)
        if extra and extra not in keys:
            keys.append(extra)
    return keys


def _placeholder_user(users: pd.Series, user_kind: str) -> Any:
    """A user id absent from ``users`` (of the same kind)."""
    if user_kind == "bigint":
        top = int(users.max())
        return top + 1 if top < np.iinfo(np.int64).max else int(users.min()) - 1
    return "\x00" * (int(users.astype(str).str.len().max()) + 1)


def _bucket(plan: _Plan, run: pd.DataFrame, qrels: pd.DataFrame) -> pd.DataFrame:
    """One bucket: ``metrics.evaluate`` on its rows, plus the pieces of the pooled metrics."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS3_WARNING, category=FutureWarning)
        run = run.sort_values("_row", kind="stable")[["user", "item", "score"]]
        return _evaluate_bucket(
            plan,
            qrels[["user", "item", "relevance"]].reset_index(drop=True),
            run.reset_index(drop=True),
        )


def _evaluate_bucket(plan: _Plan, qrels: pd.DataFrame, run: pd.DataFrame) -> pd.DataFrame:
    opts = plan.options
    rows = {"_qrels_rows": len(qrels), "_run_rows": len(run)}
    empty = dict.fromkeys(_count_keys(plan.specs), 0)
    if len(qrels) == 0:  # only users the truth does not know: nobody to evaluate
        if len(run):
            validate_run(run)
        counts = empty | {"run_users_not_in_truth": int(run["user"].nunique())}
        return _assemble(plan, [_counts_block(counts | rows)])
    placeholder = False
    if len(run) == 0:
        validate_qrels(qrels)
        if opts.user_set == "intersection":
            counts = empty | {"truth_users_not_evaluated": int(qrels["user"].nunique())}
            return _assemble(plan, [_counts_block(counts | rows)])
        # metrics.evaluate needs a non-empty run: one row of a user the truth does not know
        user = _placeholder_user(qrels["user"], plan.user_kind)
        run = pd.DataFrame(
            {
                "user": pd.Series([user], dtype=qrels["user"].dtype),
                "item": qrels["item"].iloc[:1].to_numpy(),
                "score": [0.0],
            }
        )
        placeholder = True
    train = _TrainCounts(plan.popularity) if plan.popularity is not None else None
    ev = metrics.evaluate(
        qrels,
        run,
        list(plan.local),
        train=train,
        preset=plan.preset,
        batch_cells=plan.batch_cells,
        **plan.overrides,
    )
    counts = empty | ev.counts
    if placeholder:
        counts["run_users_not_in_truth"] -= 1
    per = ev.per_user
    n = len(per)
    block: dict[str, Any] = {"_kind": np.full(n, _USER, np.int32), "user": per.index.to_numpy()}
    for i, name in enumerate(plan.names):
        block[f"m{i}"] = per[name].to_numpy() if name in plan.local else np.full(n, np.nan)
    if plan.need_nrel:
        block["n_rel"] = per["num_rel"].to_numpy()
    for j, k in enumerate(plan.micro_ks):
        block[f"hits{j}"] = per[str(MetricSpec("num_rel_ret", k))].to_numpy()
        block[f"nret{j}"] = per[str(MetricSpec("num_ret", k))].to_numpy()
    if plan.need_cand:  # every run row is a scored candidate (scores are validated finite)
        sizes = run.groupby("user", sort=False).size()
        block["cand"] = sizes.reindex(per.index, fill_value=0).to_numpy(dtype=np.float64)
    blocks = [block, _counts_block(counts | rows)]
    if plan.second_pass:
        blocks += _pooled_pieces(plan, opts, qrels, run, block, n)
    return _assemble(plan, blocks)


def _pooled_pieces(
    plan: _Plan,
    opts: Options,
    qrels: pd.DataFrame,
    run: pd.DataFrame,
    block: dict[str, Any],
    n: int,
) -> list[dict[str, Any]]:
    """Top-k item counts, score histogram and per-user rating errors of one bucket.

    The same ``prepare`` / ``batches`` the numpy engine uses, read the way its accumulator reads
    them (``metrics.evaluate._Accumulator.add``).
    """
    prep = prepare(qrels, run, opts)
    ks = plan.run_ks
    depth = None if any(k is None for k in ks) else max((k for k in ks if k), default=1)
    tops: list[list[np.ndarray]] = [[] for _ in ks]
    pooled_scores: list[np.ndarray] = []
    pooled_relevant: list[np.ndarray] = []
    errors: list[np.ndarray] = [np.zeros(n), np.zeros(n), np.zeros(n)]
    need_candidates = plan.need_scores or plan.need_errors
    thr = opts.relevance_threshold
    for batch in batches(
        prep, opts, depth=depth, need_candidates=need_candidates, budget=plan.batch_cells
    ):
        j = batch.judged
        for idx, k in enumerate(ks):
            c = j.cut(k)
            valid = np.arange(c)[None, :] < j.n_ret[:, None]
            tops[idx].append(batch.top_items[:, :c][valid])
        if batch.scores is None or batch.labels is None:
            continue
        cand = np.isfinite(batch.scores)
        if plan.need_scores:
            pooled_scores.append(batch.scores[cand])
            pooled_relevant.append(np.nan_to_num(batch.labels[cand], nan=0.0) >= thr)
        if plan.need_errors:
            judged = cand & np.isfinite(batch.labels)
            rows = np.nonzero(judged)[0]
            parts = rating.user_errors(
                rows, batch.labels[judged], batch.scores[judged], len(batch.users)
            )
            for total, part in zip(errors, parts, strict=True):  # same order as numpy
                total[batch.users] += part
    out: list[dict[str, Any]] = []
    if plan.need_errors:
        block.update(sse=errors[0], sae=errors[1], npairs=errors[2])
    for idx, chunks in enumerate(tops):
        keys = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        items, freq = np.unique(prep.item_ids(keys), return_counts=True)
        out.append(
            {
                "_kind": np.full(len(items), _ITEMS, np.int32),
                "item": items,
                "k": np.full(len(items), idx, np.int64),
                "freq": freq.astype(np.int64),
            }
        )
    if plan.need_scores and pooled_scores:
        s = np.concatenate(pooled_scores)
        rel = np.concatenate(pooled_relevant)
        values, inverse = np.unique(s, return_inverse=True)
        out.append(
            {
                "_kind": np.full(len(values), _SCORES, np.int32),
                "score": values,
                "pos": np.bincount(inverse[rel], minlength=len(values)).astype(np.int64),
                "neg": np.bincount(inverse[~rel], minlength=len(values)).astype(np.int64),
            }
        )
    return out


def _counts_block(counts: dict[str, int]) -> dict[str, Any]:
    return {"_kind": np.array([_COUNTS], np.int32), "counts": [json.dumps(counts)]}


def _assemble(plan: _Plan, blocks: list[dict[str, Any]]) -> pd.DataFrame:
    """Stack row blocks into the output schema.

    A column a block does not have is filled with 0 (integers), NaN (doubles) or None (text):
    ``_kind`` says which columns a row uses, so integer ids never pass through floats.
    """
    sizes = [len(b["_kind"]) for b in blocks]
    columns: dict[str, Any] = {}
    for name, kind in plan.columns():
        if kind in ("int", "bigint"):
            dtype: Any = np.int32 if kind == "int" else np.int64
            fill: Any = 0
        elif kind == "double":
            dtype, fill = np.float64, np.nan
        else:
            dtype, fill = object, None
        parts = [
            np.asarray(b[name], dtype=dtype) if name in b else np.full(size, fill, dtype=dtype)
            for b, size in zip(blocks, sizes, strict=True)
        ]
        columns[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return pd.DataFrame(columns)


def evaluate_spark(
    qrels: Any,
    run: Any,
    names: Iterable[str] | str,
    *,
    spark: SparkSession,
    buckets: int | None = None,
    train: Any = None,
    catalog: Any = None,
    preset: str | None = None,
    batch_cells: int = 1 << 23,
    per_user_path: str | os.PathLike[str] | None = None,
    collect_per_user: bool = True,
    **options: Any,
) -> metrics.Evaluation:
    """:func:`metrics.evaluate` on Spark: the same ``Evaluation`` (summary, per_user, options,
    counts) for ``qrels`` (user, item, relevance) and ``run`` (user, item, score).

    ``qrels``, ``run`` and ``train`` are Spark DataFrames, Parquet paths or pandas DataFrames.
    ``buckets`` (default: twice ``spark.sql.shuffle.partitions``) is the number of user groups
    evaluated independently; each must fit in one Python worker. ``per_user_path`` writes the
    per-user table (``user`` plus one column per requested name) as Parquet from Spark.
    ``collect_per_user=False`` leaves ``per_user`` empty and aggregates the summary in Spark
    (for user counts the driver cannot hold). Other keywords are ``metrics.evaluate``'s options.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    opts = resolve_options(preset, **options)
    if isinstance(batch_cells, bool) or not isinstance(batch_cells, int) or batch_cells <= 0:
        raise ValueError(f"'batch_cells' must be a positive int (got {batch_cells!r})")
    named = _named(names)
    specs = list(named.values())
    wants = {s.metric for s in specs}
    if wants & {"novelty", "popularity"} and train is None:
        bad = next(n for n, s in named.items() if s.metric in ("novelty", "popularity"))
        raise ValueError(
            f"metric {bad!r} needs train= (a DataFrame with an 'item' column) for item popularity"
        )
    q = _frame(spark, qrels, "qrels")
    r = _frame(spark, run, "run")
    _check_columns(q, ("user", "item", "relevance"), "qrels")
    _check_columns(r, ("user", "item", "score"), "run")
    user_kind = _common_kind(q, r, "user")
    item_kind = _common_kind(q, r, "item")
    if buckets is None:
        buckets = 2 * int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets <= 0:
        raise ValueError(f"'buckets' must be a positive int (got {buckets!r})")

    if train is not None and not isinstance(train, pd.DataFrame):
        train = _frame(spark, train, "train")
    if train is not None and "item" not in train.columns:
        raise ValueError("train= needs an 'item' column")
    popularity = None
    if wants & {"novelty", "popularity"}:
        popularity = _popularity(train, item_kind)
    plan = _make_plan(
        named, opts, preset, dict(options), batch_cells, user_kind, item_kind, popularity
    )

    def bucketed(df: DataFrame, cols: list[str]) -> DataFrame:
        typed = df.select(
            sf.col("user").cast(user_kind).alias("user"),
            sf.col("item").cast(item_kind).alias("item"),
            *[sf.col(c).cast("double").alias(c) for c in cols],
        )
        return typed.withColumn("_bucket", sf.pmod(sf.xxhash64("user"), sf.lit(buckets)))

    r_b = bucketed(r, ["score"]).withColumn("_row", sf.monotonically_increasing_id())
    q_b = bucketed(q, ["relevance"])
    with _quiet():
        out = (
            r_b.groupBy("_bucket")
            .cogroup(q_b.groupBy("_bucket"))
            .applyInPandas(partial(_bucket, plan), plan.schema())
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
    try:
        with _python_errors(), _quiet():
            return _finish(
                spark,
                out,
                plan,
                opts,
                q,
                r,
                train,
                catalog,
                per_user_path,
                collect_per_user,
            )
    finally:
        out.unpersist()


def _popularity(train: Any, item_kind: str) -> pd.Series:
    """Training item counts, as ``train["item"].value_counts()`` gives them."""
    if isinstance(train, pd.DataFrame):
        return train["item"].value_counts()
    from pyspark.sql import functions as sf

    counts = pd.DataFrame(
        train.groupBy(sf.col("item").cast(item_kind).alias("item")).count().toPandas()
    )
    items = counts["item"].to_numpy(dtype=np.int64 if item_kind == "bigint" else object)
    return pd.Series(counts["count"].to_numpy(dtype=np.int64), index=items, name="count")


def _finish(
    spark: SparkSession,
    out: DataFrame,
    plan: _Plan,
    opts: Options,
    qrels: DataFrame,
    run: DataFrame,
    train: DataFrame | pd.DataFrame | None,
    catalog: Any,
    per_user_path: str | os.PathLike[str] | None,
    collect_per_user: bool,
) -> metrics.Evaluation:
    from pyspark.sql import functions as sf

    kind = sf.col("_kind")
    count_rows = [json.loads(row["counts"]) for row in out.filter(kind == _COUNTS).collect()]
    totals = {"_qrels_rows": 0, "_run_rows": 0}
    keys = _count_keys(plan.specs)
    counts = dict.fromkeys(keys, 0)
    for row in count_rows:
        for key, value in row.items():
            if key in totals:
                totals[key] += int(value)
            else:
                counts[key] = counts.get(key, 0) + int(value)
    if totals["_qrels_rows"] == 0:
        raise ValueError("qrels is empty: it needs at least one row")
    if totals["_run_rows"] == 0:
        raise ValueError("run is empty: it needs at least one row")

    users_rows = out.filter(kind == _USER)
    if per_user_path is not None:
        users_rows.select(
            "user", *[sf.col(f"m{i}").alias(name) for i, name in enumerate(plan.names)]
        ).write.mode("overwrite").parquet(os.fspath(per_user_path))

    pooled: dict[str, float] = {}
    if plan.need_scores:
        pooled["global_auc"] = _global_auc(spark, out.filter(kind == _SCORES))
    if plan.run_ks:
        pooled |= _run_pooled(out.filter(kind == _ITEMS), plan, qrels, run, train, catalog)

    helper_cols = plan.helper_columns()
    metric_cols = [f"m{i}" for i in range(len(plan.names))]
    if collect_per_user:
        table = pd.DataFrame(users_rows.select("user", *metric_cols, *helper_cols).toPandas())
        ids = table["user"].to_numpy(dtype=np.int64 if plan.user_kind == "bigint" else object)
        order = np.argsort(ids, kind="stable")
        cols = {c: table[c].to_numpy(dtype=np.float64)[order] for c in metric_cols + helper_cols}
        index = pd.Index(ids[order], name="user")
        sums: _Sums = _NumpySums(cols)
    else:
        cols = {}
        empty_ids = np.zeros(0, dtype=np.int64 if plan.user_kind == "bigint" else object)
        index = pd.Index(empty_ids, name="user")
        sums = _SparkSums(users_rows)
    summary = _summary(plan, opts, sums, pooled)
    per_user = pd.DataFrame(
        {name: cols.get(f"m{i}", np.zeros(0)) for i, name in enumerate(plan.names)},
        index=index,
    )
    return metrics.Evaluation(summary, per_user, opts.as_dict(), counts)


# -------------------------------------------------------------------------------- summary


class _Sums:
    """The aggregations ``metrics.evaluate`` makes over per-user columns."""

    def mean(self, col: str) -> float:
        raise NotImplementedError

    def nansum(self, col: str) -> float:
        raise NotImplementedError

    def micro(self, j: int, skip: bool) -> tuple[float, float, float]:
        """(Σ hits, Σ list lengths, Σ |T_u|) over included users, cutoff ``micro_ks[j]``."""
        raise NotImplementedError

    def gauc(self, col: str) -> float:
        raise NotImplementedError

    def errors(self) -> tuple[float, float, float]:
        """(Σ squared errors, Σ absolute errors, Σ pairs)."""
        raise NotImplementedError

    def compute(self, requests: list[tuple[Any, ...]]) -> list[Any]:
        """Answer ``(method, *args)`` requests in order."""
        return [getattr(self, name)(*args) for name, *args in requests]


class _NumpySums(_Sums):
    """Over collected per-user columns (users sorted as the numpy engine sorts them): the same
    numpy expressions as ``metrics.evaluate``."""

    def __init__(self, cols: dict[str, np.ndarray]):
        self.cols = cols

    def mean(self, col: str) -> float:
        values = self.cols[col]
        ok = ~np.isnan(values)
        return float(values[ok].mean()) if ok.any() else float("nan")

    def nansum(self, col: str) -> float:
        return float(np.nansum(self.cols[col]))

    def micro(self, j: int, skip: bool) -> tuple[float, float, float]:
        n_rel = self.cols["n_rel"]
        included = n_rel > 0 if skip else np.ones(len(n_rel), bool)
        return (
            self.cols[f"hits{j}"][included].sum(),
            self.cols[f"nret{j}"][included].sum(),
            n_rel[included].sum(),
        )

    def gauc(self, col: str) -> float:
        return score_metrics.gauc(self.cols[col], self.cols["cand"])

    def errors(self) -> tuple[float, float, float]:
        return self.cols["sse"].sum(), self.cols["sae"].sum(), self.cols["npairs"].sum()


class _SparkSums(_Sums):
    """The same sums as one Spark aggregation over the per-user rows (nothing collected but the
    sums; equal to the numpy sums up to summation order)."""

    def __init__(self, rows: DataFrame):
        self.rows = rows

    def compute(self, requests: list[tuple[Any, ...]]) -> list[Any]:
        from pyspark.sql import functions as sf

        def ok(c: str) -> Column:
            # pandas NaN reaches Spark as NULL through Arrow, and isnan(NULL) is false
            return sf.col(c).isNotNull() & ~sf.isnan(sf.col(c))

        def total(expr: Column) -> Column:
            return sf.coalesce(sf.sum(expr), sf.lit(0.0))

        exprs: list[Column] = []
        spans: list[int] = []
        for name, *args in requests:
            if name in ("mean", "nansum"):
                c = args[0]
                exprs += [total(sf.when(ok(c), sf.col(c))), sf.count(sf.when(ok(c), 1))]
            elif name == "micro":
                j, skip = args
                inc = (sf.col("n_rel") > 0) if skip else sf.lit(True)
                exprs += [total(sf.when(inc, sf.col(c))) for c in (f"hits{j}", f"nret{j}", "n_rel")]
            elif name == "gauc":
                c = args[0]
                exprs += [
                    total(sf.when(ok(c), sf.col(c) * sf.col("cand"))),
                    total(sf.when(ok(c), sf.col("cand"))),
                ]
            else:
                exprs += [total(sf.col(c)) for c in ("sse", "sae", "npairs")]
            spans.append(len(exprs))
        row = self.rows.agg(*exprs).first() if exprs else None
        values = [] if row is None else [float(v) for v in row]
        answers: list[Any] = []
        start = 0
        for (name, *_), stop in zip(requests, spans, strict=True):
            part = values[start:stop]
            start = stop
            if name == "mean":
                answers.append(part[0] / part[1] if part[1] else float("nan"))
            elif name == "nansum":
                answers.append(part[0])
            elif name == "gauc":
                answers.append(part[0] / part[1] if part[1] > 0 else float("nan"))
            else:
                answers.append(tuple(part))
        return answers


def _summary(plan: _Plan, opts: Options, sums: _Sums, pooled: dict[str, float]) -> dict[str, float]:
    """Summary values, by the rules of ``metrics.evaluate``'s ``_finish``."""
    requests: list[tuple[Any, ...]] = []
    skip = opts.empty_users == "skip"
    for i, spec in enumerate(plan.specs):
        d, col = spec.definition, f"m{i}"
        if d.kind == "ranking" and opts.average == "micro" and spec.metric in _MICRO:
            requests.append(("micro", plan.micro_ks.index(spec.k), skip))
        elif d.aggregation == "sum":
            requests.append(("nansum", col))
        elif spec.metric == "gauc":
            requests.append(("gauc", col))
        elif d.kind == "rating":
            requests.append(("errors",))
        elif spec.metric in _POOLED_RUN or spec.metric == "global_auc":
            requests.append(("pooled",))
        else:
            requests.append(("mean", col))
    asked = [r for r in requests if r[0] != "pooled"]
    answers = iter(sums.compute(asked))
    summary: dict[str, float] = {}
    for name, spec, req in zip(plan.names, plan.specs, requests, strict=True):
        if req[0] == "pooled":
            key = spec.metric if spec.metric == "global_auc" else str(spec)
            summary[name] = pooled[key]
            continue
        answer = next(answers)
        if req[0] == "micro":
            hits, nret, nrel = answer
            p = hits / max(nret, 1)
            r = hits / max(nrel, 1)
            micro = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}
            summary[name] = float(micro[spec.metric])
        elif req[0] == "errors":
            sse, sae, n = answer
            err = sse if spec.metric == "rmse" else sae
            with np.errstate(invalid="ignore", divide="ignore"):
                value = err / n if n else float("nan")
            summary[name] = float(np.sqrt(value)) if spec.metric == "rmse" else float(value)
        else:
            summary[name] = float(answer)
    return summary


def _global_auc(spark: SparkSession, rows: DataFrame) -> float:
    """AUC over every pooled (score, relevant) pair, from the buckets' score histograms.

    Histograms are summed by score, range-partitioned by score (equal scores share a partition)
    and each partition returns its lowest score, #relevant, #irrelevant and twice its own wins
    (relevant above irrelevant, ties 1/2). The driver adds each partition's relevant count times
    the irrelevant count of all lower partitions. Integer arithmetic throughout: the numerator
    is exact, and the final division is the one ``metrics.scores.auc`` does.
    """
    from pyspark.sql import functions as sf

    hist = rows.groupBy("score").agg(sf.sum("pos").alias("pos"), sf.sum("neg").alias("neg"))
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    found = (
        hist.repartitionByRange(parts, "score")
        .mapInPandas(_auc_partition, "lo double, npos bigint, nneg bigint, wins2 bigint")
        .collect()
    )
    found.sort(key=lambda row: row["lo"])
    wins2, neg_below, n_pos, n_neg = 0, 0, 0, 0
    for row in found:
        wins2 += int(row["wins2"]) + 2 * int(row["npos"]) * neg_below
        neg_below += int(row["nneg"])
        n_pos += int(row["npos"])
        n_neg += int(row["nneg"])
    pairs = float(n_pos) * float(n_neg)
    return float(wins2 / 2) / pairs if pairs > 0 else float("nan")


def _auc_partition(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """(lowest score, #relevant, #irrelevant, 2 × wins) of one score range."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS3_WARNING, category=FutureWarning)
        chunks = [f for f in frames if len(f)]
        if not chunks:
            return
        hist = pd.concat(chunks).sort_values("score", kind="stable")
        pos = hist["pos"].to_numpy(dtype=np.int64)
        neg = hist["neg"].to_numpy(dtype=np.int64)
        neg_before = np.cumsum(neg) - neg
        yield pd.DataFrame(
            {
                "lo": [float(hist["score"].iloc[0])],
                "npos": [int(pos.sum())],
                "nneg": [int(neg.sum())],
                "wins2": [int((pos * (2 * neg_before + neg)).sum())],
            }
        )


def _run_pooled(
    rows: DataFrame,
    plan: _Plan,
    qrels: DataFrame,
    run: DataFrame,
    train: DataFrame | pd.DataFrame | None,
    catalog: Any,
) -> dict[str, float]:
    """coverage / gini at each cutoff from the summed top-k item counts (one row per distinct
    recommended item reaches the driver: ``gini`` sorts the full count vector)."""
    from pyspark.sql import functions as sf

    freq = pd.DataFrame(rows.groupBy("k", "item").agg(sf.sum("freq").alias("freq")).toPandas())
    size = _catalog_size(catalog, plan, qrels, run, train)
    out: dict[str, float] = {}
    for j, k in enumerate(plan.run_ks):
        mine = freq[freq["k"] == j]
        counts = mine["freq"].to_numpy(dtype=np.float64)
        if len(counts) > size:
            raise ValueError(
                f"'catalog' has {size} items but the run recommends {len(counts)} "
                "distinct items; pass the full catalog"
            )
        out[str(MetricSpec("coverage", k))] = beyond.coverage(np.arange(len(counts)), size)
        out[str(MetricSpec("gini", k))] = beyond.gini(
            np.concatenate([counts, np.zeros(size - len(counts))])
        )
    return out


def _catalog_size(
    catalog: Any,
    plan: _Plan,
    qrels: DataFrame,
    run: DataFrame,
    train: DataFrame | pd.DataFrame | None,
) -> int:
    """As ``metrics.evaluate``: ``catalog`` (a size or the ids), else every item of the truth,
    the run and ``train``."""
    if catalog is None:
        from pyspark.sql import functions as sf

        items = qrels.select(sf.col("item").cast(plan.item_kind).alias("item")).union(
            run.select(sf.col("item").cast(plan.item_kind).alias("item"))
        )
        if isinstance(train, pd.DataFrame):
            distinct = pd.unique(train["item"].to_numpy(dtype=object))
            frame = _frame(qrels.sparkSession, pd.DataFrame({"item": distinct}), "train")
            items = items.union(frame.select(sf.col("item").cast(plan.item_kind)))
        elif train is not None:
            items = items.union(train.select(sf.col("item").cast(plan.item_kind)))
        return int(items.distinct().count())
    if isinstance(catalog, int | np.integer):
        return int(catalog)
    return len(pd.unique(np.asarray(list(catalog), dtype=object)))


# ---------------------------------------------------------------------------------- splits


@dataclass(frozen=True, eq=False)
class SparkSplit:
    """A train/test (and optional validation) split of a Spark DataFrame.

    The parts are lazy DataFrames holding the input's rows and columns unchanged (cache them if
    they are used more than once). ``stats`` holds what the split computed anyway (the cut of a
    time split); counts are left to the caller, as they would cost a Spark job each.
    """

    train: DataFrame
    test: DataFrame
    valid: DataFrame | None
    stats: dict[str, Any]
    name: str
    params: dict[str, Any]


def _check_interactions(df: DataFrame) -> None:
    from pyspark.sql import types as st

    missing = [c for c in ("user", "item", "timestamp") if c not in df.columns]
    if missing:
        raise ValueError(
            f"interactions frame is missing column {missing[0]!r} (got {list(df.columns)}); "
            "use harness.data.validate_interactions"
        )
    dtype = df.schema["timestamp"].dataType
    if not isinstance(dtype, st.ByteType | st.ShortType | st.IntegerType | st.LongType):
        raise ValueError(
            f"column 'timestamp' must hold int64 epoch seconds (got type "
            f"{dtype.simpleString()}); use harness.data.validate_interactions"
        )


def _quantile_index(n: int, q: float) -> int:
    """0-based order statistic ``np.quantile(x, q, method="higher")`` picks among ``n`` values."""
    return int(np.ceil((n - 1) * np.float64(q)))


def _kth_smallest(df: DataFrame, column: str, index: int, n: int) -> int:
    """The exact value at 0-based rank ``index`` of ``column`` (``n`` non-null values).

    ``approxQuantile`` brackets the rank; one aggregation then counts the values below the
    bracket and collects the few inside it, so the driver sorts about ``4 · eps · n`` values.
    A bracket that misses (it should not) is widened until it covers everything.
    """
    from pyspark.sql import functions as sf

    col = sf.col(column)
    eps = float(np.clip(2000.0 / max(n, 1), 1e-5, 1e-2))
    while True:
        p = (index + 0.5) / n
        lo_p, hi_p = p - 2 * eps, p + 2 * eps
        probs = [x for x in (lo_p, hi_p) if 0.0 < x < 1.0]
        found = iter(df.approxQuantile(column, probs, eps / 4) if probs else [])
        lo = next(found) if 0.0 < lo_p < 1.0 else None
        hi = next(found) if 0.0 < hi_p < 1.0 else None
        inside = col.isNotNull()
        if lo is not None:
            inside &= col >= sf.lit(int(lo))
        if hi is not None:
            inside &= col <= sf.lit(int(hi))
        below = sf.count(sf.when(col < sf.lit(int(lo)), 1)) if lo is not None else sf.lit(0)
        row = df.agg(below.alias("below"), sf.collect_list(sf.when(inside, col)).alias("w")).first()
        assert row is not None
        window = sorted(int(v) for v in row["w"])
        at = index - int(row["below"])
        if 0 <= at < len(window):
            return window[at]
        eps *= 8


def _resolve_cut(df: DataFrame, value: Any, name: str) -> int:
    """A cut in epoch seconds, resolved exactly as :func:`harness.split.global_time` does."""
    from harness.split import _is_quantile, _resolve_time

    if _is_quantile(value):
        from pyspark.sql import functions as sf

        n = df.filter(sf.col("timestamp").isNotNull()).count()
        if n == 0:
            raise ValueError(f"'{name}' is a quantile but the frame is empty")
        return _kth_smallest(df, "timestamp", _quantile_index(n, float(value)), n)
    return _resolve_time(value, np.zeros(0, dtype=np.int64), name)


def global_time_spark(
    df: DataFrame,
    cut: str | float | dt.datetime,
    valid_cut: str | float | dt.datetime | None = None,
) -> SparkSplit:
    """:func:`harness.split.global_time` on Spark: test = events at or after ``cut``.

    A quantile cut is the same observed timestamp ``np.quantile(ts, q, method="higher")``
    returns (the order statistic at ``ceil((n - 1) q)``), found exactly (see ``_kth_smallest``);
    a date cut is parsed by the same function as the numpy split. Validation = ``[valid_cut,
    cut)``, with the same checks.
    """
    from pyspark.sql import functions as sf

    from harness.split import _is_quantile, _iso

    _check_interactions(df)
    ts = sf.col("timestamp")
    cut_s = _resolve_cut(df, cut, "cut")
    stats: dict[str, Any] = {"method": "global_time", "cut": cut_s, "cut_iso": _iso(cut_s)}
    valid = None
    train = df.filter(ts < sf.lit(cut_s))
    if valid_cut is not None:
        valid_s = _resolve_cut(df, valid_cut, "valid_cut")
        both = _is_quantile(cut) and _is_quantile(valid_cut)
        if (both and float(valid_cut) >= float(cut)) or (  # type: ignore[arg-type]
            not both and valid_s >= cut_s
        ):
            raise ValueError(
                f"'valid_cut' must be earlier than 'cut' (got valid_cut={_iso(valid_s)} "
                f">= cut={_iso(cut_s)})"
            )
        valid = df.filter((ts >= sf.lit(valid_s)) & (ts < sf.lit(cut_s)))
        train = df.filter(ts < sf.lit(valid_s))
        stats.update(valid_cut=valid_s, valid_cut_iso=_iso(valid_s))
    else:
        stats.update(valid_cut=None, valid_cut_iso=None)
    test = df.filter(ts >= sf.lit(cut_s))
    params = {"cut": cut, "valid_cut": valid_cut}
    return SparkSplit(train, test, valid, stats, "global_time", params)


def leave_one_out_spark(df: DataFrame, valid: bool = False, min_history: int = 2) -> SparkSplit:
    """:func:`harness.split.leave_one_out` on Spark: each user's latest event is test.

    "Latest" is the last in the order (timestamp, item id, input row), as in the numpy split;
    the input row is Spark's ``monotonically_increasing_id`` (see the module docstring). Users
    with fewer than ``min_history`` events stay train-only; validation (the event before the
    test one) needs ``min_history + 1`` events.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    _check_interactions(df)
    if isinstance(min_history, bool) or not isinstance(min_history, int) or min_history < 1:
        raise ValueError(f"'min_history' must be an int >= 1 (got {min_history!r})")
    cols = df.columns
    latest = Window.partitionBy("user").orderBy(
        sf.col("timestamp").desc(), sf.col("item").desc(), sf.col("_loo_row").desc()
    )
    marked = (
        df.withColumn("_loo_row", sf.monotonically_increasing_id())
        .withColumn("_loo_from_end", sf.row_number().over(latest) - 1)
        .withColumn("_loo_n", sf.count(sf.lit(1)).over(Window.partitionBy("user")))
    )
    from_end, n = sf.col("_loo_from_end"), sf.col("_loo_n")
    is_test = (from_end == 0) & (n >= min_history)
    is_valid = (from_end == 1) & (n >= min_history + 1) if valid else sf.lit(False)
    test = marked.filter(is_test).select(*cols)
    valid_df = marked.filter(is_valid).select(*cols) if valid else None
    train = marked.filter(~is_test & ~is_valid).select(*cols)
    stats = {"method": "leave_one_out"}
    params = {"valid": valid, "min_history": min_history}
    return SparkSplit(train, test, valid_df, stats, "leave_one_out", params)


# ------------------------------------------------------------------------------------ top-k


def topk_spark(scores_df: DataFrame, k: int, tie_break: str = "item_asc") -> DataFrame:
    """Each user's ``k`` best rows of a (user, item, score) table, with a 1-based ``rank``.

    Order: score descending, then the tie rule of ``metrics`` (``item_asc``, ``item_desc`` or
    ``input_order`` = Spark's row order). Scores must be finite, as in ``metrics.evaluate``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(f"'k' must be a positive int (got {k!r})")
    if tie_break not in CHOICES["tie_break"]:
        raise ValueError(
            f"option 'tie_break' must be one of {', '.join(map(repr, CHOICES['tie_break']))} "
            f"(got {tie_break!r})"
        )
    _check_columns(scores_df, ("user", "item", "score"), "scores")
    cols = scores_df.columns
    df = scores_df
    if tie_break == "input_order":
        df = df.withColumn("_topk_row", sf.monotonically_increasing_id())
        tie = sf.col("_topk_row").asc()
    else:
        tie = sf.col("item").asc() if tie_break == "item_asc" else sf.col("item").desc()
    order = Window.partitionBy("user").orderBy(sf.col("score").desc(), tie)
    ranked = df.withColumn("rank", sf.row_number().over(order))
    return ranked.filter(sf.col("rank") <= k).select(*cols, "rank")
