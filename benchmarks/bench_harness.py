"""The main job, ``python -m harness``, at production sizes: per-stage seconds, CPU seconds and
peak MB, for integer and string ids.

Each case runs the real CLI in a subprocess, as a user would: ``model=[popularity,item_knn]``,
the default split, metrics, comparison and report, tracking to a new local sqlite store. Sizes
are synthetic events with ``events / 20`` users and 50,000 items (10M events: 500k users).

- ``synthetic``: ``dataset=synthetic`` (the data is generated in the run: load = generation);
- ``int`` / ``str`` / ``uuid``: the same events from a Parquet file (``dataset=file``) with
  integer ids, short text ids (``u00012345``, ``i00042``) or random 36-character UUIDs (pandas
  reads text as Arrow-backed ``str``). Text ids sort as the integers do, so tied scores break
  the same way and every id type must give the same numbers.

``--repeats F``: a share F of the file's events are a user's repeat of an earlier event (same
user and item, a later time), as click and purchase logs have; synthetic events never repeat a
pair, so without it the loader's duplicate check never meets a repeated pair.

The machine may be shared: the table gives wall and CPU seconds (user + system, all threads)
and the load average during the case. Stage rows come from the run's ``stages.json``.

    python benchmarks/bench_harness.py --events 1000000 10000000 --ids synthetic int str
    python benchmarks/bench_harness.py --events 50000000 --ids synthetic
    python benchmarks/bench_harness.py --events 10000000 --ids int str --repeats 0.2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from _measure import print_table

from harness import synthetic

ITEMS = 50_000


def _write_events(events: int, ids: str, folder: Path, repeats: float = 0.0) -> Path:
    """The synthetic events of this size as Parquet, ids as integers or as text, a share
    ``repeats`` of them repeats of earlier events one second to a day later."""
    path = folder / f"events-{events}-{ids}-{repeats:g}.parquet"
    if path.exists():
        return path
    again = int(events * repeats)
    frame = synthetic.generate(events // 20, ITEMS, events - again, seed=0)
    if again:
        rng = np.random.default_rng(1)
        copies = frame.iloc[rng.integers(0, len(frame), again)]
        copies = copies.assign(timestamp=copies["timestamp"] + rng.integers(1, 86_400, again))
        frame = pd.concat([frame, copies], ignore_index=True)
        # a copy can land on the time of another copy of its event: events stay distinct
        frame = frame.drop_duplicates(["user", "item", "timestamp"], ignore_index=True)
    if ids in ("str", "uuid"):
        if ids == "str":
            users = np.char.add("u", np.char.zfill(np.arange(events // 20).astype(str), 8))
            items = np.char.add("i", np.char.zfill(np.arange(ITEMS).astype(str), 5))
        else:
            # sorted, so id i gets the i-th smallest: ties break as with the integers and
            # every number must equal the integer run's
            rng = np.random.default_rng(2)
            users, items = (
                np.sort([str(uuid.UUID(bytes=rng.bytes(16))) for _ in range(n)])
                for n in (events // 20, ITEMS)
            )
        frame = frame.assign(
            user=pd.array(users[frame["user"].to_numpy()], dtype="str"),
            item=pd.array(items[frame["item"].to_numpy()], dtype="str"),
        )
    frame.to_parquet(path, index=False)
    return path


def run_case(events: int, ids: str, folder: Path, repeats: float = 0.0) -> dict[str, Any]:
    """One run of ``python -m harness``: its stage rows and the process's wall/CPU/peak."""
    runs = folder / f"runs-{events}-{ids}-{repeats:g}"
    if ids == "synthetic":
        data = [
            f"dataset.n_users={events // 20}",
            f"dataset.n_items={ITEMS}",
            f"dataset.n_events={events}",
        ]
    else:
        data = ["dataset=file", f"dataset.path={_write_events(events, ids, folder, repeats)}"]
    cmd = [
        sys.executable, "-m", "harness", *data, "model=[popularity,item_knn]",
        f"runs_dir={runs}", "progress=false",
    ]  # fmt: skip
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    # not with_suffix: "runs-…-0.2" would lose its ".2"
    log_out, log_err = runs.parent / f"{runs.name}.out", runs.parent / f"{runs.name}.err"
    with log_out.open("w") as fo, log_err.open("w") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU time
    wall = time.perf_counter() - t0
    out, err = log_out.read_text(), log_err.read_text()
    code = proc.returncode = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{err[-3000:]}")
    # this run's: a kept --folder holds earlier runs too (folder names start with the time)
    stages = json.loads(max(runs.glob("results/*/*/stages.json")).read_text())
    return {
        "events": events,
        "ids": ids if not repeats or ids == "synthetic" else f"{ids}, {repeats:.0%} repeats",
        "rows": stages["stages"],
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        # the run's own peak (VmHWM, in stages.json): the child's ru_maxrss would carry this
        # process's peak (the generated events) across fork and exec
        "peak_mb": float(stages["peak_mb"]),
        "load": (load0 + os.getloadavg()[0]) / 2,
        "summary": out[out.find("ndcg@10") :].split("\n\n")[0],
    }


def markdown(results: list[dict[str, Any]]) -> str:
    """The README's table: one column per case, ``wall s / CPU s / peak MB`` per stage."""
    stages = list(dict.fromkeys(row["stage"] for r in results for row in r["rows"]))
    head = [f"{r['events'] / 1e6:g}M {r['ids']}" for r in results]
    lines = ["| stage | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for stage in stages:
        cells = []
        for r in results:
            row = next((x for x in r["rows"] if x["stage"] == stage), None)
            cells.append(
                "-"
                if row is None
                else f"{row['seconds']:.1f} / {row.get('cpu_seconds', float('nan')):.1f} / "
                f"{row['peak_mb']:.0f}"
            )
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    walls = " | ".join(f"{r['wall']:.0f}" for r in results)
    lines.append(f"| **process: wall s** | {walls} |")
    lines.append(
        "| **process: CPU s** | " + " | ".join(f"**{r['cpu']:.1f}**" for r in results) + " |"
    )
    lines.append(
        "| **process: peak MB** | " + " | ".join(f"**{r['peak_mb']:.0f}**" for r in results) + " |"
    )
    lines.append("| load average | " + " | ".join(f"{r['load']:.0f}" for r in results) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--ids", nargs="+", default=["synthetic", "int", "str"])
    p.add_argument(
        "--repeats", type=float, default=0.0, help="share of file events that repeat a pair"
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument(
        "--folder", type=Path, help="keep the data and the runs' results here (default: a temp dir)"
    )
    p.add_argument(
        "--markdown", type=Path, nargs="+", help="only print the README table of these --json files"
    )
    args = p.parse_args()
    if args.markdown:
        print(markdown([r for f in args.markdown for r in json.loads(f.read_text())]))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for events in args.events:
            for ids in args.ids:
                results.append(run_case(events, ids, folder, args.repeats))
                r = results[-1]
                print(
                    f"{events:,} events, {ids} ids: wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s, "
                    f"peak {r['peak_mb']:.0f} MB, load average {r['load']:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    stages = list(dict.fromkeys(row["stage"] for r in results for row in r["rows"]))
    header = ("stage", *(f"{r['events'] / 1e6:g}M {r['ids']}" for r in results))
    table = []
    for stage in stages:
        cells = []
        for r in results:
            row = next((x for x in r["rows"] if x["stage"] == stage), None)
            cells.append(
                "-"
                if row is None
                else f"{row['seconds']:.1f} s / {row.get('cpu_seconds', float('nan')):.1f} cpu"
                f" / {row['peak_mb']:.0f} MB"
            )
        table.append((stage, *cells))
    table.append(("wall (process)", *(f"{r['wall']:.1f} s" for r in results)))
    table.append(("CPU (process, user+sys)", *(f"{r['cpu']:.1f} s" for r in results)))
    table.append(("peak RSS (process)", *(f"{r['peak_mb']:.0f} MB" for r in results)))
    table.append(("load average (2 cores)", *(f"{r['load']:.1f}" for r in results)))
    print("stage rows: wall seconds / CPU seconds / peak MB of the process so far\n")
    print_table(header, table)
    for r in results:
        print(f"\n{r['events']:,} {r['ids']}:\n{r['summary']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
