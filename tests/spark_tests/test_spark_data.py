"""The data stages of ``engine=spark`` give the in-process rows: splits with their filters, unseen
policy and stats, sampled candidates, and the loader's checks and one-line errors.

Needs PySpark and Java 17 (the ``spark`` fixture skips without them, except under ``CI=true``).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support import nearly_everything_seen, short_of_negatives

from harness import split as hsplit
from harness.synthetic import generate

pytestmark = pytest.mark.spark


def events(ids: str) -> pd.DataFrame:
    """Synthetic events with same-day ties, exact repeats (rows 0, 50, ... twice) and repeats
    that differ only in rating; ``ids="str"`` turns the ids into text whose order differs from
    the integers' order (``u10`` < ``u9``)."""
    df = generate(n_users=200, n_items=90, n_events=3000, seed=11)
    df["timestamp"] = df["timestamp"] // 86_400 * 86_400
    df = pd.concat(
        [df, df.iloc[::50], df.iloc[7::97].assign(rating=lambda d: d["rating"] % 5 + 0.5)],
        ignore_index=True,
    )
    if ids == "str":
        df["user"] = "u" + df["user"].astype(str)
        df["item"] = "i-" + df["item"].astype(str)
    return df.assign(row=np.arange(len(df)))


def frame(part: Any, drop_row: bool = False) -> pd.DataFrame:
    """A split part as a sorted pandas frame (``drop_row``: content columns only)."""
    out = part.toPandas() if hasattr(part, "toPandas") else part.copy()
    if drop_row:
        out = out.drop(columns=[c for c in ("row",) if c in out.columns])
    ints = [c for c in ("timestamp", "row") if c in out.columns and out[c].dtype.kind != "f"]
    out = out.astype(dict.fromkeys(ints, "int64"))
    if out["user"].dtype.kind != "i":
        out = out.astype({"user": object, "item": object})
    return out.sort_values(list(out.columns)).reset_index(drop=True)


def same_parts(got: Any, want: hsplit.Split, drop_row: bool = False) -> None:
    for name in ("train", "test", "valid"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            pd.testing.assert_frame_equal(
                frame(a, drop_row), frame(b, drop_row), check_dtype=False, obj=name
            )


METHODS: list[tuple[str, dict[str, Any]]] = [
    ("global_time", {"cut": 0.8, "valid_cut": 0.7}),
    ("leave_one_out", {"valid": True, "min_history": 3}),
    ("user_time", {"test_ratio": 0.3, "valid_ratio": 0.15}),  # halves up, exactly
    ("random", {"test_ratio": 0.35, "seed": 5, "valid_ratio": 0.1}),
]
FILTERS: list[dict[str, Any]] = [
    {},
    {"min_user_interactions": 5, "min_item_interactions": 20},
    {"kcore": 8},
]
UNSEEN = ("drop", "keep")
# Pairwise, not every combination (each case is ~20 Spark jobs of fixed cost): each method meets
# both id kinds and both unseen policies, each filter set too, and each policy both id kinds.
CASES = [
    pytest.param(
        m,
        p,
        f,
        ("int", "str")[(i + j) % 2],
        UNSEEN[(i + (j == 2)) % 2],
        id=f"{m}-{'+'.join(f) or 'nofilter'}-{UNSEEN[(i + (j == 2)) % 2]}",
    )
    for i, (m, p) in enumerate(METHODS)
    for j, f in enumerate(FILTERS)
]


def subsecond_events() -> pd.DataFrame:
    """:func:`events` with times in milliseconds: many users' events fall within one second
    (float seconds), with exact repeats at one millisecond."""
    df = events("int")
    ms = df["timestamp"] // 86_400 * 1000 + (df["row"] * 7919) % 3000
    return df.assign(timestamp=ms / 1000)


def test_split_cases_pair_every_method_filter_policy_and_id_kind() -> None:
    """The pairwise cases above cover what they claim (so a later edit cannot thin them)."""
    seen = {(c.values[0], c.values[4]) for c in CASES} | {(c.values[0], c.values[3]) for c in CASES}
    assert seen == {(m, x) for m, _ in METHODS for x in (*UNSEEN, "int", "str")}
    by_filter = {(tuple(c.values[2]), x) for c in CASES for x in (c.values[3], c.values[4])}
    assert by_filter == {(tuple(f), x) for f in FILTERS for x in (*UNSEEN, "int", "str")}
    assert {(c.values[3], c.values[4]) for c in CASES} == {
        (i, u) for i in ("int", "str") for u in UNSEEN
    }


@pytest.mark.parametrize(("method", "params", "filters", "ids", "unseen"), CASES)
def test_split_rows_and_stats_equal_the_in_process_split(
    spark: Any,
    method: str,
    params: dict[str, Any],
    filters: dict[str, Any],
    ids: str,
    unseen: str,
) -> None:
    """The same train / valid / test rows, params and stats."""
    from harness.spark.split import apply_filters_spark, method_split_spark

    df = events(ids)
    sdf = spark.createDataFrame(df.astype({"user": object, "item": object}) if ids == "str" else df)
    raw = method_split_spark(sdf, method, **params)
    want = hsplit.make_split(df, method, **params, **filters, unseen=unseen)
    got = apply_filters_spark(raw, **filters, unseen=unseen)
    # random: an exact repeat's copies are interchangeable, so only their `row` may differ
    same_parts(got, want, drop_row=method == "random")
    assert got.params == want.params
    assert got.stats == want.stats, {
        k: (got.stats.get(k), v) for k, v in want.stats.items() if got.stats.get(k) != v
    }
    assert want.stats["n_test_events"] > 0 and want.stats["n_train_events"] > 0
    if filters:
        assert want.stats["train_filtered_events"] > 0  # the filters do something here
    if method == "global_time":
        assert want.stats["test_unseen_events"] > 0
    if method == "random":  # repeated interactions on both sides of the holdout
        assert want.stats["test_pairs_in_train"] > 0
    if unseen == "drop" and want.stats["test_unseen_events"]:
        assert want.stats["test_dropped_events"] == want.stats["test_unseen_events"]


def test_sub_second_splits_equal_the_in_process_ones(spark: Any) -> None:
    """Float (sub-second) times: the same rows and stats from every method on both engines."""
    from harness.spark.split import apply_filters_spark, method_split_spark

    df = subsecond_events()
    assert df["timestamp"].dtype == np.float64
    sdf = spark.createDataFrame(df)
    for method, params in METHODS:
        want = hsplit.make_split(df, method, **params)
        got = apply_filters_spark(method_split_spark(sdf, method, **params))
        same_parts(got, want, drop_row=method == "random")
        assert got.stats == want.stats, (method, got.stats, want.stats)
        assert want.test["timestamp"].dtype == np.float64


@pytest.mark.parametrize("method", ["global_time", "leave_one_out", "user_time", "random"])
def test_parts_read_the_split_s_persisted_frames_not_the_input_again(
    spark: Any, method: str
) -> None:
    """The per-user window (or hash), the filtered training events and a test part after its
    unseen events are dropped are each computed once: every part's plan reads persisted data,
    though the input is not persisted (its statistics run several jobs over each part). With
    ``global_time`` the parts filter the input: training reads the filtered events, test the
    part left after the drop."""
    from harness.spark.split import make_split_spark

    sdf = spark.createDataFrame(events("int"))
    params = {"cut": 0.8} if method == "global_time" else {}
    got = make_split_spark(sdf, method, **params, min_user_interactions=3, unseen="drop")
    assert got.stats["train_filtered_events"] > 0 and got.stats["test_dropped_events"] > 0
    for name in ("train", "test"):
        plan = getattr(got, name)._jdf.queryExecution().withCachedData().toString().splitlines()
        # above the first persisted frame: only column picks and row filters, no recomputation
        above = list(itertools.takewhile(lambda line: "InMemoryRelation" not in line, plan))
        assert len(above) < len(plan), (name, plan)
        work = ("Join", "Window", "Aggregate", "Exchange", "Scan")
        assert not [x for x in above if any(w in x for w in work)], (name, plan)
    assert "InMemoryRelation" not in sdf._jdf.queryExecution().withCachedData().toString()


def test_make_split_spark_fills_defaults_and_checks_params(spark: Any) -> None:
    from harness.spark.split import make_split_spark

    df = events("int")
    sdf = spark.createDataFrame(df)
    want = hsplit.make_split(df, "user_time")
    got = make_split_spark(sdf, "user_time")
    same_parts(got, want)
    assert got.params == want.params and got.stats == want.stats
    ninety = pd.DataFrame({"user": 1, "item": np.arange(90) % 3, "timestamp": np.arange(90.0)})
    for method in ("user_time", "random"):  # 0.35 × 90 = 31.5: 32 (float64 says 31.4999…)
        part = make_split_spark(spark.createDataFrame(ninety), method, test_ratio=0.35).test
        assert part.count() == 32, method
    for method, bad, message in (
        ("user_time", {"ratio": 0.2}, "unknown parameter 'ratio' for split method 'user_time'"),
        ("user_time", {"unseen": "ignore"}, r"'split\.unseen'"),
        ("user_time", {"kcore": -1}, r"'split\.kcore'"),
        ("user_time", {"test_ratio": 1.5}, r"'split\.test_ratio'"),
        ("global_time", {"cut": 1.5}, r"'split\.cut'"),
        ("global_time", {"cut": 0.5, "valid_cut": 0.7}, r"'split\.valid_cut' must be earlier"),
        ("leave_one_out", {"min_history": 0}, r"'split\.min_history'"),
    ):
        with pytest.raises(ValueError) as in_process:
            hsplit.make_split(df, method, **bad)
        with pytest.raises(ValueError, match=message) as spark_error:
            make_split_spark(sdf, method, **bad)
        assert str(spark_error.value) == str(in_process.value)
    with pytest.raises(ValueError, match="unknown split method 'kfold'"):
        make_split_spark(sdf, "kfold")


def test_random_split_ignores_row_order_and_follows_the_seed() -> None:
    df = events("str")
    shuffled = df.sample(frac=1.0, random_state=3)
    a = hsplit.random_split(df, test_ratio=0.3, seed=9)
    b = hsplit.random_split(shuffled, test_ratio=0.3, seed=9)
    c = hsplit.random_split(df, test_ratio=0.3, seed=10)
    content = ["user", "item", "timestamp", "rating"]

    def events_of(part: pd.DataFrame) -> list[tuple[Any, ...]]:
        return sorted(part[content].itertuples(index=False))

    assert events_of(a.test) == events_of(b.test)  # repeats are interchangeable
    assert events_of(a.test) != events_of(c.test)
    assert len(a.test) == int(np.floor(len(df) * 0.3 + 0.5))
    # exact repeats get their own draws (occurrence): some are split between train and test
    repeated = df[df.duplicated(content, keep=False)]
    in_test = repeated["row"].isin(a.test["row"])
    split_pairs = in_test.groupby([repeated[c] for c in content]).nunique()
    assert (split_pairs == 2).any()


# ---------------------------------------------------------------------------- candidates


@pytest.mark.parametrize(("ids", "sampling"), [("str", "uniform"), ("int", "popularity")])
def test_sampled_candidates_equal_the_in_process_ones(spark: Any, ids: str, sampling: str) -> None:
    """The same (user, item) rows, for text and integer ids, uniform and popularity draws; test
    items unseen in training (unseen=keep), and a user who has seen all but a few items (who
    gets all of them)."""
    from harness.candidates import sample_negatives
    from harness.spark.candidates import sample_negatives_spark

    df = events(ids).drop(columns="row")
    split = hsplit.make_split(df, "global_time", cut=0.85, unseen="keep")
    catalog = pd.unique(split.train["item"])
    power = split.test["user"].iloc[0]
    train = pd.concat(
        [split.train, pd.DataFrame({"user": power, "item": catalog[3:], "timestamp": 0})],
        ignore_index=True,
    )
    test = split.test
    want = sample_negatives(train, test, 20, sampling, seed=4)
    if ids == "str":
        train, test = (p.astype({"user": object, "item": object}) for p in (train, test))
    got, short = sample_negatives_spark(
        spark.createDataFrame(train), spark.createDataFrame(test), 20, sampling, 4
    )
    assert short == want.attrs["candidates.users_short"] == 0
    pd.testing.assert_frame_equal(frame(got, drop_row=True), frame(want, drop_row=True))
    per_user = want.groupby("user").size()
    assert per_user.max() > per_user[power] > 0  # the power user got its few unseen items
    assert len(want) > 20 * len(per_user)


def test_users_left_short_of_negatives_are_counted_as_in_process(spark: Any) -> None:
    """Under popularity sampling, users who have seen the ten items holding all but 2.5e-5 of
    the training events rarely draw one of the five others: after the last round some are short
    of the 3 negatives asked. Spark draws the same rows and counts the same short users, and
    that count is checked against a naive count from the rows."""
    from harness.candidates import SHORT, sample_negatives
    from harness.spark.candidates import sample_negatives_spark

    train, test = short_of_negatives()
    want = sample_negatives(train, test, 3, "popularity", seed=0)
    got, short = sample_negatives_spark(
        spark.createDataFrame(train), spark.createDataFrame(test), 3, "popularity", 0
    )
    known = pd.concat([train, test]).drop_duplicates()
    naive = 0
    for user, rows in want.groupby("user"):
        unseen = 15 - known.loc[known["user"] == user, "item"].nunique()
        negatives = len(rows) - int((test["user"] == user).sum())
        naive += negatives < min(3, unseen)
    assert naive >= 1
    assert short == want.attrs[SHORT] == naive
    pd.testing.assert_frame_equal(frame(got, drop_row=True), frame(want, drop_row=True))


def test_validation_items_are_known_as_in_process(spark: Any) -> None:
    """With a validation part (leave_one_out, valid=True) both engines know a user's
    validation items as they know train and test ones: the same rows and stats, and no
    negative is a pair of any of the three parts (checked pair by pair)."""
    from harness.candidates import CandidateSpec, build_candidates
    from harness.spark.candidates import build_candidates_spark
    from harness.spark.split import make_split_spark

    df = events("int").drop(columns="row")
    split = hsplit.make_split(df, "leave_one_out", valid=True)
    sp = make_split_spark(spark.createDataFrame(df), "leave_one_out", valid=True)
    assert split.valid is not None and sp.valid is not None
    spec = CandidateSpec(kind="sampled", n_negatives=40, seed=3)
    want, want_stats = build_candidates(spec, split, None)
    got_df, got_stats = build_candidates_spark(spec, sp)
    assert want is not None and got_df is not None
    pd.testing.assert_frame_equal(frame(got_df), frame(want))
    assert got_stats == want_stats
    test_pairs = set(zip(split.test["user"], split.test["item"], strict=True))
    train_pairs = set(zip(split.train["user"], split.train["item"], strict=True))
    valid_pairs = set(zip(split.valid["user"], split.valid["item"], strict=True))
    assert len(valid_pairs - train_pairs - test_pairs) > 50  # validated, never trained on
    negatives = set(zip(want["user"], want["item"], strict=True)) - test_pairs
    assert negatives and not negatives & (train_pairs | valid_pairs)


def test_uniform_rounds_leave_no_user_short_as_in_process(spark: Any) -> None:
    """Users who have seen all but 100 of 20,000 items, asked 98 uniform negatives: both
    engines size each round from the items not drawn yet (uncapped under uniform), so every
    user gets exactly 98 (counted by hand), none is short, and the rows are the same."""
    from harness.candidates import SHORT, sample_negatives
    from harness.spark.candidates import sample_negatives_spark

    train, test = nearly_everything_seen()
    heavy = np.arange(10)
    want = sample_negatives(train, test, 98, "uniform", seed=0)
    got, short = sample_negatives_spark(
        spark.createDataFrame(train), spark.createDataFrame(test), 98, "uniform", 0
    )
    assert short == want.attrs[SHORT] == 0
    rows = frame(got)
    negatives = rows[rows["item"] != -5]
    assert (negatives.groupby("user").size().reindex(heavy) == 98).all()
    assert set(negatives["item"]) <= set(range(100))
    pd.testing.assert_frame_equal(rows, frame(want))


def test_file_candidates_missing_users_and_unmatched_ids_as_in_process(
    spark: Any, tmp_path: Any
) -> None:
    """A file listing a third of the test users: both engines count the others (naive count)
    and give the same stats; a file of integer ids against text ids that match no test user
    is the same one-line error on both."""
    from harness.candidates import MISSING, TEST_USERS, CandidateSpec, build_candidates
    from harness.errors import DataError
    from harness.spark.candidates import build_candidates_spark
    from harness.spark.split import make_split_spark

    df = events("str").drop(columns="row")
    split = hsplit.make_split(df, "leave_one_out")
    sp = make_split_spark(
        spark.createDataFrame(df.astype({"user": object, "item": object})), "leave_one_out"
    )
    users = sorted(pd.unique(split.test["user"]))
    listed = users[::3]
    path = tmp_path / "cands.csv"
    pd.DataFrame({"user": listed, "item": "i-1"}).to_csv(path, index=False)
    spec = CandidateSpec(kind="file", path=str(path))
    _, want_stats = build_candidates(spec, split, None)
    _, got_stats = build_candidates_spark(spec, sp)
    assert got_stats == want_stats
    assert got_stats[MISSING] == sum(u not in set(listed) for u in users) > 0
    assert got_stats[TEST_USERS] == len(users)
    path.write_text("user,item\n1,3\n2,1\n")
    with pytest.raises(DataError) as in_process:
        build_candidates(spec, split, None)
    with pytest.raises(DataError) as on_spark:
        build_candidates_spark(spec, sp)
    assert str(on_spark.value) == str(in_process.value)
    assert str(in_process.value) == (
        f"{path}: column 'user' holds integer ids but the interactions have text ids and none "
        "is a test user's id, e.g. 1"
    )


# ------------------------------------------------------------------------------- reading

GOOD = pd.DataFrame(
    {
        "user": ["42", "42.0", "7", "8"],  # "42.0" is the id 42: integer ids
        "item": ["007", "b", "c", "b"],  # "007" is not an integer: text ids, kept as written
        "timestamp": ["13/01/2023 10:00", "14/01/2023 11:30", "2/02/2023 09:05", "1/03/2023 00:00"],
        "rating": [1.0, 2.5, 3.0, 5.0],
    }
)


def _without_rows(message: str) -> str:
    """The loader's message less its row numbers, which the Spark reader does not know."""
    import re

    message = re.sub(r" at rows? (?:\[[\d, ]*\]|\d+)", "", message)
    return re.sub(r" \(0-based data rows?\)", "", message)


def _write(frame: pd.DataFrame, path: Any) -> None:
    if str(path).endswith(".csv"):
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)


def test_read_interactions_gives_the_loaders_rows_and_types(spark: Any, tmp_path: Any) -> None:
    from harness import data as hdata
    from harness.spark.io import read_interactions

    cases: dict[str, tuple[pd.DataFrame, dict[str, Any]]] = {
        "dayfirst.csv": (GOOD, {}),
        "epoch_ms.parquet": (
            GOOD.assign(timestamp=[1673604000123, 1673695800999, 1675328700000, 1677628800000]),
            {},
        ),
        "epoch_ms_whole.csv": (
            GOOD.assign(timestamp=[1673604000000, 1673695800000, 1675328700000, 1677628800000]),
            {},
        ),
        "epoch_us.csv": (
            GOOD.assign(timestamp=[1673604000123456, 1673695800999999, -1, 1677628800000001]),
            {"timestamp_format": "epoch_us"},
        ),
        "epoch_ns.csv": (  # 19 digits: int64, every nanosecond, as the Parquet copy reads
            GOOD.assign(
                timestamp=[
                    1_700_950_463_696_325_935,
                    1_700_950_463_696_326_126,
                    1_675_328_700_000_000_001,
                    9_223_372_036_854_775_807 // 4,
                ]
            ),
            {"timestamp_format": "epoch_ns"},
        ),
        "float_seconds.parquet": (
            GOOD.assign(timestamp=[1673604000.25, 1673695800.5, 1675328700.0, 1677628800.125]),
            {},
        ),
        "iso_fraction.csv": (
            GOOD.assign(
                timestamp=[
                    "2023-01-13T10:00:00.123456Z",
                    "2023-01-14T11:30:00.5",
                    "2023-02-02T09:05:00",
                    "2023-03-01T00:00:00.001+01:00",
                ]
            ),
            {},
        ),
        "datetimes.parquet": (
            GOOD.assign(
                timestamp=pd.to_datetime(
                    [
                        "2023-01-13 10:00:00.25",
                        "2023-01-14 00:00:00",
                        "2023-02-02 00:00:00",
                        "2023-03-01 00:00:00",
                    ],
                    utc=True,
                    format="ISO8601",
                )
            ),
            {},
        ),
        "floats.parquet": (GOOD.assign(user=[42.0, 42.0, 7.0, 8.0], item=[1.5, 2.0, 2.0, 3.0]), {}),
        "renamed.csv": (
            GOOD.rename(columns={"user": "uid", "timestamp": "when"}),
            {"columns": {"user": "uid", "timestamp": "when"}},
        ),
        "repeats_first.csv": (
            pd.concat([GOOD, GOOD.assign(rating=4.0)]),
            {"duplicates": "keep_first"},
        ),
        "repeats_last.csv": (
            pd.concat([GOOD, GOOD.assign(rating=4.0)]),
            {"duplicates": "keep_last"},
        ),
        # no time column: every event at 0, a repeated pair is a repeated event
        "untimed.csv": (
            pd.concat([GOOD, GOOD.iloc[[1]].assign(rating=4.0)]).drop(columns="timestamp"),
            {"columns": {"timestamp": None}, "duplicates": "keep_last"},
        ),
        "unrated.parquet": (GOOD, {"columns": {"rating": None}}),  # null: the column is ignored
        # whitespace str.strip() removes, not only spaces (Spark's trim): one id each
        "padded.parquet": (
            GOOD.assign(
                user=["42\t", "\xa042", " 7\u3000", "8\x1c"], item=["007\t", "b", "\u2000c", "b\n"]
            ),
            {},
        ),
        "padded_int.csv": (GOOD.assign(user=["\t42", "42 ", "7", "8"]), {}),
        # RFC 4180: a quoted field with a comma and doubled quotes is one id, as pandas reads it
        "quotes.csv": (GOOD.assign(item=['Book, "Vol 2"', "b", '"c"', "b"]), {}),
        "format.csv": (
            GOOD.assign(
                timestamp=[
                    "2023.01.13 10h00",
                    "2023.01.14 11h30",
                    "2023.02.02 09h05",
                    "2023.03.01 00h00",
                ]
            ),
            {"timestamp_format": "%Y.%m.%d %Hh%M"},
        ),
    }
    for name, (frame_, kw) in cases.items():
        path = tmp_path / name
        _write(frame_, path)
        want = hdata.load_interactions(path, rating_range=(1, 5), **kw)
        got = read_interactions(spark, str(path), rating_range=(1, 5), **kw).toPandas()
        for col in ("user", "item", "timestamp"):
            assert (got[col].dtype.kind == "i") == (want[col].dtype.kind == "i"), (name, col)
        pd.testing.assert_frame_equal(
            frame(got, drop_row=True), frame(want, drop_row=True), check_dtype=False, obj=name
        )


def test_ids_are_stripped_as_str_strip_strips(spark: Any) -> None:
    """Every character Python's ``str.isspace`` accepts, and its non-space neighbours, at either
    end of an id: Spark's ``stripped`` leaves what ``str.strip()`` leaves."""
    from pyspark.sql import functions as sf

    from harness.spark.io import stripped

    space = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    others = ["\x00", "\x08", "\x0e", "\x1b", "!", "\x7f", "\x84", "\x86", "\xa1", "\u200b"]
    values = ["", "a", "a b", "é"]
    for c in space + others:
        values += [c, c + "a", "a" + c, c + c + "x y" + c, "\xa0" + c + "id"]
    frame = spark.createDataFrame([(v,) for v in values], "id string")
    got = [r[0] for r in frame.select(stripped(sf.col("id"))).collect()]
    assert got == [v.strip() for v in values]


def test_a_missing_file_or_a_row_longer_than_the_header_is_one_line(
    spark: Any, tmp_path: Any, harness_cli: Any
) -> None:
    """A missing dataset.path is the in-process error (it was Spark's traceback, exit 1); a CSV
    row with more fields than the header stops the read (Spark used to drop the extra field)
    with one line from :func:`malformed_csv`, as in process it stops with pandas' error; the
    JVM prints nothing of its own about the failed task (it printed a 45-line stack trace)."""
    from harness import data as hdata
    from harness.errors import DataError
    from harness.spark.io import malformed_csv, read_interactions

    for name in ("nope.csv", "nope.parquet"):
        with pytest.raises(DataError) as want:
            hdata.load_interactions(tmp_path / name)
        with pytest.raises(DataError) as got:
            read_interactions(spark, str(tmp_path / name))
        said = f"{tmp_path / name}: no such file (dataset.path)"
        assert str(got.value) == str(want.value) == said
    path = tmp_path / "long.csv"
    path.write_text("user,item,timestamp,rating\n1,a,100,1\n2,b,200,2,9\n3,c,300,3\n")
    with pytest.raises(DataError, match="Expected 4 fields in line 3, saw 5"):
        hdata.load_interactions(path)
    # in a new process: the JVM's own console output is seen only there
    script = (
        "import sys\n"
        "from harness.spark import spark_session\n"
        "from harness.spark.io import malformed_csv, read_interactions\n"
        "spark = spark_session('local[1]')\n"
        "print('-- read', file=sys.stderr, flush=True)\n"
        "try:\n"
        "    read_interactions(spark, sys.argv[1]).count()\n"
        "except Exception as err:\n"
        "    print(malformed_csv(err))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        env=harness_cli.env(),
        timeout=300,
    )
    assert done.stdout.strip() == (
        "a CSV row does not fit its file's header (more fields than it names, or a broken "
        "quote): [2,b,200,2]; fix the row or write the file as Parquet"
    ), done.stderr[-3000:]
    after = done.stderr.split("-- read\n")[1]  # Spark printed a 45-line stack trace here
    assert after == "", after[:3000]
    assert malformed_csv(ValueError("another error")) is None


BAD: dict[str, pd.DataFrame] = {
    "missing.csv": GOOD.drop(columns="timestamp"),
    "null_user.parquet": GOOD.assign(user=[1.0, None, 2.0, 3.0]),
    "rating.csv": GOOD.assign(rating=[1.0, 9.0, 2.0, 7.0]),
    "text_rating.csv": GOOD.assign(rating=["1", "x", "2", "3"]),
    "near_duplicate.csv": GOOD.assign(user=["70", "x1", "70.0", "8"]),
    "blank_id.parquet": GOOD.assign(item=["007", " \t", "c", "b"]),
    "plus_sign.csv": GOOD.assign(item=["+5", "5", "x", "y"]),
    "float_beyond.parquet": GOOD.assign(user=[2.0**60, 1.0, 2.0, 3.0]),
    "epoch_mixed.csv": GOOD.assign(timestamp=[1673604000, 1673695800000, 1675328700, 1677628800]),
    "epoch_huge.parquet": GOOD.assign(timestamp=[10**15, 10**15 + 1, 10**15 + 2, 10**15 + 3]),
    "one_layout.csv": GOOD.assign(
        timestamp=["2023-01-13 10:00:00", "2023-01-14", "14/01/2023", "2023-03-01T00:00:00"]
    ),
    "ambiguous.csv": GOOD.assign(
        timestamp=["01/02/2023", "03/04/2023", "05/06/2023", "07/08/2023"]
    ),
    "unparsable.csv": GOOD.assign(timestamp=["x", "yesterday", "?", "never"]),
    "duplicate.csv": pd.concat([GOOD, GOOD.iloc[[2]]]),
    "empty.parquet": GOOD.iloc[:0],
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_read_interactions_gives_the_loaders_one_line_errors(
    spark: Any, tmp_path: Any, name: str
) -> None:
    """The same file, column, what and example value as the in-process loader's message (its
    row numbers aside)."""
    from harness import data as hdata
    from harness.errors import DataError
    from harness.spark.io import read_interactions

    path = tmp_path / name
    _write(BAD[name], path)
    with pytest.raises(DataError) as want:
        hdata.load_interactions(path, rating_range=(1, 5))
    with pytest.raises(DataError) as got:
        read_interactions(spark, str(path), rating_range=(1, 5))
    message = str(got.value)
    assert "\n" not in message and message.startswith(str(path))
    assert message == _without_rows(str(want.value))


def test_a_given_epoch_unit_that_puts_every_time_in_1970_is_the_same_error(
    spark: Any, tmp_path: Any
) -> None:
    from harness import data as hdata
    from harness.errors import DataError
    from harness.spark.io import read_interactions

    path = tmp_path / "seconds.csv"
    _write(GOOD.assign(timestamp=[1673604000, 1673695800, 1675328700, 1677628800]), path)
    with pytest.raises(DataError) as want:
        hdata.load_interactions(path, timestamp_format="epoch_ms")
    with pytest.raises(DataError) as got:
        read_interactions(spark, str(path), timestamp_format="epoch_ms")
    assert "timestamp_format=epoch_s" in str(got.value)
    assert str(got.value) == _without_rows(str(want.value))


def test_a_repeated_pair_without_timestamps_is_the_same_error_on_both_engines(
    spark: Any, tmp_path: Any
) -> None:
    from harness import data as hdata
    from harness.errors import DataError
    from harness.spark.io import read_interactions

    path = tmp_path / "untimed.csv"
    _write(pd.concat([GOOD, GOOD.iloc[[2]]]).drop(columns="timestamp"), path)
    columns = {"timestamp": None}
    with pytest.raises(DataError) as want:
        hdata.load_interactions(path, columns=columns)
    with pytest.raises(DataError) as got:
        read_interactions(spark, str(path), columns=columns)
    assert (
        str(got.value)
        == _without_rows(str(want.value))
        == (
            f"{path}: columns ('user', 'item') have 2 rows in repeated pairs (no timestamp "
            "column), e.g. user=7 item='c'; to keep them set dataset.duplicates to "
            "keep_last or keep_first or keep_all"
        )
    )
