"""A plug-in fitted on a sample of the training rows (``engine.fit_sample``) still leaves every
training item of a user out of that user's list and AUC candidates, as the in-process model,
fitted on every row, does; before, only the sampled rows' items were left out (5-16% of list
slots held seen items in benchmarks/bench_fit_sample.py).

The reference is written here, one user at a time: the fitted model's score rows without any
exclusion (``score_items``), every training item of the user removed, ties by item id (the
in-process order), and AUC counts over every remaining (relevant, other) pair.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.models import BiasRating

K = 4


def data(text: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Training rows (ratings with ties), the half a model is fitted on (user 3 and user 5 not
    in it at all), and relevant pairs (some of them seen items)."""
    rng = np.random.default_rng(3)
    train = pd.DataFrame(
        {
            "user": np.repeat(np.arange(6), 5),
            "item": np.concatenate([rng.choice(9, 5, replace=False) for _ in range(6)]),
            "rating": rng.integers(1, 4, 30).astype(float),
        }
    )
    sample = train[(train.index % 2 == 0) & ~train["user"].isin([3, 5])]
    relevant = pd.DataFrame({"user": [0, 0, 1, 3, 3, 5, 7], "item": [1, 2, 3, 4, 5, 0, 6]})
    if text:
        for df in (train, sample, relevant):
            df["user"] = ("u" + df["user"].astype(str)).astype(object)
            df["item"] = ("i" + df["item"].astype(str)).astype(object)
    return train, sample, relevant


def reference(
    model: Any, users: np.ndarray, train: pd.DataFrame, relevant: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Lists (user, rank, item, score), AUC counts (user, wins, n_pos, n_neg) and pooled wins,
    every training item of a user excluded, one user and one pair at a time."""
    items = np.asarray(model.item_ids_)
    scores = model.score_items(users, np.tile(items, (users.size, 1)))
    seen = train.groupby("user")["item"].agg(set).to_dict()
    lists, counts, all_pos, all_neg = [], [], [], []
    for u, row in zip(users, scores, strict=True):
        cands = [(s, i) for s, i in zip(row, items, strict=True) if i not in seen.get(u, set())]
        ranked = sorted(cands, key=lambda c: -c[0])  # stable: ties keep item order
        lists += [(u, r + 1, i, s) for r, (s, i) in enumerate(ranked[:K])]
        rel = set(relevant.loc[relevant["user"] == u, "item"])
        pos = [s for s, i in cands if i in rel]
        neg = [s for s, i in cands if i not in rel]
        wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
        counts.append((u, float(wins), float(len(pos)), float(len(neg))))
        all_pos += pos
        all_neg += neg
    pooled = sum((p > n) + 0.5 * (p == n) for p in all_pos for n in all_neg)
    return (
        pd.DataFrame(lists, columns=["user", "rank", "item", "score"]),
        pd.DataFrame(counts, columns=["user", "wins", "n_pos", "n_neg"]),
        float(pooled),
    )


def table(df: Any, by: list[str]) -> pd.DataFrame:
    """A Spark result as pandas, ids as objects, sorted by ``by``."""
    out = pd.DataFrame(df.toPandas()).astype({"user": object})
    if "item" in out.columns:
        out = out.astype({"item": object})
    return out.sort_values(by).reset_index(drop=True)


@pytest.mark.parametrize("text", [False, True])
def test_sampled_plugin_lists_and_counts_leave_out_every_seen_item(spark: Any, text: bool) -> None:
    from harness.spark.models import plugin_catalog, plugin_topk

    train, sample, relevant = data(text)
    model = BiasRating().fit(sample)
    users = np.array(sorted(set(train["user"]) | set(relevant["user"])), dtype=object)
    if not text:
        users = users.astype(np.int64)
    want_lists, want_counts, want_pooled = reference(model, users, train, relevant)
    kind = "string" if text else "bigint"
    frame = spark.createDataFrame(pd.DataFrame({"user": users}))
    seen = spark.createDataFrame(train[["user", "item"]])
    cols = ["user", "rank", "item", "score"]

    got = plugin_topk(spark, model, frame, K, item_kind=kind, batch_users=2, seen=seen)
    pd.testing.assert_frame_equal(table(got, ["user", "rank"])[cols], want_lists, check_dtype=False)
    lists, counts, pooled = plugin_catalog(
        spark,
        model,
        frame,
        spark.createDataFrame(relevant),
        K,
        pooled=True,
        item_kind=kind,
        batch_users=2,
        seen=seen,
    )
    pd.testing.assert_frame_equal(
        table(lists, ["user", "rank"])[cols], want_lists, check_dtype=False
    )
    pd.testing.assert_frame_equal(table(counts, ["user"]), want_counts, check_dtype=False)
    assert pooled == want_pooled
    # without ``seen`` the sampled model lists items its users have seen: the test can fail
    plain = table(plugin_topk(spark, model, frame, K, item_kind=kind, batch_users=2), ["user"])
    pairs = set(zip(train["user"], train["item"], strict=True))
    assert any((u, i) in pairs for u, i in zip(plain["user"], plain["item"], strict=True))


def test_pipeline_excludes_every_seen_item_only_when_fitted_on_a_sample(spark: Any) -> None:
    """``model_lists`` with ``fit_sample``: the lists of the model it fitted on its sample equal
    the reference; the full-fit path passes no history (its model excludes every row itself)."""
    from harness.spark.models import history
    from harness.spark.pipeline import model_lists

    train, _, relevant = data(False)
    frame = spark.createDataFrame(train)
    users = np.array(sorted(set(train["user"]) | set(relevant["user"])), dtype=np.int64)
    model = BiasRating()
    lists, how = model_lists(
        spark,
        model,
        frame,
        spark.createDataFrame(pd.DataFrame({"user": users})),
        K,
        batch_users=3,
        fit_sample=0.5,
        seed=1,
    )
    assert how == "plugin" and len(model.interactions_.data) < len(train)  # fitted on a sample
    want, _, _ = reference(model, users, train, relevant)
    cols = ["user", "rank", "item", "score"]
    pd.testing.assert_frame_equal(table(lists, ["user", "rank"])[cols], want, check_dtype=False)
    assert history(model, frame, None) is None and history(model, frame, 1.0) is None
    assert history(BiasRating(exclude_seen=False), frame, 0.5) is None
    assert history(model, frame, 0.5) is not None
