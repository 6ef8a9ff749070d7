"""Loading and validating interaction files: normalization and one-line DataError messages."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.data import load_interactions, validate_interactions
from harness.errors import DataError

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


def test_parquet_null_id_names_file_and_column(tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": [1, None], "item": [1, 2], "timestamp": [1, 2]})
    path = tmp_path / "nulls.parquet"
    frame.to_parquet(path)
    with pytest.raises(DataError, match=r"nulls\.parquet: column 'user' has 1 null id\(s\).*row 1"):
        load_interactions(path)
