"""Inputs as Spark DataFrames: paths, pandas frames or DataFrames; column and id-type checks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
