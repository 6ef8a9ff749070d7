"""``_string_order`` (how string ids are ranked) against Python's sort of the UTF-8 bytes, on
strings built to tie in the 8-byte key: shared prefixes, NUL bytes, lengths around 8, repeats;
and ``_link`` (string ids to int keys) against ranks in that sort."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.engine import _Coded, _link, _string_order

PIECES = st.text(alphabet=["a", "b", "\0", "é", "\U0001f600", "~"], max_size=11)


@settings(max_examples=300, deadline=None, database=None)
@given(
    prefix=st.sampled_from(["", "user-000", "x" * 13]),
    suffixes=st.lists(PIECES, max_size=25),
    drop=st.integers(0, 2),
)
def test_sorts_as_python_sorts_the_bytes(prefix, suffixes, drop):
    strings = [prefix + s for s in suffixes]
    values = pa.array(strings, pa.large_string()).slice(min(drop, len(strings)))  # offset > 0
    got = [values[int(i)].as_py() for i in _string_order(values)]
    assert got == sorted(strings[min(drop, len(strings)) :], key=lambda s: s.encode())


def test_short_and_empty_strings():
    for strings in (["", ""], ["b", "a", ""], ["ab", "a\0", "a", "a\0"], ["\0" * 9, "\0" * 8]):
        values = pa.array(strings, pa.large_string())
        got = [values[int(i)].as_py() for i in _string_order(values)]
        assert got == sorted(strings, key=lambda s: s.encode())


@st.composite
def coded_columns(draw):
    """Coded columns in pieces (codes into the piece's values); some values arrays equal an
    earlier one, as a truth table and a run listing the same users in the same order do."""
    arrays: list[list[str]] = []
    columns = []
    for _ in range(draw(st.integers(1, 3))):
        codes, values = [], []
        for _ in range(draw(st.integers(1, 3))):
            if arrays and draw(st.booleans()):
                strings = list(draw(st.sampled_from(arrays)))  # equal to an earlier array
            else:
                strings = draw(st.lists(PIECES, min_size=1, max_size=8, unique=True))
                arrays.append(strings)
            values.append(pa.array(strings, pa.large_string()))
            codes.append(np.array(draw(st.lists(st.integers(0, len(strings) - 1), max_size=6))))
        columns.append(_Coded([c.astype(np.int64) for c in codes], values))
    return columns


@settings(max_examples=200, deadline=None, database=None)
@given(columns=coded_columns())
def test_link_keys_are_ranks_among_every_distinct_id(columns):
    keys, distinct = _link(columns, None)
    every = sorted(
        {v for c in columns for arr in c.values for v in arr.to_pylist()}, key=lambda s: s.encode()
    )
    assert distinct.to_pylist() == every
    for c, got in zip(columns, keys, strict=True):
        ids = [
            v.as_py() for codes, arr in zip(c.codes, c.values, strict=True) for v in arr.take(codes)
        ]
        assert got.tolist() == [every.index(s) for s in ids]
