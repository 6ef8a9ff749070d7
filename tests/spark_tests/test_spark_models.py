"""Model versions on Spark (harness.spark.models) give the in-process models' top-k lists.

The reference is the in-process model (harness.models) on the same pandas data, turned into a
long table by the harness's own list-to-run step; popularity is also checked against a naive
pandas count. ALS (MLlib) has no in-process twin: it must beat a random ranking on data with
clear taste clusters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.experiment import _lists, _recommendations
from harness.models import ImplicitItemCosine, PopularityModel, PrecomputedScores, RandomModel
from harness.spark.io import _frame
from harness.spark.models import (
    SparkALS,
    fit_plugin,
    plugin_topk,
    popularity_topk,
    precomputed_stats,
    precomputed_topk,
)

K = 5


def events(text_ids: bool, seed: int = 0) -> pd.DataFrame:
    """Small interactions with many popularity ties; ids ``u7``/``i12`` when ``text_ids``."""
    rng = np.random.default_rng(seed)
    n = 400
    frame = pd.DataFrame(
        {
            "user": rng.integers(0, 40, n),
            "item": rng.integers(0, 25, n),
            "timestamp": np.arange(n, dtype=np.int64),
        }
    ).drop_duplicates(["user", "item"])
    if text_ids:
        frame["user"] = "u" + frame["user"].astype(str)
        frame["item"] = "i" + frame["item"].astype(str)
        frame = frame.astype({"user": object, "item": object})
    return frame.reset_index(drop=True)


def requested(train: pd.DataFrame, text_ids: bool) -> np.ndarray:
    """Known users plus two users absent from training."""
    extra = ["u900", "u901"] if text_ids else [900, 901]
    users = np.concatenate([np.sort(train["user"].unique()), np.asarray(extra, dtype=object)])
    return users.astype(object) if text_ids else users.astype(np.int64)


def in_process(model: Any, train: pd.DataFrame, users: np.ndarray) -> pd.DataFrame:
    """The in-process model's lists as (user, rank, item, score), sorted."""
    model.fit(train)
    ids, scores = model.recommend(users, K)
    out = _recommendations(users, np.asarray(ids), np.asarray(scores))
    return out.sort_values(["user", "rank"]).reset_index(drop=True)


def collected(lists: Any) -> pd.DataFrame:
    """A Spark list table as (user, rank, item, score), sorted (tests only)."""
    frame = pd.DataFrame(lists.toPandas())[["user", "rank", "item", "score"]]
    frame["rank"] = frame["rank"].astype(np.int64)
    return frame.sort_values(["user", "rank"]).reset_index(drop=True)


def same_lists(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert len(a) > 0
    assert a[["user", "rank", "item"]].astype(str).equals(b[["user", "rank", "item"]].astype(str))
    assert np.array_equal(a["score"].to_numpy(float), b["score"].to_numpy(float))


def users_frame(spark: Any, users: np.ndarray) -> Any:
    return _frame(spark, pd.DataFrame({"user": users}), "users")


@pytest.mark.parametrize("text_ids", [False, True])
@pytest.mark.parametrize("exclude_seen", [False, True])
def test_precomputed_equals_in_process(
    spark: Any, tmp_path: Path, text_ids: bool, exclude_seen: bool
) -> None:
    train = events(text_ids)
    rng = np.random.default_rng(3)
    grid = pd.MultiIndex.from_product(
        [pd.unique(train["user"])[:30], pd.unique(train["item"])[:20]], names=["user", "item"]
    ).to_frame(index=False)
    grid = grid.sample(frac=0.7, random_state=1).reset_index(drop=True)
    grid["score"] = rng.integers(0, 4, len(grid)).astype(float)  # many ties
    # a user and an item training does not know, for the file's counts
    stranger = ("u950", "i990") if text_ids else (950, 990)
    grid.loc[len(grid)] = [*stranger, 1.0]
    path = tmp_path / "scores.parquet"
    grid.to_parquet(path, index=False)
    users = requested(train, text_ids)
    model = PrecomputedScores(path, exclude_seen=exclude_seen)
    with pytest.warns(UserWarning, match="have no list in the file"):
        expected = in_process(model, train, users)
    got = precomputed_topk(
        spark,
        str(path),
        _frame(spark, train, "train"),
        users_frame(spark, users),
        K,
        exclude_seen=exclude_seen,
    )
    same_lists(expected, collected(got))
    # the file's counts (model.stats.* on the run) as in process, and the user the note names
    stats, example = precomputed_stats(
        spark, str(path), _frame(spark, train, "train"), users_frame(spark, users)
    )
    assert stats == model.stats_
    missing = set(users) - set(grid["user"])
    assert stats["users_without_list"] == len(missing) > 0
    assert stats["users_not_in_train"] == stats["items_unknown"] == 1
    assert example == min(missing)


def test_precomputed_text_that_is_integers_and_bad_input(spark: Any, tmp_path: Path) -> None:
    """Ids stored as text "7" match integer training ids (as in-process); duplicates and
    non-finite scores are one-line errors naming the file."""
    from harness.errors import DataError

    train = events(False)
    users = requested(train, False)
    table = pd.DataFrame({"user": [1, 1, 2, 2], "item": [3, 4, 3, 5], "score": [1.0, 2, 2, 2]})
    text = table.astype({"user": str, "item": str})
    text.to_csv(tmp_path / "s.csv", index=False)
    expected = in_process(PrecomputedScores(tmp_path / "s.csv"), train, users)
    got = precomputed_topk(
        spark, str(tmp_path / "s.csv"), _frame(spark, train, "train"), users_frame(spark, users), K
    )
    result = collected(got)
    same_lists(expected, result)
    assert result["item"].dtype == np.int64
    dup = pd.concat([table, table.iloc[:1]])
    dup.to_parquet(tmp_path / "dup.parquet", index=False)
    with pytest.raises(DataError, match=r"dup.parquet: .*1 duplicate .*user=1 item=3"):
        precomputed_topk(
            spark,
            str(tmp_path / "dup.parquet"),
            _frame(spark, train, "train"),
            users_frame(spark, users),
            K,
        )
    bad = table.assign(score=[1.0, np.inf, 2, 2])
    bad.to_parquet(tmp_path / "bad.parquet", index=False)
    with pytest.raises(DataError, match=r"bad.parquet: column 'score' has 1 .*non-finite"):
        precomputed_topk(
            spark,
            str(tmp_path / "bad.parquet"),
            _frame(spark, train, "train"),
            users_frame(spark, users),
            K,
        )


def test_precomputed_zero_padded_ids_are_text_as_in_process(spark: Any, tmp_path: Path) -> None:
    """A score file's "003" is the text id "003", never the integer 3 (Spark read it as 3, so it
    missed text ids written with zeros and matched integer ids in-process leaves apart)."""
    train = events(False)
    padded = train.assign(
        user=train["user"].map("{:03d}".format).astype(object),
        item=train["item"].map("{:03d}".format).astype(object),
    )
    table = pd.DataFrame(
        {"user": ["001", "001", "002", "002"], "item": ["003", "004", "003", "005"]}
    ).assign(score=[1.0, 2.0, 2.0, 2.0])
    path = tmp_path / "zeros.csv"
    table.to_csv(path, index=False)
    for fit_on in (padded, train):  # text ids with zeros, then integer ids
        text = fit_on is padded
        users = requested(fit_on, text) if not text else np.sort(padded["user"].unique())
        with pytest.warns(UserWarning, match="have no list in the file"):
            expected = in_process(PrecomputedScores(path), fit_on, users)
        got = collected(
            precomputed_topk(
                spark, str(path), _frame(spark, fit_on, "train"), users_frame(spark, users), K
            )
        )
        if text:
            same_lists(expected, got)
            assert set(got["item"]) == {"003", "004", "005"}
        else:  # "001" is no integer user: no list in either engine
            assert len(expected) == len(got) == 0


@pytest.mark.parametrize("text_ids", [False, True])
def test_popularity_equals_in_process_and_a_naive_count(spark: Any, text_ids: bool) -> None:
    train = events(text_ids)
    users = requested(train, text_ids)
    expected = in_process(PopularityModel(), train, users)
    got = collected(popularity_topk(_frame(spark, train, "train"), users_frame(spark, users), K))
    same_lists(expected, got)
    # naive: distinct users per item, sorted by (-count, item), seen items skipped
    counts = train.groupby("item")["user"].nunique()
    order = sorted(counts.index, key=lambda i: (-counts[i], i))
    user = users[0]
    seen = set(train.loc[train["user"] == user, "item"])
    naive = [i for i in order if i not in seen][:K]
    assert got.loc[got["user"] == user, "item"].tolist() == naive
    assert got.loc[got["user"] == user, "score"].tolist() == [counts[i] for i in naive]


@pytest.mark.parametrize("text_ids", [False, True])
@pytest.mark.parametrize("make", [lambda: ImplicitItemCosine(k_neighbors=10), RandomModel])
def test_plugin_models_scored_per_partition_equal_in_process(
    spark: Any, text_ids: bool, make: Any
) -> None:
    train = events(text_ids)
    users = requested(train, text_ids)
    expected = in_process(make(), train, users)
    train_df = _frame(spark, train, "train")
    fitted = fit_plugin(make(), train_df)
    kind = "string" if text_ids else "bigint"
    got = plugin_topk(
        spark, fitted, users_frame(spark, users).repartition(3), K, item_kind=kind, batch_users=7
    )
    same_lists(expected, collected(got))


def test_a_plugin_breaking_its_contract_fails_as_in_process(spark: Any, tmp_path: Path) -> None:
    """A NaN score is the in-process error line (``harness.models.checked_lists``), raised in
    the Python workers, not a list silently cut short."""
    import shutil

    import plugins.models

    from harness.spark.session import _python_errors

    train = events(False).assign(timestamp=0)
    users = np.sort(requested(train, False))
    fitted = fit_plugin(plugins.models.NanSecond(), _frame(spark, train, "train"))
    message = f"^NanSecond.recommend scored user {int(users[0])}'s item at rank 2 nan: scores"
    with pytest.raises(ValueError, match=message):
        _lists(fitted, users, K)
    # the workers import the model's class: ship tests/plugins to them
    package = Path(plugins.models.__file__).parent
    shipped = shutil.make_archive(str(tmp_path / "plugins"), "zip", package.parent, package.name)
    spark.sparkContext.addPyFile(shipped)
    lists = plugin_topk(spark, fitted, users_frame(spark, users), K, item_kind="bigint")
    wanted = r"^NanSecond.recommend scored user \d+'s item at"
    with pytest.raises(ValueError, match=wanted), _python_errors():
        collected(lists)


def clustered(seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Users of 4 taste clusters, each interacting within its cluster's 15 items; one held-out
    item per user (test)."""
    rng = np.random.default_rng(seed)
    rows = []
    for user in range(120):
        cluster = user % 4
        items = rng.choice(15, size=8, replace=False) + 15 * cluster
        rows += [(user, int(i), t) for t, i in enumerate(items)]
    frame = pd.DataFrame(rows, columns=["user", "item", "timestamp"])
    last = frame.groupby("user")["timestamp"].transform("max") == frame["timestamp"]
    return frame[~last].reset_index(drop=True), frame[last].reset_index(drop=True)


def test_mllib_als_runs_and_beats_random(spark: Any) -> None:
    train, test = clustered()
    users = np.sort(test["user"].unique())
    model = SparkALS(factors=8, iterations=10, regularization=0.1, alpha=10.0, seed=1)
    lists = collected(model.topk(_frame(spark, train, "train"), users_frame(spark, users), K))
    assert lists.groupby("user").size().eq(K).all()
    seen = set(zip(train["user"], train["item"], strict=True))
    assert not any((u, i) in seen for u, i in zip(lists["user"], lists["item"], strict=True))
    truth = set(zip(test["user"], test["item"], strict=True))

    def hit_rate(frame: pd.DataFrame) -> float:
        hits = {u for u, i in zip(frame["user"], frame["item"], strict=True) if (u, i) in truth}
        return len(hits) / len(users)

    random_lists = in_process(RandomModel(seed=0), train, users)
    # a user's 7 unseen in-cluster items among 53 unseen: random hits about 5/53 ≈ 0.09
    assert hit_rate(lists) > 0.4 > hit_rate(random_lists)
    with pytest.raises(ValueError, match="runs only with engine=spark"):
        model.fit(train)
