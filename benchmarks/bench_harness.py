"""The default pipeline on 1M synthetic events (~50k users, 20k items): seconds and peak memory
per stage (load, split, fit, rank, metrics, logging).

    python benchmarks/bench_harness.py [--events 1000000 --users 50000 --items 20000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _measure import print_table, stage

import metrics
from harness import synthetic
from harness.datasets import Dataset
from harness.experiment import (
    ExperimentResult,
    MetricSuite,
    ModelOutcome,
    _recommendations,
    qrels_from_test,
)
from harness.models import ImplicitItemCosine, PopularityModel, RandomModel
from harness.record import record
from harness.split import make_split
from harness.tracking import Tracker


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--items", type=int, default=20_000)
    args = p.parse_args()
    rows: list[tuple[str, float, float]] = []
    suite = MetricSuite(
        k=10,
        names=(
            "ndcg@10",
            "map@10",
            "precision@10",
            "recall@10",
            "hit_rate@10",
            "mrr@10",
            "coverage@10",
            "novelty@10",
        ),
    )
    with stage(rows, "load (synthetic generate)"):
        frame = synthetic.generate(args.users, args.items, args.events, seed=0)
    with stage(rows, "split (global_time 0.8)"):
        split = make_split(frame, "global_time", cut=0.8)
    qrels = qrels_from_test(split.test, suite)
    users = np.sort(qrels["user"].unique())
    outcomes = {}
    for name, model in [
        ("random", RandomModel(seed=0)),
        ("popularity", PopularityModel()),
        ("item_knn", ImplicitItemCosine()),
    ]:
        with stage(rows, f"fit {name}"):
            model.fit(split.train)
        with stage(rows, f"rank {name} ({len(users):,} users, full catalog)"):
            ids, scores = model.recommend(users, suite.k)
        recs = _recommendations(users, ids, scores)
        with stage(rows, f"metrics {name} ({len(suite.names)} metrics)"):
            run = recs.assign(score=-recs["rank"])[["user", "item", "score"]]
            ev = metrics.evaluate(
                qrels, run, list(suite.names), train=split.train, catalog=frame["item"].unique()
            )
        outcomes[name] = ModelOutcome(name, ev, recs)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "results"
        result = ExperimentResult(
            Dataset("synthetic", frame, "synthetic"), split, suite, outcomes, folder
        )
        from harness.experiment import save

        with stage(rows, "save results locally (Parquet)"):
            save(result)
        with stage(rows, "logging (MLflow sqlite, new store)"):
            tracker = Tracker(f"sqlite:///{tmp}/mlflow.db", "bench", Path(tmp) / "artifacts")
            record(
                tracker,
                result,
                run_name="bench",
                config={"bench": True},
                split_key="x",
                model_params={},
            )
    print(
        f"{len(frame):,} events, {frame['user'].nunique():,} users, "
        f"{frame['item'].nunique():,} items; test users {len(users):,}\n"
    )
    print_table(("stage", "seconds", "peak MB"), [(n, f"{s:.2f}", f"{m:.0f}") for n, s, m in rows])
    print(f"\ntotal {sum(s for _, s, _ in rows):.1f} s")


if __name__ == "__main__":
    main()
