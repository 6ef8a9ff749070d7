"""``_string_order`` (how string ids are ranked) against Python's sort of the UTF-8 bytes, on
strings built to tie in the 8-byte key: shared prefixes, NUL bytes, lengths around 8, repeats."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.engine import _string_order

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
