"""A score file with gaps, through the whole in-process evaluation: users it has no list for under
``user_set=intersection`` (the comparison pairs the users both models were evaluated on), and
items the dataset does not hold (``coverage@k`` / ``gini@k`` count them in the catalog).

Expected values are computed here from the lists and the test set, by plain loops."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import metrics
from harness.compare import CompareSpec, compare_models
from harness.compare.buckets import bucket_tables, bucket_tables_by_engine
from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.gate import GateSpec, decide
from harness.models import ImplicitItemCosine, PopularityModel, PrecomputedScores, padding_mask
from harness.split import Split, make_split
from harness.synthetic import generate

K = 10


@pytest.fixture(scope="module")
def data():
    frame = generate(n_users=300, n_items=150, n_events=6000, seed=5)
    return frame, make_split(frame, "global_time", cut=0.8)


def _lists(model, split, users: np.ndarray) -> dict[object, list[object]]:
    """Each user's top-K list of ``model`` fitted on the training part (padding removed)."""
    ids, scores = model.fit(split.train).recommend(users, K)
    keep = ~padding_mask(scores)
    return {u: list(ids[i][keep[i]]) for i, u in enumerate(users)}


def _export(lists: dict[object, list[object]], path: Path) -> None:
    """The lists as a score file: score K - rank, so the file's order is the list's order."""
    rows = [(u, item, float(K - r)) for u, items in lists.items() for r, item in enumerate(items)]
    pd.DataFrame(rows, columns=["user", "item", "score"]).to_csv(path, index=False)


def _ndcg(items: list[object], truth: set[object]) -> float:
    """Binary-gain NDCG@K of one list, by hand."""
    dcg = sum(1 / math.log2(r + 2) for r, item in enumerate(items[:K]) if item in truth)
    ideal = sum(1 / math.log2(r + 2) for r in range(min(K, len(truth))))
    return dcg / ideal


def test_intersection_pairs_the_users_both_models_were_evaluated_on(data, tmp_path: Path) -> None:
    frame, split = data
    users = np.sort(split.test["user"].unique())
    knn = _lists(ImplicitItemCosine(), split, users)
    pop = _lists(PopularityModel(), split, users)
    left_out = set(users[::7].tolist())  # the file has no list for every 7th test user
    _export({u: items for u, items in knn.items() if u not in left_out}, tmp_path / "s.csv")
    suite = MetricSuite(k=K, names=("ndcg@10", "recall@10"), options={"user_set": "intersection"})
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"popularity": PopularityModel(), "file": PrecomputedScores(str(tmp_path / "s.csv"))},
        suite,
        tmp_path / "out",
        progress=False,
    )
    assert all(o.ok for o in result.outcomes.values())
    pairs, notes = compare_models(result, CompareSpec(n_resamples=200, seed=3))
    assert not notes and len(pairs) == 1
    pair = pairs[0]

    truth = split.test.groupby("user")["item"].agg(set)
    both = [u for u in users if u not in left_out]
    row = pair.row("ndcg@10")
    assert row["n"] == len(both)
    assert row["mean_a"] == pytest.approx(np.mean([_ndcg(pop[u], truth[u]) for u in both]))
    assert row["mean_b"] == pytest.approx(np.mean([_ndcg(knn[u], truth[u]) for u in both]))
    assert len(pair.differences["ndcg@10"]) == len(both)
    gap = (
        f"compared on the {len(both)} users both models were evaluated on, leaving out "
        f"{len(left_out)} of the {len(users)} users of 'popularity' and 0 of the {len(both)} "
        "users of 'file' (user_set=intersection evaluates a model only on the test users it "
        "gave a list)"
    )
    assert gap in pair.notes
    # segments pair the same users: no segment holds a user of one table only
    for seg in ("cold", "heavy", "items:head", "items:mid", "items:tail"):
        seg_row = pair.row("ndcg@10", seg)
        assert seg_row is None or seg_row["n"] <= len(both)
    decision = decide(pair, GateSpec(primary={"metric": "ndcg@10", "min_lift": 0.0}))
    assert decision.decision in ("GO", "NO_GO", "INCONCLUSIVE")


@pytest.mark.slow
def test_trec_eval_preset_run_and_recompared_runs_pair_the_common_users(tmp_path: Path) -> None:
    """The audit's command: a documented preset (user_set=intersection) and a score file
    without lists for some users. The run completes (exit 0, COMPLETE, a report) and says how
    many users the comparison left out; ``python -m harness.compare`` on its two logged model
    runs pairs the same users."""
    from mlflow import MlflowClient
    from support import HarnessCli

    frame = generate(n_users=200, n_items=100, n_events=3000, seed=6)
    split = make_split(frame, "global_time", cut=0.8)
    users = np.sort(split.test["user"].unique())
    knn = _lists(ImplicitItemCosine(), split, users)
    left_out = set(users[::5].tolist())
    frame[["user", "item", "timestamp"]].to_csv(tmp_path / "events.csv", index=False)
    _export({u: items for u, items in knn.items() if u not in left_out}, tmp_path / "s.csv")
    cli = HarnessCli()
    args = (
        "dataset=file", "dataset.path=events.csv", "dataset.columns.rating=null",
        "split=global_time", "split.cut=0.8", "'model=[popularity,precomputed]'",
        "model.precomputed.path=s.csv", "'metrics.names=[ndcg@10,recall@10]'",
        "metrics.options.preset=trec_eval", "'gate.guardrails=[]'", "progress=false",
    )  # fmt: skip
    done = cli.run(tmp_path, *(a.strip("'") for a in args))
    assert done.returncode == 0, done.stderr[-3000:]
    note = (
        f"note: compared on the {len(users) - len(left_out)} users both models were evaluated "
        f"on, leaving out {len(left_out)} of the {len(users)} users of 'popularity' and 0 of "
        f"the {len(users) - len(left_out)} users of 'precomputed'"
    )
    assert note in done.stdout, done.stdout + done.stderr[-3000:]
    folder = next((tmp_path / "runs" / "results").rglob("summary.csv")).parent
    assert (folder / "COMPLETE").exists() and (folder / "report.html").exists()

    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("offline-eval").experiment_id])
    child = {r.data.tags["model"]: r.info.run_id for r in runs if "model" in r.data.tags}
    again = cli.run(
        tmp_path, child["popularity"], child["precomputed"], "gate.guardrails=[]",
        module="harness.compare",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert note.removeprefix("note: ") in again.stdout


# ------------------------------------------------------------ items outside the dataset (a)

OUTSIDE_TEXT, OUTSIDE_INT = "SKU 999", 1_000_000  # in no part of the split, nor the dataset


def outside_file(split: Split, path: Path, text: bool) -> pd.DataFrame:
    """A score file for every test user: an item outside the data on top for every other user
    (``SKU 999`` with ``text``, which makes the file's ids text, else the integer 1,000,000),
    then the user's test items (hits), then items 0, 1, 2… (no tie within a user). Returns the
    expected top-K lists (user, item as the file writes it)."""
    rows = []
    for n, (user, items) in enumerate(split.test.groupby("user")["item"].agg(set).items()):
        row = [(OUTSIDE_TEXT if text else OUTSIDE_INT, 100.0)] if n % 2 == 0 else []
        row += [(i, 50.0 - j) for j, i in enumerate(sorted(items))]
        row += [(i, 10.0 - 0.01 * i) for i in range(20) if i not in items]
        rows += [(user, item, score) for item, score in row]
    table = pd.DataFrame(rows, columns=["user", "item", "score"])
    table.to_csv(path, index=False)
    ranked = table.sort_values(["user", "score"], ascending=[True, False])
    return ranked.groupby("user").head(K)


def expected_outside(frame: pd.DataFrame, split: Split, top: pd.DataFrame) -> dict[str, float]:
    """precision@K and coverage@K of the lists ``top`` by hand: an item outside the data is a
    miss; coverage's catalog is the dataset's items joined by the listed items in no part of
    the split (max of the two counts: README)."""
    truth = split.test.groupby("user")["item"].agg(lambda s: {str(i) for i in s})
    hits = [sum(str(i) in truth[u] for i in g["item"]) for u, g in top.groupby("user")]
    parts = {str(i) for p in (split.train, split.test) for i in p["item"]}
    listed = {str(i) for i in top["item"]}
    catalog = max(frame["item"].nunique(), len(parts | listed))
    return {"precision@10": float(np.mean(hits)) / K, "coverage@10": len(listed) / catalog}


SUITE_A = MetricSuite(k=K, names=("precision@10", "coverage@10", "ndcg@10"))


@pytest.mark.parametrize("text", [True, False], ids=["text-file-ids", "int-file-ids"])
def test_items_outside_the_data_are_misses_and_join_the_catalog(
    data, tmp_path: Path, text: bool
) -> None:
    frame, split = data
    top = outside_file(split, tmp_path / "s.csv", text)
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"popularity": PopularityModel(), "file": PrecomputedScores(str(tmp_path / "s.csv"))},
        SUITE_A,
        tmp_path / "out",
        progress=False,
    )
    outcome = result.outcomes["file"]
    assert outcome.ok, outcome.error
    want = expected_outside(frame, split, top)
    for name, value in want.items():
        assert outcome.evaluation.summary[name] == pytest.approx(value, abs=1e-12), name
    assert outcome.info["items_outside_data"] == 1 and outcome.info["stats.items_unknown"] == 1
    assert any(
        n.startswith("1 recommended item(s) are in no part of the split") for n in outcome.notes
    )
    # the model's lists are kept as the file has them, the outside item included
    assert set(map(str, outcome.recommendations["item"])) == set(map(str, top["item"]))
    pairs, notes = compare_models(result, CompareSpec(n_resamples=50))  # item buckets too
    assert not notes and pairs[0].row("precision@10", "items:head") is not None


def test_item_buckets_judge_text_ids_against_integer_ones(data) -> None:
    """A score file's text ids (one not an integer: an item outside the data) against integer
    truth ids: the item-bucket tables are those of the same lists with integer ids (the
    outside item a new integer), from the engine path (one ``metrics.evaluate`` per bucket)."""
    _, split = data
    qrels = split.test[["user", "item"]].drop_duplicates().assign(relevance=1.0)
    users = np.sort(qrels["user"].unique())
    lists = _lists(PopularityModel(), split, users)
    rows = [(u, r + 1, i) for u, items in lists.items() for r, i in enumerate(items)]
    as_int = pd.DataFrame(rows, columns=["user", "rank", "item"])
    as_int.loc[as_int["rank"] == 2, "item"] = OUTSIDE_INT  # rank 2: an item outside the data
    as_text = as_int.assign(item=as_int["item"].astype(str).replace(str(OUTSIDE_INT), OUTSIDE_TEXT))
    as_text["item"] = as_text["item"].astype(object)
    counts = split.train["item"].value_counts()
    bucket_of = pd.Series(np.where(counts > counts.median(), "head", "mid"), index=counts.index)
    names = ["precision@10", "ndcg@10", "recall@10"]
    want = bucket_tables_by_engine(qrels, (as_int, as_int), names, bucket_of, {})
    got = bucket_tables(qrels, (as_int, as_text), names, bucket_of, {}, metrics.evaluate)
    assert want.keys() == got.keys()
    for bucket, (_, b) in want.items():
        pd.testing.assert_frame_equal(got[bucket][1], b, check_exact=False, rtol=1e-12)
