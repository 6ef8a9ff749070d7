"""Time and peak memory of ONE candidate's whole default comparison against the baseline.

"Whole default comparison" is what `harness.compare.compare_models` does for one candidate:
segments from the training events (`segment_data`), then `compare_pair` over every metric of the
default suite on every segment (all, cold, heavy users; head/mid/tail item buckets, which also
re-evaluate both models' lists against each bucket's test items). Data: seeded synthetic users
(training activity long-tailed, 1-3 test items each) and two top-10 lists per user with
different hit rates. The per-user tables come from `metrics.evaluate` and are not timed.

- `before`: the plain path, as the harness did it before: `metrics.stats.compare` once per
  metric and segment with the paired bootstrap and the sampled sign-flip test
  (`method="bootstrap"`), each drawing its own resamples.
  Each item bucket evaluates every list of both models. `before-sampled` (for 1M users, where
  the plain path takes many minutes): the same, but only the first metric of each segment is
  run; the others, which draw the same resamples for the same number of users, are counted at
  its CPU time (an estimate, marked as such in the table).
- `after`: `compare_pair` as it is now (`metrics.stats.compare_many`, `method="auto"`): resamples
  drawn once per segment below `NORMAL_MIN_N` users, normal / delta-method intervals (from the
  sums of `metrics.stats.compare_from_moments`) and the normal sign-flip p-value at and above it;
  the item buckets judge each model's lists once and mask the judged relevance per bucket
  (`harness.compare.buckets`). A second table splits its time into stages: the segments from
  the training events, the rows (statistics) of each segment, the item-bucket tables, the rest.

Each (size, path) runs in a fresh subprocess; peak memory is the growth of peak RSS over the
data already in memory. Wall and CPU seconds are both printed, with the 1-minute load average
before and after: on a machine shared with other work the wall time includes waiting for a core.

    python benchmarks/bench_compare.py                       # 100k and 1M users, both paths
    python benchmarks/bench_compare.py --sizes 100000 --paths after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
N_ITEMS = 50_000
K = 10
SUITE = [
    "ndcg@10",
    "map@10",
    "precision@10",
    "recall@10",
    "hit_rate@10",
    "mrr@10",
    "coverage@10",
    "novelty@10",
]  # fmt: skip  (configs/metrics/default.yaml)


def make_data(n_users: int, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Seeded train events, test qrels and two top-10 lists (baseline, candidate) per user."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, N_ITEMS + 1) ** 0.9
    popularity /= popularity.sum()
    activity = np.minimum(1 + rng.geometric(0.12, n_users), 200)  # 1-200 events, mean ~9
    users = np.repeat(np.arange(n_users), activity)
    train = pd.DataFrame({"user": users, "item": rng.choice(N_ITEMS, users.size, p=popularity)})
    n_test = rng.integers(1, 4, n_users)
    test_users = np.repeat(np.arange(n_users), n_test)
    qrels = pd.DataFrame(
        {"user": test_users, "item": rng.choice(N_ITEMS, test_users.size, p=popularity)}
    ).drop_duplicates(["user", "item"])
    qrels = qrels.assign(relevance=1.0).sort_values(["user", "item"], ignore_index=True)
    first_test = qrels.groupby("user")["item"].first().to_numpy()
    lists = []
    for hit_share in (0.15, 0.20):  # baseline, candidate: share of users with a test item listed
        items = rng.choice(N_ITEMS, (n_users, K), p=popularity)
        hit = rng.random(n_users) < hit_share
        items[hit, rng.integers(0, K, int(hit.sum()))] = first_test[hit]
        lists.append(
            pd.DataFrame(
                {
                    "user": np.repeat(np.arange(n_users), K),
                    "item": items.ravel(),
                    "rank": np.tile(np.arange(1, K + 1), n_users),
                }
            ).drop_duplicates(["user", "item"], ignore_index=True)
        )
    return {"train": train, "qrels": qrels, "base": lists[0], "cand": lists[1]}


def bucket_per_user_before(
    qrels: pd.DataFrame, recs: pd.DataFrame, names: list[str], bucket_of: pd.Series, bucket: str
) -> pd.DataFrame:
    """The harness's item-bucket evaluation before: one model, one bucket, all of its lists."""
    import metrics

    item_bucket = bucket_of.reindex(qrels["item"]).fillna("tail").to_numpy()
    truth = qrels[item_bucket == bucket]
    run = pd.DataFrame({"user": recs["user"], "item": recs["item"], "score": -recs["rank"]})
    return metrics.evaluate(truth, run.astype({"user": truth["user"].dtype}), names).per_user


def _timed(stages: dict[str, list[float]], name: str, fn: Any) -> Any:
    """``fn`` wrapped to add its wall and CPU seconds to ``stages[name(args)]``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        key = name if name != "rows" else f"rows {args[3]}"  # _rows(a, b, names, segment, ...)
        spent = stages.setdefault(key, [0.0, 0.0])
        spent[0] += time.perf_counter() - w
        spent[1] += time.process_time() - c
        return out

    return run


def measure(n_users: int, path: str) -> dict[str, Any]:
    """One comparison of the candidate with the baseline on ``n_users`` users, timed."""
    from _measure import reset_peak, status

    import harness.compare as hc
    import metrics
    from harness.compare import CompareSpec, compare_pair, segment_data
    from metrics import stats

    data = make_data(n_users)
    evals = [
        metrics.evaluate(
            data["qrels"],
            data[m].assign(score=-data[m]["rank"]),
            SUITE,
            train=data["train"],
            catalog=N_ITEMS,
        )
        for m in ("base", "cand")
    ]
    spec = CompareSpec(baseline="base")
    stages: dict[str, list[float]] = {}
    if path == "after":  # the stages of the real compare_pair, timed where it calls them
        hc._rows = _timed(stages, "rows", hc._rows)  # type: ignore[attr-defined]
        hc._bucket_tables = _timed(stages, "item-bucket tables", hc._bucket_tables)  # type: ignore[attr-defined]
    load = os.getloadavg()[0]
    base_rss = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    users = np.sort(data["qrels"]["user"].unique())
    segments = segment_data(data["train"], users, spec)
    stages["segments (segment_data)"] = [time.perf_counter() - t0, time.process_time() - c0]
    per_user = (evals[0].per_user, evals[1].per_user)
    recs = (data["base"], data["cand"])
    if path == "after":
        pair = compare_pair(
            "base", "cand", per_user, SUITE, spec,
            summaries=(evals[0].summary, evals[1].summary), segments=segments,
            qrels=data["qrels"], recs=recs,
        )  # fmt: skip
        rows, methods = len(pair.table), pair.table.get("method", pd.Series()).value_counts()
        sizes = pair.table.groupby("segment")["n"].max().to_dict()
    else:  # the plain path: one bootstrap + sign-flip test per metric and segment
        extra = 0.0
        a, b = per_user
        tables = [("all", a, b)]
        tables += [(s, a[a.index.isin(u)], b[b.index.isin(u)]) for s, u in segments.users.items()]
        ranked = [n for n in SUITE if metrics.parse(n).definition.kind == "ranking"]
        for bucket in ("head", "mid", "tail"):
            pa, pb = (
                bucket_per_user_before(data["qrels"], r, ranked, segments.item_bucket, bucket)
                for r in recs
            )
            tables.append((f"items:{bucket}", pa, pb.reindex(pa.index)))
        rows, sizes, extra = 0, {}, 0.0
        for seg, ta, tb in tables:
            timed_one = None
            for name in SUITE:
                if name not in ta or ta[name].notna().sum() < 2:
                    continue
                ok = ta[name].notna() & tb[name].notna()
                hib = metrics.parse(name).definition.higher_is_better
                rows += 1
                sizes[seg] = int(ok.sum())
                if path == "before-sampled" and timed_one is not None:
                    extra += timed_one  # same n, same resampling work: the first one's time
                    continue
                c1 = time.process_time()
                stats.compare(
                    ta[name][ok], tb[name][ok], higher_is_better=hib,
                    n_resamples=spec.n_resamples, seed=spec.seed, method="bootstrap",
                )  # fmt: skip
                timed_one = time.process_time() - c1
        methods = pd.Series({"bootstrap": rows})
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if stages:
        stages["rest (p-adjust, differences, table)"] = [
            seconds - sum(w for w, _ in stages.values()),
            cpu - sum(c for _, c in stages.values()),
        ]
    if path != "after":
        seconds, cpu = seconds + extra, cpu + extra  # before-sampled: the metrics not run
    return {
        "users": n_users,
        "path": path,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_mb": (status("VmHWM") - base_rss) / 2**20,
        "rows": rows,
        "methods": {str(k): int(v) for k, v in methods.items()},
        "segment_users": {str(k): int(v) for k, v in sizes.items() if v == v},
        "stages": stages,
        "load": [load, os.getloadavg()[0]],
    }


def main() -> None:
    """Run every (size, path) cell in its own process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--paths", nargs="+", default=["before", "after"])
    parser.add_argument("--cell", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(measure(int(args.cell[0]), args.cell[1])))
        return
    print("| users | path | wall s | CPU s | load avg | peak MB | rows | intervals |")
    print("|---:|---|---:|---:|---|---:|---:|---|")
    breakdown = []
    for n in args.sizes:
        for path in args.paths:
            out = subprocess.run(
                [sys.executable, __file__, "--cell", str(n), path],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            how = ", ".join(f"{k} {v}" for k, v in r["methods"].items())
            print(
                f"| {n:,} | {path} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | "
                f"{r['load'][0]:.1f} → {r['load'][1]:.1f} | {r['peak_mb']:.0f} | {r['rows']} | "
                f"{how} |",
                flush=True,
            )
            print(f"<!-- segment users: {r['segment_users']} -->", flush=True)
            breakdown += [(n, stage, w, c) for stage, (w, c) in r["stages"].items()]
    if breakdown:
        print("\n| users | stage (after) | wall s | CPU s |\n|---:|---|---:|---:|")
        for n, stage, w, c in breakdown:
            print(f"| {n:,} | {stage} | {w:.2f} | {c:.2f} |")


if __name__ == "__main__":
    main()
