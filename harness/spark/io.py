"""Inputs as Spark DataFrames: paths, pandas frames or DataFrames; column and id-type checks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

from harness.spark.session import _quiet


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


def _is_integer_type(dtype: Any) -> bool:
    """Whether a Spark data type is an integer type (byte, short, int or long)."""
    from pyspark.sql import types as st

    return isinstance(dtype, st.ByteType | st.ShortType | st.IntegerType | st.LongType)


def _id_kind(df: DataFrame, column: str) -> str:
    """``"bigint"`` for integer ids, ``"string"`` for text ids (the numpy engine's two kinds)."""
    from pyspark.sql import types as st

    dtype = df.schema[column].dataType
    if _is_integer_type(dtype):
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


# ---------------------------------------------------------------------------- interactions


def _spark_format(path: str, fmt: str | None) -> str:
    """``parquet`` or ``csv``, from ``fmt`` or the path's suffix (a directory is Parquet)."""
    from harness.errors import DataError

    if fmt is not None:
        if fmt not in ("parquet", "csv"):
            raise DataError(f"{path}: unknown format {fmt!r}; allowed: ['parquet', 'csv']")
        return fmt
    name = path.rstrip("/").lower()
    if name.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    return "parquet"


def read_interactions(
    spark: SparkSession,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    rating_range: tuple[float, float] | None = None,
) -> DataFrame:
    """Interactions (``user, item, timestamp`` [, ``rating``]) from any Spark-readable path
    (local, ``s3a://``, ``hdfs://``; Parquet, or CSV with a header), checked in Spark.

    The checks of :func:`harness.data.validate_interactions`, with its one-line
    ``DataError`` naming the path and the column: missing column, no rows, null ids, ids that
    are neither integers nor text, null or unparsable timestamps, null / non-finite ratings or
    ratings outside ``rating_range``. One Spark job counts every problem (with an example
    value); nothing is collected. Timestamps become int64 epoch seconds; CSV ids that are all
    integers become integers, as in the in-process loader.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st

    from harness.errors import DataError

    source = os.fspath(path)
    kind = _spark_format(source, fmt)
    reader = spark.read
    if kind == "csv":
        sep = "\t" if source.rstrip("/").lower().endswith(".tsv") else ","
        df = reader.option("header", True).option("sep", sep).csv(source)
    else:
        df = reader.parquet(source)
    found = [str(c) for c in df.columns]
    missing = [c for c in ("user", "item", "timestamp") if c not in found]
    if missing:
        raise DataError(f"{source}: missing column '{missing[0]}'; columns found: {found}")
    cols = ["user", "item", "timestamp"] + (["rating"] if "rating" in found else [])
    df = df.select(*cols)

    checks: list[tuple[str, str, Column]] = []  # (column, what, bad-row condition)
    typed: dict[str, Column] = {}
    for name in ("user", "item"):
        dtype = df.schema[name].dataType
        col = sf.col(name)
        checks.append((name, "null id(s)", col.isNull()))
        if isinstance(dtype, st.StringType):
            as_int = sf.expr(f"try_cast(trim(`{name}`) as bigint)")
            typed[name] = col  # decided below: integers if every value is one
            checks.append((name, "_int", col.isNotNull() & as_int.isNull()))
        elif _is_integer_type(dtype):
            typed[name] = col.cast("bigint")
        elif isinstance(dtype, st.FloatType | st.DoubleType | st.DecimalType):
            frac = col.isNotNull() & (sf.isnan(col.cast("double")) | (col != sf.floor(col)))
            checks.append((name, "non-integer number(s) (ids must be integers or text)", frac))
            typed[name] = col.cast("bigint")
        else:
            raise DataError(
                f"{source}: column '{name}' holds {dtype.simpleString()} values; "
                "ids must be integers or text"
            )
    ts = sf.col("timestamp")
    ts_type = df.schema["timestamp"].dataType
    checks.append(("timestamp", "null timestamp(s)", ts.isNull()))
    if _is_integer_type(ts_type):
        seconds = ts.cast("bigint")
    elif isinstance(ts_type, st.TimestampType | st.TimestampNTZType | st.DateType):
        seconds = sf.unix_timestamp(ts.cast("timestamp"))
    else:
        parsed = sf.expr("try_to_timestamp(cast(`timestamp` as string))")
        as_int = sf.expr("try_cast(trim(cast(`timestamp` as string)) as bigint)")
        seconds = sf.coalesce(as_int, sf.unix_timestamp(parsed))
        checks.append(("timestamp", "unparsable timestamp(s)", ts.isNotNull() & seconds.isNull()))
    out_cols = {"timestamp": seconds}
    if "rating" in cols:
        rating = sf.expr("try_cast(`rating` as double)")
        raw = sf.col("rating")
        checks.append(("rating", "null rating(s)", raw.isNull()))
        bad = raw.isNotNull() & (
            rating.isNull() | sf.isnan(rating) | (sf.abs(rating) == float("inf"))
        )
        checks.append(("rating", "non-numeric or non-finite rating(s)", bad))
        if rating_range is not None:
            lo, hi = (float(v) for v in rating_range)
            if lo > hi:
                raise DataError(
                    f"{source}: rating_range must satisfy low <= high (got {rating_range})"
                )
            outside = rating.isNotNull() & ~bad & ((rating < lo) | (rating > hi))
            checks.append(("rating", f"rating(s) outside [{lo}, {hi}]", outside))
        out_cols["rating"] = rating

    aggs = [sf.count(sf.lit(1)).alias("_rows")]
    for i, (name, _, cond) in enumerate(checks):
        aggs += [
            sf.count(sf.when(cond, 1)).alias(f"n{i}"),
            sf.first(sf.when(cond, sf.col(name)), ignorenulls=True).alias(f"e{i}"),
        ]
    row = df.agg(*aggs).first()
    if row is None or int(row["_rows"]) == 0:
        raise DataError(f"{source}: no interactions (0 rows)")
    text_ids: set[str] = set()
    for i, (name, what, _) in enumerate(checks):
        n = int(row[f"n{i}"])
        if what == "_int":
            if n:
                text_ids.add(name)
            continue
        if n:
            example = row[f"e{i}"]
            shown = "null" if example is None else repr(example)
            raise DataError(f"{source}: column '{name}' has {n} {what}, e.g. {shown}")
    for name in ("user", "item"):
        if isinstance(df.schema[name].dataType, st.StringType):
            typed[name] = (
                sf.col(name) if name in text_ids else sf.expr(f"try_cast(trim(`{name}`) as bigint)")
            )
    return df.select(
        typed["user"].alias("user"),
        typed["item"].alias("item"),
        *[c.alias(n) for n, c in out_cols.items()],
    )
