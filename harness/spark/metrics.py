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
from metrics import rating
from metrics.engine import batches, prepare, validate_qrels, validate_run
from metrics.options import Options, resolve_options
from metrics.registry import MetricSpec, parse

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from harness.spark.io import _check_columns, _common_kind, _frame
from harness.spark.session import _PANDAS3_WARNING, _python_errors, _quiet

_MICRO = {"precision", "recall", "f1"}
_POOLED_RUN = {"coverage", "gini"}
# Row kinds of the bucket function's output (one schema, four kinds of rows).
_USER, _COUNTS, _ITEMS, _SCORES = 0, 1, 2, 3


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
        if opts.gauc_weight == "positives":  # RecBole: weight by the relevant candidates
            judged = run[["user", "item"]].merge(qrels, on=["user", "item"], how="left")
            hit = judged["relevance"].to_numpy(dtype=np.float64) >= opts.relevance_threshold
            sizes = pd.Series(hit, index=run.index).groupby(run["user"], sort=False).sum()
        else:
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


from harness.spark.aggregate import _finish  # noqa: E402
