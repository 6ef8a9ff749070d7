"""The TREC readers read a file's fields with Arrow's CSV reader when every line is plain (single
spaces, no comment, plain numbers), about 15x faster than line by line. Hypothesis writes files
plain and not (tabs, Unicode spaces, comments, blank lines, byte-order marks, odd field counts,
numbers Python reads and Arrow does not): the result, or the one-line error, is always the line
reader's."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metrics.io as io

#: plain fields, ids (digit strings and text) and numbers, which both readers read alike
PLAIN = st.sampled_from(
    ["u1", "u2", "10", "007", "7.0", "d1", "d2", "Q0", "0", "1", "2.5", "-1", "é", "a#b", "1e3"]
)
#: fields the two readers could read differently
ODD = st.sampled_from(
    ["#", "#c", "1_0", "nan", "inf", "+3", ".5", "a\tb", "a\u00a0b", "x\x0b", "\u2003"]
)


@st.composite
def files(draw: st.DrawFn, fields: int) -> bytes:
    """A TREC-like file: half of them plain (every line ``fields`` plain fields between single
    spaces, blank lines), the others with odd fields, spaces, comments and field counts."""
    plain = draw(st.booleans())
    field = PLAIN if plain else st.one_of(PLAIN, PLAIN, ODD)
    counts = [fields] if plain else [fields, fields, fields - 1, fields + 1]
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        n = draw(st.sampled_from(counts))
        line = " ".join(draw(st.lists(field, min_size=n, max_size=n)))
        forms = [line, ""] if plain else [line, line, " " + line, line + " ", "# x", ""]
        lines.append(draw(st.sampled_from(forms)))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    bom = "" if plain else draw(st.sampled_from(["", "\ufeff"]))
    return (bom + ending.join(lines) + ending).encode()


def _outcome(read, path: Path) -> pd.DataFrame | str:
    try:
        return read(path)
    except ValueError as err:
        return str(err)


@pytest.mark.parametrize(("reader", "fields"), [("read_trec_run", 6), ("read_trec_qrels", 4)])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_fast_read_is_the_line_readers(
    tmp_path: Path, reader: str, fields: int, data: st.DataObject
) -> None:
    path = tmp_path / "file.txt"
    path.write_bytes(data.draw(files(fields)))
    read = getattr(io, reader)
    got = _outcome(read, path)
    with mock.patch.object(io, "_trec_fields", lambda *args: None):  # the line reader alone
        want = _outcome(read, path)
    if isinstance(want, str):
        assert got == want
    else:
        assert not isinstance(got, str), got
        pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("coded", [False, True])
def test_a_plain_file_is_read_without_the_line_reader(tmp_path: Path, coded: bool) -> None:
    # the fast path is taken (the line reader would fail here), and gives what the file says
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 d2 1 0.5 t\nq1 Q0 d10 2 0.25 t\nq2 Q0 d2 1 1e-3 t\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d2 1\r\nq2 0 d10 2\r\n")
    with mock.patch.object(io, "_lines", side_effect=AssertionError("read line by line")):
        r = io.read_trec_run(run, coded=coded)
        q = io.read_trec_qrels(qrels, coded=coded)
    assert list(r["user"]) == ["q1", "q1", "q2"] and list(r["item"]) == ["d2", "d10", "d2"]
    assert list(r["score"]) == [0.5, 0.25, 0.001]
    assert list(q["item"]) == ["d2", "d10"] and list(q["relevance"]) == [1.0, 2.0]
    assert isinstance(r["user"].dtype, pd.CategoricalDtype) == coded
