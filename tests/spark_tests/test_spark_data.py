"""The data stages of ``engine=spark`` give the in-process rows: splits with their filters, unseen
policy and stats, sampled candidates, and the loader's checks and one-line errors.

Needs PySpark and Java 17 (the ``spark`` fixture skips without them, except under ``CI=true``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness import split as hsplit
from harness.synthetic import generate

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]


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
        out = out.drop(columns="row")
    out = out.astype({"timestamp": "int64", **({} if drop_row else {"row": "int64"})})
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
    ("user_time", {"test_ratio": 0.25, "valid_ratio": 0.1}),
    ("random", {"test_ratio": 0.2, "seed": 5, "valid_ratio": 0.1}),
]
FILTERS: list[dict[str, Any]] = [
    {},
    {"min_user_interactions": 5, "min_item_interactions": 20},
    {"kcore": 8},
]
CASES = [
    pytest.param(m, p, f, ("int", "str")[(i + j) % 2], id=f"{m}-{'+'.join(f) or 'nofilter'}")
    for i, (m, p) in enumerate(METHODS)
    for j, f in enumerate(FILTERS)  # each method meets both id kinds, each filter set too
]


@pytest.fixture
def few_partitions(spark: Any) -> Any:
    """Two shuffle partitions while a test runs (the data is small); restored afterwards."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield spark
    spark.conf.set("spark.sql.shuffle.partitions", before)


@pytest.mark.parametrize(("method", "params", "filters", "ids"), CASES)
def test_split_rows_and_stats_equal_the_in_process_split(
    few_partitions: Any, method: str, params: dict[str, Any], filters: dict[str, Any], ids: str
) -> None:
    """For both unseen policies: the same train / valid / test rows, params and stats."""
    from harness.spark.split import apply_filters_spark, method_split_spark

    spark = few_partitions
    df = events(ids)
    sdf = spark.createDataFrame(df.astype({"user": object, "item": object}) if ids == "str" else df)
    raw = method_split_spark(sdf, method, **params)
    for unseen in ("drop", "keep"):
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


def test_make_split_spark_fills_defaults_and_checks_params(few_partitions: Any) -> None:
    from harness.spark.split import make_split_spark

    df = events("int")
    sdf = few_partitions.createDataFrame(df)
    want = hsplit.make_split(df, "user_time")
    got = make_split_spark(sdf, "user_time")
    same_parts(got, want)
    assert got.params == want.params and got.stats == want.stats
    for bad, message in (
        ({"ratio": 0.2}, "unknown parameter 'ratio' for split method 'user_time'"),
        ({"unseen": "ignore"}, "unseen"),
        ({"kcore": -1}, "kcore"),
        ({"test_ratio": 1.5}, "test_ratio"),
    ):
        with pytest.raises(ValueError) as in_process:
            hsplit.make_split(df, "user_time", **bad)
        with pytest.raises(ValueError, match=message) as spark_error:
            make_split_spark(sdf, "user_time", **bad)
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


def test_random_split_is_a_uniform_draw() -> None:
    """Each event is test with probability test_ratio, independently of who or when: over 400
    seeds every row's test frequency is within 5 sigma of 0.2 and the per-seed count is exact."""
    df = events("int").iloc[:500]
    hits = np.zeros(len(df))
    for seed in range(400):
        test = hsplit.random_split(df, test_ratio=0.2, seed=seed).test
        assert len(test) == 100
        hits[test.index.to_numpy()] += 1
    freq = hits / 400
    sigma = np.sqrt(0.2 * 0.8 / 400)
    assert np.abs(freq - 0.2).max() < 5 * sigma
    # no dependence on time: early and late halves are held out equally often
    early = df["timestamp"].to_numpy() <= np.median(df["timestamp"])
    assert abs(freq[early].mean() - freq[~early].mean()) < 0.01
