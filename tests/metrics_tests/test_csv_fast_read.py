"""`metrics.io.csv_text` (Arrow's CSV reader) reads exactly what pandas' reader reads, or
declines: files built from awkward pieces (quotes, blank and whitespace lines, every line end,
byte-order marks, short and long rows, NULs, compression) are read both ways."""

from __future__ import annotations

import bz2
import gzip
import warnings
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrics import io
from metrics.io import csv_text

FIELDS = ["a", "b7", "1", "-2.5", "", "", " ", "é", "x y", "\x00", "#", "\ufeff", "NaN", "null"]
QUOTED = [
    '"a"',
    '""',
    '"a,b"',
    '"x""y"',
    '"n\nm"',
    '"r\r\ns"',
    '"NA"',
    ' "a"',
    '"a" ',
    'a"b',
    '"a"b',
]
ODD = [
    "\t", ",", ";", '"', '""', '"q,r"', '"n\nm"', "\n", "\r", "\r\n", "\n\n", " \n", "\r,", "\r\r",
]  # fmt: skip


@st.composite
def lines(draw: st.DrawFn, sep: str, width: int) -> str:
    """Rows of the header's width, in some files with odd pieces (quotes, separators, line
    ends, short and long rows): half the files or so stay plain enough for the fast path."""
    odd = draw(st.sampled_from([0, 0, 1, 5, 10]))  # in 20: how often a row is odd
    values = FIELDS + QUOTED if draw(st.booleans()) else FIELDS
    ends = draw(st.sampled_from([["\n"], ["\r\n"], ["\n", "\r\n", "\r"]]))
    out = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 19)) < odd:
            out.append(draw(st.sampled_from(ODD)))
            size = draw(st.integers(1, width + 1))
        else:
            size = width
        fields = draw(st.lists(st.sampled_from(values), min_size=size, max_size=size))
        out.append(sep.join(fields) + draw(st.sampled_from(ends)))
    if out and draw(st.booleans()):
        out[-1] = out[-1].rstrip("\r\n")  # no line end after the last row
    return "".join(out)


def pandas_text(path, sep: str) -> pd.DataFrame | None:
    """The reference: pandas' reader as the harness calls it; None on an error or a warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            frame = pd.read_csv(
                path, sep=sep, dtype=str, keep_default_na=False, na_values=[""], index_col=False
            )
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError):
            return None
    return None if caught else frame


def header_names(path, sep: str) -> list[str] | None:
    try:
        return [str(c) for c in pd.read_csv(path, sep=sep, nrows=0).columns]
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        return None


def write(path, text: str, bom: bool, compression: str) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")
    opener = {"": open, ".gz": gzip.open, ".bz2": bz2.open}[compression]
    with opener(path, "wb") as fh:
        fh.write(data)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    header=st.sampled_from(["user,item", "user,item,rating", '"user","item"', "\nuser,item", "u"]),
    tsv=st.booleans(),
    data=st.data(),
    bom=st.booleans(),
    compression=st.sampled_from(["", "", ".gz", ".bz2"]),
    scan=st.sampled_from([1, 3, 1 << 24]),
)
def test_the_fast_reader_reads_what_pandas_reads_or_declines(
    tmp_path_factory, header, tsv, data, bom, compression, scan
):
    sep = "\t" if tsv else ","
    body = data.draw(lines(sep, header.count(",") + 1))
    path = tmp_path_factory.mktemp("csv") / f"t.{'tsv' if tsv else 'csv'}{compression}"
    write(path, header.replace(",", sep) + "\n" + body, bom, compression)
    names = header_names(path, sep)
    if names is None:
        return
    with mock.patch.object(io, "_SCAN_BYTES", scan):  # small blocks: a "\r\n" split in two
        fast = csv_text(path, sep, names)
    if fast is None:
        return
    ref = pandas_text(path, sep)
    assert ref is not None, "Arrow read a file pandas refuses"
    pd.testing.assert_frame_equal(fast, ref)
    assert list(fast.columns) == list(ref.columns)


@pytest.mark.parametrize("compression", ["", ".gz"])
def test_a_plain_file_takes_the_fast_path(tmp_path, compression):
    rng = np.random.default_rng(0)
    lines = [f"u{u},i{i},{r},{t}" for u, i, r, t in rng.integers(0, 50, (200, 4))]
    lines[3] = "u1,,4,"  # missing values stay missing
    path = tmp_path / f"events.csv{compression}"
    write(path, "user,item,rating,timestamp\r\n" + "\r\n".join(lines) + "\r\n", True, compression)
    fast = csv_text(path, ",", ["user", "item", "rating", "timestamp"])
    assert fast is not None
    pd.testing.assert_frame_equal(fast, pandas_text(path, ","))
    assert fast.loc[3].isna().tolist() == [False, True, False, True]


@pytest.mark.parametrize("scan", [1, 1 << 24])
def test_a_blank_line_ended_by_a_lone_cr_goes_to_pandas(tmp_path, scan):
    """pandas drops the empty first field of the row after it (Arrow keeps it): declined, also
    when the ``\\r`` ends a block of the scan."""
    path = tmp_path / "cr.csv"
    path.write_bytes(b"user,item\n\r,a\n")
    assert pandas_text(path, ",").to_dict("list") == {"user": ["a"], "item": [np.nan]}
    with mock.patch.object(io, "_SCAN_BYTES", scan):
        assert csv_text(path, ",", ["user", "item"]) is None


def test_quoted_data_is_read_unless_a_quote_is_open_at_the_end(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('user,item\n"u1","a ""b"", c"\n"u\n2",""\n')
    assert csv_text(path, ",", ["user", "item"]).to_dict("list") == {
        "user": ["u1", "u\n2"],
        "item": ['a "b", c', np.nan],
    }
    path.write_text('user,item\nu1,i1\nu2,"i2\n')  # pandas: "EOF inside string"
    assert pandas_text(path, ",") is None
    assert csv_text(path, ",", ["user", "item"]) is None


def test_pandas_missing_strings_are_pandas_own():
    from pandas._libs.parsers import STR_NA_VALUES

    assert set(io.PANDAS_NA) == set(STR_NA_VALUES)


#: how the metric command (pandas' missing strings) and precomputed scores (only "" in ids; a
#: score's own) call :func:`metrics.io.read_csv_ids`: (its arguments, pandas' own arguments)
CALLERS = {
    "metrics": ({}, {}),
    "precomputed": (
        {
            "ids_na": ("",),
            "keep_default_na": False,
            "na_values": {"user": [""], "item": [""], "score": ["", "nan", "null"]},
        },
        {
            "keep_default_na": False,
            "na_values": {"user": [""], "item": [""], "score": ["", "nan", "null"]},
        },
    ),
}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    header=st.sampled_from(["user,item,score", "score,item,user", "user,item", "item,score"]),
    data=st.data(),
    caller=st.sampled_from(sorted(CALLERS)),
    subset=st.booleans(),
)
def test_ids_by_arrow_and_the_rest_by_pandas_are_pandas_table(
    tmp_path_factory, header, data, caller, subset
):
    body = data.draw(lines(",", header.count(",") + 1))
    path = tmp_path_factory.mktemp("ids") / "run.csv"
    write(path, header + "\n" + body, False, "")
    ours, theirs = CALLERS[caller]
    names = header.split(",")
    usecols = names[:2] if subset else None
    try:
        ref = pd.read_csv(
            path, sep=",", usecols=usecols, dtype={"user": str, "item": str}, **theirs
        )
    except (pd.errors.ParserError, ValueError) as exc:
        with pytest.raises(type(exc)):
            io.read_csv_ids(path, ",", ["user", "item"], usecols=usecols, **ours)
        return
    got = io.read_csv_ids(path, ",", ["user", "item"], usecols=usecols, **ours)
    pd.testing.assert_frame_equal(got, ref)


@pytest.mark.parametrize("others", [{"skiprows": [2]}, {"comment": "#"}])
def test_rows_pandas_leaves_out_send_the_whole_read_to_pandas(tmp_path, others):
    """An argument that makes pandas read fewer rows than Arrow (rows skipped, a comment line)
    leaves two tables of different lengths: the whole file is then read by pandas alone,
    never two columns joined out of line."""
    path = tmp_path / "run.csv"
    path.write_text("user,item,score\nu1,a,1.5\nu2,b,2.5\n#u3,c,3.5\nu4,d,4.5\n")
    got = io.read_csv_ids(path, ",", ["user", "item"], **others)
    ref = pd.read_csv(path, sep=",", dtype={"user": str, "item": str}, **others)
    assert len(ref) == 3  # the case: pandas has one row fewer than the file
    pd.testing.assert_frame_equal(got, ref)
