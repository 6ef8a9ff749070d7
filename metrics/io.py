"""Reading truth and runs: TREC qrels/run files, CSV and Parquet tables.

Ids get one type per column whatever the file format, by the rule the harness loads data with:
a column whose ids are all integral (``42``, ``42.0``; not ``007``; within int64) is ``int64``,
anything else text as written (surrounding spaces removed). So a TREC file and a CSV of the same
data give the same ids, and the same order of tied scores (``tie_break`` follows ``id_order``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from io import RawIOBase
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from metrics.checks import require_choice

__all__ = [
    "align_ids",
    "csv_text",
    "read_csv_ids",
    "read_qrels",
    "read_run",
    "read_trec_qrels",
    "read_trec_run",
    "typed_ids",
]

FORMATS = ("trec", "csv", "parquet")


def _lines(path: str | Path) -> list[tuple[int, list[str]]]:
    """Non-blank, non-comment lines split on whitespace, with their 1-based line numbers."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                out.append((number, text.split()))
    return out


#: Arrow's CSV reader set to read a TREC file's fields: single spaces between them, no quoting,
#: every field text (columns named f0, f1, …)
_TREC_CSV = {
    "read_options": pcsv.ReadOptions(autogenerate_column_names=True),
    "parse_options": pcsv.ParseOptions(
        delimiter=" ", quote_char=False, double_quote=False, escape_char=False
    ),
    "convert_options": pcsv.ConvertOptions(
        column_types={f"f{i}": pa.string() for i in range(64)},
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    ),
}


@dataclass(frozen=True)
class _Trec:
    """One TREC file kind: its fields (ids in the first and third), the number's field."""

    what: str
    fields: int
    exact: bool  # exactly ``fields`` (else at least)
    number: int  # the field holding the number
    name: str  # its column
    count_rule: str
    number_rule: str


_QRELS = _Trec(
    "qrels",
    4,
    True,
    3,
    "relevance",
    "a qrels line needs 4 fields: query iter doc rel",
    "relevance must be a number",
)
_RUN = _Trec(
    "run",
    6,
    False,
    4,
    "score",
    "a run line needs 6 fields: query Q0 doc rank score tag",
    "score (field 5) must be a number",
)


def _trec_fields(path: str | Path, kind: _Trec) -> list[pa.Array | pa.ChunkedArray] | None:
    """The user, item and number fields of a TREC file read at Arrow's speed (line by line
    reads ~15x slower): the ids dictionary-encoded (the id rule then reads each distinct id
    once), the number cast to float64. None unless every line holds the kind's
    fields between single spaces and reads as ``str.split`` would read it (no comment, no other
    whitespace, a plain number): :func:`_lines` then reads it, and names any bad line."""
    try:
        with open(path, "rb") as fh:
            if fh.read(3) == b"\xef\xbb\xbf":  # a byte-order mark: Arrow drops it, Python keeps it
                return None
        table = pcsv.read_csv(path, **_TREC_CSV)
    except (OSError, ValueError, pa.ArrowException):  # read again line by line: the same error
        return None
    if table.num_columns < kind.fields or (kind.exact and table.num_columns > kind.fields):
        return None
    # one array per field, so one dictionary of its distinct values
    columns = [c.combine_chunks().dictionary_encode() for c in table.columns[: kind.number]]
    # a field with a space of another kind (a tab, U+00A0 …) or none at all (two spaces) is read
    # unlike ``str.split``: checked on the distinct values of every field before the number
    for i, column in enumerate(columns):
        distinct = column.dictionary.to_pylist()
        if any(v.split() != [v] for v in distinct) or (
            i == 0 and any(v[0] == "#" for v in distinct)
        ):
            return None
    try:  # Arrow's numbers are a subset of Python's float() (which also takes "1_0", " 1")
        number = pc.cast(table.column(kind.number), pa.float64())
    except (ValueError, pa.ArrowException):
        return None
    return [columns[0], columns[2], number]


def _bad_line(path: str | Path, number: int, rule: str, fields: list[str]) -> ValueError:
    return ValueError(f"{path}:{number}: {rule} (got {' '.join(fields)!r})")


def _read_trec(path: str | Path, kind: _Trec, coded: bool) -> pd.DataFrame:
    """A TREC file as columns ``user, item`` and the kind's number, ids typed."""
    fast = _trec_fields(path, kind)
    if fast is not None:
        users, items, numbers = (x.to_pandas() for x in fast)
    else:
        lists: tuple[list[str], list[str], list[float]] = ([], [], [])
        for line, fields in _lines(path):
            if len(fields) < kind.fields or (kind.exact and len(fields) > kind.fields):
                raise _bad_line(path, line, kind.count_rule, fields)
            try:
                lists[2].append(float(fields[kind.number]))
            except ValueError:
                raise _bad_line(path, line, kind.number_rule, fields) from None
            lists[0].append(fields[0])
            lists[1].append(fields[2])
        users, items, numbers = (pd.Series(x) for x in lists)
    if not len(users):
        raise ValueError(f"{path}: no {kind.what} lines found")
    return pd.DataFrame(
        {
            "user": typed_ids(users, path, "query", coded=coded).array,
            "item": typed_ids(items, path, "doc", coded=coded).array,
            kind.name: numbers.to_numpy(dtype=np.float64),
        }
    )


def read_trec_qrels(path: str | Path, *, coded: bool = False) -> pd.DataFrame:
    """TREC qrels (``query iter doc relevance``) as columns ``user, item, relevance``.

    Ids are typed as the module docstring says (the ``trec_eval`` preset compares them as
    strings, as trec_eval does; ``coded``: text ids as a categorical); lines starting with ``#``
    are comments.
    """
    return _read_trec(path, _QRELS, coded)


def read_trec_run(path: str | Path, *, coded: bool = False) -> pd.DataFrame:
    """TREC run (``query Q0 doc rank score tag``) as columns ``user, item, score``.

    The rank column is ignored (ranking follows the score, as in trec_eval); fields after the
    sixth are ignored. ``coded``: text ids as a categorical.
    """
    return _read_trec(path, _RUN, coded)


#: Canonical integral id text (no sign "+", no leading zeros, optionally ".0"; int64 checked
#: after): the one pattern of the id rule, which the harness's loader reads with too.
INTEGRAL_ID = r"(?:0|-?[1-9]\d{0,18})(?:\.0+)?"
_FORM = r"^\+|\.0+$"  # what only writes a number differently


def typed_ids(
    values: pd.Series | list[str], path: str | Path, column: str, *, coded: bool = False
) -> pd.Series:
    """One id column typed by the module docstring's rule: ``int64`` when every id is
    integral, else text (``str``; with ``coded``, a categorical of the same text, which
    :func:`metrics.evaluate` reads at integer speed). Text ids that only differ in how a number
    is written (``70`` and ``70.0`` next to ``abc``) are refused: they would silently be two ids.
    The rule reads each distinct id once; the rows keep their codes."""
    s = pd.Series(values, copy=False)
    if pd.api.types.is_integer_dtype(s.dtype) and not s.hasnans:
        return s.astype(np.int64)
    if s.isna().any():
        raise ValueError(
            f"{path}: column {column!r} has a missing id at row {int(s.isna().argmax())}"
        )
    if pd.api.types.is_float_dtype(s.dtype):
        x = s.to_numpy(dtype=np.float64)
        if (np.floor(x) == x).all() and (np.abs(x) < 2.0**53).all():
            return pd.Series(x.astype(np.int64))
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes, distinct = s.cat.codes.to_numpy(), s.cat.categories
        used = np.bincount(codes, minlength=len(distinct)) > 0
        if not used.all():  # a category no row holds is no id (pandas' own way sorts the rows)
            codes, distinct = (np.cumsum(used) - 1)[codes], distinct[used]
    else:
        codes, distinct = pd.factorize(s)
    ids = _typed_distinct(pd.Series(distinct), path, column)
    if ids.dtype.kind == "i":
        return pd.Series(ids.to_numpy()[codes])
    joined, text = pd.factorize(ids)  # stripped, two spellings may be one id (" a" and "a")
    codes = joined[codes]
    if coded:
        return pd.Series(pd.Categorical.from_codes(codes, categories=text, validate=False))
    return pd.Series(text.take(codes))


def _typed_distinct(distinct: pd.Series, path: str | Path, column: str) -> pd.Series:
    """:func:`typed_ids`' rule on distinct ids: ``int64`` when every one is integral, else the
    stripped text (which may repeat)."""
    text = distinct.astype(str).str.strip()
    integral = text.str.fullmatch(INTEGRAL_ID)
    if integral.all():
        try:
            return pd.Series(text.str.replace(_FORM, "", regex=True).astype(np.int64))
        except (OverflowError, ValueError):
            pass
    looks = text[text.str.fullmatch(r"\+?" + INTEGRAL_ID)]  # "+70", "70.0" and "70": one number
    forms = pd.DataFrame({"written": looks, "number": looks.str.replace(_FORM, "", regex=True)})
    forms = forms.drop_duplicates("written")
    clash = forms[forms["number"].duplicated(keep=False)]
    if len(clash):
        a, b = clash.loc[clash["number"] == clash["number"].iloc[0], "written"].iloc[:2]
        raise ValueError(
            f"{path}: column {column!r} has ids {a!r} and {b!r} that differ only in number "
            "formatting (the ids are text); write each id one way"
        )
    return text.astype(str)


#: pandas 3's ``str`` dtype (Arrow strings, NaN for missing), what ``dtype=str`` reads text as
_TEXT = pd.StringDtype("pyarrow", na_value=np.nan)
#: endings pandas reads as compressed that Arrow decompresses too (a ``.tar.*`` is an archive)
_ARROW_CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_PANDAS_ONLY = (".zip", ".xz", ".tar", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")

#: bytes per block of :func:`_scan`
_SCAN_BYTES = 1 << 24
#: a last row appended to a file with quotes: read back as a row unless the file ends inside a
#: quoted field (pandas' "EOF inside string" error), where it becomes part of that field
_END = "\x02end\x03"


def _scan(file: Path, codec: str | None) -> bool | None:
    """Whether the data after the header holds a quote; None when Arrow may split the file into
    lines unlike pandas: the header not on the first line (or beyond 64 KiB), or a lone ``\\r``
    (pandas drops a field after a line ended by one). Read in blocks: a large file costs a pass,
    not its size in memory."""
    quoted = False
    with pa.input_stream(str(file), compression=codec) as stream:
        first = stream.read(1 << 16)
        end = first.find(b"\n")
        if end < 0 or first.removeprefix(b"\xef\xbb\xbf")[:1] in (b"\n", b"\r"):
            return None
        rest = first[end + 1 :]
        blocks = chain(
            (rest[i : i + _SCAN_BYTES] for i in range(0, len(rest), _SCAN_BYTES)),
            iter(lambda: stream.read(_SCAN_BYTES), b""),
        )
        pending = False  # the last block ended in "\r": lone unless this one starts with "\n"
        for block in blocks:
            if pending and not block.startswith(b"\n"):
                return None
            quoted = quoted or b'"' in block
            pending = block.endswith(b"\r")
            if block.count(b"\r") - block.count(b"\r\n") > pending:
                return None
    return quoted


class _Then(RawIOBase):
    """A stream, then ``tail``: what Arrow reads as one file."""

    def __init__(self, stream: pa.NativeFile, tail: bytes) -> None:
        self.stream, self.tail = stream, tail

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read() if size < 0 else self.stream.read(size)
        if data:
            return data
        n = len(self.tail) if size < 0 else size
        data, self.tail = self.tail[:n], self.tail[n:]
        return data


def csv_text(
    path: str | os.PathLike[str],
    sep: str,
    names: list[str],
    usecols: list[str] | None = None,
    na_values: tuple[str, ...] = ("",),
) -> pd.DataFrame | None:
    """``pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, na_values=na_values,
    index_col=False, usecols=usecols)`` by Arrow's multithreaded reader (10M rows, 4 columns:
    ~2 s against pandas' ~24 s), for a local file both read alike; ``names``: the header as
    pandas names it.

    None (read it with pandas, which also names what is wrong) unless: two or more columns, no
    header name holding the separator, a quote or a line end; :func:`_scan`; every row
    holding the header's fields; no quoted field open at the end of the file.
    """
    file = Path(path)
    codec = _ARROW_CODECS.get(file.suffix.lower())
    if (
        len(names) < 2
        or any(c in name for name in names for c in (sep, '"', "\n", "\r"))
        or file.name.lower().endswith(_PANDAS_ONLY)
        or not file.is_file()
    ):
        return None
    columns = [f"f{i}" for i in range(len(names))]
    kept = [i for i, name in enumerate(names) if usecols is None or name in usecols]
    try:
        quoted = _scan(file, codec)
        if quoted is None:
            return None
        with pa.input_stream(str(file), compression=codec) as stream:
            source = (
                _Then(stream, f"\n{sep.join([_END] * len(names))}\n".encode()) if quoted else stream
            )
            table = pcsv.read_csv(
                source,
                read_options=pcsv.ReadOptions(column_names=columns, skip_rows=1),
                parse_options=pcsv.ParseOptions(
                    delimiter=sep,
                    quote_char='"' if quoted else False,
                    double_quote=quoted,
                    escape_char=False,
                    newlines_in_values=quoted,
                ),
                convert_options=pcsv.ConvertOptions(
                    column_types=dict.fromkeys(columns, pa.string()),
                    include_columns=[columns[i] for i in kept],
                    strings_can_be_null=True,
                    null_values=list(na_values),
                ),
            )
    except (OSError, ValueError, pa.ArrowException):
        return None
    if quoted:
        if not len(table) or any(c[-1].as_py() != _END for c in table.columns):
            return None  # the file ends inside a quoted field: pandas refuses it
        table = table.slice(0, len(table) - 1)
    frame = table.to_pandas(types_mapper={pa.string(): _TEXT}.get)
    frame.columns = pd.Index([names[i] for i in kept])
    return frame


#: the strings pandas' CSV reader takes as missing unless told otherwise (``keep_default_na``)
PANDAS_NA = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip


def read_csv_ids(
    path: str | os.PathLike[str],
    sep: str,
    ids: list[str],
    usecols: list[str] | None = None,
    ids_na: tuple[str, ...] = PANDAS_NA,
    **others: Any,
) -> pd.DataFrame:
    """``pd.read_csv(path, sep=sep, usecols=usecols, dtype=dict.fromkeys(ids, str), **others)``
    with the text ``ids`` columns read by :func:`csv_text` where it can (pandas makes a Python
    string of every row's text: the slow part of a large file) and the other columns by pandas.
    ``ids_na``: the strings ``others`` makes missing in the ids columns."""
    names = [str(c) for c in pd.read_csv(path, sep=sep, nrows=0).columns]
    wanted = [c for c in names if usecols is None or c in usecols]
    text = [c for c in wanted if c in ids]
    fast = csv_text(path, sep, names, text, ids_na) if text else None
    rest = [c for c in wanted if c not in text]
    if fast is not None and rest:
        other = pd.read_csv(path, sep=sep, usecols=rest, **others)
        fast = fast.join(other) if len(other) == len(fast) else None  # rows alike, or pandas
    if fast is None:
        return pd.read_csv(path, sep=sep, usecols=usecols, dtype=dict.fromkeys(ids, str), **others)
    return fast[wanted]


def _format(path: str | Path, fmt: str | None) -> str:
    if fmt is not None:
        return require_choice("format", fmt, FORMATS)
    suffix = Path(path).suffix.lower()
    return {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".tsv": "csv"}.get(
        suffix, "trec"
    )


def _table(path: str | Path, fmt: str, columns: tuple[str, ...]) -> pd.DataFrame:
    # Parquet id columns read as codes and their distinct values (its dictionaries as they are
    # stored); CSV text is coded by the rule, which reads each distinct id once
    if fmt == "parquet":
        df = pd.read_parquet(path, read_dictionary=["user", "item"])
    else:
        sep = "\t" if str(path).lower().endswith(".tsv") else ","
        df = read_csv_ids(path, sep, ["user", "item"])
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column {missing[0]!r}; need {list(columns)}, found {list(df.columns)}"
        )
    df = df[list(columns)]
    return df.assign(**{c: typed_ids(df[c], path, c, coded=True).array for c in ("user", "item")})


def align_ids(*tables: pd.DataFrame) -> list[pd.DataFrame]:
    """Tables read one by one (truth and runs) with one id type per column across them all: where
    one file's ids are all integral and another's are not, every file's ids of that column are
    text, as if the files were one column (``8`` in the truth then matches ``8`` in the run)."""
    out = list(tables)
    for column in ("user", "item"):
        kinds = {t[column].dtype.kind == "i" for t in out}
        if len(kinds) > 1:  # integer ids as their text; text ids (maybe coded) as they are
            out = [
                t.assign(**{column: t[column].astype(str)}) if t[column].dtype.kind == "i" else t
                for t in out
            ]
    return out


def read_qrels(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """Truth from a TREC qrels, CSV or Parquet file (format by extension unless ``fmt``)."""
    f = _format(path, fmt)
    if f == "trec":
        return read_trec_qrels(path, coded=True)
    return _table(path, f, ("user", "item", "relevance"))


def read_run(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """A run from a TREC run, CSV or Parquet file (format by extension unless ``fmt``)."""
    f = _format(path, fmt)
    if f == "trec":
        return read_trec_run(path, coded=True)
    return _table(path, f, ("user", "item", "score"))
