"""Interaction data: the column convention, loading from CSV/Parquet and validation.

An *Interactions* frame is a pandas DataFrame with the columns

- ``user``, ``item``: ids, one type per column (the same rule for CSV and Parquet, so the same
  data gives the same ids either way). Surrounding spaces in text ids are removed. A column whose
  ids are all integral numbers (an integer dtype, integral floats below 2**53, or text such as
  ``"42"`` or ``"42.0"``, not ``"007"``, within int64) becomes ``int64``: ``70`` and ``70.0`` are
  the same id. Anything else becomes ``str``; two text ids that only differ in how a number is
  written (``"70"``/``"70.0"``/``"+70"``) are refused, as are object columns mixing numbers and
  text (``1`` and ``"1"``), nested values (lists, maps) and bytes.
- ``timestamp``: epoch seconds (UTC), ``int64`` when every time is a whole second, else
  ``float64`` (sub-second times keep their order), read with ONE format per column: either the
  ``timestamp_format`` given (``ISO8601``, ``epoch_s``, ``epoch_ms``, ``epoch_us``, ``epoch_ns`` or
  a strftime pattern such as ``%d/%m/%Y %H:%M``) or one inferred from the data: numbers (and
  digit-only text) are epoch seconds, or milliseconds when every value is in [1e11, 1e14); text
  is tried against ISO 8601, then day-first and month-first layouts (``%d/%m/%Y %H:%M`` ...). A
  day-first and a month-first layout that both read every row differently is ambiguous: an
  error asking for the format. A row that does not fit the format is an error naming the file,
  the row and the value. ``datetime64`` columns are taken as they are; naive times are UTC.
- ``rating`` (optional): ``float64``, finite.

The validated frame has exactly these columns in this order and a fresh ``RangeIndex``.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.errors import DataError
from metrics.io import INTEGRAL_ID, csv_text

__all__ = [
    "COLUMNS",
    "DUPLICATE_HINT",
    "DUPLICATE_POLICIES",
    "EMPTY_IDS",
    "ITEM",
    "RATING",
    "REQUIRED_COLUMNS",
    "TIMESTAMP",
    "TIMESTAMP_FORMATS",
    "USER",
    "IdCodes",
    "IdentityCache",
    "arrow_text",
    "check_text_file",
    "duplicate_message",
    "empty_like",
    "id_codes",
    "known_codes",
    "load_interactions",
    "load_interactions_coded",
    "load_item_table",
    "normalize_ids",
    "plain",
    "read_parquet_columns",
    "read_text_table",
    "release_arrow_memory",
    "remember_codes",
    "seconds_from",
    "time_value",
    "timed",
    "validate_interactions",
    "wrong_unit",
    "wrong_unit_error",
]

USER = "user"
ITEM = "item"
TIMESTAMP = "timestamp"
RATING = "rating"
REQUIRED_COLUMNS: tuple[str, ...] = (USER, ITEM, TIMESTAMP)
COLUMNS: tuple[str, ...] = (USER, ITEM, TIMESTAMP, RATING)
DUPLICATE_POLICIES: tuple[str, ...] = ("error", "keep_last", "keep_first", "keep_all")
#: The end of the repeated-events error (both engines): the settings that keep them.
DUPLICATE_HINT = f"; to keep them set dataset.duplicates to {' or '.join(DUPLICATE_POLICIES[1:])}"
FORMATS: tuple[str, ...] = ("csv", "tsv", "parquet")

# Integral numbers written canonically (no sign "+", no leading zeros), optionally with ".0";
# values outside int64 are caught by the cast.
_INTEGRAL_TEXT = INTEGRAL_ID
_NUMBER_TEXT = r"[+-]?\d+(?:\.\d*)?"
# epoch numbers: ASCII digits only (Python's \d also takes "٣", which no number parser here reads)
_DIGITS_TEXT = r"[+-]?[0-9]{1,19}"  # int64 has 19 digits (epoch_ns today); beyond it: float
_EPOCH_TEXT = r"[+-]?[0-9]+(?:\.[0-9]*)?"
_EPOCH = pd.Timestamp(0, tz="UTC")
_MICROSECOND = pd.Timedelta(microseconds=1)
# Epoch units: name -> units per second.
_EPOCH_UNITS: dict[str, int] = {
    "epoch_s": 1,
    "epoch_ms": 1_000,
    "epoch_us": 1_000_000,
    "epoch_ns": 1_000_000_000,
}
TIMESTAMP_FORMATS: tuple[str, ...] = ("ISO8601", *_EPOCH_UNITS)
# Text layouts tried in order when no format is given; a day-first and a month-first reading of
# the same layout are tried together (both reading every row differently is ambiguous).
DATE_LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("ISO8601",),
    ("%d/%m/%Y %H:%M:%S", "%m/%d/%Y %H:%M:%S"),
    ("%d/%m/%Y %H:%M", "%m/%d/%Y %H:%M"),
    ("%d/%m/%Y", "%m/%d/%Y"),
    ("%d-%m-%Y %H:%M:%S", "%m-%d-%Y %H:%M:%S"),
    ("%d-%m-%Y %H:%M", "%m-%d-%Y %H:%M"),
    ("%d-%m-%Y", "%m-%d-%Y"),
    ("%d.%m.%Y %H:%M:%S",),
    ("%d.%m.%Y %H:%M",),
    ("%d.%m.%Y",),
)
_SAMPLE = 256  # rows a candidate format must read before it is tried on the whole column
_FORMAT_HINT = "set dataset.timestamp_format"
EMPTY_IDS = "empty id(s) (only whitespace)"


class IdCodes(NamedTuple):
    """A text id column as ``uniques.take(codes)``: ``uniques`` (``str``) holds each id once.

    What the validation already computed, so that later steps (the dataset digest) need not
    hash millions of strings again.
    """

    codes: np.ndarray
    uniques: pd.Series


class IdentityCache:
    """Values kept for objects while they live, keyed by identity (for objects that cannot be
    hashed or weakly keyed, such as Arrow arrays and pandas indexes): an entry goes when its
    object is freed, so a new object at the same address never finds the old value."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: object) -> Any:
        """The value kept for ``obj``, or None."""
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def put(self, obj: object, value: Any) -> None:
        """Keep ``value`` for ``obj`` until ``obj`` is freed."""
        key = id(obj)
        self._entries[key] = (weakref.ref(obj), value)
        weakref.finalize(obj, self._entries.pop, key, None)


# Codes of Arrow-backed text id columns already computed (by the split, or a first
# ``id_codes``), keyed by the identity of the column's Arrow data: Arrow arrays cannot change,
# so the same data object always has the same codes.
_KNOWN_CODES = IdentityCache()


def release_arrow_memory() -> None:
    """Give back to the OS what Arrow's allocator keeps after its buffers are freed: it holds
    on to it for later Arrow allocations, which numpy never makes (reading three columns of 20M
    rows left 860 MB of RSS for 460 MB of data; 510 MB after this)."""
    pa.default_memory_pool().release_unused()


def empty_like(frame: pd.DataFrame) -> pd.DataFrame:
    """An empty frame with ``frame``'s columns and dtypes, sharing none of its memory (a
    zero-row slice would keep the whole columns' buffers alive)."""
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in frame.dtypes.items()})


def arrow_text(column: pd.Series) -> pa.ChunkedArray | None:
    """The Arrow data of an Arrow-backed ``str`` column (immutable), else None."""
    dtype = column.dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        return column.array.__arrow_array__()  # type: ignore[attr-defined,no-any-return]
    return None


def remember_codes(column: pd.Series, codes: np.ndarray, categories: pd.Index) -> None:
    """Note that ``column`` is ``categories.take(codes)`` (``categories``: sorted distinct ids, a
    superset of the column's), so :func:`id_codes` need not hash its strings again. Kept only for
    Arrow-backed text (its data cannot change) and only while that data lives."""
    data = arrow_text(column)
    if data is None or len(codes) != len(column) or (len(codes) and int(codes.min()) < 0):
        return
    small = np.int32 if len(categories) < 2**31 else np.int64
    _KNOWN_CODES.put(data, (codes.astype(small, copy=False), categories))


def known_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index] | None:
    """``(codes, categories)`` noted by :func:`remember_codes` for this column's data, or None."""
    data = arrow_text(column)
    return None if data is None else _KNOWN_CODES.get(data)


def id_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """``pd.factorize(column, sort=True)``: ``int64`` codes into the column's sorted distinct ids.

    For Arrow-backed text the codes the split (or an earlier call) made are reused, so millions
    of strings are hashed once per run rather than once per model, comparison and digest.
    """
    known = known_codes(column)
    if known is None:
        codes, uniques = pd.factorize(column, sort=True)
        uniques = pd.Index(uniques)
        remember_codes(column, codes, uniques)
        return codes, uniques
    codes, categories = known
    used = np.bincount(codes, minlength=len(categories)) > 0
    if used.all():
        return codes.astype(np.int64), categories
    rank = np.cumsum(used, dtype=np.int64) - 1
    codes, categories = rank[codes], categories[used]
    remember_codes(column, codes, categories)  # the next call: these, no recount
    return codes, categories


def load_interactions(
    path: str | os.PathLike[str],
    *,
    columns: Mapping[str, str | None] | None = None,
    fmt: str | None = None,
    rating_range: tuple[float, float] | None = None,
    duplicates: str = "error",
    timestamp_format: str | None = None,
) -> pd.DataFrame:
    """Read interactions from CSV/TSV or Parquet and return a validated Interactions frame.

    ``columns`` maps our names (user, item, timestamp, rating) to the file's column names; errors
    are ``DataError`` with a one-line message naming the file, the column and an example value.
    A CSV row with more fields than the header, a non-text CSV and nested Parquet values are
    errors too.
    """
    return load_interactions_coded(
        path,
        columns=columns,
        fmt=fmt,
        rating_range=rating_range,
        duplicates=duplicates,
        timestamp_format=timestamp_format,
    )[0]


def load_interactions_coded(
    path: str | os.PathLike[str],
    *,
    columns: Mapping[str, str | None] | None = None,
    fmt: str | None = None,
    rating_range: tuple[float, float] | None = None,
    duplicates: str = "error",
    timestamp_format: str | None = None,
) -> tuple[pd.DataFrame, dict[str, IdCodes]]:
    """:func:`load_interactions`, plus the codes of its text id columns (see :class:`IdCodes`).

    Parquet text id columns are read dictionary-encoded: the validation then works on each
    distinct id once, without decoding and hashing every row's string.
    """
    source = str(path)
    if "://" not in source and not Path(path).exists():
        raise DataError(f"{source}: no such file (dataset.path)")
    mapping = _column_mapping(columns, source)
    kind = _detect_format(path, fmt)
    _check_policy(duplicates, source)
    _check_timestamp_format(timestamp_format, source)

    found = file_columns(path, kind, source)
    wanted, missing = _wanted_columns(mapping, columns, found)
    if missing:
        raise missing_column(source, missing[0], mapping, found)
    file_cols = [str(mapping[name]) for name in wanted]
    if kind == "parquet":
        schema = _check_flat_parquet(path, file_cols, source)
        raw = read_parquet_columns(path, file_cols, set(file_cols[:2]), schema)  # user, item
    else:
        raw = _read_text_table(path, kind, source, found)
    frame = pd.DataFrame(  # copy=False: int64 columns would otherwise be copied into one block
        {
            name: raw[col].reset_index(drop=True)
            for name, col in zip(wanted, file_cols, strict=True)
        },
        copy=False,
    )
    return _validate(
        frame,
        source=source,
        rating_range=rating_range,
        duplicates=duplicates,
        columns=mapping,
        timestamp_format=timestamp_format,
    )


def load_item_table(
    path: str | os.PathLike[str], kind: str, fmt: str | None = None
) -> pd.DataFrame:
    """An item side table (``kind``: ``item_features`` or ``item_embeddings``) from CSV/TSV or
    Parquet: an ``item`` column of ids normalized as interaction ids, unique; embeddings numeric.

    Feature cells may hold several values (Parquet lists, or ``a|b`` text); Parquet embeddings
    may be numeric columns or one list column.
    """
    source = f"{path} (dataset.{kind})"
    fmt_kind = _detect_format(path, fmt)
    found = file_columns(path, fmt_kind, source)
    if "item" not in found:
        raise DataError(f"{source}: missing column 'item'; columns found: {found}")
    if len(found) < 2:
        raise DataError(f"{source}: needs at least one column besides 'item'")
    if fmt_kind == "parquet":
        raw = pd.read_parquet(path)
    else:
        raw = _read_text_table(path, fmt_kind, source, found)
    frame = raw.reset_index(drop=True)
    frame["item"] = normalize_ids(frame["item"], source, "'item'")
    dup = frame["item"].duplicated().to_numpy()
    if dup.any():
        raise DataError(f"{source}: item {_show(frame['item'].iloc[int(np.argmax(dup))])} twice")
    if kind == "item_embeddings":
        for column in (c for c in frame.columns if c != "item"):
            if frame[column].dtype == object and fmt_kind == "parquet":
                continue  # one list column of vectors
            values = pd.to_numeric(frame[column], errors="coerce")
            bad = values.isna().to_numpy() | ~np.isfinite(values.to_numpy(dtype=np.float64))
            if bad.any():
                row = int(np.argmax(bad))
                raise DataError(
                    f"{source}: column '{column}' must hold finite numbers; row {row} has "
                    f"{_show(frame[column].iloc[row])}"
                )
            frame[column] = values.astype(np.float64)
    return frame


def validate_interactions(
    df: pd.DataFrame,
    *,
    source: str,
    rating_range: tuple[float, float] | None = None,
    duplicates: str = "error",
    columns: Mapping[str, str | None] | None = None,
    timestamp_format: str | None = None,
) -> pd.DataFrame:
    """Check and normalize a frame that uses our column names; return a new Interactions frame.

    Used by the loader and the synthetic generator so that every source obeys the same rules;
    ``source`` (and the optional ``columns`` mapping) only shape the error messages.
    """
    return _validate(
        df,
        source=source,
        rating_range=rating_range,
        duplicates=duplicates,
        columns=columns,
        timestamp_format=timestamp_format,
    )[0]


def _validate(
    df: pd.DataFrame,
    *,
    source: str,
    rating_range: tuple[float, float] | None = None,
    duplicates: str = "error",
    columns: Mapping[str, str | None] | None = None,
    timestamp_format: str | None = None,
) -> tuple[pd.DataFrame, dict[str, IdCodes]]:
    """:func:`validate_interactions` and the :class:`IdCodes` of its text id columns."""
    mapping = _column_mapping(columns, source)
    _check_policy(duplicates, source)
    _check_timestamp_format(timestamp_format, source)
    with_time = mapping[TIMESTAMP] is not None
    missing = [n for n in REQUIRED_COLUMNS if n not in df.columns and (with_time or n != TIMESTAMP)]
    if missing:
        raise DataError(
            f"{source}: missing column {_label(missing[0], mapping)}; "
            f"columns found: {[str(c) for c in df.columns]}"
        )
    if len(df) == 0:
        raise DataError(f"{source}: no interactions (0 rows)")

    out: dict[str, pd.Series | np.ndarray] = {}
    coded: dict[str, IdCodes] = {}
    ids = normalize_ids_coded_all([(df[n], _label(n, mapping)) for n in (USER, ITEM)], source)
    for name, (column, codes) in zip((USER, ITEM), ids, strict=True):
        out[name] = column
        if codes is not None:
            coded[name] = codes
    out[TIMESTAMP] = (
        _normalize_timestamps(df[TIMESTAMP], source, _label(TIMESTAMP, mapping), timestamp_format)
        if with_time
        else np.zeros(len(df), dtype=np.int64)  # no times: every event at 0 (split=random only)
    )
    if RATING in df.columns and mapping[RATING] is not None:
        out[RATING] = _normalize_ratings(df[RATING], source, _label(RATING, mapping), rating_range)
    # no copy: the columns are new arrays or copy-on-write views, never changed in place
    result = pd.DataFrame({name: _values(col) for name, col in out.items()}, copy=False)
    keep = _duplicate_policy_rows(result, duplicates, source, coded, timed=with_time)
    if keep is None:
        return result, coded
    # each dropped row repeats a kept event: every distinct id is still used
    kept = {name: IdCodes(c.codes[keep], c.uniques) for name, c in coded.items()}
    return result[keep].reset_index(drop=True), kept


# --------------------------------------------------------------------------------- helpers


def _values(col: pd.Series | np.ndarray) -> pd.Series | np.ndarray:
    return col.reset_index(drop=True) if isinstance(col, pd.Series) else col


def _column_mapping(columns: Mapping[str, str | None] | None, source: str) -> dict[str, str | None]:
    """Our column names -> the file's; ``None``: the file has no such column (rating, or a
    timestamp: then every event gets time 0 and only ``split=random`` applies)."""
    mapping: dict[str, str | None] = {name: name for name in COLUMNS}
    if columns:
        unknown = sorted(set(columns) - set(COLUMNS))
        if unknown:
            raise DataError(
                f"{source}: unknown column name {unknown[0]!r} in the column mapping; "
                f"allowed: {list(COLUMNS)}"
            )
        mapping.update({str(k): None if v is None else str(v) for k, v in columns.items()})
    for name in (USER, ITEM):
        if mapping[name] is None:
            raise DataError(f"{source}: dataset.columns.{name} cannot be null: events need {name}s")
    return mapping


def timed(columns: Mapping[str, str | None] | None) -> bool:
    """Whether a column mapping reads event times (``dataset.columns.timestamp`` is not null)."""
    return (columns or {}).get(TIMESTAMP, TIMESTAMP) is not None


def _wanted_columns(
    mapping: Mapping[str, str | None], columns: Mapping[str, str | None] | None, found: list[str]
) -> tuple[list[str], list[str]]:
    """The columns read (ours, in order) and those missing from the file (both engines): the
    required ones unless mapped to null, and a rating column when it is there or named."""
    wanted = [name for name in COLUMNS if mapping[name] is not None and mapping[name] in found]
    missing = [n for n in REQUIRED_COLUMNS if mapping[n] is not None and mapping[n] not in found]
    if RATING in (columns or {}) and mapping[RATING] is not None and mapping[RATING] not in found:
        missing.append(RATING)
    return wanted, missing


def duplicate_message(source: str, rows: int, example: Mapping[str, Any], timed: bool) -> str:
    """The start of the repeated-events error (both engines): how many rows, one example."""
    if not timed:
        return (
            f"{source}: columns ('user', 'item') have {rows} rows in repeated pairs (no "
            f"timestamp column), e.g. user={_show(example[USER])} item={_show(example[ITEM])}"
        )
    return (
        f"{source}: columns ('user', 'item', 'timestamp') have {rows} rows in duplicate events, "
        f"e.g. user={_show(example[USER])} item={_show(example[ITEM])} "
        f"timestamp={_show(example[TIMESTAMP])} ({_iso_utc(float(example[TIMESTAMP]))})"
    )


def _check_policy(duplicates: str, source: str) -> None:
    if duplicates not in DUPLICATE_POLICIES:
        raise DataError(
            f"{source}: unknown duplicates policy {duplicates!r}; "
            f"allowed: {list(DUPLICATE_POLICIES)}"
        )


def missing_column(
    source: str, name: str, mapping: Mapping[str, str | None], found: list[str]
) -> DataError:
    """The one-line error of a missing column (both engines), with the key that fixes it."""
    hint = f"; name the file's column with dataset.columns.{name}=<column>"
    other = [sep for sep in (";", "|", "\t") if len(found) == 1 and sep in found[0]]
    if other:  # one column whose name holds another separator: read with the wrong one
        sep = {"\t": "tabs"}.get(other[0], f"'{other[0]}'")
        hint = (
            f"; the file looks separated by {sep}, not commas: write it with commas (or tabs "
            "as .tsv), or as Parquet"
        )
    elif name in (RATING, TIMESTAMP):
        hint += f", or set dataset.columns.{name}=null if the file has no {name}s"
        if name == TIMESTAMP:
            hint += " (then only split=random applies)"
    return DataError(
        f"{source}: missing column {_label(name, mapping)}; columns found: {found}{hint}"
    )


def _label(name: str, mapping: Mapping[str, str | None]) -> str:
    file_col = mapping.get(name, name)
    return f"'{name}'" if file_col == name else f"'{name}' (file column '{file_col}')"


def _detect_format(path: str | os.PathLike[str], fmt: str | None) -> str:
    if fmt is not None:
        kind = fmt.lower().lstrip(".")
        if kind in ("pq", "parq"):
            kind = "parquet"
        if kind not in FORMATS:
            raise DataError(f"{path}: unknown format {fmt!r}; allowed: {list(FORMATS)}")
        return kind
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    if p.is_dir() or (suffixes and suffixes[-1] in (".parquet", ".pq", ".parq")):
        return "parquet"
    compress = (".gz", ".bz2", ".zip", ".xz", ".zst")
    core = suffixes[:-1] if suffixes and suffixes[-1] in compress else suffixes
    if core and core[-1] == ".csv":
        return "csv"
    if core and core[-1] == ".tsv":
        return "tsv"
    raise DataError(
        f"{path}: cannot tell the format from the extension; pass fmt= one of {list(FORMATS)}"
    )


def _check_timestamp_format(fmt: str | None, source: str) -> None:
    """Refuse a ``timestamp_format`` that is neither a known name nor a strftime pattern."""
    if fmt is None or fmt in TIMESTAMP_FORMATS or (isinstance(fmt, str) and "%" in fmt):
        return
    raise DataError(
        f"{source}: unknown timestamp_format {fmt!r}; use one of {list(TIMESTAMP_FORMATS)} "
        f"or a strftime pattern such as '%d/%m/%Y %H:%M'"
    )


def _parquet_schema(path: str | os.PathLike[str]) -> pa.Schema:
    import pyarrow.parquet as pq

    return pq.ParquetDataset(path).schema


def _check_flat_parquet(path: str | os.PathLike[str], columns: list[str], source: str) -> pa.Schema:
    """Nested Parquet columns (lists, structs, maps) cannot hold ids, times or ratings; returns
    the file's schema."""
    schema = _parquet_schema(path)
    for name in columns:
        kind = schema.field(name).type
        if pa.types.is_nested(kind):
            raise DataError(
                f"{source}: column '{name}' holds nested values ({kind}); ids, timestamps and "
                f"ratings must be single values"
            )
    return schema


def read_parquet_columns(
    path: str | os.PathLike[str],
    columns: list[str],
    ids: set[str],
    schema: pa.Schema | None = None,
) -> dict[str, pd.Series]:
    """The file's ``columns`` as pandas reads them, except that text columns among ``ids``
    stored dictionary-encoded come as a categorical of the same values: reading and validating
    them then touches each distinct id once instead of one Python-visible string per row."""
    import pyarrow.parquet as pq

    schema = _parquet_schema(path) if schema is None else schema
    text = [c for c in dict.fromkeys(columns) if c in ids and _dictionary_stored(path, schema, c)]
    rest = [c for c in dict.fromkeys(columns) if c not in text]
    # one column at a time: a frame of several int64 columns is consolidated into one 2D block,
    # a copy of them all (user, item and score of 20M rows: 1.3 against 0.3 CPU s)
    out = {c: pd.read_parquet(path, columns=[c])[c].reset_index(drop=True) for c in rest}
    if text:
        table = pq.read_table(path, columns=text, read_dictionary=text)
        for c in text:
            out[c] = pd.Series(_dictionary_categorical(table.column(c)), copy=False)
        del table
    release_arrow_memory()  # the read's transient buffers
    return out


def _dictionary_categorical(data: pa.ChunkedArray) -> pd.Categorical:
    """A dictionary-encoded Arrow text column as a categorical, hashing each distinct dictionary
    once: Parquet gives one dictionary per row group, shared by that group's many batches, and
    ``to_pandas`` merges it again for every batch (3.4 against 1.0 s at 20M rows)."""
    slots: dict[tuple[int, ...], int] = {}
    dictionaries: list[pa.Array] = []
    slot = []
    for chunk in data.chunks:
        d = chunk.dictionary  # the same memory means the same values: Arrow data is immutable
        key = (*(b.address if b is not None else 0 for b in d.buffers()), d.offset, len(d))
        slot.append(slots.setdefault(key, len(dictionaries)))
        if slot[-1] == len(dictionaries):
            dictionaries.append(d.cast(pa.large_string()))
    encoded = pc.dictionary_encode(
        pa.concat_arrays([pa.array([], pa.large_string()), *dictionaries])
    )
    merged = encoded.indices.to_numpy()
    starts = np.cumsum([0] + [len(d) for d in dictionaries])
    codes = np.empty(len(data), dtype=np.int32)
    lo = 0
    for chunk, at in zip(data.chunks, slot, strict=True):
        hi = lo + len(chunk)
        indices = chunk.indices
        np.take(merged[starts[at] : starts[at + 1]], indices.fill_null(0), out=codes[lo:hi])
        if indices.null_count:
            codes[lo:hi][pc.is_null(indices).to_numpy(zero_copy_only=False)] = -1
        lo = hi
    return pd.Categorical.from_codes(codes, pd.Index(pd.array(encoded.dictionary, dtype="str")))


def _dictionary_stored(path: str | os.PathLike[str], schema: pa.Schema, column: str) -> bool:
    """True when a single Parquet file stores the text ``column`` as dictionary indices.

    Plain text costs at least 4 bytes a value (the length prefix), so under 4 bytes a value
    the pages hold indices into small dictionaries: reading them as a dictionary is cheap.
    Many distinct ids overflow the writer's dictionary page and fall back to plain pages; then
    merging per-chunk dictionaries would cost more than hashing the decoded text once.
    """
    import pyarrow.parquet as pq

    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return False
    if not Path(path).is_file():
        return False
    meta = pq.ParquetFile(path).metadata
    if meta.num_row_groups == 0 or meta.num_rows == 0:
        return False
    first = meta.row_group(0)
    leaves = [first.column(i).path_in_schema for i in range(meta.num_columns)]
    if column not in leaves:
        return False
    index = leaves.index(column)
    size = sum(
        meta.row_group(g).column(index).total_uncompressed_size for g in range(meta.num_row_groups)
    )
    return size < 4 * meta.num_rows


def file_columns(path: str | os.PathLike[str], kind: str, source: str) -> list[str]:
    """The file's column names (as pandas names them); a name given twice is a ``DataError``."""
    if kind == "parquet":
        names = _parquet_schema(path).names
        _check_distinct(names, source, "the Parquet schema")
        return [n for n in names if not n.startswith("__index_level_")]
    check_text_file(path, kind, source)
    sep = "\t" if kind == "tsv" else ","
    try:
        header = pd.read_csv(path, sep=sep, nrows=0)
        # pandas renames a repeated name ('user' -> 'user.1'): the header row as written
        written = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{source}: empty file, no header row") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{source}: cannot parse {kind.upper()}: {_first_line(exc)}") from exc
    # blank header cells stay allowed: pandas names them 'Unnamed: <i>', one way only
    _check_distinct([c for c in written.iloc[0].tolist() if c != ""], source, "the header")
    return [str(c) for c in header.columns]


def _check_distinct(names: list[str], source: str, where: str) -> None:
    """Refuse a column name given twice: which of the two columns it means is ambiguous."""
    seen = pd.Series(names, dtype=object)
    repeated = seen[seen.duplicated()]
    if len(repeated):
        name = repeated.iloc[0]
        raise DataError(
            f"{source}: column {name!r} appears {int((seen == name).sum())} times in {where}; "
            f"each column needs its own name"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_compressed(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in (".gz", ".bz2", ".zip", ".xz", ".zst", ".tar")


def check_text_file(path: str | os.PathLike[str], kind: str, source: str) -> None:
    """A CSV/TSV must be UTF-8 text: a NUL byte or invalid UTF-8 near the start is refused."""
    if _is_compressed(path) or not Path(path).is_file():
        return  # pandas decompresses; a missing file is reported by the reader
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    nul = head.find(b"\x00")
    if nul >= 0:
        raise DataError(
            f"{source}: not a {kind.upper()} text file (binary content: a NUL byte at byte {nul})"
        )
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not merely a character cut at the end of the sample
            raise DataError(
                f"{source}: not UTF-8 text (byte 0x{head[exc.start]:02x} at byte {exc.start}); "
                f"save the {kind.upper()} as UTF-8"
            ) from None


def read_text_table(
    path: str | os.PathLike[str], kind: str = "csv", source: str = ""
) -> pd.DataFrame:
    """A CSV/TSV with every column as text, checked like interaction files (UTF-8 text, a
    header, no row longer than it); for other tables read by the harness (candidates)."""
    source = source or str(path)
    found = file_columns(path, kind, source)
    return _read_text_table(path, kind, source, found)


def _read_text_table(
    path: str | os.PathLike[str], kind: str, source: str, names: list[str]
) -> pd.DataFrame:
    """Every column as text (``names``: the header, as :func:`file_columns` gives it), by Arrow
    where it reads the file as pandas does; a row with more fields than the header is an error
    (pandas would otherwise silently turn leading fields into an index or drop trailing ones)."""
    sep = "\t" if kind == "tsv" else ","
    fast = csv_text(path, sep, names)
    if fast is not None:
        return fast
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        try:
            raw = pd.read_csv(
                path,
                sep=sep,
                dtype=str,
                keep_default_na=False,
                na_values=[""],
                index_col=False,
            )
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise DataError(f"{source}: cannot parse {kind.upper()}: {_first_line(exc)}") from exc
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        raise DataError(f"{source}: {_long_row(path, sep, len(names))}")
    return raw


def _long_row(path: str | os.PathLike[str], sep: str, n_header: int) -> str:
    """Describe the first line with more fields than the header (error path only)."""
    import csv

    if not _is_compressed(path):
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.reader(fh, delimiter=sep)
            for fields in reader:
                if len(fields) > n_header:
                    return (
                        f"line {reader.line_num} has {len(fields)} fields but the header has "
                        f"{n_header}"
                    )
    return f"some rows have more fields than the header ({n_header})"


def plain(value: object) -> object:
    """A numpy scalar as its Python value (``9``, not ``np.int64(9)``, in messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _show(value: object) -> str:
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "null"
    text = repr(plain(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(
    source: str, label: str, mask: np.ndarray, what: str, values: pd.Series, hint: str = ""
) -> DataError:
    positions = np.flatnonzero(mask)
    first = int(positions[0])
    return DataError(
        f"{source}: column {label} has {positions.size} {what}, "
        f"e.g. {_show(values.iloc[first])} at row {first} (0-based data row)"
        + (f"; {hint}" if hint else "")
    )


def normalize_ids(s: pd.Series, source: str, label: str) -> pd.Series:
    """One id type per column (see the module docstring); CSV text and Parquet agree."""
    return _normalize_ids(s, source, label)[0]


def normalize_ids_coded_all(
    columns: Sequence[tuple[pd.Series, str]], source: str, *, decode: bool = True
) -> list[tuple[pd.Series, IdCodes | None]]:
    """:func:`normalize_ids` of several ``(column, label)``, each with the :class:`IdCodes` of a
    text result (its one hash of the column, so a caller need not hash it again). On threads:
    Arrow's hashing releases the GIL, so the user and item columns are encoded side by side; an
    error is the first column's in order, as one after the other would give. ``decode=False``:
    a text result that is not the column as it came is a categorical of the normalized ids, for
    callers that read only the codes (no string per row is made)."""
    with ThreadPoolExecutor(max(1, len(columns))) as pool:
        return list(pool.map(lambda c: _normalize_ids(c[0], source, c[1], decode), columns))


def _normalize_ids(
    s: pd.Series, source: str, label: str, decode: bool = True
) -> tuple[pd.Series, IdCodes | None]:
    """:func:`normalize_ids` and, for a text result, its :class:`IdCodes` (``decode``: see
    :func:`normalize_ids_coded_all`)."""
    nulls = s.isna().to_numpy()
    if nulls.any():
        raise _fail(source, label, nulls, "null id(s)", s)
    if pd.api.types.is_object_dtype(s.dtype):
        s = _typed_object_ids(s, source, label)
    if pd.api.types.is_bool_dtype(s.dtype):
        return s.astype(str), None
    if pd.api.types.is_integer_dtype(s.dtype):
        if pd.api.types.is_unsigned_integer_dtype(s.dtype) and s.max() > np.iinfo(np.int64).max:
            return s.astype(str), None
        return s.astype(np.int64), None
    if pd.api.types.is_float_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64)
        if np.all(np.isfinite(v)) and np.all(v == np.floor(v)):
            inexact = np.abs(v) >= 2.0**53
            if inexact.any():
                raise _fail(
                    source,
                    label,
                    inexact,
                    "float id(s) beyond 2**53 (not exact; store ids as integers or text)",
                    s,
                )
            return pd.Series(v.astype(np.int64), index=s.index), None
        return s.astype(str), None
    # text: one hash of the column (none for a categorical), then the string work on its
    # distinct values only
    s = _one_chunk(s)
    codes, text, unchanged = _distinct_text(s)
    blank = (text == "").to_numpy(dtype=bool)
    if blank.any():  # only whitespace: no id at all
        raise _fail(source, label, blank[codes], EMPTY_IDS, s)
    integral = text.str.fullmatch(_INTEGRAL_TEXT).to_numpy(dtype=bool)
    if integral.all():
        digits = text.str.replace(r"\.0+$", "", regex=True)
        ints = _text_to_int64(digits)
        if ints is not None:
            return pd.Series(ints[codes], index=s.index), None
    _check_near_duplicates(text, integral, codes, source, label)
    if not unchanged and not text.is_unique:  # ids that differ only by surrounding spaces: one id
        inner, text = pd.factorize(text, sort=False)
        codes = inner[codes]
        text = pd.Series(text, copy=False)
        unchanged = False
    small = codes.astype(np.int32 if len(text) < 2**31 else np.int64, copy=False)  # kept: compact
    if unchanged and s.dtype == text.dtype:  # no id had spaces: the column as it came, no copy
        return s, IdCodes(small, text)
    coded = IdCodes(small, text)
    if not decode:
        return pd.Series(pd.Categorical.from_codes(small, text), index=s.index), coded
    return pd.Series(text.array.take(codes), index=s.index), coded


def _distinct_text(s: pd.Series) -> tuple[np.ndarray, pd.Series, bool]:
    """Each row's code, the column's distinct values (those that occur) as stripped ``str``, and
    whether they are the column's own text unchanged (then distinct, as they came); a
    categorical gives its codes and categories without hashing a row."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        codes, raw = _factorize_text(s)
        text = raw.str.strip()
        return codes, text, bool((raw == text).all())
    codes = s.cat.codes.to_numpy()
    categories = s.cat.categories
    used = np.flatnonzero(np.bincount(codes, minlength=len(categories)))
    if len(used) < len(categories):  # unused categories are not ids of this column
        remap = np.full(len(categories), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        codes, categories = remap[codes], categories[used]
    raw = pd.Series(categories, copy=False)
    text = raw.astype(str).str.strip()
    as_text = pd.api.types.infer_dtype(raw, skipna=False) == "string"  # not 1 and "1"
    return codes, text, as_text and bool((raw == text).all())


def _one_chunk(s: pd.Series) -> pd.Series:
    """An Arrow-backed text column as one contiguous Arrow array (Parquet gives a chunk per
    page or row group): selecting rows (the split's parts) from one array is several times
    cheaper than from many chunks, and encoding it needs it contiguous anyway."""
    data = arrow_text(s)
    if data is None or data.num_chunks <= 1:
        return s
    try:
        whole = pa.chunked_array([data.combine_chunks()], type=data.type)
    except (pa.ArrowInvalid, pa.ArrowCapacityError):  # offsets would overflow: keep the chunks
        return s
    return pd.Series(pd.array(whole, dtype=s.dtype), index=s.index, name=s.name, copy=False)


def _factorize_text(s: pd.Series) -> tuple[np.ndarray, pd.Series]:
    """``pd.factorize(s, sort=False)`` with the uniques as ``str``. Arrow-backed text in one chunk
    (:func:`_one_chunk`) is encoded by one Arrow dictionary pass (first-seen order, like
    factorize), a third cheaper than pandas' chunk-by-chunk encoding plus the merge of the
    chunks' dictionaries; text left in chunks (offsets would overflow) goes pandas' way."""
    data = arrow_text(s)
    if data is not None and data.num_chunks == 1:
        encoded = pc.dictionary_encode(data.chunk(0))  # the chunk itself: no copy of the column
        uniques = pd.Series(pd.array(encoded.dictionary, dtype=s.dtype), copy=False)
        return encoded.indices.to_numpy(zero_copy_only=False), uniques
    codes, uniques = pd.factorize(s, sort=False)
    return codes, pd.Series(uniques, copy=False).astype(str)


def _number_text(text: pd.Series) -> np.ndarray:
    """Which values of ``text`` fully match ``_NUMBER_TEXT`` under Python's ``re`` rules, without
    a Python call per value: Arrow's regex decides ASCII values (where its digit class and
    Python's agree), Python's ``re`` only the non-ASCII ones (Python's also matches other
    scripts' digits)."""
    arr = text.array
    data = arr.__arrow_array__() if hasattr(arr, "__arrow_array__") else pa.array(arr)
    ascii_ = pc.string_is_ascii(data).to_numpy(zero_copy_only=False)
    matched = pc.match_substring_regex(data, f"^(?:{_NUMBER_TEXT})$")
    mask = np.array(matched.to_numpy(zero_copy_only=False), dtype=bool)
    if not ascii_.all():
        rest = np.flatnonzero(~ascii_)
        values = pd.Series(text.to_numpy(dtype=object)[rest], dtype=object)
        mask[rest] = values.str.fullmatch(_NUMBER_TEXT).to_numpy(dtype=bool)
    return mask


def _typed_object_ids(s: pd.Series, source: str, label: str) -> pd.Series:
    """An object column as one scalar type, or a DataError for mixed, nested or odd values."""
    kind = pd.api.types.infer_dtype(s, skipna=False)
    if kind in ("string", "empty"):
        return s
    if kind == "integer":
        try:
            return s.astype(np.int64)
        except OverflowError:  # beyond int64: text, as a CSV would give
            return s.astype(str)
    if kind in ("floating", "mixed-integer-float", "decimal"):
        return s.astype(np.float64)
    if kind == "boolean":
        return s.astype(bool)
    nested = s.map(lambda v: isinstance(v, list | tuple | dict | set | np.ndarray)).to_numpy()
    if nested.any():
        raise _fail(source, label, nested, "nested value(s) (lists or maps, not single ids)", s)
    if kind in ("mixed-integer", "mixed"):
        names = s.map(lambda v: type(v).__name__)
        other = int(np.argmax((names != names.iloc[0]).to_numpy()))
        raise DataError(
            f"{source}: column {label} mixes id types: {_show(s.iloc[0])} ({names.iloc[0]}) at "
            f"row 0 and {_show(s.iloc[other])} ({names.iloc[other]}) at row {other} (0-based data "
            f"row); use one type per column, all integers or all text"
        )
    raise _fail(
        source, label, np.ones(len(s), bool), f"{kind} value(s) (ids must be integers or text)", s
    )


def _check_near_duplicates(
    text: pd.Series, integral: np.ndarray, codes: np.ndarray, source: str, label: str
) -> None:
    """Refuse text ids that only differ in how a number is written ('70', '70.0', '+70').

    ``text`` holds the column's distinct values (stripped), ``codes`` each row's index into it.
    """
    number = _number_text(text)
    if number.sum() < 2:
        return
    # the distinct numeric values in first-seen order (as filtering ``pd.unique(text)`` gives)
    numeric = pd.Series(pd.unique(text[number]), dtype=object)
    if len(numeric) < 2:
        return
    key = (
        numeric.str.lstrip("+")
        .str.replace(r"^(-?\d+\.\d*?)0+$", r"\1", regex=True)
        .str.replace(r"\.$", "", regex=True)
        .str.replace(r"^-0$", "0", regex=True)
    )
    clash = key.duplicated(keep=False).to_numpy()
    if not clash.any():
        return
    first = np.full(len(text), len(codes), dtype=np.int64)  # each value's first row
    np.minimum.at(first, codes, np.arange(len(codes)))
    order = np.argsort(first, kind="stable")
    if (order != np.arange(len(order))).any():  # name the pair in row order, as factorize would
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        text = text.iloc[order].reset_index(drop=True)
        _check_near_duplicates(text, integral[order], inverse[codes], source, label)
        return
    first_key = key[clash].iloc[0]
    a, b = numeric[(key == first_key).to_numpy()].iloc[:2]
    values = text.to_numpy()
    row_a, row_b = (int(np.argmax(np.isin(codes, np.flatnonzero(values == v)))) for v in (a, b))
    why = (
        f" (ids are text because of e.g. {_show(values[codes[np.argmin(integral[codes])]])})"
        if not integral.all()
        else ""
    )
    raise DataError(
        f"{source}: column {label} has ids that differ only in number formatting: {a!r} at row "
        f"{row_a} and {b!r} at row {row_b} (0-based data rows){why}; write each id one way"
    )


def _text_to_int64(text: pd.Series) -> np.ndarray | None:
    """Parse validated decimal text to int64, or None when a value is outside int64 (Arrow's
    cast is ~10x faster than ``astype``)."""
    try:
        return pc.cast(pa.array(text.array), pa.int64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        return None
    except (pa.ArrowException, TypeError, ValueError):
        try:
            return text.astype(np.int64).to_numpy()
        except (OverflowError, ValueError):
            return None


def _canonical_ints(s: pd.Series) -> np.ndarray | None:
    """An Arrow text column of integers written canonically (``-12``; at most 20 characters, no
    ``+``, spaces or leading zeros) as int64, else None: Arrow's cast (an error beyond int64),
    checked by casting back (it also reads ``0x1f``). 10M rows: 0.8 against 1.85 s for strip and
    regular expressions."""
    data = arrow_text(s)
    if data is None or not len(data) or pc.max(pc.binary_length(data)).as_py() > 20:
        return None
    try:
        ints = pc.cast(data, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if not pc.all(pc.equal(pc.cast(ints, data.type), data)).as_py():
        return None
    return ints.to_numpy()


def _normalize_timestamps(
    s: pd.Series, source: str, label: str, fmt: str | None = None
) -> np.ndarray:
    """Epoch seconds from one format per column (given, or inferred: see the module docstring)."""
    nulls = s.isna().to_numpy()
    if nulls.any():
        raise _fail(source, label, nulls, "null timestamp(s)", s)
    dtype = s.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype):
        aware = s if getattr(dtype, "tz", None) is not None else s.dt.tz_localize("UTC")
        return _to_seconds(aware)
    if pd.api.types.is_bool_dtype(dtype):
        raise _fail(source, label, np.ones(len(s), bool), "unparsable timestamp(s)", s)
    if pd.api.types.is_object_dtype(dtype):
        kind = pd.api.types.infer_dtype(s, skipna=False)
        if kind in ("integer", "floating", "mixed-integer-float", "decimal"):
            try:
                s = s.astype(np.float64) if kind != "integer" else s.astype(np.int64)
            except OverflowError:
                huge = s.map(lambda v: abs(v) > np.iinfo(np.int64).max).to_numpy(dtype=bool)
                raise _fail(source, label, huge, "timestamp(s) beyond int64", s) from None
        elif kind in ("datetime", "datetime64"):
            return _to_seconds(pd.to_datetime(s, utc=True))
        elif kind != "string":
            nested = s.map(lambda v: isinstance(v, list | tuple | dict | set | np.ndarray))
            if nested.any():
                raise _fail(source, label, nested.to_numpy(), "nested value(s)", s)
    is_number = pd.api.types.is_numeric_dtype(s.dtype)
    if fmt is not None and fmt not in _EPOCH_UNITS:
        text = s.astype(str).str.strip()
        parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
        bad = parsed.isna().to_numpy()
        if bad.any():
            raise _fail(
                source,
                label,
                bad,
                f"timestamp(s) not in the format {fmt!r} set in dataset.timestamp_format",
                s,
            )
        return _to_seconds(parsed)
    if is_number:
        return _epoch_seconds(s, source, label, fmt)
    ints = _canonical_ints(s)
    if ints is not None:  # what the digits rule below reads, without its passes over the text
        return _epoch_seconds(pd.Series(ints, index=s.index), source, label, fmt, shown=s)

    text = s.astype(str).str.strip()
    ints = _text_to_int64(text.str.lstrip("+")) if text.str.fullmatch(_DIGITS_TEXT).all() else None
    if ints is not None:  # the common case: one regex pass; int64 keeps every nanosecond
        return _epoch_seconds(pd.Series(ints, index=s.index), source, label, fmt, shown=s)
    numeric = text.str.fullmatch(_EPOCH_TEXT).to_numpy(dtype=bool)
    if numeric.all():
        values = pd.Series(pd.to_numeric(text).to_numpy(dtype=np.float64), index=s.index)
        return _epoch_seconds(values, source, label, fmt, shown=s)
    if fmt is not None:
        raise _fail(
            source,
            label,
            ~numeric,
            f"timestamp(s) not in the format {fmt!r} set in dataset.timestamp_format",
            s,
        )
    return _infer_date_text(text, numeric, s, source, label)


def _to_seconds(parsed: pd.Series) -> np.ndarray:
    """UTC datetimes to epoch seconds (:func:`seconds_from`), kept to the microsecond."""
    return seconds_from(((parsed - _EPOCH) // _MICROSECOND).to_numpy(dtype=np.int64), 1_000_000)


def time_value(seconds: float) -> int | float:
    """One time in epoch seconds as the time column holds it: an int when whole, else a float."""
    value = float(seconds)
    return int(value) if value.is_integer() else value


def seconds_from(x: np.ndarray, per_second: int) -> np.ndarray:
    """Epoch numbers in units of ``1 / per_second`` s to epoch seconds: ``int64`` when every
    time is a whole second, else ``float64`` so that events within one second keep their
    order and stay distinct (to about 0.25 µs at today's dates)."""
    if x.dtype.kind == "f":
        seconds = x / per_second if per_second != 1 else x
        whole = np.floor(seconds)
        return whole.astype(np.int64) if bool((whole == seconds).all()) else seconds
    if per_second == 1:
        return x
    whole, part = np.divmod(x, per_second)
    return whole if not part.any() else whole + part / per_second


def _epoch_seconds(
    v: pd.Series, source: str, label: str, fmt: str | None, shown: pd.Series | None = None
) -> np.ndarray:
    """Epoch numbers (int or float) to seconds (:func:`seconds_from`); unit given or inferred."""
    shown = v if shown is None else shown
    if pd.api.types.is_float_dtype(v.dtype):
        x = v.to_numpy(dtype=np.float64)
        bad = ~np.isfinite(x) | (np.abs(x) >= 2.0**62)
        if bad.any():
            raise _fail(source, label, bad, "unparsable timestamp(s)", shown)
    else:
        x = v.to_numpy(dtype=np.int64)
    unit = fmt if fmt is not None else _infer_epoch_unit(x, source, label, shown)
    if fmt is not None and fmt != "epoch_s" and x.size:
        size = np.abs(x.astype(np.float64))
        row = int(np.argmax(size))
        try:
            inferred = _infer_epoch_unit(x, source, label, shown)
        except DataError:
            inferred = fmt
        if wrong_unit(float(size[row]), fmt, inferred):
            raise wrong_unit_error(source, label, fmt, inferred, shown.iloc[row], x[row], row)
    return seconds_from(x, _EPOCH_UNITS[unit])


_YEAR = 365 * 86_400


def wrong_unit(largest: float, fmt: str, inferred: str) -> bool:
    """Whether a given epoch unit ``fmt`` puts every time in 1970 (``largest``: the largest
    absolute number) while the unit inferred from the numbers puts them later: e.g. ``epoch_ms``
    set for epoch seconds, which would silently shift every date (and every date cut)."""
    return largest / _EPOCH_UNITS[fmt] < _YEAR <= largest / _EPOCH_UNITS[inferred]


def wrong_unit_error(
    source: str, label: str, fmt: str, inferred: str, shown: Any, number: float, row: int | None
) -> DataError:
    """The one-line error of :func:`wrong_unit` (both engines), with the setting that fixes it."""
    at = "" if row is None else f" at row {row}"
    return DataError(
        f"{source}: column {label} read as {fmt} puts every time in 1970 (e.g. {_show(shown)}"
        f"{at} is {_iso_utc(float(number) / _EPOCH_UNITS[fmt])}); as {inferred} it is "
        f"{_iso_utc(float(number) / _EPOCH_UNITS[inferred])}: {_FORMAT_HINT}={inferred}"
    )


def _iso_utc(seconds: float) -> str:
    return pd.Timestamp(seconds, unit="s", tz="UTC").isoformat()


def _infer_epoch_unit(x: np.ndarray, source: str, label: str, shown: pd.Series) -> str:
    """Seconds, or milliseconds when every value is in [1e11, 1e14) (as seconds: year 5138+)."""
    size = np.abs(x.astype(np.float64))
    big = size >= 1e11
    if not big.any():
        return "epoch_s"
    if big.all() and bool((size < 1e14).all()):
        return "epoch_ms"
    if big.all():
        raise _fail(
            source,
            label,
            size >= 1e14,
            "epoch number(s) too large for seconds or milliseconds",
            shown,
            f"{_FORMAT_HINT}=epoch_us or epoch_ns",
        )
    small, large = int(np.argmin(big)), int(np.argmax(big))
    raise DataError(
        f"{source}: column {label} mixes epoch magnitudes: {_show(shown.iloc[small])} at row "
        f"{small} reads as seconds, {_show(shown.iloc[large])} at row {large} as milliseconds "
        f"(0-based data rows); {_FORMAT_HINT}"
    )


def _infer_date_text(
    text: pd.Series, numeric: np.ndarray, shown: pd.Series, source: str, label: str
) -> np.ndarray:
    """Find the one date layout that reads every row, or fail naming the first row off it."""
    head = text.iloc[:_SAMPLE]
    for group in DATE_LAYOUTS:
        fits: list[tuple[str, pd.Series]] = []
        for fmt in group:
            if pd.to_datetime(head, format=fmt, errors="coerce", utc=True).isna().any():
                continue
            parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
            if not parsed.isna().any():
                fits.append((fmt, parsed))
        if len(fits) == 2:
            differ = (fits[0][1] != fits[1][1]).to_numpy()
            if differ.any():
                row = int(np.argmax(differ))
                raise DataError(
                    f"{source}: column {label} is ambiguous: every value reads both as "
                    f"{fits[0][0]!r} and as {fits[1][0]!r}, e.g. {_show(text.iloc[row])} at row "
                    f"{row}; {_FORMAT_HINT}"
                )
        if fits:
            return _to_seconds(fits[0][1])
    # nothing reads every row: report the rows off the layout that reads the most of them
    best_fmt, best_ok = "epoch seconds", numeric
    for group in DATE_LAYOUTS:
        for fmt in group:
            ok = pd.to_datetime(text, format=fmt, errors="coerce", utc=True).notna().to_numpy()
            if ok.sum() > best_ok.sum():
                best_fmt, best_ok = fmt, ok
    if not best_ok.any():
        what = "unparsable timestamp(s) (no known format)"
    else:
        what = f"timestamp(s) not in the format {best_fmt!r} of the other rows"
    raise _fail(source, label, ~best_ok, what, shown, f"one format per column; {_FORMAT_HINT}")


def _normalize_ratings(
    s: pd.Series, source: str, label: str, rating_range: tuple[float, float] | None
) -> np.ndarray:
    nulls = s.isna().to_numpy()
    if nulls.any():
        raise _fail(source, label, nulls, "null rating(s)", s)
    if pd.api.types.is_numeric_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64)
    else:
        text = s.astype(str)
        try:  # fast path: Arrow parses clean decimal text; anything odd goes to pandas
            v = pc.cast(pa.array(text.array), pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowException, TypeError, ValueError):
            v = pd.to_numeric(text.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(v)
    if bad.any():
        raise _fail(source, label, bad, "non-numeric or non-finite rating(s)", s)
    if rating_range is not None:
        lo, hi = float(rating_range[0]), float(rating_range[1])
        if not lo <= hi:
            raise DataError(f"{source}: rating_range must satisfy low <= high (got {rating_range})")
        out = (v < lo) | (v > hi)
        if out.any():
            raise _fail(source, label, out, f"rating(s) outside [{lo}, {hi}]", s)
    return v


def _pair_codes(col: pd.Series, coded: IdCodes | None) -> tuple[np.ndarray, int]:
    """Non-negative int64 codes of one id column and their bound: a text column's known codes,
    integers shifted by their minimum (no hashing), else factorize codes."""
    if coded is not None:
        return coded.codes.astype(np.int64, copy=False), max(len(coded.uniques), 1)
    if pd.api.types.is_integer_dtype(col.dtype) and len(col):
        v = col.to_numpy(dtype=np.int64)
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < 2**31:
            return v - lo, hi - lo + 1
    codes, uniques = pd.factorize(col, sort=False)
    return codes.astype(np.int64, copy=False), max(len(uniques), 1)


def _pair_keys(df: pd.DataFrame, coded: Mapping[str, IdCodes]) -> np.ndarray:
    """One int64 key per row, equal exactly where the (user, item) pairs are equal (codes
    below ``max(2**31, len(df))`` each: their product fits)."""
    users, _ = _pair_codes(df[USER], coded.get(USER))
    items, n_items = _pair_codes(df[ITEM], coded.get(ITEM))
    return users * n_items + items


#: repeated keys up to which :func:`_rows_of` looks rows up in a hash table of them (it stays in
#: cache); above, one argsort of every key costs less
_FEW_KEYS = 1 << 16


def _rows_of(key: np.ndarray, repeated: np.ndarray) -> np.ndarray:
    """Rows whose ``key`` is among the sorted distinct ``repeated`` keys, in row order. 10M keys:
    0.33 s by hash with 2,000 repeated keys (the argsort: 1.7–2.7 s); 3.0–3.3 s with 1.6M."""
    if repeated.size <= _FEW_KEYS:
        return np.flatnonzero(pd.Index(repeated).get_indexer(key) >= 0)
    order = np.argsort(key)
    ordered = key[order]
    again = ordered[1:] == ordered[:-1]
    paired = np.append(again, False)
    paired[1:] |= again
    return np.sort(order[paired])


def _repeated_events(
    df: pd.DataFrame, coded: Mapping[str, IdCodes]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows of every repeated (user, item, timestamp) event, ordered by event and then by row,
    with a flag per row saying it repeats the row before it; None when no event repeats.

    Only rows whose (user, item) pair repeats can repeat an event: sorting an int64 key per row
    finds them (for text ids, from the codes their validation made), and only those rows are
    sorted by time. Hashing the three columns instead cost 12 s at 10M rows with repeated pairs
    (now 3 s, or under 1 s when few pairs repeat; 0.4 s when none does).
    """
    key = _pair_keys(df, coded)
    ordered = np.sort(key)
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    if not repeated.size:
        return None
    rows = _rows_of(key, repeated)
    times = df[TIMESTAMP].to_numpy()[rows]
    by_event = np.lexsort((times, key[rows]))  # stable: rows in order within an event
    rows, times, keys = rows[by_event], times[by_event], key[rows][by_event]
    repeats = np.zeros(rows.size, dtype=bool)
    repeats[1:] = (keys[1:] == keys[:-1]) & (times[1:] == times[:-1])
    if not repeats.any():
        return None
    return rows, repeats


def _duplicate_policy_rows(
    df: pd.DataFrame,
    duplicates: str,
    source: str,
    coded: Mapping[str, IdCodes] | None = None,
    *,
    timed: bool = True,
) -> np.ndarray | None:
    """The rows (a mask) the policy for repeated (user, item, timestamp) events keeps: all
    (None), an error naming the first repeat, or all but the first (last) of each event.
    ``timed=False`` (no time column): an event is a (user, item) pair."""
    if duplicates == "keep_all":
        return None
    found = _repeated_events(df, coded or {})
    if found is None:
        return None
    rows, repeats = found
    if duplicates == "error":
        event = np.cumsum(~repeats)
        in_repeat = repeats | np.append(repeats[1:], False)  # a repeat and the row it repeats
        first = int(rows[in_repeat].min())
        same = np.sort(rows[event == event[rows == first][0]])
        row = {c: df[c].iloc[first] for c in (USER, ITEM, TIMESTAMP)}  # per column: ints stay ints
        raise DataError(
            duplicate_message(source, int(in_repeat.sum()), row, timed)
            + f" at rows {same[:5].tolist()}"
            + DUPLICATE_HINT
        )
    # each event's rows are in row order: keep_first drops every repeat, keep_last every row
    # that a later one repeats
    drop = rows[repeats] if duplicates == "keep_first" else rows[np.append(repeats[1:], False)]
    keep = np.ones(len(df), dtype=bool)
    keep[drop] = False
    return keep
