"""Reading truth and runs: TREC qrels/run files, CSV and Parquet tables.

Ids get one type per column whatever the file format, by the rule the harness loads data with:
a column whose ids are all integral (``42``, ``42.0``; not ``007``; within int64) is ``int64``,
anything else text as written (surrounding spaces removed). So a TREC file and a CSV of the same
data give the same ids, and the same order of tied scores (``tie_break`` follows ``id_order``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from metrics.checks import require_choice

__all__ = ["align_ids", "read_qrels", "read_run", "read_trec_qrels", "read_trec_run", "typed_ids"]

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


def _bad_line(path: str | Path, number: int, rule: str, fields: list[str]) -> ValueError:
    return ValueError(f"{path}:{number}: {rule} (got {' '.join(fields)!r})")


def read_trec_qrels(path: str | Path) -> pd.DataFrame:
    """TREC qrels (``query iter doc relevance``) as columns ``user, item, relevance``.

    Ids are typed as the module docstring says (the ``trec_eval`` preset compares them as
    strings, as trec_eval does); lines starting with ``#`` are comments.
    """
    users, items, rels = [], [], []
    for number, fields in _lines(path):
        if len(fields) != 4:
            raise _bad_line(path, number, "a qrels line needs 4 fields: query iter doc rel", fields)
        try:
            rels.append(float(fields[3]))
        except ValueError:
            raise _bad_line(path, number, "relevance must be a number", fields) from None
        users.append(fields[0])
        items.append(fields[2])
    if not users:
        raise ValueError(f"{path}: no qrels lines found")
    return pd.DataFrame(
        {
            "user": typed_ids(users, path, "query"),
            "item": typed_ids(items, path, "doc"),
            "relevance": rels,
        }
    )


def read_trec_run(path: str | Path) -> pd.DataFrame:
    """TREC run (``query Q0 doc rank score tag``) as columns ``user, item, score``.

    The rank column is ignored (ranking follows the score, as in trec_eval); fields after the
    sixth are ignored.
    """
    users, items, scores = [], [], []
    for number, fields in _lines(path):
        if len(fields) < 6:
            raise _bad_line(
                path, number, "a run line needs 6 fields: query Q0 doc rank score tag", fields
            )
        try:
            scores.append(float(fields[4]))
        except ValueError:
            raise _bad_line(path, number, "score (field 5) must be a number", fields) from None
        users.append(fields[0])
        items.append(fields[2])
    if not users:
        raise ValueError(f"{path}: no run lines found")
    return pd.DataFrame(
        {
            "user": typed_ids(users, path, "query"),
            "item": typed_ids(items, path, "doc"),
            "score": scores,
        }
    )


#: Canonical integral id text (no sign "+", no leading zeros, optionally ".0"; int64 checked
#: after): the one pattern of the id rule, which the harness's loader reads with too.
INTEGRAL_ID = r"(?:0|-?[1-9]\d{0,18})(?:\.0+)?"
_FORM = r"^\+|\.0+$"  # what only writes a number differently


def typed_ids(values: pd.Series | list[str], path: str | Path, column: str) -> pd.Series:
    """One id column typed by the module docstring's rule: ``int64`` when every id is
    integral, else ``str``. Text ids that only differ in how a number is written (``70`` and
    ``70.0`` next to ``abc``) are refused: they would silently be two ids."""
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
    text = s.astype(str).str.strip()
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


def _format(path: str | Path, fmt: str | None) -> str:
    if fmt is not None:
        return require_choice("format", fmt, FORMATS)
    suffix = Path(path).suffix.lower()
    return {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".tsv": "csv"}.get(
        suffix, "trec"
    )


def _table(path: str | Path, fmt: str, columns: tuple[str, ...]) -> pd.DataFrame:
    if fmt == "parquet":
        df = pd.read_parquet(path)
    else:
        sep = "\t" if str(path).lower().endswith(".tsv") else ","
        df = pd.read_csv(path, sep=sep, dtype={"user": str, "item": str})
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column {missing[0]!r}; need {list(columns)}, found {list(df.columns)}"
        )
    df = df[list(columns)]
    return df.assign(**{c: typed_ids(df[c], path, c).to_numpy() for c in ("user", "item")})


def align_ids(*tables: pd.DataFrame) -> list[pd.DataFrame]:
    """Tables read one by one (truth and runs) with one id type per column across them all: where
    one file's ids are all integral and another's are not, every file's ids of that column are
    text, as if the files were one column (``8`` in the truth then matches ``8`` in the run)."""
    out = list(tables)
    for column in ("user", "item"):
        kinds = {t[column].dtype.kind == "i" for t in out}
        if len(kinds) > 1:
            out = [t.assign(**{column: t[column].astype(str)}) for t in out]
    return out


def read_qrels(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """Truth from a TREC qrels, CSV or Parquet file (format by extension unless ``fmt``)."""
    f = _format(path, fmt)
    return read_trec_qrels(path) if f == "trec" else _table(path, f, ("user", "item", "relevance"))


def read_run(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """A run from a TREC run, CSV or Parquet file (format by extension unless ``fmt``)."""
    f = _format(path, fmt)
    return read_trec_run(path) if f == "trec" else _table(path, f, ("user", "item", "score"))
