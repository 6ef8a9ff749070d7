"""AUC over the whole catalog (``auc_scope=catalog``) on Spark at 1M and 10M events: time, the
driver's peak memory and the rows that reach the driver, against the in-process engine.

Data: ``harness.synthetic.generate`` with ``events / 20`` users and ``events / 200`` items (1M
events: 50k users x 5k items; 10M: 500k x 50k), split leave-one-out (``make_split``), written
as Parquet (train and test: user, item) before anything is timed. The relevant pairs are the
test pairs; the users are the test users. Each cell runs in a fresh subprocess:

- ``spark-pop``: ``spark_session("local[2]")`` (JVM start not counted), then
  ``popularity_auc_counts(..., pooled=True)`` (the table is materialized inside) and the sums of
  wins, n_pos, n_neg; the per-user table is then written as Parquet for the check (timed apart).
  Memory per process kind as in bench_spark.py: the driver's Python process (its peak, and its
  growth over the RSS before the session), the JVM (VmHWM), the Python workers (sampled sum).
  Rows to the driver: every ``toPandas``/``collect`` of the run, counted by wrapping them.
- ``numpy-pop``: ``PopularityModel().fit`` and ``recommend_with_auc(users, 10, ..., pooled=True)``
  (the in-process engine's path), with the process's peak.
- ``spark-plugin`` / ``numpy-plugin`` (``--plugin-max`` events and below): a plug-in model
  (``item_knn``: ``ImplicitItemCosine``, or ``popularity`` fitted as a plug-in) fitted on the
  driver from the collected training rows (``fit_plugin``) and scored per group of users
  (``plugin_auc_counts(..., pooled=True)``); the relevant candidates' scores collected and
  broadcast for ``global_auc`` are reported in rows and MB. The in-process peer fits the same
  model on the same rows. ``--fit-sample F`` fits the Spark plug-in on a seeded ``F`` sample of
  the training rows (``fit_plugin(..., sample=F, seed=0)``, as ``engine.fit_sample``): the Spark
  cell then runs first and, after its peaks are read, writes the rows it sampled (the same
  seeded ``DataFrame.sample``, recomputed) as Parquet; the in-process peer fits on those rows.

Checks: the per-user wins, n_pos and n_neg of Spark and in-process are equal user by user
(exactly), and so are the pooled wins. Where the in-process cell does not finish within
``--numpy-timeout`` on every user, both engines are also run on the first ``--subset`` test
users (sorted ids; a plug-in: the model Spark fitted, the in-process one fitted on the same
rows) and compared there; the full in-process time is then not reported. With a fit sample,
the rows written are first checked to be as many as those the fit collected.

    python benchmarks/bench_spark_auc.py                     # 1M and 10M events
    python benchmarks/bench_spark_auc.py --events 1000000 --plugin item_knn popularity
    python benchmarks/bench_spark_auc.py --events 3000000 --plugin-max 3000000 --fit-sample 0.1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

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
    unit_fraction,
)

MB = 2**20
K = 10
FIT_SEED = 0  # fit_plugin's seed for --fit-sample (engine.fit_sample uses the run's seed)


def write_split(folder: Path, events: int) -> dict[str, int]:
    """The leave-one-out split of ``events`` synthetic events as train/test Parquet (kept)."""
    from harness import synthetic
    from harness.split import make_split

    info = folder / f"split-{events}.json"
    if info.exists():
        return json.loads(info.read_text())
    frame = synthetic.generate(events // 20, events // 200, events, seed=0)
    split = make_split(frame, "leave_one_out")
    for name, part in (("train", split.train), ("test", split.test)):
        part[["user", "item"]].to_parquet(folder / f"{name}-{events}.parquet", index=False)
    out = {
        "train": len(split.train),
        "test": len(split.test),
        "users": int(split.test["user"].nunique()),
        "items": int(split.train["item"].nunique()),
    }
    info.write_text(json.dumps(out))
    return out


class _DriverRows:
    """Counts the rows every ``toPandas``/``collect`` brings to the driver (wraps the methods)."""

    def __init__(self) -> None:
        from pyspark.sql.classic.dataframe import DataFrame

        self.calls: list[tuple[str, int]] = []
        for name in ("toPandas", "collect"):
            original = getattr(DataFrame, name)

            def wrapped(df: Any, *a: Any, _f: Any = original, _n: str = name, **kw: Any) -> Any:
                out = _f(df, *a, **kw)
                self.calls.append((_n, len(out)))
                return out

            setattr(DataFrame, name, wrapped)


def _session(driver_memory: str, partitions: int) -> tuple[Any, int | None, float]:
    from harness.spark import spark_session

    t0 = time.perf_counter()
    spark = spark_session(
        "local[2]",
        config={
            "spark.sql.shuffle.partitions": partitions,
            "spark.driver.memory": driver_memory,
        },
    )
    jvm = next((p for p in descendants(os.getpid()) if is_java(p)), None)
    return spark, jvm, time.perf_counter() - t0


def _users(test: Any, subset: int) -> Any:
    """The test users (Spark), the first ``subset`` sorted ids when ``subset > 0``."""
    users = test.select("user").distinct()
    return users.orderBy("user").limit(subset) if subset else users


def _fit_rows(folder: Path, kind: str, events: int, sample: float) -> Path:
    """Where the Spark cell writes the rows its plug-in was fitted on (a ``sample`` < 1)."""
    return folder / f"fit-{kind}-{events}-{sample:g}"


def cell_spark(
    kind: str,
    folder: Path,
    events: int,
    driver_memory: str,
    partitions: int,
    subset: int,
    sample: float | None,
) -> dict[str, Any]:
    """popularity_auc_counts (``kind="pop"``) or a plug-in's plugin_auc_counts (``kind`` names
    the model, fitted on a ``sample`` of the training rows if given) with ``pooled=True`` on
    local[2]: seconds, peaks, rows to the driver."""
    from pyspark.sql import functions as sf

    from harness.spark.models import fit_plugin, plugin_auc_counts, popularity_auc_counts

    base_rss = proc_status("self", "VmRSS")
    spark, jvm, jvm_start = _session(driver_memory, partitions)
    spy = _DriverRows()
    train = spark.read.parquet(str(folder / f"train-{events}.parquet"))
    test = spark.read.parquet(str(folder / f"test-{events}.parquet"))
    stages: dict[str, float] = {}
    fit_calls = 0
    with Workers(jvm) as workers:
        t0 = time.perf_counter()
        if kind == "pop":
            table, pooled = popularity_auc_counts(
                spark, train, _users(test, 0), test, exclude_seen=True, pooled=True
            )
        else:
            model = fit_plugin(_plugin(kind), train, sample=sample, seed=FIT_SEED)
            stages["fit on the driver"] = time.perf_counter() - t0
            fit_calls = len(spy.calls)
            t0 = time.perf_counter()
            table, pooled = plugin_auc_counts(spark, model, _users(test, 0), test, pooled=True)
        row = table.agg(*(sf.sum(c).alias(c) for c in ("wins", "n_pos", "n_neg"))).first()
        stages["counts"] = time.perf_counter() - t0
        sums = row.asDict() if row is not None else {}
        t0 = time.perf_counter()
        table.write.mode("overwrite").parquet(str(folder / f"spark-{kind}-{events}"))
        stages["write per-user table"] = time.perf_counter() - t0
    out: dict[str, Any] = {
        "jvm_start": jvm_start,
        "stages": stages,
        "sums": sums,
        "pooled": pooled,
        "fit_calls": spy.calls[:fit_calls],
        "driver_calls": spy.calls[fit_calls:],
        # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec
        "driver_peak_mb": proc_status("self", "VmHWM") / MB,
        "driver_growth_mb": (proc_status("self", "VmHWM") - base_rss) / MB,
        "jvm_peak_mb": proc_status(jvm, "VmHWM") / MB if jvm else float("nan"),
        "workers_peak_mb": workers.peak / MB,
    }
    if kind != "pop" and sample is not None and sample < 1:  # the fitted rows, for the peer
        rows = _fit_rows(folder, kind, events, sample)
        train.sample(fraction=sample, seed=FIT_SEED).write.mode("overwrite").parquet(str(rows))
        out["fit_rows_written"] = spark.read.parquet(str(rows)).count()
    if subset:  # the check on a subset of users, after the peaks are read
        if kind == "pop":
            sub, sub_pooled = popularity_auc_counts(
                spark, train, _users(test, subset), test, exclude_seen=True, pooled=True
            )
        else:  # the model fitted above
            sub, sub_pooled = plugin_auc_counts(
                spark, model, _users(test, subset), test, pooled=True
            )
        sub.write.mode("overwrite").parquet(str(folder / f"spark-{kind}-{events}-{subset}"))
        out["subset_pooled"] = sub_pooled
    spark.stop()
    return out


def _plugin(name: str) -> Any:
    from harness.models import ImplicitItemCosine, PopularityModel

    if name == "item_knn":
        return ImplicitItemCosine(k_neighbors=100, num_threads=1)
    if name == "popularity":
        return PopularityModel()
    raise ValueError(f"--plugin: unknown model {name!r} (item_knn, popularity)")


def cell_numpy(
    kind: str, folder: Path, events: int, subset: int, sample: float | None
) -> dict[str, Any]:
    """The in-process engine's path: fit (a plug-in with a ``sample`` < 1: on the rows the
    Spark cell sampled and wrote), then ``recommend_with_auc(..., pooled=True)``."""
    if kind != "pop" and sample is not None and sample < 1:
        train = pd.read_parquet(_fit_rows(folder, kind, events, sample))  # part files in order
    else:
        train = pd.read_parquet(folder / f"train-{events}.parquet")
    test = pd.read_parquet(folder / f"test-{events}.parquet")
    users = np.unique(test["user"].to_numpy())
    if subset:
        users = users[:subset]
    base = proc_status("self", "VmRSS")
    t0 = time.perf_counter()
    model = _plugin("popularity" if kind == "pop" else kind).fit(train)
    fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, _, counts = model.recommend_with_auc(
        users, K, test["user"].to_numpy(), test["item"].to_numpy(), pooled=True
    )
    seconds = time.perf_counter() - t0
    peak = proc_status("self", "VmHWM")
    table = pd.DataFrame(
        {"user": users, "wins": counts.wins, "n_pos": counts.n_pos, "n_neg": counts.n_neg}
    )
    suffix = f"-{subset}" if subset else ""
    table.to_parquet(folder / f"numpy-{kind}-{events}{suffix}.parquet", index=False)
    return {
        "fit": fit,
        "counts": seconds,
        "pooled": counts.pooled_wins,
        "sums": {c: float(table[c].sum()) for c in ("wins", "n_pos", "n_neg")},
        "peak_mb": peak / MB,
        "growth_mb": (peak - base) / MB,
        "fit_rows": len(train),
    }


def same_counts(folder: Path, spark_name: str, numpy_name: str) -> str:
    """Whether two per-user count tables are equal user by user, as a short note."""
    a = pd.read_parquet(folder / spark_name).set_index("user").sort_index()
    b = pd.read_parquet(folder / numpy_name).set_index("user").sort_index()
    if not a.index.equals(b.index):
        return f"users differ ({len(a)} vs {len(b)})"
    bad = [c for c in ("wins", "n_pos", "n_neg") if not np.array_equal(a[c], b[c])]
    return f"per-user {'differ on ' + ','.join(bad) if bad else 'equal'} ({len(a):,} users)"


def pooled_reference(folder: Path, events: int) -> float:
    """Popularity's pooled wins over all test users written out in numpy, independently of the
    Spark and in-process code: the negatives of every user are the catalog minus their seen and
    relevant items, so their score histogram is ``users x catalog - seen - relevant``."""
    train = pd.read_parquet(folder / f"train-{events}.parquet").drop_duplicates()
    test = pd.read_parquet(folder / f"test-{events}.parquet").drop_duplicates()
    popularity = train.groupby("item")["user"].size()
    users = test["user"].unique()
    seen = train[train["user"].isin(users)]
    rel = test[test["item"].isin(popularity.index)].merge(seen, how="left", indicator=True)
    rel = rel[rel["_merge"] == "left_only"]
    width = int(popularity.max()) + 1
    count = np.bincount(popularity.to_numpy(), minlength=width).astype(np.int64)
    neg = users.size * count
    neg -= np.bincount(popularity.loc[seen["item"]].to_numpy(), minlength=width)
    neg -= np.bincount(popularity.loc[rel["item"]].to_numpy(), minlength=width)
    below = np.cumsum(neg) - neg
    s = popularity.loc[rel["item"]].to_numpy()
    return sum(int(v) for v in 2 * below[s] + neg[s]) / 2


def _cell(args: list[str], timeout: float) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    out = run_cell(__file__, args, timeout)
    out["load"] = (load0 + os.getloadavg()[0]) / 2
    return out


def main() -> None:
    p = spark_parser(__doc__)
    p.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--plugin", nargs="*", default=["item_knn"], help="plug-in models to run")
    p.add_argument("--plugin-max", type=int, default=1_000_000, help="largest size for plug-ins")
    p.add_argument("--timeout", type=float, default=1500, help="seconds per Spark cell")
    p.add_argument("--numpy-timeout", type=float, default=600, help="seconds per in-process cell")
    p.add_argument("--subset", type=int, default=20_000, help="users of the subset check")
    p.add_argument("--folder", type=Path, help="keep the data here (default: a temp dir)")
    p.add_argument("--json", type=Path, help="also write the table rows here")
    p.add_argument(
        "--fit-sample",
        type=unit_fraction,
        help="fit the Spark plug-in on this seeded fraction in (0, 1] of the training rows "
        "(engine.fit_sample; default: every row)",
    )
    args = p.parse_args()
    if args.cell:
        engine, kind, folder, events, subset = args.cell[:5]
        sample = args.fit_sample
        if engine == "numpy":
            out = cell_numpy(kind, Path(folder), int(events), int(subset), sample)
        else:
            out = cell_spark(
                kind,
                Path(folder),
                int(events),
                args.driver_memory,
                args.partitions,
                int(subset),
                sample,
            )
        print(json.dumps(out, default=float))
        return
    fit = ["--fit-sample", repr(args.fit_sample)] if args.fit_sample is not None else []
    sampled = args.fit_sample is not None and args.fit_sample < 1
    rows: list[tuple[Any, ...]] = []
    with tempfile.TemporaryDirectory(prefix="bench_spark_auc_") as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for events in args.events:
            t0 = time.perf_counter()
            info = write_split(folder, events)
            label = f"{events / 1e6:g}M events ({info['users']:,} users x {info['items']:,} items)"
            print(f"{label}: split ready in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            common = [str(folder), str(events)]
            kinds = ["pop"] + (args.plugin if events <= args.plugin_max else [])
            for kind in kinds:
                name = "popularity" if kind == "pop" else f"{kind} (plug-in)"
                opts = ["--driver-memory", args.driver_memory, "--partitions", str(args.partitions)]
                if kind != "pop" and sampled:
                    # the in-process peer needs the rows Spark sampled: Spark first, and its
                    # subset check always (the peer's outcome is not known yet)
                    name = f"{kind} (plug-in, fit sample {args.fit_sample:g})"
                    subset = args.subset
                    sp = _cell(["spark", kind, *common, str(subset), *opts, *fit], args.timeout)
                    if "error" in sp:
                        ref = {"error": "not run (no fit rows from Spark)", "load": float("nan")}
                    else:
                        ref = _cell(["numpy", kind, *common, "0", *fit], args.numpy_timeout)
                else:
                    ref = _cell(["numpy", kind, *common, "0", *fit], args.numpy_timeout)
                    subset = args.subset if "error" in ref else 0
                    cell = ["spark", kind, *common, str(subset)]
                    sp = _cell([*cell, *opts, *fit], args.timeout)
                print(f"{label} {name}: numpy {ref}\nspark {sp}", file=sys.stderr, flush=True)
                rows += _rows(label, name, kind, folder, events, ref, sp, args, subset)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=1))
    print_table(
        (
            "data",
            "model / engine",
            "fit s",
            "counts s",
            "driver py peak MB (growth)",
            "JVM peak MB",
            "py workers peak MB",
            "rows to the driver",
            "load avg",
            "notes",
        ),
        rows,
    )
    sample_note = (
        f"; plug-ins fitted on a {args.fit_sample:g} sample of the training rows (seed "
        f"{FIT_SEED}), the in-process peer on the same rows"
        if sampled
        else ""
    )
    print(
        f"\nSpark local[2], {args.partitions} shuffle partitions, driver heap "
        f"{args.driver_memory}; counts s: the AUC counts with global_auc's pooled wins and the "
        f"sums of the per-user table (Spark: JVM start and the Parquet write not counted)"
        f"{sample_note}."
    )


def _rows(
    label: str,
    name: str,
    kind: str,
    folder: Path,
    events: int,
    ref: dict[str, Any],
    sp: dict[str, Any],
    args: argparse.Namespace,
    subset: int,
) -> list[tuple[Any, ...]]:
    """The table rows of one model at one size: in-process, then Spark with the checks."""
    rows: list[tuple[Any, ...]] = []
    if "error" in ref:
        rows.append(
            (label, f"{name}, in-process", "", ref["error"], *[""] * 4, f"{ref['load']:.1f}", "")
        )
    else:
        rows.append(
            (
                label, f"{name}, in-process", f"{ref['fit']:.1f}", f"{ref['counts']:.1f}",
                f"{ref['peak_mb']:.0f} (+{ref['growth_mb']:.0f})", "-", "-", "-",
                f"{ref['load']:.1f}", "",
            )
        )  # fmt: skip
    if "error" in sp:
        rows.append((label, f"{name}, spark", "", sp["error"], *[""] * 4, f"{sp['load']:.1f}", ""))
        return rows
    st = sp["stages"]
    calls = sp["driver_calls"]
    notes = [f"JVM start {sp['jvm_start']:.0f} s, write {st['write per-user table']:.0f} s"]
    if kind != "pop":
        fitted = sum(n for _, n in sp["fit_calls"])
        scores = next((n for name, n in calls if name == "toPandas"), 0)
        fit_note = f"fit collects {fitted:,} training rows"
        if args.fit_sample is not None:
            fit_note = (
                f"fit on a {args.fit_sample:g} sample: {fitted:,} training rows to the driver"
            )
        notes.append(f"{fit_note}; broadcast {scores:,} relevant scores ({scores * 8 / MB:.2f} MB)")
        if "fit_rows_written" in sp:  # the rows the in-process peer is fitted on
            written = sp["fit_rows_written"]
            same = "equal" if written == fitted else f"{written:,} vs {fitted:,}: NOT the same"
            notes.append(f"sampled rows rewritten for the in-process fit: count {same}")
    if "error" not in ref:
        same = same_counts(folder, f"spark-{kind}-{events}", f"numpy-{kind}-{events}.parquet")
        pooled = "equal" if sp["pooled"] == ref["pooled"] else f"{sp['pooled']} vs {ref['pooled']}"
        notes.append(f"{same}; pooled wins {pooled}")
    if kind == "pop":
        ref_pooled = pooled_reference(folder, events)
        same = "equal" if sp["pooled"] == ref_pooled else f"{sp['pooled']} vs {ref_pooled}"
        notes.append(f"pooled wins vs a numpy histogram count: {same}")
    if "error" in ref and subset:
        fit = ["--fit-sample", repr(args.fit_sample)] if args.fit_sample is not None else []
        sub = _cell(
            ["numpy", kind, str(folder), str(events), str(subset), *fit], args.numpy_timeout
        )
        if "error" in sub:
            notes.append(f"subset check: {sub['error']}")
        else:
            same = same_counts(
                folder, f"spark-{kind}-{events}-{subset}", f"numpy-{kind}-{events}-{subset}.parquet"
            )
            pooled = "equal" if sp["subset_pooled"] == sub["pooled"] else "differ"
            notes.append(
                f"first {subset:,} users: {same}, pooled wins {pooled}; in-process "
                f"{sub['counts']:.1f} s, peak {sub['peak_mb']:.0f} MB for them"
            )
    fit = f"{st['fit on the driver']:.1f}" if "fit on the driver" in st else "-"
    rows.append(
        (
            label, f"{name}, spark", fit, f"{st['counts']:.1f}",
            f"{sp['driver_peak_mb']:.0f} (+{sp['driver_growth_mb']:.0f})",
            f"{sp['jvm_peak_mb']:.0f}", f"{sp['workers_peak_mb']:.0f}",
            f"{sum(n for _, n in calls):,} in {len(calls)} calls", f"{sp['load']:.1f}",
            "; ".join(notes),
        )
    )  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
