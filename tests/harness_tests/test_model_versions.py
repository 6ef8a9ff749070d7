"""Model versions through the whole evaluation: precomputed files and rating predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import (
    BiasRating,
    ImplicitItemCosine,
    PopularityModel,
    PrecomputedScores,
    padding_mask,
)
from harness.split import make_split
from harness.synthetic import generate


@pytest.fixture(scope="module")
def data():
    frame = generate(n_users=300, n_items=200, n_events=6000, seed=4)
    return frame, make_split(frame, "leave_one_out")


def test_precomputed_file_of_a_models_lists_gives_identical_metrics(data, tmp_path: Path) -> None:
    frame, split = data
    knn = ImplicitItemCosine().fit(split.train)
    users = np.sort(split.test["user"].unique())
    ids, scores = knn.recommend(users, 10)
    keep = ~padding_mask(scores)
    rows = np.nonzero(keep)
    exported = pd.DataFrame({"user": users[rows[0]], "item": ids[keep], "score": scores[keep]})
    path = tmp_path / "knn_scores.parquet"
    exported.to_parquet(path)
    suite = MetricSuite(k=10, names=("ndcg@10", "map@10", "recall@10", "mrr@10", "coverage@10"))
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"item_knn": ImplicitItemCosine(), "exported": PrecomputedScores(str(path))},
        suite,
        tmp_path / "out",
        progress=False,
    )
    table = result.table()
    assert result.outcomes["exported"].ok, result.outcomes["exported"].error
    pd.testing.assert_series_equal(table.loc["item_knn"], table.loc["exported"], check_names=False)


def test_rating_metrics_for_rating_models_only(data, tmp_path: Path) -> None:
    frame, split = data
    suite = MetricSuite(k=10, names=("ndcg@10", "rmse", "mae"))
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"bias": BiasRating(), "pop": PopularityModel()},
        suite,
        tmp_path / "out",
        progress=False,
    )
    bias = result.outcomes["bias"]
    # independent RMSE/MAE over the test (user, item) pairs
    model = BiasRating().fit(split.train)
    pairs = split.test.groupby(["user", "item"], as_index=False)["rating"].mean()
    err = (
        model.predict_ratings(pairs["user"].to_numpy(), pairs["item"].to_numpy()) - pairs["rating"]
    )
    assert bias.evaluation.summary["rmse"] == pytest.approx(float(np.sqrt(np.mean(err**2))))
    assert bias.evaluation.summary["mae"] == pytest.approx(float(np.mean(np.abs(err))))
    pop = result.outcomes["pop"]
    assert np.isnan(pop.evaluation.summary["rmse"]) and pop.ok
    assert any("does not predict ratings" in n for n in pop.notes)
