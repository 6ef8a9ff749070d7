"""Reading a run file, and `python -m metrics` on it, with integer and text ids, per format.

The files hold `bench_metrics.make_data`'s run (users x 100 scored candidates) and qrels, as
Parquet, CSV and TREC. Cells: `metrics.io.read_run`; for TREC also the line-by-line reader alone
(the fast path turned off: what a file it cannot take costs) and, with `--peers`, ranx's
`Run.from_file`; the plain `pd.read_parquet` / `pd.read_csv` of the file as the floor; then the
whole `python -m metrics QRELS RUN` command (a fresh process). Wall seconds, fastest of two
calls (the line reader: one).

    python benchmarks/bench_read.py                  # 100k users (10M rows)
    python benchmarks/bench_read.py --users 10000 --formats trec
    python benchmarks/bench_read.py --formats csv --events 10000000   # also the harness's loader

CSV cells also time `read_run` with Arrow's reader turned off (pandas' parser alone, as before
session 30). `--events N`: an interactions CSV of N events (500k users, 50k items, text ids,
rating, timestamp), unquoted and with every text value quoted (as Arrow and R write it), loaded
and validated by `harness.data.load_interactions`, with and without Arrow's reader.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv

sys.path.insert(0, str(Path(__file__).parent))
from bench_metrics import make_data

import metrics.io as io

FORMATS = ("parquet", "csv", "trec")


def write(df: pd.DataFrame, path: Path, fmt: str, value: str) -> None:
    """``df`` (user, item, ``value``) written as ``fmt``; TREC by Arrow's CSV writer."""
    if fmt == "parquet":
        df.to_parquet(path)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:
        n = len(df)
        cols = {"user": pa.array(df["user"].astype(str))}
        if value == "score":
            cols |= {"q0": pa.array(["Q0"] * n), "item": pa.array(df["item"].astype(str))}
            cols |= {"rank": pa.array([0] * n), "score": pa.array(df["score"]), "tag": ["t"] * n}
        else:
            cols |= {"iter": pa.array([0] * n), "item": pa.array(df["item"].astype(str))}
            cols |= {"rel": pa.array(df["relevance"].astype(int))}
        options = pcsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
        pcsv.write_csv(pa.table(cols), str(path), options)


def timed(fn: Callable[[], object], repeat: int = 2) -> float:
    """Fastest of ``repeat`` calls of ``fn`` (the first pays the process's first reads)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    p.add_argument("--peers", action="store_true", help="also ranx (slow: 15 s at 200k rows)")
    p.add_argument("--events", type=int, default=0, help="also load an interactions CSV")
    args = p.parse_args()
    rows: list[tuple[str, str, str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for ids in ("int", "str"):
            qrels, run = make_data(args.users, ids=ids)
            for fmt in args.formats:
                ext = {"parquet": ".parquet", "csv": ".csv", "trec": ".txt"}[fmt]
                q, r = Path(tmp, f"q_{ids}{ext}"), Path(tmp, f"r_{ids}{ext}")
                write(qrels, q, fmt, "relevance")
                write(run, r, fmt, "score")
                print(f"{fmt} {ids}: files written", file=sys.stderr, flush=True)
                read = partial(io.read_run, r)
                rows.append((fmt, ids, "read_run", timed(read)))
                if fmt == "parquet":
                    rows.append(
                        (fmt, ids, "pd.read_parquet", timed(lambda r=r: pd.read_parquet(r)))
                    )
                elif fmt == "csv":
                    rows.append((fmt, ids, "pd.read_csv", timed(lambda r=r: pd.read_csv(r))))
                    with mock.patch.object(io, "csv_text", lambda *a: None):
                        rows.append((fmt, ids, "read_run, pandas only", timed(read, 1)))
                else:
                    with mock.patch.object(io, "_trec_fields", lambda *a: None):
                        line = timed(lambda r=r: io.read_trec_run(r), 1)
                    rows.append((fmt, ids, "line reader", line))
                    if args.peers:
                        try:
                            from ranx import Run
                        except ImportError:
                            pass
                        else:
                            rows.append(
                                (
                                    fmt,
                                    ids,
                                    "ranx Run.from_file",
                                    timed(lambda r=r: Run.from_file(str(r), kind="trec")),
                                )
                            )
                cli = [sys.executable, "-m", "metrics", str(q), str(r)]
                rows.append(
                    (
                        fmt,
                        ids,
                        "python -m metrics",
                        timed(lambda cli=cli: subprocess.run(cli, check=True, capture_output=True)),
                    )
                )
        if args.events:
            rows += events(args.events, Path(tmp))
    n = args.users * 100
    print(f"\n{n:,} run rows ({args.users:,} users x 100), {args.events:,} events; wall seconds")
    print("(fastest of 2; the pandas-only cells: one call)")
    print(f"{'format':8s} {'ids':4s} {'cell':26s} {'seconds':>8s}")
    for fmt, ids, cell, sec in rows:
        print(f"{fmt:8s} {ids:4s} {cell:26s} {sec:8.2f}")


def events(n: int, tmp: Path) -> list[tuple[str, str, str, float]]:
    """``load_interactions`` of an ``n``-event CSV, unquoted and quoted, with Arrow's reader and
    with pandas' alone."""
    import harness.data as data

    rng = np.random.default_rng(0)
    users = pa.array([f"u{x}" for x in range(500_000)]).take(rng.integers(0, 500_000, n))
    items = pa.array([f"i{x}" for x in range(50_000)]).take(rng.integers(0, 50_000, n))
    table = pa.table(
        {
            "user": users,
            "item": items,
            "rating": rng.integers(1, 6, n),
            "timestamp": 1_600_000_000 + rng.integers(0, 10**7, n),
        }
    )
    out = []
    for quoting in ("none", "needed"):
        path = tmp / f"events_{quoting}.csv"
        pcsv.write_csv(table, str(path), pcsv.WriteOptions(quoting_style=quoting))
        print(f"events ({quoting} quoting): file written", file=sys.stderr, flush=True)
        name = "events" if quoting == "none" else "events q"
        load = partial(data.load_interactions, path)
        out.append((name, "str", "load_interactions", timed(load)))
        with mock.patch.object(data, "csv_text", lambda *a: None):
            out.append((name, "str", "load_interactions, pandas", timed(load, 1)))
    return out


if __name__ == "__main__":
    main()
