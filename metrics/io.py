"""Reading truth and runs: TREC qrels/run files, CSV and Parquet tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from metrics.checks import require_choice

__all__ = ["read_qrels", "read_run", "read_trec_qrels", "read_trec_run"]

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

    Ids stay strings (trec_eval compares them as strings); lines starting with ``#`` are comments.
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
        {"user": pd.array(users, dtype=str), "item": pd.array(items, dtype=str), "relevance": rels}
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
        {"user": pd.array(users, dtype=str), "item": pd.array(items, dtype=str), "score": scores}
    )


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
        df = pd.read_csv(path, sep=sep)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column {missing[0]!r}; need {list(columns)}, found {list(df.columns)}"
        )
    return df[list(columns)]


def read_qrels(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """Truth from a TREC qrels, CSV or Parquet file (format by extension unless ``fmt``)."""
    f = _format(path, fmt)
    return read_trec_qrels(path) if f == "trec" else _table(path, f, ("user", "item", "relevance"))


def read_run(path: str | Path, fmt: str | None = None) -> pd.DataFrame:
    """A run from a TREC run, CSV or Parquet file (format by extension unless ``fmt``)."""
    f = _format(path, fmt)
    return read_trec_run(path) if f == "trec" else _table(path, f, ("user", "item", "score"))
