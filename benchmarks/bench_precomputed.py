"""`PrecomputedScores` (the usual production model: a file of user, item, score rows) with
integer and text ids: the seconds, CPU seconds and peak memory of ``fit`` (read, validate,
encode and index the file) and of the run's top-k table built from its lists.

Data: a Parquet score file of ``--users`` users x ``--rows`` rows each (``--items`` items,
random float scores, rows grouped by user as a scoring job writes them) and a training frame of
two events per user, written once per id kind before anything is timed: ``int`` ids are int64,
``str`` ids are ``u00012345`` / ``i00042`` text read back as pandas 3's Arrow-backed ``str``.
Each cell runs in a fresh process: the training frame is read (not timed), then
``PrecomputedScores(path).fit(train)`` is timed, then ``rank_positions(users, k)`` and
``harness.experiment._recommendations`` (what ``python -m harness`` does for this model).
Peak memory is the process's growth in VmHWM over the RSS after reading the training frame.
Cells alternate int, str, int, str...; the fastest CPU time per kind is kept.

Check: the two kinds' top-k tables are equal row by row once the text ids are mapped back to
their numbers (same users, ranks, items and scores: ties fall the same way because the text
ids are zero-padded, so they sort as the numbers do).

    python benchmarks/bench_precomputed.py                       # 1M users x 20 rows, k = 10
    python benchmarks/bench_precomputed.py --users 100000 --repeat 3
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
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import print_table, reset_peak, run_cell, status

MB = 2**20
KINDS = ("int", "str")


def _ids(prefix: str, numbers: np.ndarray, width: int, kind: str) -> pa.Array:
    """``numbers`` as int64, or as zero-padded text (``u00000042``) built in Arrow."""
    if kind == "int":
        return pa.array(numbers.astype(np.int64))
    names = pa.array([f"{prefix}{i:0{width}d}" for i in range(int(numbers.max()) + 1)])
    return names.take(pa.array(numbers))


def write_data(folder: Path, users: int, rows: int, items: int, seed: int = 0) -> None:
    """The score file and the training frame, for both id kinds (the same numbers)."""
    rng = np.random.default_rng(seed)
    user = np.repeat(np.arange(users), rows)
    # distinct items per user: a random start and a stride coprime with the catalog size
    start = rng.integers(0, items, users)
    item = (start[:, None] + np.arange(rows) * 7919) % items
    score = rng.random(users * rows)
    train_user = np.repeat(np.arange(users), 2)
    train_item = rng.integers(0, items, 2 * users)
    for kind in KINDS:
        scores = pa.table(
            {
                "user": _ids("u", user, 8, kind),
                "item": _ids("i", item.ravel(), 5, kind),
                "score": score,
            }
        )
        pq.write_table(scores, folder / f"scores-{kind}.parquet")
        train = pa.table(
            {"user": _ids("u", train_user, 8, kind), "item": _ids("i", train_item, 5, kind)}
        )
        pq.write_table(train, folder / f"train-{kind}.parquet")


def cell(folder: Path, kind: str, k: int) -> dict[str, Any]:
    """Fit and top-k table of one kind in this (fresh) process."""
    from harness.experiment import _recommendations
    from harness.models.precomputed import PrecomputedScores

    train = pd.read_parquet(folder / f"train-{kind}.parquet")
    users = np.unique(train["user"].to_numpy())
    base = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    model = PrecomputedScores(folder / f"scores-{kind}.parquet").fit(train)
    t1, c1 = time.perf_counter(), time.process_time()
    at, scores = model.rank_positions(users, k)
    table = _recommendations(users, np.asarray(at), np.asarray(scores), model.position_ids_)
    t2, c2 = time.perf_counter(), time.process_time()
    out = folder / f"topk-{kind}-{os.getpid()}.parquet"
    table.to_parquet(out)
    return {
        "fit_s": t1 - t0,
        "fit_cpu": c1 - c0,
        "topk_s": t2 - t1,
        "topk_cpu": c2 - c1,
        "peak_mb": (status("VmHWM") - base) / MB,
        "rows": len(table),
        "table": str(out),
    }


def _as_numbers(table: pd.DataFrame) -> pd.DataFrame:
    """A top-k table with text ids mapped back to their numbers."""
    out = table.copy()
    for column in ("user", "item"):
        if not pd.api.types.is_integer_dtype(out[column].dtype):
            out[column] = out[column].astype(str).str.slice(1).astype(np.int64)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=20, help="score rows per user")
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2, help="cells per id kind (fastest kept)")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--folder", type=Path, help="keep the data here (default: a temp dir)")
    p.add_argument("--cell", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cell:
        folder, kind, k = args.cell
        print(json.dumps(cell(Path(folder), kind, int(k))))
        return
    with tempfile.TemporaryDirectory(prefix="bench_precomputed_") as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        write_data(folder, args.users, args.rows, args.items)
        print(f"data: {args.users:,} users x {args.rows} rows, {args.items:,} items "
              f"({time.perf_counter() - t0:.0f} s to write)", flush=True)  # fmt: skip
        load = os.getloadavg()
        results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
        for _ in range(args.repeat):
            for kind in KINDS:
                r = run_cell(__file__, [str(folder), kind, str(args.k)], args.timeout)
                if "error" in r:
                    sys.exit(f"{kind} cell failed: {r['error']}")
                results[kind].append(r)
                print(
                    f"  {kind}: fit {r['fit_cpu']:.2f} CPU s, top-k {r['topk_cpu']:.2f}", flush=True
                )
        best = {
            kind: min(rs, key=lambda r: r["fit_cpu"] + r["topk_cpu"])
            for kind, rs in results.items()
        }
        tables = [_as_numbers(pd.read_parquet(best[kind]["table"])) for kind in KINDS]
        same = tables[0].equals(tables[1])
        rows = []
        for kind in KINDS:
            r, ref = best[kind], best["int"]
            rows.append((
                kind,
                f"{r['fit_s']:.2f}", f"{r['fit_cpu']:.2f}", f"{r['fit_cpu'] / ref['fit_cpu']:.2f}x",
                f"{r['topk_s']:.2f}", f"{r['topk_cpu']:.2f}",
                f"{r['topk_cpu'] / ref['topk_cpu']:.2f}x",
                f"{r['peak_mb']:.0f}",
                f"{r['rows']:,}",
            ))  # fmt: skip
        print()
        print_table(
            ("ids", "fit s", "fit CPU s", "CPU / int", "top-k s", "top-k CPU s", "CPU / int",
             "peak MB", "list rows"),
            rows,
        )  # fmt: skip
        spread = {
            kind: f"{min(r['fit_cpu'] for r in rs):.2f}-{max(r['fit_cpu'] for r in rs):.2f}"
            for kind, rs in results.items()
        }
        end = os.getloadavg()
        print(f"\nfit CPU s over {args.repeat} cells per kind: {spread}")
        print(f"top-k tables equal once text ids are mapped back: {same}")
        print(f"load average (1 min) at the start / end: {load[0]:.1f} / {end[0]:.1f} on "
              f"{os.cpu_count()} cores")  # fmt: skip
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
