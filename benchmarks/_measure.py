"""Timing and peak-memory helpers shared by the benchmark scripts (Linux /proc)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> int:
    """Reset the peak-RSS counter and return the current RSS in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return status("VmRSS")


@contextmanager
def stage(rows: list[tuple[str, float, float]], name: str) -> Iterator[None]:
    """Append (name, seconds, peak MB above the RSS at entry) for the block."""
    base = reset_peak()
    t0 = time.perf_counter()
    yield
    rows.append((name, time.perf_counter() - t0, (status("VmHWM") - base) / 2**20))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Call ``fn`` and return (result, seconds)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def print_table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Aligned plain-text table."""
    text = [tuple(str(v) for v in r) for r in [header, *rows]]
    widths = [max(len(r[i]) for r in text) for i in range(len(header))]
    for i, r in enumerate(text):
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def proc_status(pid: int | str, field: str) -> int:
    """A /proc/<pid>/status field in bytes (0 if the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree (children, their children...)."""
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def is_java(pid: int) -> bool:
    """True when ``pid`` is a JVM (Spark's, a child of the driver in local mode)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


class Workers:
    """Peak summed RSS of the processes the JVM forked (Python workers), sampled."""

    def __init__(self, jvm: int | None, interval: float = 0.5):
        self.jvm, self.interval, self.peak = jvm, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        procs: list[int] = []
        scanned = 0.0
        while not self._stop.is_set() and self.jvm:
            if time.monotonic() - scanned > 2.0:
                procs, scanned = descendants(self.jvm), time.monotonic()
            self.peak = max(self.peak, sum(proc_status(p, "VmRSS") for p in procs))
            self._stop.wait(self.interval)

    def __enter__(self) -> Workers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_cell(script: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``script --cell *args`` in a fresh interpreter; its last stdout line parsed as JSON,
    or ``{"error": ...}`` (timeout, or the exit code and last stderr line: killed when empty)."""
    cmd = [sys.executable, script, "--cell", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["killed (out of memory?)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:120]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def spark_parser(doc: str | None) -> argparse.ArgumentParser:
    """The Spark benchmarks' command line: their description and the options every Spark cell
    takes (JVM heap, shuffle partitions, and the hidden ``--cell`` of a measured subprocess)."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--driver-memory", default="4g", help="spark.driver.memory (JVM heap)")
    p.add_argument("--partitions", type=int, default=32, help="spark.sql.shuffle.partitions")
    p.add_argument("--cell", nargs="+", help=argparse.SUPPRESS)
    return p


def unit_fraction(text: str) -> float:
    """An ``argparse`` type: a fraction in (0, 1] (a sample of the training rows)."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value
