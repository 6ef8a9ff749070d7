"""metrics.sets against plain Python sets (numpy's own np.unique / np.isin are what it replaces)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.sets import distinct, member

ints = st.lists(st.integers(-(2**62), 2**62), max_size=60)
small = st.lists(st.integers(-3, 3), max_size=60)


@settings(max_examples=200, deadline=None)
@given(st.one_of(ints, small), st.sampled_from([np.int64, np.int32, np.uint64, np.bool_]))
def test_distinct_is_the_sorted_set(values: list[int], dtype: type) -> None:
    if dtype is np.int32:
        values = [v % 1000 for v in values]
    if dtype is np.uint64:
        values = [abs(v) for v in values]
    array = np.array(values, dtype=dtype)
    got = distinct(array)
    assert got.dtype == array.dtype
    assert got.tolist() == sorted({array.dtype.type(v).item() for v in values})


@settings(max_examples=200, deadline=None)
@given(st.one_of(ints, small), st.one_of(ints, small))
def test_member_is_set_membership(values: list[int], of: list[int]) -> None:
    got = member(np.array(values, dtype=np.int64), np.array(of, dtype=np.int64))
    assert got.dtype == bool
    assert got.tolist() == [v in set(of) for v in values]


def test_member_keeps_the_shape_and_other_dtypes_fall_back() -> None:
    grid = np.array([[1, 5], [7, 1]])
    assert member(grid, np.array([1, 7])).tolist() == [[True, False], [True, True]]
    # floats with NaN, text and mixed integer widths are numpy's (its NaN and object rules)
    assert distinct(np.array([2.0, np.nan, 1.0, np.nan])).tolist()[:2] == [1.0, 2.0]
    assert member(np.array(["a", "b"], dtype=object), np.array(["b"], dtype=object)).tolist() == [
        False,
        True,
    ]
    assert member(np.array([1, 2], np.int64), np.array([2], np.int32)).tolist() == [False, True]
