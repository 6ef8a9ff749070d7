"""engine=spark with a score file whose lists hold items outside the data (audit finding): the
item ranks as a miss and joins the catalog of coverage and gini, as in-process
(``tests/harness_tests/test_precomputed_gaps.py``); a non-integer id in the file (its ids then
compare as text) against integer dataset ids is judged too. Expected values by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.compare import CompareSpec
from harness.experiment import MetricSuite
from harness.models import PopularityModel, PrecomputedScores

pytestmark = pytest.mark.spark

K = 10


def test_items_outside_the_data_are_misses_and_join_the_catalog(spark: Any, tmp_path: Path) -> None:
    from harness.spark.pipeline import (
        compare_result_spark,
        load_spark,
        run_models_spark,
        split_spark,
    )

    spec = {"kind": "synthetic", "n_users": 200, "n_items": 120, "n_events": 3000, "seed": 5}
    events, dataset = load_spark(spark, spec, 10**6)
    sp, split = split_spark(events, "global_time", {"cut": 0.8}, 10**6)
    # every other test user: "SKU 999" (outside the data; the file's ids become text) on top,
    # then the user's test items, then items 0, 1, 2… (no tie within a user)
    rows = []
    for n, (user, items) in enumerate(split.test.groupby("user")["item"].agg(set).items()):
        row = [("SKU 999", 100.0)] if n % 2 == 0 else []
        row += [(str(i), 50.0 - j) for j, i in enumerate(sorted(items))]
        row += [(str(i), 10.0 - 0.01 * i) for i in range(20) if i not in items]
        rows += [(user, item, score) for item, score in row]
    table = pd.DataFrame(rows, columns=["user", "item", "score"])
    table.to_csv(tmp_path / "s.csv", index=False)
    top = table.sort_values(["user", "score"], ascending=[True, False]).groupby("user").head(K)

    suite = MetricSuite(k=K, names=("precision@10", "coverage@10", "ndcg@10"))
    models = {"popularity": PopularityModel(), "file": PrecomputedScores(str(tmp_path / "s.csv"))}
    result = run_models_spark(
        spark, dataset, events, sp, split, models, suite, tmp_path / "out", driver_rows=10**6
    )
    outcome = result.outcomes["file"]
    assert outcome.ok, outcome.error
    truth = split.test.groupby("user")["item"].agg(lambda s: {str(i) for i in s})
    hits = [sum(i in truth[u] for i in g["item"]) for u, g in top.groupby("user")]
    parts = {str(i) for p in (split.train, split.test) for i in p["item"]}
    listed = set(top["item"])
    catalog = max(dataset.frame["item"].nunique(), len(parts | listed))
    assert catalog == dataset.frame["item"].nunique() + 1  # this split drops no item
    summary = outcome.evaluation.summary
    assert summary["precision@10"] == pytest.approx(np.mean(hits) / K, abs=1e-12)
    assert summary["coverage@10"] == pytest.approx(len(listed) / catalog, abs=1e-12)
    assert outcome.info["items_outside_data"] == 1 and outcome.info["catalog_items"] == catalog
    assert outcome.notes == [
        "1 recommended item(s) are in no part of the split (training, validation, test), "
        f"e.g. 'SKU 999': ranked as misses; counted into the catalog of coverage and gini "
        f"({catalog} items instead of the dataset's {catalog - 1})"
    ]
    # the lists keep the file's ids; the comparison (item buckets included) runs on them
    assert set(outcome.recommendations["item"].astype(str)) == listed
    found = compare_result_spark(result, CompareSpec(n_resamples=50))
    assert found is not None and not found[1]
    assert found[0][0].row("precision@10", "items:head") is not None


def test_text_ids_in_the_file_tie_as_the_integer_truth(spark: Any, tmp_path: Path) -> None:
    """One non-integer id (``x``, for a user outside the test) makes the file's ids text; tied
    scores still go by ascending item *number* (9 before 10: the truth's integer ids), as
    in-process (``test_precomputed_file_ties.py``): lists and NDCG by hand."""
    import math

    from harness.spark.pipeline import load_spark, run_models_spark, split_spark

    spec = {"kind": "synthetic", "n_users": 120, "n_items": 80, "n_events": 2400, "seed": 3}
    events, dataset = load_spark(spark, spec, 10**6)
    sp, split = split_spark(events, "global_time", {"cut": 0.8}, 10**6)
    rng = np.random.default_rng(11)
    items = np.sort(split.train["item"].unique())
    rows = [  # 12 items per user, scores from {0, 1, 2}: many ties
        (u, int(i), float(rng.integers(0, 3)))
        for u in np.sort(split.test["user"].unique())
        for i in rng.choice(items, size=12, replace=False)
    ]
    table = pd.DataFrame(rows, columns=["user", "item", "score"])
    text = pd.concat(
        [
            table.astype({"item": str}),
            pd.DataFrame({"user": [10**7], "item": ["x"], "score": [1.0]}),
        ]
    )
    text.to_csv(tmp_path / "s.csv", index=False)
    lists = {
        u: [i for _, i in sorted(zip(-g["score"], g["item"], strict=True))[:5]]
        for u, g in table.groupby("user")
    }
    as_text = {
        u: [i for _, i in sorted(zip(-g["score"], g["item"].astype(str), strict=True))[:5]]
        for u, g in table.groupby("user")
    }
    assert any([str(i) for i in lists[u]] != as_text[u] for u in lists)  # the data has such ties
    suite = MetricSuite(k=5, names=("ndcg@5",))
    models = {"file": PrecomputedScores(str(tmp_path / "s.csv"))}
    result = run_models_spark(
        spark, dataset, events, sp, split, models, suite, tmp_path / "out", driver_rows=10**6
    )
    outcome = result.outcomes["file"]
    assert outcome.ok, outcome.error
    got = outcome.recommendations.sort_values(["user", "rank"]).groupby("user")["item"]
    assert {u: [int(i) for i in g] for u, g in got} == lists
    truth = split.test.groupby("user")["item"].agg(set)
    per_user = outcome.evaluation.per_user["ndcg@5"]
    for user, value in per_user.items():
        relevant, mine = truth[user], lists.get(user, [])
        dcg = sum(1 / math.log2(r + 2) for r, item in enumerate(mine) if item in relevant)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(5, len(relevant))))
        assert value == pytest.approx(dcg / ideal, abs=1e-12), user
