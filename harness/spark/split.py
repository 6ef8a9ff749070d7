"""The splits of :mod:`harness.split` on Spark (window functions, no collect): the same rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.data import time_value
from harness.split import HINT
from metrics.checks import require_columns, require_int

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True, eq=False)
class SparkSplit:
    """A train/test (and optional validation) split of a Spark DataFrame.

    The parts are lazy DataFrames holding the input's rows and columns unchanged: filters of the
    input, or of a frame persisted (memory and disk) because several parts or stats read it
    (the per-user window or hash of a split, the filtered training events, a part after its
    unseen events are dropped). The input itself is not persisted here. From a method alone,
    ``stats`` holds what the split computed anyway (the cut of a time split);
    :func:`make_split_spark` adds every stat of :class:`harness.split.Split` (counts, unseen and
    dropped events, leakage), from aggregates.
    """

    train: DataFrame
    test: DataFrame
    valid: DataFrame | None
    stats: dict[str, Any]
    name: str
    params: dict[str, Any]


def _check_interactions(df: DataFrame) -> None:
    from pyspark.sql import types as st

    from harness.spark.io import _is_integer_type

    require_columns(df.columns, ("user", "item", "timestamp"), "interactions frame", HINT)
    dtype = df.schema["timestamp"].dataType
    if not (_is_integer_type(dtype) or isinstance(dtype, st.DoubleType)):
        raise ValueError(
            f"column 'timestamp' must hold epoch seconds, bigint or double (got type "
            f"{dtype.simpleString()}); {HINT}"
        )


def _kept(df: DataFrame) -> DataFrame:
    """``df`` persisted (memory and disk): a split's parts and every stat of
    :func:`make_split_spark` read it, and each would otherwise compute it again from the input
    (a window over every user, a hash, a k-core)."""
    from pyspark import StorageLevel

    return df.persist(StorageLevel.MEMORY_AND_DISK)


def _quantile_index(n: int, q: float) -> int:
    """0-based order statistic ``np.quantile(x, q, method="higher")`` picks among ``n`` values."""
    return int(np.ceil((n - 1) * np.float64(q)))


#: Values a column may hold for :func:`_kth_smallest` to collect them all in one job (0.8 MB)
#: instead of bracketing the rank with ``approxQuantile`` first (a job of its own).
WHOLE_COLUMN_ROWS = 100_000


def _kth_smallest(df: DataFrame, column: str, index: int, n: int) -> Any:
    """The exact value at 0-based rank ``index`` of ``column`` (``n`` non-null values).

    Up to :data:`WHOLE_COLUMN_ROWS` values are collected and sorted on the driver. Beyond,
    ``approxQuantile`` brackets the rank; one aggregation then counts the values below the
    bracket and collects the few inside it, so the driver sorts about ``4 · eps · n`` values.
    A bracket that misses (it should not) is widened until it covers everything.
    """
    from pyspark.sql import functions as sf

    from harness.spark.io import _is_integer_type

    col = sf.col(column)
    exact: Callable[[Any], Any] = int if _is_integer_type(df.schema[column].dataType) else float
    eps = float(np.clip(2000.0 / max(n, 1), 1e-5, 1e-2))
    while True:
        p = (index + 0.5) / n
        lo_p, hi_p = p - 2 * eps, p + 2 * eps
        probs = [x for x in (lo_p, hi_p) if 0.0 < x < 1.0] if n > WHOLE_COLUMN_ROWS else []
        found = df.approxQuantile(column, probs, eps / 4) if probs else []
        bounds = dict(zip(probs, found, strict=True))
        lo, hi = bounds.get(lo_p), bounds.get(hi_p)
        inside = col.isNotNull()
        if lo is not None:
            inside &= col >= sf.lit(exact(lo))
        if hi is not None:
            inside &= col <= sf.lit(exact(hi))
        below = sf.count(sf.when(col < sf.lit(exact(lo)), 1)) if lo is not None else sf.lit(0)
        row = df.agg(below.alias("below"), sf.collect_list(sf.when(inside, col)).alias("w")).first()
        if row is None:  # an aggregate always returns one row
            raise RuntimeError("Spark returned no row for a quantile window aggregate")
        window = sorted(exact(v) for v in row["w"])
        at = index - int(row["below"])
        if 0 <= at < len(window):
            return window[at]
        eps *= 8


def _resolve_cut(df: DataFrame, value: Any, name: str) -> int | float:
    """A cut in epoch seconds, resolved exactly as :func:`harness.split.global_time` does."""
    from harness.split import _is_quantile, _resolve_time

    if _is_quantile(value):
        from pyspark.sql import functions as sf

        n = df.filter(sf.col("timestamp").isNotNull()).count()
        if n == 0:
            raise ValueError(f"'{name}' is a quantile but the frame is empty")
        return time_value(_kth_smallest(df, "timestamp", _quantile_index(n, float(value)), n))
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

    from harness.split import _iso, check_cut_order

    _check_interactions(df)
    ts = sf.col("timestamp")
    cut_s = _resolve_cut(df, cut, "split.cut")
    stats: dict[str, Any] = {"method": "global_time", "cut": cut_s, "cut_iso": _iso(cut_s)}
    valid = None
    train_end = cut_s
    if valid_cut is not None:
        valid_s = _resolve_cut(df, valid_cut, "split.valid_cut")
        check_cut_order(cut, valid_cut, cut_s, valid_s)
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
    require_int("split.min_history", min_history, 1)
    cols = df.columns
    latest = Window.partitionBy("user").orderBy(
        sf.col("timestamp").desc(), sf.col("item").desc(), sf.col("_loo_row").desc()
    )
    marked = _kept(
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


def user_time_spark(df: DataFrame, test_ratio: float = 0.2, valid_ratio: float = 0.0) -> SparkSplit:
    """:func:`harness.split.user_time` on Spark: each user's latest ``round(n * test_ratio)``
    events are test (at least one training event kept), validation just before them.

    Ties as in :func:`leave_one_out_spark`; the counts round half up in the same integer arithmetic.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    from harness.split import _check_ratios, ratio_parts

    _check_interactions(df)
    _check_ratios(test_ratio, valid_ratio)
    cols = df.columns
    latest = Window.partitionBy("user").orderBy(
        sf.col("timestamp").desc(), sf.col("item").desc(), sf.col("_ut_row").desc()
    )
    n = sf.col("_ut_n")

    def share(ratio: float) -> Column:  # harness.split.round_share, in long integers
        p, q = ratio_parts(ratio)
        return sf.expr(f"(2 * _ut_n * {p} + {q}) div {2 * q}")

    n_test = sf.least(n - 1, share(test_ratio))
    n_valid = sf.least(n - 1 - n_test, share(valid_ratio))
    marked = _kept(
        df.withColumn("_ut_row", sf.monotonically_increasing_id())
        .withColumn("_ut_from_end", sf.row_number().over(latest) - 1)
        .withColumn("_ut_n", sf.count(sf.lit(1)).over(Window.partitionBy("user")))
    )
    from_end = sf.col("_ut_from_end")
    is_test = from_end < n_test
    is_valid = (from_end >= n_test) & (from_end < n_test + n_valid)
    valid = valid_ratio > 0
    test = marked.filter(is_test).select(*cols)
    valid_df = marked.filter(is_valid).select(*cols) if valid else None
    train = marked.filter(~is_test & ~is_valid if valid else ~is_test).select(*cols)
    params = {"test_ratio": test_ratio, "valid_ratio": valid_ratio}
    return SparkSplit(train, test, valid_df, {"method": "user_time"}, "user_time", params)


_KEY = ("_rs_h", "user", "item", "timestamp", "_rs_occ")


def _random_keys(df: DataFrame, seed: int) -> DataFrame:
    """``df`` plus ``_rs_occ`` and ``_rs_h``: the occurrence and hash of
    :func:`harness.split.random_order`, computed by the same numpy code in the Python workers."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf
    from pyspark.sql.functions import pandas_udf

    from harness.hashing import hash_ids, mix, time_words

    seed = int(seed)

    @pandas_udf("long")  # type: ignore[call-overload, untyped-decorator, misc]
    def _hash(u: pd.Series, i: pd.Series, t: pd.Series, o: pd.Series) -> pd.Series:
        h = mix(seed, hash_ids(u), hash_ids(i), time_words(t.to_numpy()), o.to_numpy(np.int64))
        return pd.Series(h.view(np.int64))

    same = Window.partitionBy("user", "item", "timestamp")
    order = same.orderBy("rating") if "rating" in df.columns else same.orderBy(sf.lit(0))
    with_occ = df.withColumn("_rs_occ", (sf.row_number().over(order) - 1).cast("long"))
    return with_occ.withColumn(
        "_rs_h", _hash(sf.col("user"), sf.col("item"), sf.col("timestamp"), sf.col("_rs_occ"))
    )


def _before(key: tuple[Any, ...] | None) -> Any:
    """A condition: the row's (hash, user, item, timestamp, occurrence) sorts before ``key``
    (``None``: every row)."""
    from pyspark.sql import functions as sf

    if key is None:
        return sf.lit(True)
    cond = sf.lit(False)
    for name, value in reversed(list(zip(_KEY, key, strict=True))):
        col = sf.col(name)
        cond = (col < sf.lit(value)) | ((col == sf.lit(value)) & cond)
    return cond


def _key_at(keyed: DataFrame, index: int, n: int) -> tuple[Any, ...] | None:
    """The (hash, user, item, timestamp, occurrence) key at 0-based rank ``index`` among ``n``
    rows (``None`` past the end): the hash's order statistic exactly, then its ties (hash
    collisions, normally none) ordered on the driver."""
    from pyspark.sql import functions as sf

    if index >= n:
        return None
    h = _kth_smallest(keyed, "_rs_h", index, n)
    col = sf.col("_rs_h")
    row = keyed.agg(
        sf.count(sf.when(col < sf.lit(h), 1)).alias("below"),
        sf.collect_list(sf.when(col == sf.lit(h), sf.struct(*[sf.col(c) for c in _KEY]))).alias(
            "ties"
        ),
    ).first()
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    ties = sorted(tuple(t) for t in row["ties"])
    return ties[index - int(row["below"])]


def random_split_spark(
    df: DataFrame, test_ratio: float = 0.2, seed: int = 0, valid_ratio: float = 0.0
) -> SparkSplit:
    """:func:`harness.split.random_split` on Spark, the same rows: the ``round(n * test_ratio)``
    events first in the hash order of :func:`harness.split.random_order` are test, the next
    ``round(n * valid_ratio)`` validation.

    Costs a count, and per cut an approximate quantile and two aggregates (the exact order
    statistic); nothing but a few keys reaches the driver. The hashed frame the parts read is
    persisted (memory and disk), so the hash is computed once. Repeated identical events are
    interchangeable: which copy lands in test may differ from the numpy split only in columns
    other than ``user, item, timestamp, rating``.
    """
    from harness.split import _check_ratios, round_share

    _check_interactions(df)
    _check_ratios(test_ratio, valid_ratio)
    cols = df.columns
    keyed = _kept(_random_keys(df, seed))
    n = keyed.count()
    n_test, n_valid = round_share(n, test_ratio), round_share(n, valid_ratio)
    in_test = _before(_key_at(keyed, n_test, n))
    test = keyed.filter(in_test).select(*cols)
    valid = None
    in_train = ~in_test
    if valid_ratio > 0:
        in_head = _before(_key_at(keyed, n_test + n_valid, n))
        valid = keyed.filter(in_head & ~in_test).select(*cols)
        in_train = ~in_head
    train = keyed.filter(in_train).select(*cols)
    params = {"test_ratio": test_ratio, "seed": seed, "valid_ratio": valid_ratio}
    return SparkSplit(train, test, valid, {"method": "random"}, "random", params)


SPARK_METHODS: dict[str, Any] = {
    "global_time": global_time_spark,
    "leave_one_out": leave_one_out_spark,
    "user_time": user_time_spark,
    "random": random_split_spark,
}


# ------------------------------------------------------------------------------ filtering


def _counted(df: DataFrame, column: str, alias: str) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    return df.withColumn(alias, sf.count(sf.lit(1)).over(Window.partitionBy(column)))


def filter_train_spark(
    train: DataFrame, min_user_interactions: int = 0, min_item_interactions: int = 0, kcore: int = 0
) -> DataFrame:
    """The training filters of :func:`harness.split.apply_filters`: users with fewer than
    ``min_user_interactions`` events, then items with fewer than ``min_item_interactions`` (one
    pass each), then the ``kcore`` core (both counts, repeated until stable; one job and a
    local checkpoint per round)."""
    from pyspark.sql import functions as sf

    cols = train.columns
    if min_user_interactions > 1:
        train = (
            _counted(train, "user", "_f_n")
            .filter(sf.col("_f_n") >= min_user_interactions)
            .select(*cols)
        )
    if min_item_interactions > 1:
        train = (
            _counted(train, "item", "_f_n")
            .filter(sf.col("_f_n") >= min_item_interactions)
            .select(*cols)
        )
    if kcore > 1:
        while True:
            marked = _counted(_counted(train, "user", "_f_u"), "item", "_f_i").localCheckpoint()
            bad = (sf.col("_f_u") < kcore) | (sf.col("_f_i") < kcore)
            if marked.filter(bad).limit(1).count() == 0:
                break
            train = marked.filter(~bad).select(*cols)
    return train


def _seen_marks(part: DataFrame, train: DataFrame) -> DataFrame:
    """``part`` plus ``_user_seen`` / ``_item_seen``: whether its user / item is in ``train``."""
    from pyspark.sql import functions as sf

    users = train.select("user").distinct().withColumn("_user_seen", sf.lit(True))
    items = train.select("item").distinct().withColumn("_item_seen", sf.lit(True))
    marked = part.join(users, "user", "left").join(items, "item", "left")
    return marked.select(
        *part.columns,
        sf.coalesce(sf.col("_user_seen"), sf.lit(False)).alias("_user_seen"),
        sf.coalesce(sf.col("_item_seen"), sf.lit(False)).alias("_item_seen"),
    )


def _part_aggs(prefix: str, cond: Any = None) -> list[Any]:
    """Aggregates describing (the rows matching ``cond`` of) a part: events, users, items, time."""
    from pyspark.sql import functions as sf

    def only(col: Any) -> Any:
        return col if cond is None else sf.when(cond, col)

    return [
        sf.count(only(sf.lit(1))).alias(f"{prefix}_events"),
        sf.count_distinct(only(sf.col("user"))).alias(f"{prefix}_users"),
        sf.count_distinct(only(sf.col("item"))).alias(f"{prefix}_items"),
        sf.min(only(sf.col("timestamp"))).alias(f"{prefix}_tmin"),
        sf.max(only(sf.col("timestamp"))).alias(f"{prefix}_tmax"),
    ]


def _describe_row(row: Any, prefix: str, name: str) -> dict[str, Any]:
    tmin, tmax = row[f"{prefix}_tmin"], row[f"{prefix}_tmax"]
    return {
        f"n_{name}_events": int(row[f"{prefix}_events"]),
        f"n_{name}_users": int(row[f"{prefix}_users"]),
        f"n_{name}_items": int(row[f"{prefix}_items"]),
        f"{name}_time_min": None if tmin is None else time_value(tmin),
        f"{name}_time_max": None if tmax is None else time_value(tmax),
    }


def _unseen_spark(
    part: DataFrame, train: DataFrame, prefix: str, policy: str
) -> tuple[DataFrame, dict[str, Any]]:
    """:func:`harness.split._unseen` on Spark, plus the describe stats of the returned part:
    one aggregate job."""
    from pyspark.sql import functions as sf

    marked = _seen_marks(part, train)
    us, its = sf.col("_user_seen"), sf.col("_item_seen")
    seen = us & its
    row = marked.agg(
        sf.count(sf.when(~seen, 1)).alias("unseen"),
        sf.count(sf.when(~us, 1)).alias("unseen_user_events"),
        sf.count(sf.when(~its, 1)).alias("unseen_item_events"),
        sf.count_distinct(sf.when(~us, sf.col("user"))).alias("unseen_users"),
        sf.count_distinct(sf.when(~its, sf.col("item"))).alias("unseen_items"),
        *_part_aggs("all"),
        *_part_aggs("kept", seen),
    ).first()
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    unseen = int(row["unseen"])
    stats: dict[str, Any] = {
        f"{prefix}_unseen_events": unseen,
        f"{prefix}_unseen_user_events": int(row["unseen_user_events"]),
        f"{prefix}_unseen_item_events": int(row["unseen_item_events"]),
        f"{prefix}_unseen_users": int(row["unseen_users"]),
        f"{prefix}_unseen_items": int(row["unseen_items"]),
        f"{prefix}_dropped_events": 0,
        f"{prefix}_dropped_users": 0,
        f"{prefix}_dropped_items": 0,
    }
    if policy == "drop" and unseen:
        stats[f"{prefix}_dropped_events"] = unseen
        stats[f"{prefix}_dropped_users"] = int(row["all_users"]) - int(row["kept_users"])
        stats[f"{prefix}_dropped_items"] = int(row["all_items"]) - int(row["kept_items"])
        stats.update(_describe_row(row, "kept", prefix))
        return _kept(marked.filter(seen).select(*part.columns)), stats
    stats.update(_describe_row(row, "all", prefix))
    return part, stats


def _pairs_in_train_spark(train: DataFrame, part: DataFrame | None, name: str) -> dict[str, int]:
    """:func:`harness.split._pairs_in_train` on Spark: ``part``'s distinct (user, item) pairs
    and how many training holds too, in one join."""
    from pyspark.sql import functions as sf

    keys = (f"n_{name}_pairs", f"{name}_pairs_in_train")
    if part is None:
        return dict.fromkeys(keys, 0)
    known = train.select("user", "item").distinct().withColumn("_in_train", sf.lit(1))
    row = (
        part.select("user", "item")
        .distinct()
        .join(known, ["user", "item"], "left")
        .agg(sf.count(sf.lit(1)).alias("n"), sf.count("_in_train").alias("in_train"))
        .first()
    )
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    return {keys[0]: int(row["n"]), keys[1]: int(row["in_train"])}


def _leakage_spark(
    train: DataFrame, test: DataFrame, n_train: int, n_test: int, first_test: int | None
) -> dict[str, Any]:
    """:func:`harness.split._leakage` on Spark, exactly, in two jobs: one aggregate for the user
    and global shares; for the mean share, training/test counts per distinct timestamp,
    range-partitioned, each partition's running training count (the driver adds the totals of
    the partitions before it, one small row per partition)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    keys = (
        "leakage_user_train_after_test",
        "leakage_mean_train_after_test",
        "leakage_global_train_after_first_test",
    )
    if n_train == 0 or n_test == 0 or first_test is None:
        return dict.fromkeys(keys)
    ts = sf.col("timestamp")
    first = test.groupBy("user").agg(sf.min(ts).alias("_first_test"))
    row = (
        train.select("user", "timestamp")
        .join(first, "user", "left")
        .agg(
            sf.count(sf.when(ts > sf.col("_first_test"), 1)).alias("own"),
            sf.count(sf.when(ts > sf.lit(first_test), 1)).alias("global"),
        )
        .first()
    )
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    per_ts = (
        train.select(ts, sf.lit(1).alias("_a"), sf.lit(0).alias("_b"))
        .unionByName(test.select(ts, sf.lit(0).alias("_a"), sf.lit(1).alias("_b")))
        .groupBy("timestamp")
        .agg(sf.sum("_a").alias("_a"), sf.sum("_b").alias("_b"))
    )
    n_parts = max(int(per_ts.sparkSession.conf.get("spark.sql.shuffle.partitions") or 8), 1)
    running = (
        Window.partitionBy("_pid")
        .orderBy("timestamp")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    # per partition: its training events, its test events, and sum over its test events of
    # the training events after them counting only this partition and the later ones
    parts = (
        per_ts.repartitionByRange(n_parts, "timestamp")
        .withColumn("_pid", sf.spark_partition_id())
        .withColumn("_cum", sf.sum("_a").over(running))
        .groupBy("_pid")
        .agg(
            sf.sum("_a").alias("a"),
            sf.sum("_b").alias("b"),
            sf.sum(sf.col("_b") * (sf.lit(n_train) - sf.col("_cum"))).alias("later"),
        )
        .collect()
    )
    total_later, before = 0, 0
    for r in sorted(parts, key=lambda r: int(r["_pid"])):  # one row per partition
        total_later += int(r["later"]) - int(r["b"]) * before
        before += int(r["a"])
    mean_share = float(np.float64(total_later) / n_test / n_train)
    return {
        keys[0]: int(row["own"]) / n_train,
        keys[1]: mean_share,
        keys[2]: int(row["global"]) / n_train,
    }


def apply_filters_spark(
    split: SparkSplit,
    min_user_interactions: int = 0,
    min_item_interactions: int = 0,
    kcore: int = 0,
    unseen: str = "drop",
) -> SparkSplit:
    """:func:`harness.split.apply_filters` on Spark: the same training filters, unseen policy
    and stats (filtered, unseen and dropped counts, per-part counts and times, leakage), from a
    few aggregate jobs; the parts stay lazy DataFrames."""
    from pyspark.sql import functions as sf

    from harness.split import _unseen_zero, check_filters

    check_filters(min_user_interactions, min_item_interactions, kcore, unseen)
    train = filter_train_spark(split.train, min_user_interactions, min_item_interactions, kcore)
    if train is not split.train:
        train = _kept(train)
    after = train.agg(*_part_aggs("train")).first()
    if after is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    before = {"n": after["train_events"], "u": after["train_users"], "i": after["train_items"]}
    if max(min_user_interactions, min_item_interactions, kcore) > 1:
        first = split.train.agg(
            sf.count(sf.lit(1)).alias("n"),
            sf.count_distinct("user").alias("u"),
            sf.count_distinct("item").alias("i"),
        ).first()
        if first is None:  # an aggregate always returns one row
            raise RuntimeError("Spark returned no row for an aggregate")
        before = first.asDict()
    stats: dict[str, Any] = {
        "train_filtered_events": int(before["n"]) - int(after["train_events"]),
        "train_filtered_users": int(before["u"]) - int(after["train_users"]),
        "train_filtered_items": int(before["i"]) - int(after["train_items"]),
    }
    stats.update(_describe_row(after, "train", "train"))
    test, test_stats = _unseen_spark(split.test, train, "test", unseen)
    stats.update(test_stats)
    valid = None
    if split.valid is not None:
        valid, valid_stats = _unseen_spark(split.valid, train, "valid", unseen)
        stats.update(valid_stats)
    else:
        stats.update(_unseen_zero("valid"))
        stats.update(
            {f"n_valid_{k}": 0 for k in ("events", "users", "items")}
            | {"valid_time_min": None, "valid_time_max": None}
        )
    stats["unseen_policy"] = unseen
    for name, part in (("test", test), ("valid", valid)):
        stats.update(_pairs_in_train_spark(train, part, name))
    stats.update(
        _leakage_spark(
            train, test, stats["n_train_events"], stats["n_test_events"], stats["test_time_min"]
        )
    )
    params = {
        **split.params,
        "min_user_interactions": min_user_interactions,
        "min_item_interactions": min_item_interactions,
        "kcore": kcore,
        "unseen": unseen,
    }
    return SparkSplit(train, test, valid, {**split.stats, **stats}, split.name, params)


def _input_stats(df: DataFrame, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The input counts every split records (one job), plus leave-one-out's user counts (one)."""
    from pyspark.sql import functions as sf

    row = df.agg(
        sf.count(sf.lit(1)).alias("events"),
        sf.count_distinct("user").alias("users"),
        sf.count_distinct("item").alias("items"),
    ).first()
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    stats: dict[str, Any] = {
        "n_input_events": int(row["events"]),
        "n_input_users": int(row["users"]),
        "n_input_items": int(row["items"]),
    }
    if method == "leave_one_out":
        k = int(params["min_history"])
        n = sf.col("_n")
        per_user = df.groupBy("user").agg(sf.count(sf.lit(1)).alias("_n"))
        loo = per_user.agg(
            sf.count(sf.when(n >= k, 1)).alias("eligible"),
            sf.count(sf.when(n >= k + 1, 1)).alias("valid"),
        ).first()
        if loo is None:  # an aggregate always returns one row
            raise RuntimeError("Spark returned no row for an aggregate")
        stats["loo_eligible_users"] = int(loo["eligible"])
        stats["loo_train_only_users"] = stats["n_input_users"] - int(loo["eligible"])
        stats["loo_valid_users"] = int(loo["valid"]) if params["valid"] else 0
    return stats


def method_split_spark(df: DataFrame, method: str, **params: Any) -> SparkSplit:
    """Split ``method`` on Spark with its own params (no filters: test and validation keep the
    unseen events), plus the input counts every split records."""
    raw = SPARK_METHODS[method](df, **params)
    stats = {**raw.stats, **_input_stats(df, method, raw.params)}
    return SparkSplit(raw.train, raw.test, raw.valid, stats, raw.name, raw.params)


def make_split_spark(df: DataFrame, method: str, **params: Any) -> SparkSplit:
    """:func:`harness.split.make_split` on Spark: the method, then :func:`apply_filters_spark`,
    with the same parameter names, defaults, checks, rows and stats as the in-process split.

    Runs a few aggregate jobs over ``df`` (cache it first if it is expensive to recompute).
    The frames it persists (see :class:`SparkSplit`) stay in Spark's storage while the session
    lives; ``spark.catalog.clearCache()`` releases them.
    """
    from harness.split import FILTER_PARAMS, _effective_params

    effective = _effective_params(method, params)
    method_kw = {k: v for k, v in effective.items() if k not in FILTER_PARAMS}
    filter_kw = {k: v for k, v in effective.items() if k in FILTER_PARAMS}
    return apply_filters_spark(method_split_spark(df, method, **method_kw), **filter_kw)
