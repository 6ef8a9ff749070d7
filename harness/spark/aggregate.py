"""The buckets' states merged and finished by ``metrics``' own functions; nothing named here.

Sums and counts (one JSON row per bucket) are merged on the driver with
:func:`metrics.merge_states`; the count tables are added key by key in Spark first: a table keyed
by item sends one row per distinct item to the driver; a table keyed by score with columns
``pos, neg`` (relevant / irrelevant candidates per distinct score, which a finish reads only
through its pooled pairs: global AUC's) is reduced in Spark to its pair counts and reaches the
driver as the few-row histogram with the same counts (:func:`_pairs_histogram`), so its size
does not grow with the number of distinct scores.
:func:`metrics.finish_state` turns the merged state into the summary and counts, exactly as
:func:`metrics.evaluate` does in process.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import metrics
from harness.spark.io import _frame
from harness.spark.metrics import _STATE, _TABLE, _TABLE_VALUES, _USER, _Plan
from metrics.evaluate import State, finish_state, merge_states
from metrics.options import Options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def finish(
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
    """The ``Evaluation`` of the buckets' output rows (see :mod:`harness.spark.metrics`)."""
    from pyspark.sql import functions as sf

    kind = sf.col("_kind")
    found = [json.loads(row["state"]) for row in out.filter(kind == _STATE).collect()]
    rows = {"_qrels_rows": 0, "_run_rows": 0}
    for part in found:
        for key in rows:
            rows[key] += int(part["counts"].pop(key, 0))
    if rows["_qrels_rows"] == 0:
        raise ValueError("qrels is empty: it needs at least one row")
    if rows["_run_rows"] == 0:
        raise ValueError("run is empty: it needs at least one row")
    state = merge_states(State(sums=p["sums"], counts=p["counts"]) for p in found)
    layouts: dict[str, list[Any]] = {}
    for part in found:
        layouts.update(part["tables"])
    state.tables = _tables(out.filter(kind == _TABLE), layouts, plan)

    users_rows = out.filter(kind == _USER)
    if per_user_path is not None:
        users_rows.select(
            "user", *[sf.col(f"m{i}").alias(name) for i, name in enumerate(plan.names)]
        ).write.mode("overwrite").parquet(os.fspath(per_user_path))

    size = lambda: _catalog_size(catalog, plan, qrels, run, train)  # noqa: E731
    summary, counts = finish_state(state, list(plan.names), size, **opts.as_dict())

    metric_cols = [f"m{i}" for i in range(len(plan.names))]
    id_dtype = np.int64 if plan.user_kind == "bigint" else object
    if collect_per_user:
        table = pd.DataFrame(users_rows.select("user", *metric_cols).toPandas())
        ids = table["user"].to_numpy(dtype=id_dtype)
        order = np.argsort(ids, kind="stable")
        cols = {c: table[c].to_numpy(dtype=np.float64)[order] for c in metric_cols}
        index = pd.Index(ids[order], name="user")
    else:
        cols = {}
        index = pd.Index(np.zeros(0, dtype=id_dtype), name="user")
    per_user = pd.DataFrame(
        {name: cols.get(f"m{i}", np.zeros(0)) for i, name in enumerate(plan.names)},
        index=index,
    )
    return metrics.Evaluation(summary, per_user, opts.as_dict(), counts)


def _tables(rows: DataFrame, layouts: dict[str, list[Any]], plan: _Plan) -> dict[str, pd.DataFrame]:
    """The buckets' count tables added key by key in Spark; one pandas frame per table."""
    if not layouts:
        return {}
    from pyspark.sql import functions as sf

    summed = rows.groupBy("tbl", "item", "score").agg(*[sf.sum(c).alias(c) for c in _TABLE_VALUES])
    pairs = [n for n, (key, cols) in layouts.items() if key == "score" and cols == _PAIRS]
    frame = pd.DataFrame(summed.filter(~sf.col("tbl").isin(pairs)).toPandas())
    out: dict[str, pd.DataFrame] = {}
    for name, (key, columns) in layouts.items():
        if name in pairs:
            pos, neg, wins2 = _pooled_pairs(summed.filter(sf.col("tbl") == name))
            out[name] = _pairs_histogram(pos, neg, wins2, columns)
            continue
        mine = frame[frame["tbl"] == name]
        if key == "item":
            ids = mine["item"].to_numpy(dtype=np.int64 if plan.item_kind == "bigint" else object)
        else:
            ids = mine["score"].to_numpy(dtype=np.float64)
        data = {
            col: mine[value].to_numpy(dtype=np.float64).astype(np.int64)
            for value, col in zip(_TABLE_VALUES, columns, strict=False)
        }
        out[name] = pd.DataFrame(data, index=pd.Index(ids, name=key))
    return out


# A score-keyed table with these columns counts relevant / irrelevant candidates per distinct
# score, which a finish reads only through its pooled pairs (global AUC): reduced in Spark.
_PAIRS = ["pos", "neg"]


def _pooled_pairs(hist: DataFrame) -> tuple[int, int, int]:
    """(relevant, irrelevant, 2 · wins) of a score table's rows (``score``, ``v0`` relevant,
    ``v1`` irrelevant; a score may repeat): over every (relevant, irrelevant) pair, wins count
    the relevant candidate scored higher, ties 1/2.

    In Spark: the rows are summed per score and sorted (range partitions: each holds a
    contiguous run of scores); each partition sums ``pos · (2 · neg below + neg)`` over its own
    scores and its totals; the driver adds ``2 · pos · neg`` of the earlier partitions, from one
    row per partition. Integer counts throughout, so the numerator is exact.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    per_score = hist.groupBy("score").agg(
        sf.sum("v0").cast("bigint").alias("pos"), sf.sum("v1").cast("bigint").alias("neg")
    )
    ranged = per_score.orderBy("score").withColumn("_part", sf.spark_partition_id())
    below = Window.partitionBy("_part").orderBy("score").rowsBetween(Window.unboundedPreceding, -1)
    before = sf.coalesce(sf.sum("neg").over(below), sf.lit(0).cast("bigint"))
    local = ranged.withColumn("_w", sf.col("pos") * (2 * before + sf.col("neg")))
    parts = local.groupBy("_part").agg(
        sf.sum("pos").alias("pos"), sf.sum("neg").alias("neg"), sf.sum("_w").alias("w")
    )
    pos = neg = wins2 = 0
    for row in sorted(parts.collect(), key=lambda r: r["_part"]):
        wins2 += int(row["w"]) + 2 * int(row["pos"]) * neg
        pos, neg = pos + int(row["pos"]), neg + int(row["neg"])
    return pos, neg, wins2


def _pairs_histogram(pos: int, neg: int, wins2: int, columns: list[str]) -> pd.DataFrame:
    """The smallest score table (at most 4 rows) with ``pos`` relevant and ``neg`` irrelevant
    candidates whose pairs give ``2 · wins = wins2``: each relevant candidate adds
    ``2 · (irrelevant below) + (irrelevant tied)`` to it, ``q`` or ``q + 1`` for ``divmod(wins2,
    pos) = (q, r)``; so a pooled AUC finished from it is the same number, bit for bit."""
    if pos == 0 or neg == 0:
        rows = [(0.0, pos, neg)]
    else:
        q, r = divmod(wins2, pos)
        j, odd = divmod(q, 2)
        if odd:  # q = 2j + 1: tied with the (j+1)-th irrelevant; q + 1: above it
            rows = [(0.0, 0, j), (1.0, pos - r, 1), (2.0, r, 0), (3.0, 0, neg - j - 1)]
        else:  # q = 2j: above j irrelevant; q + 1: tied with the (j+1)-th
            tie = 1 if r else 0
            rows = [(0.0, 0, j), (1.0, pos - r, 0), (2.0, r, tie), (3.0, 0, neg - j - tie)]
        rows = [row for row in rows if row[1] or row[2]]
    frame = pd.DataFrame(rows, columns=["score", *columns[:2]]).set_index("score")
    return frame.astype(np.int64)


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
