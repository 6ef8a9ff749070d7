"""The metric conventions' tie rules reach the lists the harness evaluates: over the full
catalog, ties at a list's k-th score are settled by ``tie_break`` (and averaged over their
whole group with ``ndcg_ties=average``), not by the models' ascending item order; with
candidates, the top-k table follows the same rule. References: plain Python from the
definitions (popularity scores = training users per item)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import PopularityModel
from harness.split import make_split

K = 3


def _events() -> pd.DataFrame:
    """Few items with equal popularity, so each user's 3rd score ties with items past it."""
    rng = np.random.default_rng(4)
    rows = [(u, i) for u in range(40) for i in rng.choice(12, size=4, replace=False)]
    frame = pd.DataFrame(rows, columns=["user", "item"])
    return frame.assign(timestamp=np.arange(len(frame)))


def _naive(split, tie: str, average: bool) -> dict[str, float]:
    """Mean ndcg@K and recall@K: unseen items ranked by popularity, ties by item id in the
    ``tie`` direction; with ``average`` each ranked item's gain is its tie group's mean gain
    over the whole ranking."""
    train, test = split.train, split.test
    pop = train.groupby("item")["user"].nunique()
    ndcg, recall = [], []
    for user, rows in test.groupby("user"):
        relevant = set(rows["item"])
        seen = set(train.loc[train["user"] == user, "item"])
        items = [i for i in pop.index if i not in seen]
        sign = 1 if tie == "item_asc" else -1
        ranked = sorted(items, key=lambda i: (-pop[i], sign * i))
        gains = [1.0 if i in relevant else 0.0 for i in ranked]
        if average:
            groups: dict[float, list[float]] = {}
            for i, g in zip(ranked, gains, strict=True):
                groups.setdefault(pop[i], []).append(g)
            gains = [float(np.mean(groups[pop[i]])) for i in ranked]
        dcg = sum(g / math.log2(r + 2) for r, g in enumerate(gains[:K]))
        ideal = sum(1 / math.log2(r + 2) for r in range(min(K, len(relevant))))
        ndcg.append(dcg / ideal)
        recall.append(len(relevant & set(ranked[:K])) / len(relevant))
    return {f"ndcg@{K}": float(np.mean(ndcg)), f"recall@{K}": float(np.mean(recall))}


def _run(tmp_path: Path, options: dict, candidates: pd.DataFrame | None = None, extra: tuple = ()):
    frame = _events()
    split = make_split(frame, "leave_one_out")
    suite = MetricSuite(k=K, names=(f"ndcg@{K}", f"recall@{K}", *extra), options=options)
    result = run_models(
        Dataset("t", frame, "t"),
        split,
        {"pop": PopularityModel()},
        suite,
        tmp_path,
        progress=False,
        candidates=candidates,
    )
    outcome = result.outcomes["pop"]
    assert outcome.ok, outcome.error
    return split, outcome


@pytest.mark.parametrize(
    ("options", "tie", "average"),
    [
        ({}, "item_asc", False),
        ({"tie_break": "item_desc"}, "item_desc", False),
        ({"preset": "trec_eval"}, "item_desc", False),
        ({"ndcg_ties": "average"}, "item_asc", True),
    ],
)
def test_full_catalog_ties_follow_the_conventions(
    tmp_path: Path, options: dict, tie: str, average: bool
) -> None:
    split, outcome = _run(tmp_path, options)
    want = _naive(split, tie, average)
    if options.get("preset") == "trec_eval":  # its own user set and empty-user rule: ndcg only
        want = {f"ndcg@{K}": want[f"ndcg@{K}"]}
    for name, value in want.items():
        assert outcome.evaluation.summary[name] == pytest.approx(value, abs=1e-12), name
    pop = split.train.groupby("item")["user"].nunique()
    recs = outcome.recommendations
    for user, rows in recs.groupby("user"):  # the saved lists are the lists evaluated
        seen = set(split.train.loc[split.train["user"] == user, "item"])
        sign = 1 if tie == "item_asc" else -1
        ranked = sorted((i for i in pop.index if i not in seen), key=lambda i: (-pop[i], sign * i))
        assert rows.sort_values("rank")["item"].tolist() == ranked[:K]
    assert _naive(split, "item_asc", False) != _naive(split, "item_desc", False)  # ties matter


def test_average_ties_with_catalog_auc(tmp_path: Path) -> None:
    """``ndcg_ties=average`` (the torchmetrics preset) with AUC over the catalog: the cutoff
    metrics average whole tie groups and AUC is the one without the option (it failed with
    KeyError 'auc' before: the averaged metrics were ordered with AUC not yet joined)."""
    split, outcome = _run(tmp_path / "a", {"ndcg_ties": "average"}, extra=("auc",))
    _, plain = _run(tmp_path / "b", {}, extra=("auc",))
    got = outcome.evaluation.summary
    assert got[f"ndcg@{K}"] == pytest.approx(
        _naive(split, "item_asc", True)[f"ndcg@{K}"], abs=1e-12
    )
    assert got["auc"] == plain.evaluation.summary["auc"]
    assert list(got) == [f"ndcg@{K}", f"recall@{K}", "auc"]


def test_sampled_candidates_top_k_table_follows_tie_break(tmp_path: Path) -> None:
    frame = _events()
    split = make_split(frame, "leave_one_out")
    users = np.sort(split.test["user"].unique())
    candidates = pd.DataFrame([(u, i) for u in users for i in range(12)], columns=["user", "item"])
    _, outcome = _run(tmp_path, {"tie_break": "item_desc"}, candidates)
    pop = split.train.groupby("item")["user"].nunique()
    for _, rows in outcome.recommendations.groupby("user"):
        ranked = sorted(range(12), key=lambda i: (-pop.get(i, 0), -i))
        assert rows.sort_values("rank")["item"].tolist() == ranked[:K]


def test_a_score_files_counts_describe_the_lists_not_the_tie_fetches(tmp_path: Path) -> None:
    """Fetching tied items asks the model again for a few users; the counts logged as
    ``model.stats.*`` (users requested, users without a list) stay those of every test user."""
    from harness.models import PrecomputedScores

    frame = _events()
    split = make_split(frame, "leave_one_out")
    test_users = np.sort(split.test["user"].unique())
    listed = test_users[:-3]  # the last 3 test users have no list in the file
    scores = pd.DataFrame(
        [(u, i, 1.0) for u in listed for i in range(12)], columns=["user", "item", "score"]
    )
    scores.to_csv(tmp_path / "s.csv", index=False)
    suite = MetricSuite(k=K, names=(f"ndcg@{K}",), options={"tie_break": "item_desc"})
    result = run_models(
        Dataset("t", frame, "t"),
        split,
        {"file": PrecomputedScores(tmp_path / "s.csv")},
        suite,
        tmp_path / "run",
        progress=False,
    )
    outcome = result.outcomes["file"]
    assert outcome.ok, outcome.error
    assert outcome.info["stats.users_requested"] == len(test_users)
    assert outcome.info["stats.users_without_list"] == 3
