"""Timestamps written as integer text: Arrow's cast (checked by casting back) reads exactly what
the loader's digits rule reads, and hands every other spelling to that rule."""

from __future__ import annotations

from unittest import mock

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness.data as data
from harness.errors import DataError

SPELLINGS = st.one_of(
    st.integers(-(10**18), 10**19).map(str),  # canonical, up to 19 digits and beyond int64
    st.integers(0, 10**12).map(lambda n: f"+{n}"),
    st.integers(0, 10**12).map(lambda n: f"00{n}"),
    st.integers(0, 10**12).map(lambda n: f" {n} "),
    st.integers(0, 10**6).map(lambda n: f"0x{n:x}"),
    st.sampled_from(["1e3", "5.0", "٣", "1_0", "-0", "0", "", "x", "2024-01-02"]),
)


def read(values: list[str], fmt: str | None, fast: bool) -> object:
    """Epoch seconds (or the error) with the cast on or off."""
    column = pd.Series(pd.array(values, dtype="str"))
    cast = data._canonical_ints if fast else (lambda s: None)
    with mock.patch.object(data, "_canonical_ints", cast):
        try:
            return data._normalize_timestamps(column, "f.csv", "'timestamp'", fmt).tolist()
        except DataError as exc:
            return f"error: {exc}"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(SPELLINGS, min_size=1, max_size=6), st.sampled_from([None, "epoch_s"]))
def test_the_cast_reads_what_the_digits_rule_reads(values, fmt):
    assert read(values, fmt, fast=True) == read(values, fmt, fast=False)


@pytest.mark.parametrize(
    "values", [["1600000000", "-5"], ["0", "17"], ["1700950463696325935", "-9223372036854775808"]]
)
def test_canonical_integers_take_the_cast(values):
    got = data._canonical_ints(pd.Series(pd.array(values, dtype="str")))
    assert got is not None and got.tolist() == [int(v) for v in values]


@pytest.mark.parametrize("values", [["0x1f"], ["007"], ["+5"], [" 5"], ["9223372036854775808"]])
def test_other_spellings_do_not(values):
    assert data._canonical_ints(pd.Series(pd.array(values, dtype="str"))) is None


@pytest.mark.parametrize("values", [["5", "٣"], ["5.0", "٣"]])
def test_a_digit_of_another_script_is_one_clear_line(values):
    """It matched the number rule (Python's ``\\d``), then failed in pandas' parser with a bare
    ValueError, or blamed ``'5'`` (before session 30)."""
    with pytest.raises(DataError, match="'٣' at row 1"):
        data._normalize_timestamps(pd.Series(pd.array(values, dtype="str")), "f.csv", "'t'")
