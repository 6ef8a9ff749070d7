"""The splits of :mod:`harness.split` on Spark (window functions, no collect): the same rows."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.split import HINT
from metrics.checks import require_columns, require_int

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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
    from harness.spark.io import _is_integer_type

    require_columns(df.columns, ("user", "item", "timestamp"), "interactions frame", HINT)
    dtype = df.schema["timestamp"].dataType
    if not _is_integer_type(dtype):
        raise ValueError(
            f"column 'timestamp' must hold int64 epoch seconds (got type "
            f"{dtype.simpleString()}); {HINT}"
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
        if row is None:  # an aggregate always returns one row
            raise RuntimeError("Spark returned no row for a quantile window aggregate")
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
    train_end = cut_s
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
        train_end = valid_s
        stats.update(valid_cut=valid_s, valid_cut_iso=_iso(valid_s))
    else:
        stats.update(valid_cut=None, valid_cut_iso=None)
    train = df.filter(ts < sf.lit(train_end))
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
    require_int("min_history", min_history)
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
