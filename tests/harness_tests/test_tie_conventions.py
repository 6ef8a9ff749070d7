"""The metric conventions' tie rules reach the lists the harness evaluates: over the full
catalog, ties at a list's k-th score are settled by ``tie_break`` (and averaged over their
whole group with ``ndcg_ties=average``), not by the models' ascending item order; with
candidates, the top-k table follows the same rule. References: plain Python from the
definitions (popularity scores = training users per item)."""

from __future__ import annotations

import math
import subprocess
import sys
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


def _run(tmp_path: Path, options: dict, candidates: pd.DataFrame | None = None):
    frame = _events()
    split = make_split(frame, "leave_one_out")
    suite = MetricSuite(k=K, names=(f"ndcg@{K}", f"recall@{K}"), options=options)
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


def test_spark_refuses_a_tie_rule_it_cannot_apply_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "experiment=quick",
            "engine=spark",
            "metrics.options.tie_break=item_desc",
            "tracking=none",
            "progress=false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "tie_break=item_desc" in proc.stderr and "engine=numpy" in proc.stderr
    assert not (tmp_path / "runs" / "results").exists() or not any(
        (tmp_path / "runs" / "results").rglob("topk.parquet")
    )
