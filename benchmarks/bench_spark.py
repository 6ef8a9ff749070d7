"""The Spark engine end to end on ``local[2]``: top-k, per-user metrics and the comparison of two
models on a scored-candidate table, with the driver's peak memory.

Data: ``users × 100`` scored candidates (bench_metrics.py's seeded generator, written chunk by
chunk to Parquet first, not timed): one table ``user, item, score_a, score_b`` (two model
versions of the same candidates; ``score_b`` leans towards the relevant items) and the truth
(1-10 relevant items per user). Each size runs in a fresh subprocess:

- spark: ``spark_session("local[2]")`` (JVM start not counted), then for each model
  ``topk_spark`` (k = 10) and ``evaluate_spark`` of the lists (per-user table written as Parquet,
  never collected), then ``compare_spark`` of the two per-user tables (every metric, the normal
  intervals from sums at this size). Memory per process kind: the driver's Python process
  (VmHWM: its peak over the whole run, and its growth over the import baseline), the JVM (a child
  process of the driver in local mode: executors are its threads; VmHWM), the Python workers the
  JVM forks for the pandas UDFs (sum, sampled every 0.5 s).
- numpy (``--numpy-max`` rows and below): the same in process (``pd.read_parquet``, a top-k by
  sort, ``metrics.evaluate``, ``harness.compare.compare_pair``), to check the numbers agree.

    python benchmarks/bench_spark.py                          # 10M and 100M scored rows
    python benchmarks/bench_spark.py --rows 1e6               # a quick check

Needs the `spark` extra (pip install -e ".[spark]") and Java 17.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import (  # noqa: E402
    Workers,
    descendants,
    is_java,
    print_table,
    proc_status,
    run_cell,
    spark_parser,
)
from bench_metrics import CANDIDATES, METRICS, _int_data  # noqa: E402

MB = 2**20
K = 10
CHUNK_USERS = 50_000


def write_data(folder: Path, n_users: int, seed: int = 0) -> None:
    """The scored candidates and the truth as Parquet, written ``CHUNK_USERS`` users at a time."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    writers: dict[str, pq.ParquetWriter] = {}
    try:
        for start in range(0, n_users, CHUNK_USERS):
            size = min(CHUNK_USERS, n_users - start)
            qrels, run = _int_data(size, seed + start // CHUNK_USERS)
            qrels["user"] += start
            run["user"] += start
            rel = run.merge(qrels, on=["user", "item"], how="left")["relevance"].notna()
            rng = np.random.default_rng([seed, start])
            noise = rng.random(len(run))
            run = run.rename(columns={"score": "score_a"})
            run["score_b"] = 0.8 * noise + 0.25 * rel.to_numpy() * rng.random(len(run))
            qrels["relevance"] = qrels["relevance"].astype(np.float64)
            for name, frame in (("run", run), ("qrels", qrels)):
                table = pa.Table.from_pandas(pd.DataFrame(frame), preserve_index=False)
                if name not in writers:
                    writers[name] = pq.ParquetWriter(folder / f"{name}.parquet", table.schema)
                writers[name].write_table(table)
    finally:
        for w in writers.values():
            w.close()


def _spec() -> object:
    from harness.compare import CompareSpec

    return CompareSpec(baseline="a", gsb_metric="ndcg@10", segments=False)


def cell_spark(folder: Path, driver_memory: str, partitions: int) -> dict[str, object]:
    from harness.spark import evaluate_spark, spark_session, topk_spark
    from harness.spark.compare import compare_spark

    base_rss = proc_status("self", "VmRSS")
    t0 = time.perf_counter()
    spark = spark_session(
        "local[2]",
        config={
            "spark.sql.shuffle.partitions": partitions,
            "spark.driver.memory": driver_memory,
        },
    )
    jvm_start = time.perf_counter() - t0
    jvm = next((p for p in descendants(os.getpid()) if is_java(p)), None)
    run = spark.read.parquet(str(folder / "run.parquet"))
    qrels = spark.read.parquet(str(folder / "qrels.parquet"))
    stages: dict[str, float] = {}
    summaries: dict[str, dict[str, float]] = {}
    tables = {}
    with Workers(jvm) as workers:
        for model in ("a", "b"):
            t0 = time.perf_counter()
            scored = run.select("user", "item", run[f"score_{model}"].alias("score"))
            top = topk_spark(scored, K).select("user", "item", "score")
            path = folder / f"per_user_{model}"
            ev = evaluate_spark(
                qrels, top, METRICS, spark=spark, buckets=2 * partitions,
                per_user_path=path, collect_per_user=False,
            )  # fmt: skip
            stages[f"top-k + metrics {model}"] = time.perf_counter() - t0
            summaries[model] = ev.summary
            tables[model] = spark.read.parquet(str(path))
        t0 = time.perf_counter()
        pair = compare_spark(
            tables["a"], tables["b"], METRICS, _spec(), baseline="a", candidate="b",
            summaries=(summaries["a"], summaries["b"]),
        )  # fmt: skip
        stages["comparison"] = time.perf_counter() - t0
    users = tables["a"].count()
    out = {
        "jvm_start": jvm_start,
        "stages": stages,
        "users": users,
        # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec
        "driver_peak_mb": proc_status("self", "VmHWM") / MB,
        "driver_growth_mb": (proc_status("self", "VmHWM") - base_rss) / MB,
        "jvm_peak_mb": proc_status(jvm, "VmHWM") / MB if jvm else float("nan"),
        "workers_peak_mb": workers.peak / MB,
        "summary": summaries["b"],
        "table": pair.table.drop(columns=["method"]).to_dict("list"),
        "methods": sorted(set(pair.table["method"].dropna())),
    }
    spark.stop()
    return out


def cell_numpy(folder: Path) -> dict[str, object]:
    import pandas as pd

    import metrics
    from harness.compare import compare_pair

    t0 = time.perf_counter()
    run = pd.read_parquet(folder / "run.parquet")
    qrels = pd.read_parquet(folder / "qrels.parquet")
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    evs = {}
    for model in ("a", "b"):
        score = run[f"score_{model}"].to_numpy()
        order = np.lexsort((run["item"].to_numpy(), -score, run["user"].to_numpy()))
        user = run["user"].to_numpy()[order]
        first = np.r_[0, np.flatnonzero(user[1:] != user[:-1]) + 1]
        rank = np.arange(len(user)) - np.repeat(first, np.diff(np.r_[first, len(user)]))
        keep = order[rank < K]
        top = pd.DataFrame(
            {"user": run["user"].to_numpy()[keep], "item": run["item"].to_numpy()[keep],
             "score": score[keep]}
        )  # fmt: skip
        evs[model] = metrics.evaluate(qrels, top, METRICS)
    metrics_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pair = compare_pair(
        "a", "b", (evs["a"].per_user, evs["b"].per_user), METRICS, _spec(),
        summaries=(evs["a"].summary, evs["b"].summary),
    )  # fmt: skip
    return {
        "read": read,
        "metrics": metrics_s,
        "comparison": time.perf_counter() - t0,
        "peak_mb": proc_status("self", "VmHWM") / MB,
        "summary": evs["b"].summary,
        "table": pair.table.drop(columns=["method"]).to_dict("list"),
    }


def measure(args: list[str], timeout: float) -> dict[str, object]:
    return run_cell(__file__, args, timeout)


def _largest_gap(x: dict[str, list], y: dict[str, list]) -> float:
    """Largest |difference| between two comparison tables' numeric cells (NaN where NaN)."""
    gap = 0.0
    for col, values in y.items():
        a, b = x.get(col), values
        if a is None:
            return float("inf")
        with contextlib.suppress(TypeError, ValueError):
            va, vb = np.asarray(a, np.float64), np.asarray(b, np.float64)
            both = np.isfinite(va) & np.isfinite(vb)
            if (np.isnan(va) != np.isnan(vb)).any():
                return float("inf")
            gap = max(gap, float(np.abs(va[both] - vb[both]).max(initial=0.0)))
    return gap


def main() -> None:
    p = spark_parser(__doc__)
    p.add_argument("--rows", type=float, nargs="+", default=[1e7, 1e8])
    p.add_argument("--numpy-max", type=float, default=1e7, help="largest size run in-process")
    p.add_argument("--timeout", type=float, default=7200)
    args = p.parse_args()
    if args.cell:
        kind, folder = args.cell[0], Path(args.cell[1])
        out = (
            cell_numpy(folder)
            if kind == "numpy"
            else cell_spark(folder, args.cell[2], int(args.cell[3]))
        )
        print(json.dumps(out, default=float))
        return
    rows = []
    for size in args.rows:
        n_users = int(size) // CANDIDATES
        label = f"{n_users * CANDIDATES / 1e6:g}M rows ({n_users:,} users)"
        with tempfile.TemporaryDirectory(prefix="bench_spark_") as tmp:
            t0 = time.perf_counter()
            write_data(Path(tmp), n_users)
            print(f"{label}: data written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            ref = measure(["numpy", tmp], args.timeout) if size <= args.numpy_max else None
            sp = measure(["spark", tmp, args.driver_memory, str(args.partitions)], args.timeout)
        if ref is not None and "error" not in ref:
            rows.append(
                (
                    label, "numpy (in process)",
                    f"{ref['metrics']:.1f}", f"{ref['comparison']:.2f}",
                    f"{ref['metrics'] + ref['comparison']:.1f}", f"{ref['peak_mb']:.0f}",
                    "-", "-", f"read {ref['read']:.1f} s (not counted)",
                )
            )  # fmt: skip
        elif ref is not None:
            rows.append((label, "numpy", ref["error"], "", "", "", "", "", ""))
        if "error" in sp:
            rows.append((label, "spark local[2]", sp["error"], "", "", "", "", "", ""))
            continue
        st = sp["stages"]
        topk_metrics = st["top-k + metrics a"] + st["top-k + metrics b"]
        note = f"JVM start {sp['jvm_start']:.0f} s (not counted); methods {sp['methods']}"
        if ref is not None and "error" not in ref:
            gap = max(
                _largest_gap(sp["table"], ref["table"]),
                max(abs(sp["summary"][m] - ref["summary"][m]) for m in METRICS),
            )
            note += f"; max |diff| vs numpy {gap:.1e}"
        rows.append(
            (
                label, "spark local[2]", f"{topk_metrics:.1f}", f"{st['comparison']:.1f}",
                f"{topk_metrics + st['comparison']:.1f}",
                f"{sp['driver_peak_mb']:.0f} (+{sp['driver_growth_mb']:.0f})",
                f"{sp['jvm_peak_mb']:.0f}", f"{sp['workers_peak_mb']:.0f}", note,
            )
        )  # fmt: skip
    print_table(
        (
            "data",
            "engine",
            "top-k + metrics s (2 models)",
            "comparison s",
            "total s",
            "driver py peak MB (growth)",
            "JVM peak MB",
            "py workers peak MB",
            "notes",
        ),
        rows,
    )
    print(
        f"\nMetrics: {', '.join(METRICS)} on each model's top-{K}; comparison of model b "
        f"against a on every metric (segment 'all'). Spark: {args.partitions} shuffle "
        f"partitions, {2 * args.partitions} user buckets, driver heap {args.driver_memory}."
    )


if __name__ == "__main__":
    main()
