"""Loading and validating interaction files: normalization and one-line DataError messages."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.data import load_interactions, validate_interactions
from harness.errors import DataError
from harness.split import leave_one_out

UTC = dt.UTC


def epoch(*args: int) -> int:
    """Epoch seconds of a UTC date, computed with the standard library (not pandas)."""
    return int(dt.datetime(*args, tzinfo=UTC).timestamp())


def write(tmp_path: Path, text: str, name: str = "events.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ happy paths


def test_csv_with_mapped_columns_dates_and_ratings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "uid,iid,when,stars,extra\n"
        "1,10,2023-01-01,4.5,x\n"
        "2,10,2023-01-02 12:00:00,3,y\n"
        "1,11,2023-01-03T00:00:30,5,z\n",
    )
    df = load_interactions(
        path,
        columns={"user": "uid", "item": "iid", "timestamp": "when", "rating": "stars"},
        rating_range=(1, 5),
    )
    assert list(df.columns) == ["user", "item", "timestamp", "rating"]
    assert df["user"].dtype == np.int64
    assert df["item"].dtype == np.int64
    assert df["timestamp"].dtype == np.int64
    assert df["rating"].dtype == np.float64
    assert df["timestamp"].tolist() == [
        epoch(2023, 1, 1),
        epoch(2023, 1, 2, 12),
        epoch(2023, 1, 3, 0, 0, 30),
    ]
    assert df["rating"].tolist() == [4.5, 3.0, 5.0]
    assert df["user"].tolist() == [1, 2, 1]


def test_epoch_second_integers_and_string_ids(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\nu1,007,1700000000\nu2,a-b,1700000060\n")
    df = load_interactions(path)
    assert "rating" not in df.columns
    assert pd.api.types.is_string_dtype(df["user"].dtype)
    # "007" is not a canonical integer, so the whole item column stays text (no lost zeros)
    assert df["item"].tolist() == ["007", "a-b"]
    assert df["user"].tolist() == ["u1", "u2"]
    assert df["timestamp"].tolist() == [1_700_000_000, 1_700_000_060]


def test_timezone_offsets_are_converted_to_utc(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "user,item,timestamp\n1,1,2023-06-01T12:00:00+02:00\n1,2,2023-06-01T12:00:00Z\n",
    )
    df = load_interactions(path)
    assert df["timestamp"].tolist() == [epoch(2023, 6, 1, 10), epoch(2023, 6, 1, 12)]


def test_parquet_with_datetime_column_and_tsv(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "user": np.array([3, 4], dtype=np.int32),
            "item": ["a", "b"],
            "ts": pd.to_datetime(["2024-02-29 00:00:01", "1969-12-31 23:59:59"]),
        }
    )
    path = tmp_path / "events.parquet"
    frame.to_parquet(path)
    df = load_interactions(path, columns={"timestamp": "ts"})
    assert df["user"].dtype == np.int64
    assert df["timestamp"].tolist() == [epoch(2024, 2, 29, 0, 0, 1), -1]

    tsv = write(tmp_path, "user\titem\ttimestamp\n1\t2\t5\n", "events.tsv")
    assert load_interactions(tsv)["timestamp"].tolist() == [5]
    odd = write(tmp_path, "user,item,timestamp\n1,2,5\n", "events.data")
    assert load_interactions(odd, fmt="csv")["item"].tolist() == [2]


@pytest.mark.parametrize(
    ("policy", "expected_ratings"),
    [("keep_first", [1.0, 3.0]), ("keep_last", [2.0, 3.0]), ("keep_all", [1.0, 2.0, 3.0])],
)
def test_duplicate_policies(tmp_path: Path, policy: str, expected_ratings: list[float]) -> None:
    path = write(tmp_path, "user,item,timestamp,rating\n1,1,5,1\n1,1,5,2\n1,2,5,3\n")
    df = load_interactions(path, duplicates=policy)
    assert df["rating"].tolist() == expected_ratings
    assert df.index.tolist() == list(range(len(expected_ratings)))


_ID_KINDS = {
    "int": lambda v: v,
    "wide int": lambda v: v * 2**40 - 2**62,  # a span past 2**31: factorized, not shifted
    "text": lambda v: np.array([f"id{x}" for x in v], dtype=object),
    "spaced text": lambda v: np.array([f"id{x}" + " " * (i % 2) for i, x in enumerate(v)], object),
}


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)), min_size=1),
    kind=st.sampled_from(sorted(_ID_KINDS)),
)
def test_duplicate_policies_agree_with_pandas(
    events: list[tuple[int, int, int]], kind: str
) -> None:
    # the reference: pandas' own duplicate detection over the three validated columns
    raw = np.array(events)
    frame = pd.DataFrame(
        {
            "user": _ID_KINDS[kind](raw[:, 0]),
            "item": _ID_KINDS[kind](raw[:, 1]),
            "timestamp": raw[:, 2],
            "rating": np.arange(len(raw), dtype=float),  # tells the rows apart
        }
    )
    every = validate_interactions(frame, source="f", duplicates="keep_all")
    key = ["user", "item", "timestamp"]
    for policy in ("keep_first", "keep_last"):
        want = every.drop_duplicates(key, keep=policy.removeprefix("keep_")).reset_index(drop=True)
        got = validate_interactions(frame, source="f", duplicates=policy)
        pd.testing.assert_frame_equal(got, want)
    repeated = np.flatnonzero(every.duplicated(key, keep=False).to_numpy())
    if repeated.size == 0:
        pd.testing.assert_frame_equal(validate_interactions(frame, source="f"), every)
        return
    first = every.iloc[repeated[0]]
    same = [int(r) for r in repeated if (every.iloc[r][key] == first[key]).all()][:5]
    with pytest.raises(DataError) as err:
        validate_interactions(frame, source="f")
    assert f"have {repeated.size} rows in duplicate events" in str(err.value)
    assert f"at rows {same};" in str(err.value)


def test_validate_interactions_on_a_frame() -> None:
    frame = pd.DataFrame(
        {
            "user": [1.0, 2.0],  # integral floats become int64 ids
            "item": ["x", "y"],
            "timestamp": pd.to_datetime(["2023-01-01", "2023-01-02"]).tz_localize("UTC"),
        }
    )
    df = validate_interactions(frame, source="memory")
    assert df["user"].dtype == np.int64
    assert df["timestamp"].tolist() == [epoch(2023, 1, 1), epoch(2023, 1, 2)]


# ------------------------------------------------------------------------------ bad inputs


BAD_CASES = [
    # (file text, load kwargs, expected column label, expected value fragment)
    ("user,item\n1,2\n", {}, "'timestamp'", "['user', 'item']"),
    (
        "u,item,timestamp\n1,2,3\n",
        {"columns": {"user": "uid"}},
        "'uid'",
        "['u', 'item', 'timestamp']",
    ),
    ("user,item,timestamp\n1,2,3\n,2,4\n", {}, "'user'", "null at row 1"),
    ("user,item,timestamp\n1,2,3\n1,,4\n", {}, "'item'", "row 1"),
    ("user,item,timestamp\n1,2,3\n1,3,yesterday\n", {}, "'timestamp'", "'yesterday'"),
    ("user,item,timestamp\n1,2,3\n1,3,\n", {}, "'timestamp'", "null"),
    (
        "user,item,when\n1,2,2023-01-01\n1,3,2023-13-45\n",
        {"columns": {"timestamp": "when"}},
        "'when'",
        "'2023-13-45'",
    ),
    ("user,item,timestamp,rating\n1,2,3,4\n1,3,4,7\n", {"rating_range": (1, 5)}, "'rating'", "'7'"),
    (
        "user,item,timestamp,rating\n1,2,3,4\n1,3,4,0.5\n",
        {"rating_range": (1, 5)},
        "'rating'",
        "'0.5'",
    ),
    ("user,item,timestamp,rating\n1,2,3,abc\n", {}, "'rating'", "'abc'"),
    ("user,item,timestamp\n1,2,3\n1,2,3\n", {}, "'user', 'item', 'timestamp'", "user=1 item=2"),
    ("user,item,timestamp\n1,2,3\n", {"duplicates": "keep_none"}, "duplicates", "keep_last"),
]


@pytest.mark.parametrize(("text", "kwargs", "column", "value"), BAD_CASES)
def test_bad_input_raises_one_line_data_error(
    tmp_path: Path, text: str, kwargs: dict, column: str, value: str
) -> None:
    path = write(tmp_path, text, "bad_input.csv")
    with pytest.raises(DataError) as info:
        load_interactions(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert "bad_input.csv" in message
    assert column in message
    assert value in message


def test_data_error_is_a_value_error() -> None:
    assert issubclass(DataError, ValueError)


def test_empty_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"empty\.csv: no interactions"):
        load_interactions(write(tmp_path, "user,item,timestamp\n", "empty.csv"))
    with pytest.raises(DataError, match=r"events\.json.*fmt="):
        load_interactions(write(tmp_path, "{}", "events.json"))
    with pytest.raises(DataError, match=r"unknown column name 'score'"):
        load_interactions(write(tmp_path, "user,item,timestamp\n1,2,3\n"), columns={"score": "s"})


def test_explicitly_mapped_rating_must_exist(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\n1,2,3\n", "norating.csv")
    with pytest.raises(
        DataError, match=r"norating\.csv: missing column 'rating' \(file column 'r'\)"
    ):
        load_interactions(path, columns={"rating": "r"})


def test_a_file_without_timestamps_loads_with_every_event_at_zero(tmp_path: Path) -> None:
    """dataset.columns.timestamp=null: no time column; a repeated (user, item) pair is a
    repeated event; rating=null ignores a rating column that is there."""
    text = "u,i,rating,when\n1,a,4,x\n2,b,5,y\n1,a,2,z\n"  # 'when' holds no times
    path = write(tmp_path, text, "orders.csv")
    columns = {"user": "u", "item": "i", "timestamp": None, "rating": None}
    with pytest.raises(DataError) as err:
        load_interactions(path, columns=columns)
    assert str(err.value) == (
        f"{path}: columns ('user', 'item') have 2 rows in repeated pairs (no timestamp column), "
        "e.g. user=1 item='a' at rows [0, 2]; to keep them set dataset.duplicates to "
        "keep_last or keep_first or keep_all"
    )
    got = load_interactions(path, columns={**columns, "rating": "rating"}, duplicates="keep_last")
    assert got.to_dict("list") == {
        "user": [2, 1], "item": ["b", "a"], "timestamp": [0, 0], "rating": [5.0, 2.0]
    }  # fmt: skip
    got = load_interactions(path, columns=columns, duplicates="keep_all")
    assert list(got.columns) == ["user", "item", "timestamp"] and len(got) == 3
    # without the null, a missing time column names both ways out
    with pytest.raises(DataError) as err:
        load_interactions(path, columns={"user": "u", "item": "i"})
    assert str(err.value).endswith(
        "name the file's column with dataset.columns.timestamp=<column>, or set "
        "dataset.columns.timestamp=null if the file has no timestamps (then only split=random "
        "applies)"
    )


def test_parquet_null_id_names_file_and_column(tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": [1, None], "item": [1, 2], "timestamp": [1, 2]})
    path = tmp_path / "nulls.parquet"
    frame.to_parquet(path)
    with pytest.raises(DataError, match=r"nulls\.parquet: column 'user' has 1 null id\(s\).*row 1"):
        load_interactions(path)


@pytest.mark.parametrize("kind", ["text", "int"])
def test_bad_user_and_item_columns_report_the_user_column(tmp_path: Path, kind: str) -> None:
    # the id columns are checked side by side on threads; the error is still the user column's,
    # as one after the other would report it, whichever thread finishes first
    items = ["a", "b", None] if kind == "text" else [1.0, 2.0, None]
    users = ["u", None, "v"] if kind == "text" else [1.0, None, 3.0]
    path = tmp_path / "both.parquet"
    pd.DataFrame({"user": users, "item": items, "timestamp": [1, 2, 3]}).to_parquet(path)
    with pytest.raises(DataError, match=r"both\.parquet: column 'user' has 1 null id\(s\).*row 1"):
        load_interactions(path)


# ------------------------------------------------------- timestamps: one format per column


def test_day_first_dates_are_read_one_way_for_the_whole_column(tmp_path: Path) -> None:
    # issue 14: format="mixed" read 05/07 as 7 May and 13/07 as 13 July in the same file
    path = write(tmp_path, "user,item,timestamp\n1,1,05/07/2023 10:00\n1,2,13/07/2023 10:00\n")
    df = load_interactions(path)
    assert df["timestamp"].tolist() == [epoch(2023, 7, 5, 10), epoch(2023, 7, 13, 10)]


def test_month_first_dates_are_inferred(tmp_path: Path) -> None:
    text = "user,item,timestamp\n1,1,07/13/2023 10:00:05\n1,2,02/01/2023 00:00:00\n"
    path = write(tmp_path, text)
    assert load_interactions(path)["timestamp"].tolist() == [
        epoch(2023, 7, 13, 10, 0, 5),
        epoch(2023, 2, 1),
    ]


def test_ambiguous_dates_ask_for_the_format(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\n1,1,05/07/2023 10:00\n1,2,06/07/2023\n", "a.csv")
    with pytest.raises(DataError, match=r"a\.csv: column 'timestamp' has 1 timestamp"):
        load_interactions(path)  # two layouts in one column (with and without a time)
    path = write(tmp_path, "user,item,timestamp\n1,1,05/07/2023 10:00\n1,2,06/07/2023 10:00\n")
    with pytest.raises(DataError) as info:
        load_interactions(path)
    message = str(info.value)
    assert "ambiguous" in message and "dataset.timestamp_format" in message
    assert "'%d/%m/%Y %H:%M'" in message and "'%m/%d/%Y %H:%M'" in message
    assert "'05/07/2023 10:00'" in message and "\n" not in message
    month_first = load_interactions(path, timestamp_format="%m/%d/%Y %H:%M")
    assert month_first["timestamp"].tolist() == [epoch(2023, 5, 7, 10), epoch(2023, 6, 7, 10)]
    day_first = load_interactions(path, timestamp_format="%d/%m/%Y %H:%M")
    assert day_first["timestamp"].tolist() == [epoch(2023, 7, 5, 10), epoch(2023, 7, 6, 10)]


def test_same_day_and_month_is_not_ambiguous(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\n1,1,03/03/2023\n1,2,04/04/2023\n")
    assert load_interactions(path)["timestamp"].tolist() == [epoch(2023, 3, 3), epoch(2023, 4, 4)]


@pytest.mark.parametrize(
    ("rows", "row", "value"),
    [
        # day-first fits rows 0 and 2; row 1 only month-first
        (["05/07/2023 10:00", "07/13/2023 10:00", "13/07/2023 10:00"], 1, "'07/13/2023 10:00'"),
        (["1700000000", "2023-01-01", "1700000100"], 1, "'2023-01-01'"),  # epoch and a date
        (["2023-01-01", "2023-01-02", "01/03/2023"], 2, "'01/03/2023'"),  # ISO and a slash date
    ],
)
def test_a_row_off_the_column_format_names_file_row_and_value(
    tmp_path: Path, rows: list[str], row: int, value: str
) -> None:
    text = "user,item,timestamp\n" + "".join(f"1,{i},{v}\n" for i, v in enumerate(rows))
    with pytest.raises(DataError) as info:
        load_interactions(write(tmp_path, text, "mixed_ts.csv"))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'mixed_ts.csv'}: column 'timestamp' has 1 ")
    assert f"{value} at row {row}" in message
    assert "one format per column" in message and "\n" not in message


def test_epoch_milliseconds_are_inferred_and_units_can_be_given(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\n1,1,1700000000123\n1,2,1700000001999\n")
    # sub-second times stay sub-second: float seconds (they were floored to whole seconds)
    assert load_interactions(path)["timestamp"].tolist() == [1_700_000_000.123, 1_700_000_001.999]
    assert load_interactions(path, timestamp_format="epoch_ms")["timestamp"].tolist() == [
        1_700_000_000.123,
        1_700_000_001.999,
    ]
    whole = write(tmp_path, "user,item,timestamp\n1,1,1700000000000\n1,2,1700000001000\n", "w.csv")
    read = load_interactions(whole)["timestamp"]
    assert read.dtype == np.int64 and read.tolist() == [1_700_000_000, 1_700_000_001]
    micro = write(tmp_path, "user,item,timestamp\n1,1,1700000000123456\n", "micro.csv")
    with pytest.raises(DataError, match=r"micro\.csv.*'1700000000123456' at row 0.*epoch_us"):
        load_interactions(micro)
    assert load_interactions(micro, timestamp_format="epoch_us")["timestamp"].tolist() == [
        1_700_000_000.123456
    ]
    mixed = write(tmp_path, "user,item,timestamp\n1,1,1700000000\n1,2,1700000000500\n", "mix.csv")
    with pytest.raises(DataError, match=r"mix\.csv: column 'timestamp' mixes epoch magnitudes"):
        load_interactions(mixed)
    # the same numbers in a Parquet integer column follow the same rule
    frame = pd.DataFrame({"user": [1, 1], "item": [1, 2], "timestamp": [1_700_000_000_123, 5_000]})
    frame.to_parquet(tmp_path / "ms.parquet")
    with pytest.raises(DataError, match=r"ms\.parquet: column 'timestamp' mixes epoch"):
        load_interactions(tmp_path / "ms.parquet")


def test_sub_second_times_keep_their_order_and_stay_distinct(tmp_path: Path) -> None:
    """Found by a walkthrough: times were floored to whole seconds, so two events in one second
    tied (leave_one_out then held out the smaller item id, not the later event) and two
    distinct millisecond events counted as one repeated event."""
    rows = []
    for u in range(4):  # each user's last two events 300 ms apart within one second
        t = 1_700_000_000_000 + 10_000 * u
        rows += [(u, 90, t - 5000), (u, 80, t + 200), (u, 10, t + 500)]
    text = "user,item,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, t in rows)
    loaded = load_interactions(write(tmp_path, text))
    assert loaded["timestamp"].dtype == np.float64
    test = leave_one_out(loaded, min_history=1).test
    assert sorted(test["item"].tolist()) == [10] * 4  # the latest event, not the smaller id
    # the same times as ISO text, as datetimes in Parquet and as float epoch seconds
    iso = pd.to_datetime([t for _, _, t in rows], unit="ms", utc=True)
    variants = {
        "iso.csv": [x.isoformat() for x in iso],
        "dates.parquet": iso,
        "seconds.parquet": [t / 1000 for _, _, t in rows],
    }
    for name, times in variants.items():
        frame = pd.DataFrame(rows, columns=["user", "item", "timestamp"]).assign(timestamp=times)
        if name.endswith(".csv"):
            frame.to_csv(tmp_path / name, index=False)
        else:
            frame.to_parquet(tmp_path / name)
        got = load_interactions(tmp_path / name)
        np.testing.assert_allclose(got["timestamp"], loaded["timestamp"], rtol=0, atol=1e-6)
    # distinct events 1 ms apart are not repeats; the same millisecond twice still is
    pair = "user,item,timestamp\n1,1,1700000000001\n1,1,1700000000002\n"
    assert len(load_interactions(write(tmp_path, pair, "pair.csv"))) == 2
    twice = write(tmp_path, pair.replace("002", "001"), "twice.csv")
    with pytest.raises(DataError, match=r"duplicate events"):
        load_interactions(twice)


def test_a_given_epoch_unit_that_puts_every_time_in_1970_is_refused(tmp_path: Path) -> None:
    """Found by a walkthrough: epoch_ms set for epoch seconds silently dated every event in
    January 1970 (and moved every date cut)."""
    path = write(tmp_path, "user,item,timestamp\n1,1,1700000000\n1,2,1700000100\n")
    with pytest.raises(DataError) as info:
        load_interactions(path, timestamp_format="epoch_ms")
    assert str(info.value) == (
        f"{path}: column 'timestamp' read as epoch_ms puts every time in 1970 (e.g. "
        "'1700000100' at row 1 is 1970-01-20T16:13:20.100000+00:00); as epoch_s it is "
        "2023-11-14T22:15:00+00:00: set dataset.timestamp_format=epoch_s"
    )
    ms = write(tmp_path, "user,item,timestamp\n1,1,1700000000123\n", "ms.csv")
    with pytest.raises(DataError, match=r"read as epoch_us .* as epoch_ms it is 2023-11-14T"):
        load_interactions(ms, timestamp_format="epoch_us")
    # small times are 1970 whatever the unit: a given unit is taken as it is
    small = write(tmp_path, "user,item,timestamp\n1,1,5\n1,2,1500\n", "small.csv")
    assert load_interactions(small, timestamp_format="epoch_ms")["timestamp"].tolist() == [
        0.005,
        1.5,
    ]


def test_strftime_format_from_config_and_unknown_format(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\n1,1,20230105\n1,2,20231231\n")
    # digits alone are epoch seconds; a format reads them as dates
    assert load_interactions(path)["timestamp"].tolist() == [20_230_105, 20_231_231]
    assert load_interactions(path, timestamp_format="%Y%m%d")["timestamp"].tolist() == [
        epoch(2023, 1, 5),
        epoch(2023, 12, 31),
    ]
    with pytest.raises(DataError, match=r"'20231231' at row 1"):
        load_interactions(path, timestamp_format="%Y%d%m")
    with pytest.raises(DataError, match=r"unknown timestamp_format 'mixed'"):
        load_interactions(path, timestamp_format="mixed")


# --------------------------------------------------------------- ids: one type per column


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (  # the file's separator is not a comma
            "user;item;timestamp\n1;a;1\n",
            "missing column 'user'; columns found: ['user;item;timestamp']; the file looks "
            "separated by ';', not commas: write it with commas (or tabs as .tsv), or as Parquet",
        ),
        (  # found by a walkthrough: a blank id (" ") became the id "" and was evaluated
            'user,item,timestamp\n1,a,1\n" ",b,2\n',
            "column 'user' has 1 empty id(s) (only whitespace), e.g. ' ' at row 1 (0-based data "
            "row)",
        ),
    ],
    ids=["separator", "blank-id"],
)
def test_a_bad_file_is_one_line_naming_the_fault(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DataError) as info:
        load_interactions(path)
    assert str(info.value) == f"{path}: {message}"


def test_object_column_mixing_int_and_str_ids_is_refused() -> None:
    # issue 14: 1 and '1' were merged into one user
    frame = pd.DataFrame(
        {"user": pd.Series([1, "1"], dtype=object), "item": [1, 2], "timestamp": [1, 2]}
    )
    with pytest.raises(DataError) as info:
        validate_interactions(frame, source="memory")
    message = str(info.value)
    assert message.startswith("memory: column 'user' mixes id types")
    assert "1 (int) at row 0" in message and "'1' (str) at row 1" in message


def test_csv_and_parquet_of_the_same_data_give_the_same_frame(tmp_path: Path) -> None:
    # issue 14: a 19-digit id turned the CSV column into strings but stayed int64 in Parquet
    frame = pd.DataFrame(
        {
            "user": np.array([1_234_567_890_123_456_789, 2, np.iinfo(np.int64).max], np.int64),
            "item": [10.0, 20.0, 30.0],  # integral floats: written "10.0" in the CSV
            "timestamp": [1, 2, 3],
            "rating": [1.0, 2.5, 3.0],
        }
    )
    frame.to_csv(tmp_path / "same.csv", index=False)
    frame.to_parquet(tmp_path / "same.parquet")
    from_csv = load_interactions(tmp_path / "same.csv")
    from_parquet = load_interactions(tmp_path / "same.parquet")
    pd.testing.assert_frame_equal(from_csv, from_parquet)
    assert from_csv["user"].tolist() == [1_234_567_890_123_456_789, 2, 2**63 - 1]
    assert from_csv["item"].dtype == np.int64 and from_csv["item"].tolist() == [10, 20, 30]
    # beyond int64 both give text
    big = pd.DataFrame(
        {"user": np.array([2**63 + 5, 1], np.uint64), "item": [1, 2], "timestamp": [1, 2]}
    )
    big.to_csv(tmp_path / "big.csv", index=False)
    big.to_parquet(tmp_path / "big.parquet")
    a, b = load_interactions(tmp_path / "big.csv"), load_interactions(tmp_path / "big.parquet")
    pd.testing.assert_frame_equal(a, b)
    assert a["user"].tolist() == [str(2**63 + 5), "1"]


def test_nanosecond_epochs_read_the_same_from_csv_and_parquet(tmp_path: Path) -> None:
    """Today's epoch_ns times have 19 digits: the CSV text went through float64 before the
    division while Parquet's int64 took the exact whole + part / 1e9 path, so 517 of 2,000
    random times read differently, and two events 191 ns apart were ordered differently (a
    different leave-one-out test item). Both now read the int64 (values from the audit)."""
    a = 1_700_950_463_696_325_935
    frame = pd.DataFrame(
        {"user": 1, "item": [7, 8, 9], "timestamp": np.array([a - 10**9, a + 191, a], np.int64)}
    )
    rng = np.random.default_rng(0)
    many = pd.DataFrame(
        {"user": 2, "item": np.arange(10, 2010), "timestamp": rng.integers(a, a + 10**12, 2000)}
    )
    frame = pd.concat([frame, many], ignore_index=True)
    frame.to_csv(tmp_path / "ns.csv", index=False)
    frame.to_parquet(tmp_path / "ns.parquet")
    csv = load_interactions(tmp_path / "ns.csv", timestamp_format="epoch_ns")
    parquet = load_interactions(tmp_path / "ns.parquet", timestamp_format="epoch_ns")
    pd.testing.assert_frame_equal(csv, parquet)
    whole, part = divmod(int(frame["timestamp"].iloc[5]), 10**9)  # by hand
    assert csv["timestamp"].iloc[5] == whole + part / 1e9
    assert leave_one_out(csv).test["item"].tolist() == leave_one_out(parquet).test["item"].tolist()


def test_integral_number_ids_are_one_id_and_text_near_duplicates_are_refused(
    tmp_path: Path,
) -> None:
    # all ids integral: "70", "70.0" and " 70" are the number 70 (documented rule)
    path = write(tmp_path, "user,item,timestamp\n70,1,1\n70.0,2,2\n 70 ,3,3\n")
    assert load_interactions(path)["user"].tolist() == [70, 70, 70]
    # text ids: "70" next to "70.0" or "+70" is refused, naming both values and rows
    for other in ("70.0", "+70", "70.00"):
        path = write(tmp_path, f"user,item,timestamp\nabc,1,1\n70,2,2\n{other},3,3\n", "near.csv")
        with pytest.raises(DataError) as info:
            load_interactions(path)
        message = str(info.value)
        assert message.startswith(f"{path}: column 'user' has ids that differ only in number")
        assert "'70' at row 1" in message and f"{other!r} at row 2" in message
        assert "'abc'" in message  # why the column is text
    # surrounding spaces are not part of a text id; leading zeros are
    path = write(tmp_path, "user,item,timestamp\n a ,1,1\na,2,2\n007,3,3\n7,4,4\n")
    assert load_interactions(path)["user"].tolist() == ["a", "a", "007", "7"]


def test_nested_parquet_values_are_refused_naming_the_column(tmp_path: Path) -> None:
    # issue 14: lists became ids such as '[1 2]'
    frame = pd.DataFrame({"user": [1, 2], "item": [[1, 2], [3]], "timestamp": [1, 2]})
    frame.to_parquet(tmp_path / "nested.parquet")
    with pytest.raises(DataError, match=r"nested\.parquet: column 'item' holds nested values"):
        load_interactions(tmp_path / "nested.parquet")
    with pytest.raises(DataError, match=r"memory: column 'item' has 2 nested value"):
        validate_interactions(frame, source="memory")


def test_float_ids_beyond_2_53_are_refused() -> None:
    frame = pd.DataFrame({"user": [2.0**60, 1.0], "item": [1, 2], "timestamp": [1, 2]})
    with pytest.raises(DataError, match=r"memory: column 'user' has 1 float id.*2\*\*53"):
        validate_interactions(frame, source="memory")


# ---------------------------------------------------------------- file-level errors


def test_csv_rows_with_extra_fields_name_the_file_and_line(tmp_path: Path) -> None:
    one = write(tmp_path, "user,item,timestamp\n1,1,1\n1,2,2,9\n", "one_extra.csv")
    with pytest.raises(DataError, match=r"one_extra\.csv: .*line 3"):
        load_interactions(one)
    # every row longer: pandas would silently use the first field as an index
    every = write(tmp_path, "user,item,timestamp\n1,1,1,5\n1,2,2,9\n", "every.csv")
    with pytest.raises(DataError, match=r"every\.csv: line 2 has 4 fields but the header has 3"):
        load_interactions(every)
    first = write(tmp_path, "user,item,timestamp\n1,1,1,5\n1,2,2\n", "first.csv")
    with pytest.raises(DataError, match=r"first\.csv: line 2 has 4 fields"):
        load_interactions(first)


def test_binary_and_non_utf8_csv_name_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DataError, match=r"binary\.csv: not a CSV text file"):
        load_interactions(binary)
    parquet_named_csv = tmp_path / "really_parquet.csv"
    pd.DataFrame({"user": [1], "item": [1], "timestamp": [1]}).to_parquet(parquet_named_csv)
    with pytest.raises(DataError, match=r"really_parquet\.csv: not a CSV text file"):
        load_interactions(parquet_named_csv)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("user,item,timestamp\nJosé,1,1\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.csv: not UTF-8 text \(byte 0xe9"):
        load_interactions(latin)
    with pytest.raises(DataError, match=r"empty_file\.csv: empty file"):
        load_interactions(write(tmp_path, "", "empty_file.csv"))


def test_missing_rating_hints_at_the_config_key(tmp_path: Path) -> None:
    path = write(tmp_path, "user,item,timestamp\n1,2,3\n", "norating.csv")
    with pytest.raises(DataError, match=r"set dataset\.columns\.rating=null"):
        load_interactions(path, columns={"rating": "rating"})


def test_missing_id_column_and_file_name_the_config_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "u,item,timestamp\n1,2,3\n", "nouser.csv")
    with pytest.raises(DataError, match=r"missing column 'user'.*dataset\.columns\.user=<column>"):
        load_interactions(path)
    with pytest.raises(DataError, match=r"^\S*nope\.csv: no such file \(dataset\.path\)$"):
        load_interactions(tmp_path / "nope.csv")


def test_duplicates_error_prints_integer_ids_as_integers(tmp_path: Path) -> None:
    # issue 14: a float rating column made the row a float Series: user=1.0 item=1.0
    path = write(tmp_path, "user,item,timestamp,rating\n7,8,9,1.5\n7,8,9,2\n")
    with pytest.raises(DataError) as info:
        load_interactions(path)
    assert "user=7 item=8 timestamp=9 (1970-01-01T00:00:09+00:00) at rows [0, 1]" in str(info.value)
    assert "to keep them set dataset.duplicates to keep_last or keep_first" in str(info.value)


# ------------------------------------------------------------------ degenerate splits


def _frame(ts: list[int]) -> pd.DataFrame:
    n = len(ts)
    return pd.DataFrame(
        {"user": np.arange(n) % 3, "item": np.arange(n) % 4, "timestamp": np.array(ts, np.int64)}
    )


def test_degenerate_splits_are_data_errors() -> None:
    from harness.split import check_usable, make_split

    one_time = _frame([1_700_000_000] * 12)
    split = make_split(one_time, "global_time", cut=0.8)
    with pytest.raises(DataError, match=r"every event is at one timestamp \(2023-11-14T22:13:20"):
        check_usable(split, one_time)
    frame = _frame(list(range(1_700_000_000, 1_700_000_012)))
    late = make_split(frame, "global_time", cut="2030-01-01")
    with pytest.raises(DataError, match=r"split\.cut='2030-01-01' .* is after the last event"):
        check_usable(late, frame)
    early = make_split(frame, "global_time", cut="2000-01-01")
    with pytest.raises(DataError, match=r"split\.cut='2000-01-01' .* is at or before the first"):
        check_usable(early, frame)
    # with validation, training ends at valid_cut: that is the key to name (an audit found the
    # message naming split.cut, three months after the first event)
    early_valid = make_split(frame, "global_time", cut=0.8, valid_cut="2000-01-01")
    with pytest.raises(DataError, match=r"split\.valid_cut='2000-01-01' \(2000-01-01T00:00:00"):
        check_usable(early_valid, frame)
    # every test user unseen in training: all test events dropped
    unseen = pd.DataFrame({"user": [1, 1, 2], "item": [1, 2, 3], "timestamp": [1, 2, 3]})
    dropped = make_split(unseen, "global_time", cut="1970-01-01T00:00:03")
    with pytest.raises(DataError, match=r"all 1 test events are of users or items unseen"):
        check_usable(dropped, unseen)
    loo = make_split(frame, "leave_one_out", min_history=100)
    with pytest.raises(DataError, match=r"split leave_one_out leaves the test set empty"):
        check_usable(loo, frame)
    fine = make_split(frame, "random", test_ratio=0.5, unseen="keep")
    assert check_usable(fine, frame) is fine


def test_three_thousand_day_first_times_match_strptime(tmp_path: Path) -> None:
    # the reproduction: 3,000 day-first times, 121 of which "mixed" moved by months
    rng = np.random.default_rng(14)
    seconds = epoch(2023, 1, 1) + rng.integers(0, 365 * 86_400 // 60, 3_000) * 60
    seconds[0] = epoch(2023, 7, 5, 10)  # "05/07/2023 10:00" first: reads either way
    stamps = [dt.datetime.fromtimestamp(int(s), UTC) for s in seconds]
    text = "user,item,timestamp\n" + "".join(
        f"{i % 50},{i},{t.strftime('%d/%m/%Y %H:%M')}\n" for i, t in enumerate(stamps)
    )
    df = load_interactions(write(tmp_path, text))
    expected = [
        int(
            dt.datetime.strptime(t.strftime("%d/%m/%Y %H:%M"), "%d/%m/%Y %H:%M")
            .replace(tzinfo=UTC)
            .timestamp()
        )
        for t in stamps
    ]
    assert df["timestamp"].tolist() == expected == seconds.tolist()
