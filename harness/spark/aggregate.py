"""The global aggregation of the buckets' rows: summary values, pooled metrics, counts."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import metrics
from metrics import beyond
from metrics import scores as score_metrics
from metrics.options import Options
from metrics.registry import MetricSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

from harness.spark.io import _frame
from harness.spark.metrics import (
    _COUNTS,
    _ITEMS,
    _MICRO,
    _POOLED_RUN,
    _SCORES,
    _USER,
    _count_keys,
    _Plan,
)
from harness.spark.session import _PANDAS3_WARNING


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
