"""Inputs as Spark DataFrames: paths, pandas frames or DataFrames; column and id-type checks."""

from __future__ import annotations

import os
from collections.abc import Mapping
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
            df = spark.createDataFrame(plain)
        # above Arrow's local-relation threshold (48 MB), one partition per 10,000-row batch:
        # 200 tasks per scan at 2M rows; adjacent ones merged, in order, to one per core
        return df.coalesce(spark.sparkContext.defaultParallelism)
    if hasattr(data, "schema") and hasattr(data, "select"):
        return data
    raise ValueError(
        f"{what} must be a Spark DataFrame, a Parquet path or a pandas DataFrame "
        f"(got {type(data).__name__})"
    )


def write_read(spark: SparkSession, df: DataFrame, uri: str) -> DataFrame:
    """``df`` written to ``uri`` as Parquet (replacing what is there) and read back with its
    own schema: Spark then runs no job to read the schema from the files' footers."""
    df.write.mode("overwrite").parquet(uri)
    return spark.read.schema(df.schema).parquet(uri)


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
    """``parquet``, ``csv`` or ``tsv``, from ``fmt`` (the names :mod:`harness.data` accepts) or
    the path's suffix (anything else, a directory included, is Parquet)."""
    from harness.data import FORMATS
    from harness.errors import DataError

    if fmt is not None:
        kind = fmt.lower().lstrip(".")
        kind = "parquet" if kind in ("pq", "parq") else kind
        if kind not in FORMATS:
            raise DataError(f"{path}: unknown format {fmt!r}; allowed: {list(FORMATS)}")
        return kind
    name = path.rstrip("/").lower()
    for ext in (".gz", ".bz2", ".zip", ".xz", ".zst"):
        name = name.removesuffix(ext)
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".tsv"):
        return "tsv"
    return "parquet"


def read_table(spark: SparkSession, source: str, kind: str, key: str) -> DataFrame:
    """A CSV/TSV (header; RFC 4180 quotes, a doubled quote inside a quoted field; a row with
    more fields than the header is an error when read, not cut short) or Parquet file from any
    Spark path. A missing file is one line naming ``key``, the setting that names the file,
    as in process. CSV rows are lines: a quoted field holding a line break is not read (it
    would make the file one partition); such files read in process, or as Parquet."""
    from harness.errors import DataError

    if _local_missing(source):  # caught before Spark's own traceback
        raise DataError(f"{source}: no such file ({key})")
    try:
        if kind in ("csv", "tsv"):
            reader = spark.read.option("header", True).option("escape", '"')
            sep = "\t" if kind == "tsv" else ","
            return reader.option("sep", sep).option("mode", "FAILFAST").csv(source)
        return spark.read.parquet(source)
    except Exception as exc:  # Spark's AnalysisException: a missing remote path, a bad file
        text = str(exc).strip()
        if "PATH_NOT_FOUND" in text or "does not exist" in text:
            raise DataError(f"{source}: no such file ({key})") from None
        first = (text.splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{source}: cannot read the file ({key}): {first}") from None


def malformed_csv(err: BaseException) -> str | None:
    """One line for Spark's error on a CSV row that does not fit its header (read in FAILFAST
    mode, the error comes from the first job that parses the row), else None."""
    import re

    pattern = r"Malformed records are detected in record parsing: (.*?)\.?$"
    found = re.search(pattern, str(err), re.M)
    if found is None:
        return None
    return (
        f"a CSV row does not fit its file's header (more fields than it names, or a broken "
        f"quote): {found.group(1)}; fix the row or write the file as Parquet"
    )


def _local_missing(path: str) -> bool:
    """True for a local path (no ``scheme://``) that does not exist."""
    from pathlib import Path

    return "://" not in path and not Path(path.removeprefix("file:")).exists()


_INTEGRAL = r"^(?:0|-?[1-9][0-9]{0,18})(?:\.0+)?$"  # harness.data._INTEGRAL_TEXT
#: Python's ``str.strip()`` whitespace (what the in-process loader strips): Unicode White_Space
#: and the separators U+001C..U+001F. Spark's ``trim`` strips only the ASCII space.
_EDGE_SPACE = r"(?U)^[\s\x{1c}-\x{1f}]+|[\s\x{1c}-\x{1f}]+$"
_NUMBER = r"^[+-]?[0-9]+(?:\.[0-9]*)?$"  # harness.data._EPOCH_TEXT
_DIGITS = r"^[+-]?[0-9]{1,19}$"  # harness.data._DIGITS_TEXT
#: harness.data.DATE_LAYOUTS as Spark patterns (one or two digits read like strptime's)
_SPARK_LAYOUTS: dict[str, str] = {
    "%d/%m/%Y %H:%M:%S": "d/M/yyyy H:m:s",
    "%m/%d/%Y %H:%M:%S": "M/d/yyyy H:m:s",
    "%d/%m/%Y %H:%M": "d/M/yyyy H:m",
    "%m/%d/%Y %H:%M": "M/d/yyyy H:m",
    "%d/%m/%Y": "d/M/yyyy",
    "%m/%d/%Y": "M/d/yyyy",
    "%d-%m-%Y %H:%M:%S": "d-M-yyyy H:m:s",
    "%m-%d-%Y %H:%M:%S": "M-d-yyyy H:m:s",
    "%d-%m-%Y %H:%M": "d-M-yyyy H:m",
    "%m-%d-%Y %H:%M": "M-d-yyyy H:m",
    "%d-%m-%Y": "d-M-yyyy",
    "%m-%d-%Y": "M-d-yyyy",
    "%d.%m.%Y %H:%M:%S": "d.M.yyyy H:m:s",
    "%d.%m.%Y %H:%M": "d.M.yyyy H:m",
    "%d.%m.%Y": "d.M.yyyy",
}
_STRFTIME = {"%Y": "yyyy", "%m": "M", "%d": "d", "%H": "H", "%M": "m", "%S": "s", "%y": "yy"}


def stripped(col: Column) -> Column:
    """Text ``col`` without its surrounding whitespace, as ``str.strip()`` leaves it. The
    regular expression runs only on text whose first or last character may be whitespace (a
    code point up to U+0020 or from U+0085): on every row it cost 3x Spark's ``trim``."""
    from pyspark.sql import functions as sf

    first, last = sf.ascii(col), sf.ascii(sf.substring(col, -1, 1))
    maybe = (first <= 32) | (first >= 0x85) | (last <= 32) | (last >= 0x85)
    return sf.when(maybe, sf.regexp_replace(col, _EDGE_SPACE, "")).otherwise(col)


def integral_id(text: Column) -> tuple[Column, Column]:
    """(is ``text`` a canonical integer, as :data:`harness.data._INTEGRAL_TEXT` reads one; its
    ``bigint`` or null): stripped text, no leading zero or ``+``, an optional ``.0``; a null id
    is not one."""
    from pyspark.sql import functions as sf

    as_int = sf.regexp_replace(text, r"\.0+$", "").try_cast("bigint")
    return sf.coalesce(text.rlike(_INTEGRAL) & as_int.isNotNull(), sf.lit(False)), as_int


def _spark_pattern(fmt: str, source: str) -> str:
    """A strftime pattern as a Spark datetime pattern (the directives of dates and times)."""
    import re

    from harness.errors import DataError

    out, pos = [], 0
    for m in re.finditer(r"%.", fmt):
        out.append(_quoted(fmt[pos : m.start()]))
        if m.group() not in _STRFTIME:
            raise DataError(
                f"{source}: timestamp_format {fmt!r} uses {m.group()!r}, which the Spark reader "
                f"does not read; supported: {sorted(_STRFTIME)}"
            )
        out.append(_STRFTIME[m.group()])
        pos = m.end()
    out.append(_quoted(fmt[pos:]))
    return "".join(out)


def _quoted(literal: str) -> str:
    """Literal text of a strftime pattern in a Spark pattern (letters quoted)."""
    if not literal or not any(c.isalpha() for c in literal):
        return literal
    return "'" + literal.replace("'", "''") + "'"


def _one_row(df: DataFrame, *aggs: Column) -> Any:
    row = df.agg(*aggs).first()
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    return row


def _shown(value: Any) -> str:
    from harness.data import _show

    return _show(value)


def _epoch_seconds(
    df: DataFrame,
    x: Column,
    raw: Column,
    source: str,
    label: str,
    fmt: str | None,
    *,
    integral: bool,
) -> Column:
    """Epoch numbers to seconds as :func:`harness.data.seconds_from` makes them (bigint when
    every time is whole, else double); the unit given or inferred as in
    :func:`harness.data._infer_epoch_unit` (milliseconds when every value is in [1e11, 1e14)),
    a given unit that puts every time in 1970 refused as there. One aggregate job."""
    from pyspark.sql import functions as sf

    from harness.data import _EPOCH_UNITS, _FORMAT_HINT, wrong_unit, wrong_unit_error
    from harness.errors import DataError

    size = sf.abs(x.cast("double"))
    big, huge = size >= sf.lit(1e11), size >= sf.lit(1e14)
    row = _one_row(
        df,
        sf.count(sf.lit(1)).alias("n"),
        sf.count(sf.when(big, 1)).alias("big"),
        sf.count(sf.when(huge, 1)).alias("huge"),
        sf.first(sf.when(~big, raw), ignorenulls=True).alias("small_e"),
        sf.first(sf.when(big, raw), ignorenulls=True).alias("big_e"),
        sf.first(sf.when(huge, raw), ignorenulls=True).alias("huge_e"),
        sf.max_by(sf.struct(raw.alias("raw"), x.alias("x")), size).alias("largest"),
        *[
            sf.count(sf.when(_seconds(x, p, integral)[2], 1)).alias(f"part_{name}")
            for name, p in _EPOCH_UNITS.items()
        ],
    )
    n, n_big, n_huge = int(row["n"]), int(row["big"]), int(row["huge"])
    if n_big == 0:
        inferred = "epoch_s"
    elif n_big == n and n_huge == 0:
        inferred = "epoch_ms"
    elif fmt is not None:
        inferred = fmt
    elif n_big == n:
        raise DataError(
            f"{source}: column {label} has {n_huge} epoch number(s) too large for seconds or "
            f"milliseconds, e.g. {_shown(row['huge_e'])}; {_FORMAT_HINT}=epoch_us or epoch_ns"
        )
    else:
        raise DataError(
            f"{source}: column {label} mixes epoch magnitudes: {_shown(row['small_e'])} reads "
            f"as seconds, {_shown(row['big_e'])} as milliseconds; {_FORMAT_HINT}"
        )
    unit = fmt if fmt is not None else inferred
    largest = row["largest"]
    if fmt is not None and largest is not None and fmt != "epoch_s":
        number = float(largest["x"])
        if wrong_unit(abs(number), fmt, inferred):
            raise wrong_unit_error(source, label, fmt, inferred, largest["raw"], number, None)
    seconds, whole, _ = _seconds(x, _EPOCH_UNITS[unit], integral)
    return seconds if int(row[f"part_{unit}"]) else whole


def _seconds(x: Column, per_second: int, integral: bool) -> tuple[Column, Column, Column]:
    """Epoch numbers in units of ``1 / per_second`` s (bigint when ``integral``, else double)
    as seconds by the arithmetic of :func:`harness.data.seconds_from`: the double seconds,
    the whole seconds (bigint) and whether the time is not a whole second."""
    from pyspark.sql import functions as sf

    if integral and per_second == 1:  # as they are (a double would round beyond 2**53)
        return x.cast("double"), x, sf.lit(False)
    if integral:
        part = sf.pmod(x, sf.lit(per_second))
        whole = ((x - part) / sf.lit(per_second)).cast("bigint")  # exact: a multiple of it
        seconds = whole.cast("double") + part.cast("double") / sf.lit(float(per_second))
        return seconds, whole, part != sf.lit(0)
    seconds = x if per_second == 1 else x / sf.lit(float(per_second))
    return seconds, sf.floor(seconds).cast("bigint"), seconds != sf.floor(seconds)


def _time_seconds(df: DataFrame, t: Column) -> Column:
    """Spark timestamps as seconds the way :func:`harness.data._to_seconds` makes them: from
    their microseconds, bigint when every time is whole, else double. One aggregate job."""
    from pyspark.sql import functions as sf

    seconds, whole, sub_second = _seconds(sf.unix_micros(t), 1_000_000, integral=True)
    row = _one_row(df, sf.count(sf.when(sub_second, 1)).alias("part"))
    return seconds if int(row["part"]) else whole


def _date_text(df: DataFrame, text: Column, raw: Column, source: str, label: str) -> Column:
    """Seconds from date text: the first layout of :data:`harness.data.DATE_LAYOUTS` that
    reads every row (ISO 8601 first; a day-first and a month-first reading that both read every
    row differently is ambiguous), or an error naming a row off the layout that reads most.
    One aggregate job."""
    from pyspark.sql import functions as sf

    from harness.data import _FORMAT_HINT, DATE_LAYOUTS
    from harness.errors import DataError

    def parse(fmt: str) -> Column:
        if fmt == "ISO8601":
            return sf.try_to_timestamp(text)
        return sf.try_to_timestamp(text, sf.lit(_SPARK_LAYOUTS[fmt]))

    fmts = [f for group in DATE_LAYOUTS for f in group]
    aggs = []
    for k, fmt in enumerate(fmts):
        ok = parse(fmt).isNotNull()
        aggs += [
            sf.count(sf.when(~ok, 1)).alias(f"bad{k}"),
            sf.first(sf.when(~ok, raw), ignorenulls=True).alias(f"e{k}"),
        ]
    for group in DATE_LAYOUTS:
        if len(group) == 2:
            a = fmts.index(group[0])
            differ = parse(group[0]) != parse(group[1])
            aggs += [
                sf.count(sf.when(differ, 1)).alias(f"diff{a}"),
                sf.first(sf.when(differ, text), ignorenulls=True).alias(f"de{a}"),
            ]
    row = _one_row(df, sf.count(sf.lit(1)).alias("n"), *aggs)
    for group in DATE_LAYOUTS:
        fits = [f for f in group if int(row[f"bad{fmts.index(f)}"]) == 0]
        if len(fits) == 2 and int(row[f"diff{fmts.index(group[0])}"]):
            example = row[f"de{fmts.index(group[0])}"]
            raise DataError(
                f"{source}: column {label} is ambiguous: every value reads both as {fits[0]!r} "
                f"and as {fits[1]!r}, e.g. {_shown(example)}; {_FORMAT_HINT}"
            )
        if fits:
            return _time_seconds(df, parse(fits[0]))
    best = min(range(len(fmts)), key=lambda k: (int(row[f"bad{k}"]), k))
    n_bad = int(row[f"bad{best}"])
    numeric = _one_row(df, sf.count(sf.when(~text.rlike(_NUMBER), 1)).alias("off"))
    if int(numeric["off"]) <= n_bad:  # numbers read the most rows (as in harness.data)
        fmt_name, n_bad = "epoch seconds", int(numeric["off"])
        off = df.filter(~text.rlike(_NUMBER)).select(raw).first()
        example = None if off is None else off[0]
    else:
        fmt_name, example = fmts[best], row[f"e{best}"]
    if n_bad == int(row["n"]):
        what = "unparsable timestamp(s) (no known format)"
    else:
        what = f"timestamp(s) not in the format {fmt_name!r} of the other rows"
    raise DataError(
        f"{source}: column {label} has {n_bad} {what}, e.g. {_shown(example)}; "
        f"one format per column; {_FORMAT_HINT}"
    )


def _timestamp_seconds(
    df: DataFrame, source: str, label: str, fmt: str | None
) -> tuple[Column, list[tuple[str, str, Column]]]:
    """The ``timestamp`` column as epoch seconds (bigint, or double for sub-second times) by the
    rules of :func:`harness.data._normalize_timestamps` (one format per column), and its row
    checks."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st

    from harness.data import _EPOCH_UNITS
    from harness.errors import DataError

    ts = sf.col("timestamp")
    dtype = df.schema["timestamp"].dataType
    checks: list[tuple[str, str, Column]] = [("timestamp", "null timestamp(s)", ts.isNull())]
    given = fmt if fmt in _EPOCH_UNITS else None
    if isinstance(dtype, st.TimestampType | st.TimestampNTZType | st.DateType):
        return _time_seconds(df, ts.cast("timestamp")), checks
    if _is_integer_type(dtype) or isinstance(dtype, st.FloatType | st.DoubleType | st.DecimalType):
        x = ts.cast("double") if not _is_integer_type(dtype) else ts.cast("bigint")
        if not _is_integer_type(dtype):
            bad = ts.isNotNull() & (
                sf.isnan(x) | (sf.abs(x) == float("inf")) | (sf.abs(x) >= sf.lit(2.0**62))
            )
            checks.append(("timestamp", "unparsable timestamp(s)", bad))
            _raise_first(df, source, checks)
        integral = _is_integer_type(dtype)
        return (
            _epoch_seconds(
                df.filter(ts.isNotNull()), x, ts, source, label, given, integral=integral
            ),
            checks,
        )
    if not isinstance(dtype, st.StringType):
        raise DataError(
            f"{source}: column {label} holds {dtype.simpleString()} values; timestamps must be "
            "numbers, text or datetimes"
        )
    text = stripped(ts)
    _raise_first(df, source, checks)
    if fmt is not None and fmt not in _EPOCH_UNITS:
        if fmt == "ISO8601":
            parsed = sf.try_to_timestamp(text)
        else:
            parsed = sf.try_to_timestamp(text, sf.lit(_spark_pattern(fmt, source)))
        checks.append(
            (
                "timestamp",
                f"timestamp(s) not in the format {fmt!r} set in dataset.timestamp_format",
                parsed.isNull(),
            )
        )
        return _time_seconds(df, parsed), checks
    whole = sf.regexp_replace(text, r"^\+", "").try_cast("bigint")  # null beyond int64
    row = _one_row(
        df,
        sf.count(sf.when(~text.rlike(_DIGITS) | whole.isNull(), 1)).alias("not_digits"),
        sf.count(sf.when(~text.rlike(_NUMBER), 1)).alias("not_numbers"),
        sf.first(sf.when(~text.rlike(_NUMBER), ts), ignorenulls=True).alias("e"),
    )
    if int(row["not_digits"]) == 0:
        return _epoch_seconds(df, whole, ts, source, label, given, integral=True), checks
    if int(row["not_numbers"]) == 0:
        x = text.try_cast("double")
        return _epoch_seconds(df, x, ts, source, label, given, integral=False), checks
    if fmt is not None:
        raise DataError(
            f"{source}: column {label} has {int(row['not_numbers'])} timestamp(s) not in the "
            f"format {fmt!r} set in dataset.timestamp_format, e.g. {_shown(row['e'])}"
        )
    return _date_text(df, text, ts, source, label), checks


def _raise_first(df: DataFrame, source: str, checks: list[tuple[str, str, Column]]) -> None:
    """Run ``checks`` (column, what, bad-row condition) in one job; raise the first that fails."""
    from pyspark.sql import functions as sf

    from harness.errors import DataError

    aggs = []
    for i, (name, _, cond) in enumerate(checks):
        aggs += [
            sf.count(sf.when(cond, 1)).alias(f"n{i}"),
            sf.first(sf.when(cond, sf.col(name)), ignorenulls=True).alias(f"e{i}"),
        ]
    if not aggs:
        return
    row = _one_row(df, *aggs)
    for i, (name, what, _) in enumerate(checks):
        if int(row[f"n{i}"]):
            raise DataError(
                f"{source}: column '{name}' has {int(row[f'n{i}'])} {what}, "
                f"e.g. {_shown(row[f'e{i}'])}"
            )


def _near_duplicates(df: DataFrame, name: str, source: str, label: str, why: str) -> None:
    """:func:`harness.data._check_near_duplicates` on Spark: text ids that only differ in how a
    number is written (``70``, ``70.0``, ``+70``) are refused, naming the first two by first
    appearance. One job over the distinct numeric-looking ids."""
    from pyspark.sql import functions as sf

    from harness.errors import DataError

    value = stripped(sf.col(name))
    key = sf.regexp_replace(
        sf.regexp_replace(
            sf.regexp_replace(
                sf.regexp_replace(sf.col("_v"), r"^\+", ""), r"^(-?[0-9]+\.[0-9]*?)0+$", "$1"
            ),
            r"\.$",
            "",
        ),
        r"^-0$",
        "0",
    )
    numeric = (
        df.select(value.alias("_v"), sf.monotonically_increasing_id().alias("_r"))
        .filter(sf.col("_v").rlike(_NUMBER))
        .groupBy("_v")
        .agg(sf.min("_r").alias("_r"))
        .withColumn("_k", key)
    )
    clash = (
        numeric.groupBy("_k")
        .agg(
            sf.count(sf.lit(1)).alias("_n"),
            sf.min("_r").alias("_r"),
            sf.sort_array(sf.collect_list(sf.struct("_r", "_v"))).alias("_vs"),
        )
        .filter(sf.col("_n") > 1)
        .orderBy("_r")
        .first()
    )
    if clash is None:
        return
    a, b = (v["_v"] for v in clash["_vs"][:2])
    raise DataError(
        f"{source}: column {label} has ids that differ only in number formatting: {a!r} and "
        f"{b!r}{why}; write each id one way"
    )


def read_interactions(
    spark: SparkSession,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    rating_range: tuple[float, float] | None = None,
    columns: Mapping[str, str | None] | None = None,
    duplicates: str = "error",
    timestamp_format: str | None = None,
) -> DataFrame:
    """Interactions (``user, item, timestamp`` [, ``rating``]) from any Spark-readable path
    (local, ``s3a://``, ``hdfs://``; Parquet, or CSV/TSV with a header), checked in Spark.

    The rules and one-line ``DataError`` of :func:`harness.data.load_interactions` (file,
    column, an example value; no row number, which Spark does not keep): missing column, no
    rows, null ids; one id type per column (integral numbers, ``"42"`` or ``"42.0"`` but not
    ``"007"`` or ``"+42"``, become long, else every id is text, and text ids that differ only in
    number formatting are refused); one timestamp format per column (epoch seconds, or
    milliseconds when every value is in [1e11, 1e14); ISO 8601, then day-first / month-first
    layouts, ambiguous ones refused) or ``timestamp_format``; finite ratings within
    ``rating_range``; the ``duplicates`` policy on (user, item, timestamp). A handful of
    aggregate jobs; nothing is collected but counts and examples.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st

    from harness.data import (
        EMPTY_IDS,
        _check_policy,
        _check_timestamp_format,
        _column_mapping,
        _label,
        _wanted_columns,
        missing_column,
    )
    from harness.errors import DataError

    source = os.fspath(path)
    mapping = _column_mapping(columns, source)
    _check_policy(duplicates, source)
    _check_timestamp_format(timestamp_format, source)
    kind = _spark_format(source, fmt)
    df = read_table(spark, source, kind, "dataset.path")
    found = [str(c) for c in df.columns]
    wanted, missing = _wanted_columns(mapping, columns, found)
    with_time = mapping["timestamp"] is not None
    if missing:
        raise missing_column(source, missing[0], mapping, found)
    df = df.select(*[sf.col(f"`{mapping[c]}`").alias(c) for c in wanted])
    for c in wanted:
        if isinstance(df.schema[c].dataType, st.ArrayType | st.MapType | st.StructType):
            raise DataError(
                f"{source}: column '{mapping[c]}' holds nested values "
                f"({df.schema[c].dataType.simpleString()}); ids, timestamps and ratings must be "
                "single values"
            )
    if df.limit(1).count() == 0:
        raise DataError(f"{source}: no interactions (0 rows)")

    checks: list[tuple[str, str, Column]] = []  # (column, what, bad-row condition)
    typed: dict[str, Column] = {}
    text_checks: dict[str, tuple[Column, Column]] = {}
    for name in ("user", "item"):
        dtype = df.schema[name].dataType
        col = sf.col(name)
        is_float = isinstance(dtype, st.FloatType | st.DoubleType)
        null = col.isNull() | sf.isnan(col) if is_float else col.isNull()
        checks.append((name, "null id(s)", null))
        if isinstance(dtype, st.StringType):
            t = stripped(col)
            checks.append((name, EMPTY_IDS, col.isNotNull() & (t == sf.lit(""))))
            integral, _ = integral_id(t)
            text_checks[name] = (~integral, t)
            typed[name] = t
        elif _is_integer_type(dtype):
            typed[name] = col.cast("bigint")
        elif isinstance(dtype, st.FloatType | st.DoubleType | st.DecimalType):
            v = col.cast("double")
            exact = sf.abs(v) < sf.lit(2.0**53)
            integral = ~sf.isnan(v) & (sf.abs(v) != float("inf")) & (v == sf.floor(v))
            text_checks[name] = (~integral, col.cast("string"))
            checks.append(
                (
                    name,
                    "float id(s) beyond 2**53 (not exact; store ids as integers or text)",
                    col.isNotNull() & integral & ~exact,
                )
            )
            typed[name] = v.cast("bigint")
        else:
            raise DataError(
                f"{source}: column {_label(name, mapping)} holds {dtype.simpleString()} values; "
                "ids must be integers or text"
            )
    if with_time:
        seconds, ts_checks = _timestamp_seconds(
            df, source, _label("timestamp", mapping), timestamp_format
        )
        checks += ts_checks
        checks.append(("timestamp", "_seconds", seconds.isNull() & sf.col("timestamp").isNotNull()))
    else:  # no time column: every event at 0 (split=random only), as in-process
        seconds = sf.lit(0).cast("bigint")
    out_cols = {"timestamp": seconds}
    if "rating" in wanted:
        rating = stripped(sf.col("rating").cast("string")).try_cast("double")
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

    aggs = []
    for i, (name, _, cond) in enumerate(checks):
        aggs += [
            sf.count(sf.when(cond, 1)).alias(f"n{i}"),
            sf.first(sf.when(cond, sf.col(name)), ignorenulls=True).alias(f"e{i}"),
        ]
    for name, (not_int, _) in text_checks.items():
        aggs += [
            sf.count(sf.when(not_int, 1)).alias(f"text_{name}"),
            sf.first(sf.when(not_int, sf.col(name)), ignorenulls=True).alias(f"text_e_{name}"),
        ]
    row = _one_row(df, *aggs)
    for i, (name, what, _) in enumerate(checks):
        n = int(row[f"n{i}"])
        if n and what == "_seconds":
            raise DataError(
                f"{source}: column {_label(name, mapping)} has {n} unparsable timestamp(s), "
                f"e.g. {_shown(row[f'e{i}'])}"
            )
        if n:
            raise DataError(
                f"{source}: column {_label(name, mapping)} has {n} {what}, "
                f"e.g. {_shown(row[f'e{i}'])}"
            )
    for name, (_, as_text) in text_checks.items():
        if int(row[f"text_{name}"]) == 0:
            if isinstance(df.schema[name].dataType, st.StringType):
                typed[name] = integral_id(stripped(sf.col(name)))[1]
            continue
        typed[name] = as_text
        if isinstance(df.schema[name].dataType, st.StringType):
            why = f" (ids are text because of e.g. {_shown(row[f'text_e_{name}'].strip())})"
            _near_duplicates(df, name, source, _label(name, mapping), why)
    result = df.select(
        typed["user"].alias("user"),
        typed["item"].alias("item"),
        *[c.alias(n) for n, c in out_cols.items()],
    )
    return _duplicate_policy(result, duplicates, source, Window, with_time)


def _duplicate_policy(
    df: DataFrame,
    duplicates: str,
    source: str,
    window: Any,
    timed: bool = True,
) -> DataFrame:
    """:func:`harness.data._duplicate_policy_rows` on Spark: ``error`` counts the rows in
    duplicate (user, item, timestamp) events (one job); ``keep_first`` / ``keep_last`` keep one
    per event by input order (Spark's ``monotonically_increasing_id``)."""
    from pyspark.sql import functions as sf

    from harness.data import DUPLICATE_HINT, duplicate_message
    from harness.errors import DataError

    if duplicates == "keep_all":
        return df
    key = ["user", "item", "timestamp"]
    if duplicates == "error":
        dup = (
            df.groupBy(*key)
            .agg(sf.count(sf.lit(1)).alias("_n"))
            .filter(sf.col("_n") > 1)
            .agg(
                sf.sum("_n").alias("rows"),
                sf.first(sf.struct(*key), ignorenulls=True).alias("e"),
            )
            .first()
        )
        if dup is not None and dup["rows"]:
            raise DataError(
                duplicate_message(source, int(dup["rows"]), dup["e"].asDict(), timed)
                + DUPLICATE_HINT
            )
        return df
    order = sf.col("_dup_row").asc() if duplicates == "keep_first" else sf.col("_dup_row").desc()
    w = window.partitionBy(*key).orderBy(order)
    return (
        df.withColumn("_dup_row", sf.monotonically_increasing_id())
        .withColumn("_dup_rank", sf.row_number().over(w))
        .filter(sf.col("_dup_rank") == 1)
        .drop("_dup_row", "_dup_rank")
    )
