"""engine=spark settles ties at a list's k-th score by the metric conventions, as in-process
(``harness.experiment._evaluate``): over the full catalog, ``tie_break=item_desc`` (and the
``trec_eval`` preset), ``ndcg_ties=average`` (the ``torchmetrics`` preset) and ``id_order=string``
with integer ids fetch every item tied with each list's k-th score (one pass for popularity and
a score file, deeper lists of the fitted model for a plug-in) and choose among them.

References: the in-process engine (itself checked against plain Python in
``tests/harness_tests/test_tie_conventions.py``), and plain Python from the definitions for
popularity here (scores = distinct training users per item): its lists under each rule and its
ndcg@K. Data with many ties at the k-th score: popularity ties by count, a score file with
integer scores 0-2, item_knn with 2 neighbours (most unseen items score 0).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import ImplicitItemCosine, PopularityModel, PrecomputedScores

pytestmark = pytest.mark.spark

K = 4
N_ITEMS = 24  # ids 0..23: as text "10" < "2", so id_order=string reorders ties
NAMES = (f"ndcg@{K}", f"recall@{K}", f"precision@{K}", f"map@{K}", f"mrr@{K}", f"coverage@{K}")
TOL = 1e-9


def _events() -> pd.DataFrame:
    """60 users with 4 distinct items each among 24: equal popularity counts abound."""
    rng = np.random.default_rng(7)
    rows = [(u, int(i)) for u in range(60) for i in rng.choice(N_ITEMS, size=4, replace=False)]
    frame = pd.DataFrame(rows, columns=["user", "item"])
    return frame.assign(timestamp=np.arange(len(frame)))


def _scores(path: Path) -> None:
    """A score file over every (user, item) pair, integer scores 0-2 (ties everywhere)."""
    rng = np.random.default_rng(3)
    grid = pd.MultiIndex.from_product([range(60), range(N_ITEMS)], names=["user", "item"])
    frame = grid.to_frame(index=False)
    frame["score"] = rng.integers(0, 3, len(frame)).astype(float)
    frame.to_csv(path, index=False)


def _models(path: Path) -> dict[str, Any]:
    return {
        "pop": PopularityModel(),
        "file": PrecomputedScores(str(path)),
        "knn": ImplicitItemCosine(k_neighbors=2),
    }


def _pop_ranked(split: Any, user: int, tie: str, id_order: str) -> list[int]:
    """The user's unseen training items by popularity, ties by id (as text with
    ``id_order=string``) in the ``tie`` direction."""
    train = split.train
    pop = train.groupby("item")["user"].nunique()
    seen = set(train.loc[train["user"] == user, "item"])
    items = [int(i) for i in pop.index if i not in seen]
    key = str if id_order == "string" else int
    ranked = sorted(items, key=key, reverse=tie == "item_desc")  # stable sort: ties by id
    return sorted(ranked, key=lambda i: -pop[i])


def _pop_ndcg(split: Any, tie: str, id_order: str, average: bool) -> float:
    """Mean ndcg@K of popularity: binary gains, 1/log2(rank + 1); with ``average`` each of the
    top K items' gain is its tie group's mean gain over the whole ranking."""
    pop = split.train.groupby("item")["user"].nunique()
    values = []
    for user, rows in split.test.groupby("user"):
        relevant = set(rows["item"])
        ranked = _pop_ranked(split, int(user), tie, id_order)
        gains = [1.0 if i in relevant else 0.0 for i in ranked]
        if average:
            groups: dict[int, list[float]] = {}
            for i, g in zip(ranked, gains, strict=True):
                groups.setdefault(int(pop[i]), []).append(g)
            gains = [float(np.mean(groups[int(pop[i])])) for i in ranked]
        dcg = sum(g / math.log2(r + 2) for r, g in enumerate(gains[:K]))
        ideal = sum(1 / math.log2(r + 2) for r in range(min(K, len(relevant))))
        values.append(dcg / ideal)
    return float(np.mean(values))


@pytest.fixture(scope="module")
def data(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The events in Spark and in-process, both engines' split (the same rows) and the score
    file."""
    from harness.spark.io import _frame
    from harness.spark.pipeline import split_spark

    tmp = tmp_path_factory.mktemp("ties")
    frame = _events()
    _scores(tmp / "scores.csv")
    events = _frame(spark, frame, "events").cache()
    sp, split = split_spark(events, "leave_one_out", {}, 10**6)
    return {"frame": frame, "events": events, "sp": sp, "split": split, "path": tmp / "scores.csv"}


CASES = [
    pytest.param({"preset": "trec_eval"}, ("item_desc", "string", False), id="trec_eval"),
    pytest.param({"tie_break": "item_desc"}, ("item_desc", "natural", False), id="item_desc"),
    pytest.param({"preset": "torchmetrics"}, ("item_asc", "natural", True), id="torchmetrics"),
    pytest.param({"id_order": "string"}, ("item_asc", "string", False), id="id_order_string"),
]


@pytest.mark.parametrize(("options", "rule"), CASES)
def test_spark_settles_ties_as_in_process(
    spark: Any, data: dict[str, Any], tmp_path: Path, options: dict[str, Any], rule: tuple
) -> None:
    from harness.spark.pipeline import run_models_spark

    split, path = data["split"], data["path"]
    # once, auc: the plug-in's lists then come from its catalog pass (plugin_catalog)
    names = (*NAMES, "auc") if options.get("tie_break") == "item_desc" else NAMES
    suite = MetricSuite(k=K, names=names, options=options)
    dataset = Dataset("ties", data["frame"], "ties")
    want = run_models(dataset, split, _models(path), suite, tmp_path / "numpy", progress=False)
    got = run_models_spark(
        spark,
        dataset,
        data["events"],
        data["sp"],
        split,
        _models(path),
        suite,
        tmp_path / "spark",
        batch_users=16,
        driver_rows=10**6,
    )
    for name in ("pop", "file", "knn"):
        a, b = want.outcomes[name], got.outcomes[name]
        assert a.ok and b.ok, (a.error, b.error)
        for metric in names:
            assert b.evaluation.summary[metric] == pytest.approx(
                a.evaluation.summary[metric], abs=TOL, nan_ok=True
            ), (name, metric)
        per_user = b.evaluation.per_user.reindex(a.evaluation.per_user.index)
        pd.testing.assert_frame_equal(
            per_user, a.evaluation.per_user, check_dtype=False, atol=TOL, rtol=0
        )
        lists = b.recommendations.astype({"rank": np.int64})
        pd.testing.assert_frame_equal(
            lists, a.recommendations.astype({"rank": np.int64}), check_dtype=False
        )
        assert a.info.get("catalog_items") == b.info.get("catalog_items")
    # popularity by hand: the written lists follow the rule, and ndcg@K
    tie, id_order, average = rule
    lists = pd.read_parquet(tmp_path / "spark" / "pop" / "topk.parquet")
    for user, rows in lists.groupby("user"):
        ranked = _pop_ranked(split, int(user), tie, id_order)
        assert rows.sort_values("rank")["item"].tolist() == ranked[:K], user
    if options.get("preset") != "trec_eval":  # its own user set: compared in-process only
        ndcg = got.outcomes["pop"].evaluation.summary[f"ndcg@{K}"]
        assert ndcg == pytest.approx(_pop_ndcg(split, tie, id_order, average), abs=1e-12)
    # the rule matters on this data (else the test could not fail)
    model_order = _pop_ndcg(split, "item_asc", "natural", False)
    assert _pop_ndcg(split, tie, id_order, average) != model_order


def test_tied_rows_and_the_rules_by_hand(spark: Any, tmp_path: Path) -> None:
    """A score file by hand, k=2. User 1: item 1 (5), items 2, 3, 10 (2), item 4 (1); the
    model's list is [1, 2], its 2nd score ties with 3 and 10. User 2: [7 (3), 8 (1)], no tie."""
    import metrics
    from harness.spark.io import _frame
    from harness.spark.pipeline import _model_ranking, _tied_rows, _top_spark

    rows = [(1, 1, 5.0), (1, 2, 2.0), (1, 3, 2.0), (1, 10, 2.0), (1, 4, 1.0)]
    rows += [(2, 7, 3.0), (2, 8, 1.0)]
    pd.DataFrame(rows, columns=["user", "item", "score"]).to_csv(tmp_path / "s.csv", index=False)
    train = _frame(spark, pd.DataFrame({"user": [1, 2], "item": [99, 99]}), "train")
    users = _frame(spark, pd.DataFrame({"user": [1, 2]}), "users")
    model = PrecomputedScores(str(tmp_path / "s.csv"))
    lists, _, ties = _model_ranking(spark, model, train, users, 2)
    tied = _tied_rows(spark, lists, 2, ties, str(tmp_path / "tied.parquet")).cache()
    got = tied.toPandas().sort_values(["user", "rank"])
    assert got["item"].tolist() == [1, 2, 3, 10, 7, 8]  # every item tied with the 2nd
    assert got["rank"].tolist() == [1, 2, 3, 4, 1, 2]  # the model's order
    for options, want in [
        ({"tie_break": "item_desc"}, [1, 10, 7, 8]),
        ({"id_order": "string"}, [1, 10, 7, 8]),  # "10" < "2" < "3"
        ({"tie_break": "item_desc", "id_order": "string"}, [1, 3, 7, 8]),
        ({"preset": "torchmetrics"}, [1, 2, 7, 8]),  # input order: the model's
    ]:
        top = _top_spark(tied, 2, metrics.resolve_options(**options)).toPandas()
        assert top.sort_values(["user", "rank"])["item"].tolist() == want, options


def test_score_file_ties_in_file_order_as_in_process(
    spark: Any, data: dict[str, Any], tmp_path: Path
) -> None:
    """``PrecomputedScores(ties="file")`` under ``tie_break=input_order`` (the ranx preset):
    Spark fits it on the driver (a file's parts have no fixed order in Spark) and gives the
    in-process lists and numbers, which differ from those of ties by item id on this data."""
    from harness.spark.pipeline import run_models_spark

    shuffled = tmp_path / "shuffled.csv"
    pd.read_csv(data["path"]).sample(frac=1.0, random_state=2).to_csv(shuffled, index=False)
    suite = MetricSuite(k=K, names=NAMES, options={"preset": "ranx"})
    dataset = Dataset("ties", data["frame"], "ties")

    def models(ties: str) -> dict[str, Any]:
        return {"file": PrecomputedScores(str(shuffled), ties=ties)}

    want = run_models(dataset, data["split"], models("file"), suite, tmp_path / "a", progress=False)
    by_item = run_models(
        dataset, data["split"], models("item"), suite, tmp_path / "b", progress=False
    )
    got = run_models_spark(
        spark,
        dataset,
        data["events"],
        data["sp"],
        data["split"],
        models("file"),
        suite,
        tmp_path / "spark",
        batch_users=16,
        driver_rows=10**6,
    )
    a, b = want.outcomes["file"], got.outcomes["file"]
    assert a.ok and b.ok, (a.error, b.error)
    assert b.info.get("engine") == "plugin"
    lists = [o.recommendations.astype({"rank": np.int64}) for o in (a, b)]
    pd.testing.assert_frame_equal(lists[1], lists[0], check_dtype=False)
    per_user = b.evaluation.per_user.reindex(a.evaluation.per_user.index)
    pd.testing.assert_frame_equal(per_user, a.evaluation.per_user, check_dtype=False, atol=TOL)
    other = by_item.outcomes["file"].recommendations.astype({"rank": np.int64})
    assert not lists[0][["user", "item"]].equals(other[["user", "item"]])
