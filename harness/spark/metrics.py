"""Per-user metrics on Spark: ``metrics.evaluate`` run per bucket of users (``applyInPandas``).

Nothing here defines or names a metric. ``evaluate_spark`` hashes every user to one of ``B``
buckets, co-groups the run and the truth by bucket and calls :func:`metrics.evaluate` on each
bucket's rows, so every per-user value comes from the same kernels, options and tie rules as the
in-process engine. A user's rows never span two buckets. Each bucket returns its per-user rows
and its mergeable :class:`metrics.State` (sums and counts as one JSON row, count tables keyed by
item or score as rows); :mod:`harness.spark.aggregate` adds the tables by key in Spark, merges
the sums with :func:`metrics.merge_states` and finishes with :func:`metrics.finish_state`, the
functions ``metrics.evaluate`` itself finishes with.

What reaches the driver: one JSON row per bucket, one row per distinct key of the count tables
(recommended items for coverage/gini, distinct scores for global_auc), the per-user table unless
``collect_per_user=False``, and the training item counts for novelty/popularity.

Row order: the numpy engine's ``tie_break="input_order"`` and the summation order of a user's
rating errors follow the run's row order. Here that order is Spark's
``monotonically_increasing_id`` (partition, then position), which is the file order of a single
Parquet file and the pandas order of a frame made with ``createDataFrame``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import metrics
from harness.spark.io import _common_kind, _frame
from harness.spark.session import _PANDAS3_WARNING, _python_errors, _quiet
from metrics.checks import require_columns, require_int
from metrics.engine import validate_qrels, validate_run
from metrics.evaluate import State
from metrics.options import resolve_options
from metrics.registry import MetricDef, MetricSpec, list_metrics, parse, register

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Row kinds of the bucket function's output (one schema, three kinds of rows).
_USER, _STATE, _TABLE = 0, 1, 2
# Value columns of a state table row (tables have at most this many count columns).
_TABLE_VALUES = ("v0", "v1")


@dataclass(frozen=True)
class _Plan:
    """Everything a bucket needs; pickled once into the bucket function."""

    names: tuple[str, ...]  # requested names, output order
    preset: str | None
    overrides: dict[str, Any]
    batch_cells: int
    user_kind: str
    item_kind: str
    popularity: pd.Series | None = field(default=None, compare=False)
    train: pd.DataFrame | None = field(default=None, compare=False)  # side metrics only
    side: dict[str, Any] = field(default_factory=dict, compare=False)
    # the requested metrics' definitions: registered in a worker that lacks one (a plug-in)
    definitions: tuple[MetricDef, ...] = field(default=(), compare=False)

    def schema(self) -> str:
        """The output columns as a Spark DDL schema."""
        cols = [("_kind", "int"), ("user", self.user_kind)]
        cols += [(f"m{i}", "double") for i in range(len(self.names))]
        cols += [("tbl", "string"), ("item", self.item_kind), ("score", "double")]
        cols += [(c, "double") for c in _TABLE_VALUES] + [("state", "string")]
        return ", ".join(f"{name} {kind}" for name, kind in cols)


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

    @property
    def dtype(self) -> Any:
        """The item ids' dtype (``metrics.evaluate`` checks it is the run's kind)."""
        return self.counts.index.dtype

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


def _placeholder_user(users: pd.Series, user_kind: str) -> Any:
    """A user id absent from ``users`` (of the same kind)."""
    if user_kind == "bigint":
        top = int(users.max())
        return top + 1 if top < np.iinfo(np.int64).max else int(users.min()) - 1
    return "\x00" * (int(users.astype(str).str.len().max()) + 1)


def _bucket(plan: _Plan, run: pd.DataFrame, qrels: pd.DataFrame) -> pd.DataFrame:
    """One bucket: ``metrics.evaluate`` on its rows → per-user rows and its mergeable state."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS3_WARNING, category=FutureWarning)
        run = run.sort_values("_row", kind="stable")[["user", "item", "score"]]
        return _evaluate_bucket(
            plan,
            qrels[["user", "item", "relevance"]].reset_index(drop=True),
            run.reset_index(drop=True),
        )


def _evaluate_bucket(plan: _Plan, qrels: pd.DataFrame, run: pd.DataFrame) -> pd.DataFrame:
    for definition in plan.definitions:
        if definition.name not in list_metrics():
            register(definition)
    opts = resolve_options(plan.preset, **plan.overrides)
    rows = {"_qrels_rows": len(qrels), "_run_rows": len(run)}
    if len(qrels) == 0:  # only users the truth does not know: nobody to evaluate
        if len(run):
            validate_run(run)
        state = State(counts={"run_users_not_in_truth": int(run["user"].nunique())})
        return _assemble(plan, [_state_block(state, rows)])
    placeholder = False
    if len(run) == 0:
        validate_qrels(qrels)
        if opts.user_set == "intersection":
            state = State(counts={"truth_users_not_evaluated": int(qrels["user"].nunique())})
            return _assemble(plan, [_state_block(state, rows)])
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
    train: Any = plan.train
    if train is None and plan.popularity is not None:
        train = _TrainCounts(plan.popularity)
    ev = metrics.evaluate(
        qrels,
        run,
        list(plan.names),
        train=train,
        preset=plan.preset,
        batch_cells=plan.batch_cells,
        **plan.side,
        **plan.overrides,
    )
    state = ev.state or State()
    if placeholder:
        state.counts["run_users_not_in_truth"] -= 1
    per = ev.per_user
    block: dict[str, Any] = {
        "_kind": np.full(len(per), _USER, np.int32),
        "user": per.index.to_numpy(),
    }
    for i, name in enumerate(plan.names):
        block[f"m{i}"] = per[name].to_numpy()
    return _assemble(plan, [block, _state_block(state, rows), *_table_blocks(state)])


def _state_block(state: State, rows: dict[str, int]) -> dict[str, Any]:
    """A bucket's sums and counts (and its tables' layouts) as one JSON row."""
    layout = {k: [t.index.name, list(t.columns)] for k, t in state.tables.items()}
    text = json.dumps({"sums": state.sums, "counts": state.counts | rows, "tables": layout})
    return {"_kind": np.array([_STATE], np.int32), "state": [text]}


def _table_blocks(state: State) -> list[dict[str, Any]]:
    """A bucket's state tables as rows (key in ``item`` or ``score``, counts in ``v0``, ``v1``)."""
    out = []
    for key, table in state.tables.items():
        if len(table.columns) > len(_TABLE_VALUES):
            raise ValueError(f"state table {key!r} has more than {len(_TABLE_VALUES)} columns")
        n = len(table)
        block: dict[str, Any] = {
            "_kind": np.full(n, _TABLE, np.int32),
            "tbl": np.full(n, key, dtype=object),
            "item" if table.index.name == "item" else "score": table.index.to_numpy(),
        }
        for col, value in zip(_TABLE_VALUES, table.columns, strict=False):
            block[col] = table[value].to_numpy(dtype=np.float64)
        out.append(block)
    return out


def _assemble(plan: _Plan, blocks: list[dict[str, Any]]) -> pd.DataFrame:
    """Stack row blocks into the output schema.

    A column a block does not have is filled with 0 (integers), NaN (doubles) or None (text):
    ``_kind`` says which columns a row uses, so integer ids never pass through floats.
    """
    sizes = [len(b["_kind"]) for b in blocks]
    columns: dict[str, Any] = {}
    for item in plan.schema().split(", "):
        name, kind = item.split(" ")
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


def _side_frame(data: Any) -> Any:
    """An item-level side input as pandas (a Spark DataFrame is collected: one row per item)."""
    if hasattr(data, "toPandas"):
        with _quiet():
            return pd.DataFrame(data.toPandas())
    return data


def evaluate_spark(
    qrels: Any,
    run: Any,
    names: Iterable[str] | str,
    *,
    spark: SparkSession,
    buckets: int | None = None,
    train: Any = None,
    catalog: Any = None,
    item_features: Any = None,
    item_embeddings: Any = None,
    item_groups: Any = None,
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
    evaluated independently; each must fit in one Python worker. Each bucket returns its
    per-user rows and its mergeable :class:`metrics.State`; the driver merges the states and
    finishes them with ``metrics.finish_state`` (nothing here names a metric).
    ``per_user_path`` writes the per-user table (``user`` plus one column per requested name)
    as Parquet from Spark. ``collect_per_user=False`` leaves ``per_user`` empty (for user
    counts the driver cannot hold). The item-level side inputs (``item_features``,
    ``item_embeddings``, ``item_groups``) and, for the beyond-accuracy metrics that read
    training histories or co-occurrence, ``train`` are shipped to every bucket as pandas.
    Other keywords are ``metrics.evaluate``'s options.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    from harness.spark.aggregate import finish

    opts = resolve_options(preset, **options)
    require_int("batch_cells", batch_cells)
    named = _named(names)
    specs = list(named.values())
    needs = {need for s in specs for need in s.definition.inputs}  # declared by the definitions
    if "popularity" in needs and train is None:
        bad = next(n for n, s in named.items() if "popularity" in s.definition.inputs)
        raise ValueError(
            f"metric {bad!r} needs train= (a DataFrame with an 'item' column) for item popularity"
        )
    q = _frame(spark, qrels, "qrels")
    r = _frame(spark, run, "run")
    require_columns(q.columns, ("user", "item", "relevance"), "qrels")
    require_columns(r.columns, ("user", "item", "score"), "run")
    user_kind = _common_kind(q, r, "user")
    item_kind = _common_kind(q, r, "item")
    if buckets is None:
        buckets = 2 * int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    require_int("buckets", buckets)

    if train is not None and not isinstance(train, pd.DataFrame):
        train = _frame(spark, train, "train")
    if train is not None and "item" not in train.columns:
        raise ValueError("train= needs an 'item' column")
    popularity = None
    if "popularity" in needs:
        popularity = _popularity(train, item_kind)
    train_pd = None
    if "side" in needs and train is not None:
        train_pd = _side_frame(train)
    side = {
        key: _side_frame(value)
        for key, value in (
            ("item_features", item_features),
            ("item_embeddings", item_embeddings),
            ("item_groups", item_groups),
        )
        if value is not None
    }
    plan = _Plan(
        names=tuple(named),
        preset=preset,
        overrides=dict(options),
        batch_cells=batch_cells,
        user_kind=user_kind,
        item_kind=item_kind,
        popularity=popularity,
        train=train_pd,
        side=side,
        definitions=tuple({s.definition.name: s.definition for s in specs}.values()),
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
            return finish(out, plan, opts, q, r, train, catalog, per_user_path, collect_per_user)
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


# ------------------------------------------------------------- AUC counts over the catalog


@dataclass(frozen=True)
class _CountsView:
    """What a score metric's ``compute`` reads of a batch (``users``, ``opts``, ``auc``), when
    the AUC counts were counted over the whole catalog while ranking (no candidate rows: the
    pooled score table comes from the pooled wins, see :func:`evaluate_auc_counts_spark`)."""

    auc: Any
    opts: Any
    users: np.ndarray
    candidates: tuple[np.ndarray, np.ndarray, np.ndarray] = (
        np.zeros(0, np.int64),
        np.zeros(0),
        np.zeros(0, bool),
    )


def _counts_bucket(
    named: dict[str, MetricSpec], opts: Any, user_kind: str, frame: pd.DataFrame
) -> pd.DataFrame:
    """``applyInPandas`` body: a bucket's per-user values and mergeable state from its users'
    AUC counts, each metric by its own definition (``compute`` and ``reduction``), as
    ``metrics.evaluate``'s ``_state`` builds them."""
    from metrics.scores import AucCounts

    n = len(frame)
    counts = AucCounts(
        frame["wins"].to_numpy(np.float64),
        frame["n_pos"].to_numpy(np.float64),
        frame["n_neg"].to_numpy(np.float64),
    )
    view = _CountsView(counts, opts, np.arange(n))
    state = State()
    everyone = np.ones(n, bool)
    block: dict[str, Any] = {}
    for i, (name, spec) in enumerate(named.items()):
        d = spec.definition
        part = d.part(view, spec)  # type: ignore[arg-type]
        pieces = dict(part.pieces)
        pieces.setdefault("undefined", np.isnan(part.values))
        for template, piece in d.counts:
            counted = pieces.get(piece, np.zeros(n))
            state.counts[template.format(name=name)] = int(counted[everyone].sum())
        d.reduction.state(state, name, part.values, pieces, everyone, opts)
        block[f"m{i}"] = part.values
    text = json.dumps({"sums": state.sums, "counts": state.counts})
    ids = frame["user"].to_numpy(dtype=np.int64 if user_kind == "bigint" else object)
    columns: dict[str, Any] = {
        "_kind": np.r_[np.full(n, _USER, np.int32), np.int32(_STATE)].astype(np.int32),
        "user": np.r_[ids, np.zeros(1, np.int64) if user_kind == "bigint" else [None]],
    }
    for i in range(len(named)):
        columns[f"m{i}"] = np.r_[np.asarray(block[f"m{i}"], np.float64), np.nan]
    columns["state"] = np.array([None] * n + [text], dtype=object)
    return pd.DataFrame({k: pd.Series(v, dtype=v.dtype) for k, v in columns.items()})


def evaluate_auc_counts_spark(
    counts: DataFrame,
    names: Iterable[str],
    *,
    pooled_wins: float,
    buckets: int = 16,
    per_user_path: str | os.PathLike[str] | None = None,
    **options: Any,
) -> metrics.Evaluation:
    """Score metrics (AUC family) from per-user AUC counts over the whole catalog (a Spark
    table user, wins, n_pos, n_neg: :func:`harness.spark.models.plugin_auc_counts`) and the
    pooled wins: the in-process ``_catalog_scores`` on Spark. Each metric's own definition
    gives the per-user values and its mergeable state per bucket of users; the pooled score
    table is the few-row histogram with the same pair counts
    (:func:`harness.spark.aggregate._pairs_histogram`); :func:`metrics.finish_state` finishes.
    The per-user table (user, one column per name) is written to ``per_user_path``; nothing
    per user reaches the driver."""
    from pyspark.sql import functions as sf

    from harness.spark.aggregate import _PAIRS, _pairs_histogram
    from harness.spark.io import _id_kind

    opts = resolve_options(**options)  # a "preset" key is the preset (the CLI passes one)
    named = _named(list(names))
    user_kind = _id_kind(counts, "user")
    cols = [("_kind", "int"), ("user", user_kind)]
    cols += [(f"m{i}", "double") for i in range(len(named))] + [("state", "string")]
    schema = ", ".join(f"{n} {k}" for n, k in cols)

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        return _counts_bucket(named, opts, user_kind, frame)

    keyed = counts.withColumn("_b", sf.pmod(sf.xxhash64("user"), sf.lit(int(buckets))))
    with _python_errors(), _quiet():
        out = keyed.groupBy("_b").applyInPandas(run, schema).cache()
        try:
            found = [
                json.loads(r["state"]) for r in out.filter(sf.col("_kind") == _STATE).collect()
            ]
            state = metrics.merge_states(State(sums=p["sums"], counts=p["counts"]) for p in found)
            total = counts.agg(sf.sum("n_pos").alias("p"), sf.sum("n_neg").alias("n")).first()
            pos, neg = (int(total[c] or 0) if total is not None else 0 for c in ("p", "n"))
            for name, spec in named.items():
                key = spec.definition.reduction.table_key(name, spec)
                if key is not None and not np.isnan(pooled_wins):
                    wins2 = round(2 * pooled_wins)
                    state.tables[key] = _pairs_histogram(pos, neg, wins2, _PAIRS)
            if per_user_path is not None:
                out.filter(sf.col("_kind") == _USER).select(
                    "user", *[sf.col(f"m{i}").alias(n) for i, n in enumerate(named)]
                ).write.mode("overwrite").parquet(os.fspath(per_user_path))
        finally:
            out.unpersist()
    summary, found_counts = metrics.finish_state(state, list(named), None, **opts.as_dict())
    empty = pd.DataFrame(columns=list(named), dtype=float)
    return metrics.Evaluation(summary, empty, opts.as_dict(), found_counts)
