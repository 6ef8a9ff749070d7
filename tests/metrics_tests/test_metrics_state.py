"""``metrics.evaluate``'s aggregation is mergeable: states of disjoint user groups, merged and
finished, give the summary and counts of one evaluation over every user (what the Spark engine
relies on), for every registered metric."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import metrics


def data(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    run = pd.DataFrame(
        {"user": rng.integers(0, 60, 900), "item": rng.integers(0, 40, 900)}
    ).drop_duplicates(ignore_index=True)
    run["score"] = rng.integers(0, 5, len(run)) + 0.5 * rng.integers(0, 2, len(run))
    qrels = pd.DataFrame(
        {"user": rng.integers(0, 70, 300), "item": rng.integers(0, 40, 300)}
    ).drop_duplicates(ignore_index=True)
    qrels["relevance"] = rng.integers(0, 4, len(qrels)).astype(float)
    train = pd.DataFrame({"user": rng.integers(0, 70, 2000), "item": rng.integers(0, 45, 2000)})
    feats = pd.DataFrame({"item": np.arange(45), "genre": [f"g{i % 3}" for i in range(45)]})
    return qrels, run, train, feats


@pytest.mark.parametrize("options", [{}, {"average": "micro"}, {"preset": "trec_eval"}])
def test_merged_states_equal_one_evaluation(every_metric, options: dict) -> None:
    qrels, run, train, feats = data(3)
    names = every_metric((5,))
    kw = {"train": train, "item_features": feats, "catalog": 60, **options}
    whole = metrics.evaluate(qrels, run, names, **kw)
    parts = []
    for g in range(3):  # users split three ways, as Spark's buckets split them
        q, r = (df[df["user"] % 3 == g] for df in (qrels, run))
        parts.append(metrics.evaluate(q, r, names, **kw).state)
    summary, counts = metrics.finish_state(metrics.merge_states(parts), names, 60, **options)
    assert counts == whole.counts
    for name in names:
        x, y = whole.summary[name], summary[name]
        assert (np.isnan(x) and np.isnan(y)) or abs(x - y) <= 1e-12, (name, x, y)
    # the pooled ones, checked against a naive computation
    top = run.sort_values(["user", "score", "item"], ascending=[True, False, True])
    top = top[top["user"].isin(qrels["user"])].groupby("user").head(5)
    assert summary["coverage@5"] == pytest.approx(top["item"].nunique() / 60, abs=1e-12)
