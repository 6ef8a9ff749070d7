"""The buckets' states merged and finished by ``metrics``' own functions; nothing named here.

Sums and counts (one JSON row per bucket) are merged on the driver with
:func:`metrics.merge_states`; the count tables are added key by key in Spark first (one row per
distinct key reaches the driver); :func:`metrics.finish_state` turns the merged state into the
summary and counts, exactly as :func:`metrics.evaluate` does in process.
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
    frame = pd.DataFrame(summed.toPandas())
    out: dict[str, pd.DataFrame] = {}
    for name, (key, columns) in layouts.items():
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
