"""``PrecomputedScores(ties="file")``: tied scores keep the file's row order, as
``tie_break="input_order"`` reads a run (ranx, Microsoft Recommenders); ``ties="item"`` (the
default) orders them by item id like every model.

Expected lists come from Python's stable ``sorted`` over the file's rows; expected NDCG by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import PrecomputedScores, padding_mask
from harness.split import make_split
from harness.synthetic import generate

K = 5


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory):
    frame = generate(n_users=120, n_items=80, n_events=2400, seed=3)
    split = make_split(frame, "global_time", cut=0.8)
    rng = np.random.default_rng(11)
    users = np.sort(split.test["user"].unique())
    items = np.sort(frame["item"].unique())
    rows = [  # 12 items per user, scores from {0, 1, 2}: many ties, rows in random order
        (u, int(i), float(rng.integers(0, 3)))
        for u in users
        for i in rng.choice(items, size=12, replace=False)
    ]
    table = pd.DataFrame(rows, columns=["user", "item", "score"])
    table = table.sample(frac=1.0, random_state=4).reset_index(drop=True)
    path = tmp_path_factory.mktemp("ties") / "scores.csv"
    table.to_csv(path, index=False)
    return frame, split, table, path


def _expected(table: pd.DataFrame, by_item: bool) -> dict[object, list[int]]:
    """Each user's top-K: score descending, ties by item id or kept in file order (stable)."""
    lists: dict[object, list[tuple[float, int]]] = {}
    for user, item, score in table.itertuples(index=False):
        lists.setdefault(user, []).append((score, item))
    key = (lambda r: (-r[0], r[1])) if by_item else (lambda r: -r[0])
    return {u: [item for _, item in sorted(rows, key=key)[:K]] for u, rows in lists.items()}


@pytest.mark.parametrize("ties", ["file", "item"])
def test_lists_order_ties_as_asked(setting, ties: str) -> None:
    _, split, table, path = setting
    model = PrecomputedScores(path, ties=ties).fit(split.train)
    users = np.array(sorted(table["user"].unique()))
    ids, scores = model.recommend(users, K)
    keep = ~padding_mask(scores)
    got = {u: [int(x) for x in ids[n][keep[n]]] for n, u in enumerate(users)}
    want = _expected(table, by_item=ties == "item")
    assert got == want
    if ties == "file":  # the data has ties, so the two orders must differ somewhere
        assert got != _expected(table, by_item=True)


def test_input_order_metrics_follow_the_file(setting, tmp_path: Path) -> None:
    frame, split, table, path = setting
    suite = MetricSuite(K, (f"ndcg@{K}",), options={"preset": "ranx"})
    result = run_models(
        Dataset("synthetic", frame, "synthetic"),
        split,
        {"file": PrecomputedScores(path, ties="file")},
        suite,
        tmp_path / "out",
        progress=False,
    )
    per_user = result.outcomes["file"].evaluation.per_user[f"ndcg@{K}"]
    lists = _expected(table, by_item=False)
    truth = split.test.groupby("user")["item"].agg(set)
    for user, value in per_user.items():
        relevant = truth[user]
        items = lists.get(user, [])
        dcg = sum(1 / math.log2(r + 2) for r, item in enumerate(items) if item in relevant)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(K, len(relevant))))
        assert value == pytest.approx(dcg / ideal, abs=1e-12), user


def test_an_unknown_tie_order_is_refused() -> None:
    with pytest.raises(ValueError, match="'ties' must be one of"):
        PrecomputedScores("x.csv", ties="rank")


def test_one_text_id_in_the_file_keeps_the_integer_tie_order(setting, tmp_path: Path) -> None:
    """A row whose item id is not an integer (``x``, for a user outside the test) makes the
    file's item column text; ties still go by ascending item *number* (9 before 10), as the
    truth's integer ids compare, not as text: the lists and NDCG equal the hand-computed ones
    of the all-integer file."""
    frame, split, table, _ = setting
    text = pd.concat(
        [
            table.astype({"item": str}),
            pd.DataFrame({"user": [10**7], "item": ["x"], "score": [1.0]}),
        ]
    )
    path = tmp_path / "text_scores.csv"
    text.to_csv(path, index=False)
    suite = MetricSuite(K, (f"ndcg@{K}",))
    result = run_models(
        Dataset("synthetic", frame, "synthetic"),
        split,
        {"file": PrecomputedScores(path)},
        suite,
        tmp_path / "out",
        progress=False,
    )
    outcome = result.outcomes["file"]
    assert outcome.ok, outcome.error
    lists = _expected(table, by_item=True)  # ties by the integer id
    got = outcome.recommendations.groupby("user")["item"].agg(lambda s: [int(x) for x in s])
    tested = [u for u in got.index if u in set(split.test["user"])]
    assert tested and all(got[u] == lists[u] for u in tested)
    as_text = table.astype({"item": str})  # ties by the text ("10" before "9"): other lists
    text_lists = _expected(as_text, by_item=True)
    assert any([str(i) for i in lists[u]] != text_lists[u] for u in tested)
    truth = split.test.groupby("user")["item"].agg(set)
    for user, value in outcome.evaluation.per_user[f"ndcg@{K}"].items():
        relevant, items = truth[user], lists.get(user, [])
        dcg = sum(1 / math.log2(r + 2) for r, item in enumerate(items) if item in relevant)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(K, len(relevant))))
        assert value == pytest.approx(dcg / ideal, abs=1e-12), user
