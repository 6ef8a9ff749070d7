"""Spark engine (local[2]) against the numpy engine on the same Parquet data: seconds and memory.

The data is bench_metrics.py's seeded generator (users x 100 scored candidates, 1-10 relevant
items per user), written to Parquet first (not timed). Every (engine, size) cell runs in a fresh
subprocess:

- numpy: ``pd.read_parquet`` both tables, then ``metrics.evaluate``; peak RSS growth of the
  process (Linux clear_refs / VmHWM).
- spark: ``spark_session("local[2]")`` (JVM start timed apart), then ``evaluate_spark`` on the
  Parquet paths, twice: the first call also starts the Python workers. In local mode the
  executors are threads of the driver's JVM (a child process of this Python) and the Python
  workers that run the numpy kernels are separate processes forked by that JVM, so memory is
  reported per process kind: driver Python (VmHWM), JVM (VmHWM, reset before each call) and
  the sum over Python workers (sampled every 0.25 s during the first call only, so that the
  sampling does not slow the timed second call), plus the sampled peak of all of them.

    python benchmarks/bench_spark.py                       # 1M and 10M scored rows
    python benchmarks/bench_spark.py --users 10000         # 1M rows only

Needs the `spark` extra (pip install -e ".[spark]") and Java 17.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import print_table  # noqa: E402
from bench_metrics import CANDIDATES, METRICS, make_data  # noqa: E402

MB = 2**20


def _status(pid: int | str, field: str) -> int:
    """A /proc/<pid>/status field in bytes (0 if the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _reset_peak(pid: int | str = "self") -> None:
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def _descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


class _Sampler:
    """Peak summed RSS of the JVM's Python workers and of all processes, sampled.

    The process tree is re-read every second and RSS every 0.25 s: on a 2-core machine a
    tighter loop slows the measured run itself.
    """

    def __init__(self, interval: float = 0.25, rescan: float = 1.0):
        self.interval, self.rescan, self.workers, self.total = interval, rescan, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import os

        me, procs, scanned = os.getpid(), [], 0.0
        while not self._stop.is_set():
            if time.monotonic() - scanned > self.rescan:
                procs, scanned = _descendants(me), time.monotonic()
            java = [p for p in procs if _is_java(p)]
            workers = sum(_status(p, "VmRSS") for p in procs if p not in java)
            total = _status(me, "VmRSS") + workers + sum(_status(p, "VmRSS") for p in java)
            self.workers, self.total = max(self.workers, workers), max(self.total, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cell_numpy(folder: Path) -> dict[str, object]:
    import pandas as pd

    import metrics

    _reset_peak()
    base = _status("self", "VmRSS")
    t0 = time.perf_counter()
    qrels = pd.read_parquet(folder / "qrels.parquet")
    run = pd.read_parquet(folder / "run.parquet")
    t1 = time.perf_counter()
    ev = metrics.evaluate(qrels, run, METRICS)
    t2 = time.perf_counter()
    return {
        "read": t1 - t0,
        "evaluate": t2 - t1,
        "driver_mb": (_status("self", "VmHWM") - base) / MB,
        "summary": ev.summary,
    }


def cell_spark(folder: Path, driver_memory: str) -> dict[str, object]:
    import os

    from harness.spark import evaluate_spark, spark_session

    t0 = time.perf_counter()
    spark = spark_session(
        "local[2]",
        config={"spark.sql.shuffle.partitions": 8, "spark.driver.memory": driver_memory},
    )
    start = time.perf_counter() - t0
    jvm = next((p for p in _descendants(os.getpid()) if _is_java(p)), None)
    paths = (str(folder / "qrels.parquet"), str(folder / "run.parquet"))
    out: dict[str, object] = {"jvm_start": start}
    for attempt in ("first", "second"):
        # first call: cold Python workers, memory sampled; second: warm, timed without sampling
        _reset_peak()
        if jvm:
            _reset_peak(jvm)
        base = _status("self", "VmRSS")
        sampler = _Sampler() if attempt == "first" else contextlib.nullcontext()
        with sampler:
            t0 = time.perf_counter()
            ev = evaluate_spark(*paths, METRICS, spark=spark, buckets=16)
            seconds = time.perf_counter() - t0
        sampled = isinstance(sampler, _Sampler)
        out[attempt] = {
            "seconds": seconds,
            "driver_mb": (_status("self", "VmHWM") - base) / MB,
            "jvm_mb": _status(jvm, "VmHWM") / MB if jvm else float("nan"),
            "workers_mb": sampler.workers / MB if sampled else float("nan"),
            "total_mb": sampler.total / MB if sampled else float("nan"),
        }
        out["summary"] = ev.summary
    spark.stop()
    return out


def measure(args: list[str], timeout: float) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--cell", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["killed (out of memory?)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--driver-memory", default="4g", help="spark.driver.memory (JVM heap)")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--cell", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cell:
        kind, folder = args.cell[0], Path(args.cell[1])
        out = cell_numpy(folder) if kind == "numpy" else cell_spark(folder, args.cell[2])
        print(json.dumps(out, default=float))
        return
    rows = []
    for n in args.users:
        with tempfile.TemporaryDirectory(prefix="bench_spark_") as tmp:
            folder = Path(tmp)
            qrels, run = make_data(n)
            qrels.to_parquet(folder / "qrels.parquet", index=False)
            run.to_parquet(folder / "run.parquet", index=False)
            del qrels, run
            label = f"{n * CANDIDATES / 1e6:g}M rows ({n} users)"
            ref = measure(["numpy", tmp], args.timeout)
            sp = measure(["spark", tmp, args.driver_memory], args.timeout)
        if "error" in ref:
            rows.append((label, "numpy", ref["error"], "", "", "", "", ""))
        else:
            rows.append(
                (
                    label,
                    "numpy (read + evaluate)",
                    f"{ref['read']:.2f} + {ref['evaluate']:.2f}",
                    f"{ref['driver_mb']:.0f}",
                    "-",
                    "-",
                    "-",
                    "",
                )
            )
        if "error" in sp:
            rows.append((label, "spark local[2]", sp["error"], "", "", "", "", ""))
            continue
        agree = (
            max(abs(sp["summary"][m] - ref["summary"][m]) for m in METRICS)
            if "summary" in ref
            else float("nan")
        )
        for attempt in ("first", "second"):
            r = sp[attempt]
            note = f"JVM start {sp['jvm_start']:.1f} s (not counted)" if attempt == "first" else ""
            if attempt == "second":
                note = f"max |diff| vs numpy {agree:.1e}"
            rows.append(
                (
                    label,
                    f"spark local[2], {attempt} call",
                    f"{r['seconds']:.2f}",
                    f"{r['driver_mb']:.0f}",
                    f"{r['jvm_mb']:.0f}",
                    f"{r['workers_mb']:.0f}" if attempt == "first" else "(not sampled)",
                    f"{r['total_mb']:.0f}" if attempt == "first" else "",
                    note,
                )
            )
    print_table(
        (
            "data",
            "engine",
            "seconds",
            "driver py MB (peak growth)",
            "JVM MB (peak RSS)",
            "py workers MB (peak sum)",
            "all MB (peak sum)",
            "notes",
        ),
        rows,
    )
    print(
        f"\nMetrics: {', '.join(METRICS)}. Spark: 8 shuffle partitions, 16 user buckets, "
        f"driver heap {args.driver_memory}; the first call also starts the Python workers "
        "and is sampled for memory, the second is timed alone.\n"
        "On a cluster: the bucket step (shuffle of run + truth by user bucket, then the numpy "
        "kernels per bucket) scales with executors; a bucket must fit one Python worker, so use "
        "more buckets as the data grows (about 1-2M run rows per bucket). The driver receives "
        "one metrics.State row per bucket (merged with metrics.merge_states) and the per-user "
        "table (the Evaluation contract; "
        "collect_per_user=False keeps it in Spark), so at tens of millions of users write it "
        "with per_user_path instead. In local mode, Spark's fixed costs (JVM, shuffle, Arrow "
        "transfer to Python workers) make it slower than the in-process numpy engine on one "
        "machine; it pays off only when the data does not fit one machine."
    )


if __name__ == "__main__":
    main()
