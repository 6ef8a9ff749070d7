"""Popularity's AUC over the whole catalog on Spark (``auc_scope=catalog``), counted in Spark
from the integer popularity histogram (:func:`harness.spark.models.popularity_auc_counts`).

References, both independent of the Spark code: a brute-force count over every (relevant,
negative) pair written here, and the in-process engine (``PopularityModel.recommend_with_auc``
and ``run_models``, tested against hand counts and sklearn elsewhere). The CLI run of the same
(``python -m harness engine=spark`` with the AUC family) is in test_spark_pipeline.py, where it
shares one run with the other ``engine=spark`` checks of a file dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness import synthetic
from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import PopularityModel
from harness.split import make_split

TOL = 1e-9
SCORES = ("auc", "gauc", "global_auc")


def tied_events(text: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training events with tied popularity (items 1-3 have 3 users, 4-5 have 1, 6 has 2) and
    relevant pairs: seen items, items unknown to training (9), a user unknown to training (u9),
    duplicate events; user 4 is evaluated with no relevant pair."""
    train = pd.DataFrame(
        {
            "user": [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3],
            "item": [1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 5, 6, 6],
        }
    )
    train = pd.concat([train, pd.DataFrame({"user": [4, 5], "item": [6, 6]})])
    relevant = pd.DataFrame(
        {
            "user": [0, 0, 0, 1, 1, 2, 3, 3, 9, 9, 9, 5],
            "item": [1, 4, 5, 6, 9, 4, 4, 1, 1, 4, 6, 6],
        }
    )
    if text:
        train = train.assign(
            user="u" + train["user"].astype(str), item="i" + train["item"].astype(str)
        )
        relevant = relevant.assign(
            user="u" + relevant["user"].astype(str), item="i" + relevant["item"].astype(str)
        )
        train, relevant = train.astype(object), relevant.astype(object)
    return train.reset_index(drop=True), relevant


def brute_force(
    train: pd.DataFrame, users: list[Any], relevant: pd.DataFrame, exclude: bool
) -> tuple[pd.DataFrame, float]:
    """Every relevant candidate against every negative candidate, one pair at a time."""
    popularity = train.drop_duplicates().groupby("item")["user"].nunique().to_dict()
    seen = train.groupby("user")["item"].agg(set).to_dict()
    rows, all_pos, all_neg = [], [], []
    for u in users:
        cands = set(popularity) - (seen.get(u, set()) if exclude else set())
        rel = set(relevant.loc[relevant["user"] == u, "item"]) & cands
        pos = [popularity[i] for i in rel]
        neg = [popularity[i] for i in cands - rel]
        wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
        rows.append((u, float(wins), float(len(pos)), float(len(neg))))
        all_pos += pos
        all_neg += neg
    pooled = sum((p > n) + 0.5 * (p == n) for p in all_pos for n in all_neg)
    table = pd.DataFrame(rows, columns=["user", "wins", "n_pos", "n_neg"])
    return table, float(pooled)


@pytest.mark.parametrize("exclude", [True, False])
@pytest.mark.parametrize("text", [False, True])
def test_counts_equal_brute_force_and_in_process(spark: Any, text: bool, exclude: bool) -> None:
    from harness.spark.models import popularity_auc_counts

    train, relevant = tied_events(text)
    users = sorted(set(relevant["user"]) | {"u4" if text else 4})
    want, want_pooled = brute_force(train, users, relevant, exclude)
    table, pooled = popularity_auc_counts(
        spark,
        spark.createDataFrame(train),
        spark.createDataFrame(pd.DataFrame({"user": pd.Series(users, dtype=train["user"].dtype)})),
        spark.createDataFrame(relevant),
        exclude_seen=exclude,
        pooled=True,
    )
    got = pd.DataFrame(table.toPandas()).astype({"user": object})
    got = got.sort_values("user").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want.astype({"user": object}), check_dtype=False)
    assert pooled == want_pooled
    assert want["n_pos"].sum() > 0 and (want["wins"] % 1 == 0.5).any()  # ties counted 1/2
    # the in-process model, from its own score rows
    model = PopularityModel(exclude_seen=exclude).fit(train)
    ids = np.array(users, dtype=object if text else np.int64)
    _, _, counts = model.recommend_with_auc(
        ids, 2, relevant["user"].to_numpy(), relevant["item"].to_numpy(), pooled=True
    )
    np.testing.assert_array_equal(got["wins"], counts.wins)
    np.testing.assert_array_equal(got["n_pos"], counts.n_pos)
    np.testing.assert_array_equal(got["n_neg"], counts.n_neg)
    assert pooled == counts.pooled_wins


def test_no_relevant_pair_and_no_pooled(spark: Any) -> None:
    """Without ``pooled`` the pooled wins are NaN; users without a relevant candidate count 0."""
    from harness.spark.models import popularity_auc_counts

    train, _ = tied_events(False)
    relevant = pd.DataFrame({"user": [0], "item": [1]})  # seen: not a candidate
    table, pooled = popularity_auc_counts(
        spark,
        spark.createDataFrame(train),
        spark.createDataFrame(pd.DataFrame({"user": [0, 7]})),
        spark.createDataFrame(relevant),
        pooled=False,
    )
    got = pd.DataFrame(table.toPandas()).sort_values("user").reset_index(drop=True)
    assert np.isnan(pooled)
    # 6 training items; user 0 saw 3 of them, user 7 is unknown to training
    assert got.to_dict("list") == {
        "user": [0, 7],
        "wins": [0.0, 0.0],
        "n_pos": [0.0, 0.0],
        "n_neg": [3.0, 6.0],
    }


def events(text: bool) -> pd.DataFrame:
    """Synthetic events with ratings (many popularity ties); ``text``: string ids."""
    frame = synthetic.generate(n_users=60, n_items=40, n_events=900, seed=5)
    if text:
        frame = frame.assign(
            user="u" + frame["user"].astype(str), item="i" + frame["item"].astype(str)
        ).astype({"user": object, "item": object})
    return frame


def both_runs(
    spark: Any,
    tmp_path: Path,
    frame: pd.DataFrame,
    model: PopularityModel,
    driver_rows: int = 2_000_000,
    **kw: Any,
) -> tuple[Any, Any, PopularityModel]:
    """The in-process and the Spark run of popularity on the same split and suite; the Spark
    run's model object is returned too (still unfitted if the driver never fitted it)."""
    from harness.spark.pipeline import run_models_spark
    from harness.spark.split import make_split_spark

    df = spark.createDataFrame(frame).cache()
    sp = make_split_spark(df, "leave_one_out")
    split = make_split(frame, "leave_one_out")
    dataset = Dataset("tiny", frame, "synthetic")
    suite = MetricSuite(k=5, names=("ndcg@5", *SCORES), **kw)
    fresh = PopularityModel(exclude_seen=model.exclude_seen)
    want = run_models(
        dataset, split, {"popularity": model}, suite, tmp_path / "numpy", progress=False
    )
    got = run_models_spark(
        spark,
        dataset,
        df,
        sp,
        split,
        {"popularity": fresh},
        suite,
        tmp_path / "spark",
        buckets=3,
        driver_rows=driver_rows,
    )
    return want, got, fresh


def assert_same_scores(want: Any, got: Any) -> None:
    """Same summary, per-user values (1e-9), counts and AUC scope as in-process."""
    w, g = want.outcomes["popularity"], got.outcomes["popularity"]
    assert w.error is None and g.error is None, (w.error, g.error)
    for metric in SCORES:
        a, b = w.evaluation.summary[metric], g.evaluation.summary[metric]
        assert np.isfinite(a) and abs(a - b) <= TOL, (metric, a, b)
    for key in ("auc_scope", "auc_relevant_unranked"):
        assert g.info.get(key) == w.info.get(key), key
    assert g.info["auc_scope"] == "catalog"
    assert g.evaluation.counts["auc_undefined_users"] == w.evaluation.counts["auc_undefined_users"]


@pytest.mark.parametrize("exclude", [True, False])
@pytest.mark.parametrize("text", [False, True])
def test_run_equals_in_process_and_driver_never_fits(
    spark: Any, tmp_path: Path, text: bool, exclude: bool
) -> None:
    """``auc``, ``gauc``, ``global_auc`` of a Spark run equal the in-process run's; the Spark run's
    popularity model is never fitted on the driver (``fit_plugin`` would set ``item_ids_``)."""
    want, got, fresh = both_runs(
        spark, tmp_path, events(text), PopularityModel(exclude_seen=exclude)
    )
    assert_same_scores(want, got)
    pw, pg = (
        want.outcomes["popularity"].evaluation.per_user,
        got.outcomes["popularity"].evaluation.per_user,
    )
    assert list(pw.index) == list(pg.index)
    np.testing.assert_allclose(pg[list(SCORES)], pw[list(SCORES)], atol=TOL, rtol=0)
    assert not hasattr(fresh, "item_ids_")


def test_rating_relevance_gauc_by_positives_without_driver_copies(
    spark: Any, tmp_path: Path
) -> None:
    """Relevance from ratings with a threshold (some test users have no relevant item), GAUC
    weighted by positives, and no driver copy at all (``driver_rows=0``): per-user values are
    read from the table written by Spark and still equal in-process."""
    want, got, fresh = both_runs(
        spark,
        tmp_path,
        events(False),
        PopularityModel(),
        driver_rows=0,
        relevance="rating",
        relevance_threshold=4.0,
        options={"gauc_weight": "positives"},
    )
    assert_same_scores(want, got)
    assert want.outcomes["popularity"].evaluation.counts["auc_undefined_users"] > 0
    g = got.outcomes["popularity"]
    table = pd.read_parquet(g.info["per_user_uri"]).set_index("user").sort_index()
    pw = want.outcomes["popularity"].evaluation.per_user
    np.testing.assert_allclose(
        table.loc[pw.index, list(SCORES)], pw[list(SCORES)], atol=TOL, rtol=0
    )
    assert not hasattr(fresh, "item_ids_")


@pytest.mark.parametrize("text", [False, True])
def test_plugin_lists_and_counts_from_one_pass_equal_in_process(spark: Any, text: bool) -> None:
    """A catalog-scoring plug-in's top-k lists (padding dropped: ``k`` above what some users
    have left) and AUC counts from one pass equal the in-process ``recommend_with_auc``."""
    from harness.models import BiasRating
    from harness.spark.models import plugin_catalog

    train, relevant = tied_events(text)
    train = train.assign(rating=np.arange(len(train)) % 5 + 1.0)
    users = np.array(sorted(set(relevant["user"]) | {"u4" if text else 4}), dtype=object)
    if not text:
        users = users.astype(np.int64)
    model = BiasRating().fit(train)
    want_ids, want_scores, want = model.recommend_with_auc(
        users, 5, relevant["user"].to_numpy(), relevant["item"].to_numpy(), pooled=True
    )
    lists, table, pooled = plugin_catalog(
        spark,
        model,
        spark.createDataFrame(pd.DataFrame({"user": users})),
        spark.createDataFrame(relevant),
        5,
        pooled=True,
        item_kind="string" if text else "bigint",
        batch_users=2,
    )
    got = pd.DataFrame(table.toPandas()).astype({"user": object}).set_index("user")
    got = got.loc[list(users)]
    np.testing.assert_array_equal(got["wins"], want.wins)
    np.testing.assert_array_equal(got["n_pos"], want.n_pos)
    np.testing.assert_array_equal(got["n_neg"], want.n_neg)
    assert pooled == want.pooled_wins
    # in-process lists, padding (score -inf) dropped, ranks 1-based
    rows = [
        (u, r + 1, want_ids[i, r], want_scores[i, r])
        for i, u in enumerate(users)
        for r in range(5)
        if np.isfinite(want_scores[i, r])
    ]
    assert len(rows) < users.size * 5  # some users have fewer than 5 unseen items
    expect = pd.DataFrame(rows, columns=["user", "rank", "item", "score"]).astype(object)
    found = pd.DataFrame(lists.toPandas())[["user", "rank", "item", "score"]].astype(object)
    found = found.sort_values(["user", "rank"]).reset_index(drop=True)
    expect = expect.sort_values(["user", "rank"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(found, expect, check_dtype=False)
