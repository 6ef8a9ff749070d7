"""Status lines, quiet third-party logs, the per-stage time table of a run and help text.

A terminal gets tqdm bars for the long loops and one status line per step; a log file (stderr
not a terminal) gets one line per step and no bar updates. Third-party libraries (MLflow,
alembic, matplotlib) log nothing below WARNING unless ``debug=true``.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = ["NOISY_LOGGERS", "Stages", "bars_on", "peak_mb", "quiet", "stages"]

#: Loggers of libraries whose INFO lines ("Creating initial MLflow database tables", the
#: font cache) are not the user's business.
NOISY_LOGGERS = (
    "mlflow",
    "mlflow.store",
    "mlflow.store.db.utils",
    "mlflow.tracking",
    "alembic",
    "alembic.runtime.migration",
    "matplotlib",
    "matplotlib.font_manager",
    "PIL",
    "urllib3",
    "numba",
    "py4j",
    "huey",
)


def help_text(doc: str | None) -> str:
    """A module docstring as ``--help`` prints it: without reST markup (````x````, ``:mod:`x```)."""
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", doc or "")
    return re.sub(r"``([^`]+)``", r"\1", text)


def quiet(debug: bool = False) -> None:
    """Third-party loggers to WARNING (MLflow's also through ``MLFLOW_LOGGING_LEVEL``, which it
    reads when imported); nothing changes with ``debug``."""
    if debug:
        return
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def bars_on(progress: bool) -> bool:
    """Progress bars only on a terminal: in a log file every bar update would be a line."""
    return bool(progress) and sys.stderr.isatty()


_PEAK_KIB = 0  # the largest peak read so far (peak_mb)


def peak_mb() -> float:
    """The process's peak resident memory so far, in MB to 0.1. Rounded here, once, so every row
    and the total of the stage table agree when printed.

    On Linux ``VmHWM`` of ``/proc/self/status``: ``ru_maxrss`` keeps the peak of the process that
    started this one across fork and exec (a 14 MB child of a 2.3 GB parent reports 2.3 GB), so
    it would report the launcher's memory, not the run's. Elsewhere ``ru_maxrss``. The kernel's
    counters are approximate (a read can be ~0.1 MB below an earlier one), so the largest value
    read so far is returned: a peak never decreases down the table."""
    global _PEAK_KIB
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            kib = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        kib = rss // 1024 if sys.platform == "darwin" else rss  # bytes on macOS, KiB on Linux
    _PEAK_KIB = max(_PEAK_KIB, kib)
    return round(_PEAK_KIB / 1024, 1)


@dataclass
class Stages:
    """Times and peak memory of a run's steps, and their status lines (on stderr)."""

    show: bool = True
    rows: list[dict[str, Any]] = field(default_factory=list)
    _t0: float = field(default_factory=time.perf_counter)
    _cpu0: float = field(default_factory=time.process_time)

    def say(self, text: str) -> None:
        """One status line (nothing when quiet)."""
        if self.show:
            print(text, file=sys.stderr, flush=True)

    @contextmanager
    def stage(self, name: str, doing: str | None = None) -> Iterator[None]:
        """Time a step: a status line when it starts and one with its time when it ends."""
        self.say(f"… {doing or name}")
        start, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.add(name, seconds, time.process_time() - cpu)
            self.say(f"  {name}: {seconds:.1f} s")

    def add(
        self, name: str, seconds: float, cpu: float | None = None, peak: float | None = None
    ) -> None:
        """Record a step timed elsewhere (a model's fit, rank, metrics): wall seconds, CPU
        seconds (all threads; shows the work when the machine is shared) and the peak so far
        (``peak``: as measured right after the step, default now).

        Arrow's allocator keeps what a step freed (800 MB after reading 10M events from
        Parquet); it is handed back to the OS here, so the next step's peak does not carry it."""
        pa.default_memory_pool().release_unused()
        row: dict[str, Any] = {"stage": name, "seconds": round(float(seconds), 3)}
        if cpu is not None:
            row["cpu_seconds"] = round(float(cpu), 3)
        row["peak_mb"] = round(peak_mb() if peak is None else float(peak), 1)
        self.rows.append(row)

    def add_model(
        self,
        name: str,
        seconds: Mapping[str, float],
        cpu: Mapping[str, float] | None = None,
        peaks: Mapping[str, float] | None = None,
    ) -> None:
        """A model's fit/rank/metrics times (wall, and CPU and the peak after each part when
        measured), one row each, and one status line."""
        for part in ("fit", "rank", "metrics"):
            if part in seconds:
                self.add(
                    f"{name} {part}", seconds[part], (cpu or {}).get(part), (peaks or {}).get(part)
                )
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items())
        self.say(f"  model {name}: {parts}")

    def reused(self, name: str) -> None:
        """A model a resumed run did not run again: a row of its own in the stage table (it
        was missing, so the table seemed to lack a model) and one status line."""
        self.add(f"{name} reused", 0.0)
        self.say(f"  model {name}: reused (its results from an earlier run)")

    def table(self) -> str:
        """The stage table: seconds and peak memory per step, and the total."""
        total = time.perf_counter() - self._t0
        width = max([len(r["stage"]) for r in self.rows] + [5])
        lines = [f"{'stage':<{width}}  {'seconds':>8}  {'peak MB':>8}"]
        lines += [
            f"{r['stage']:<{width}}  {r['seconds']:>8.1f}  {r['peak_mb']:>8.0f}" for r in self.rows
        ]
        lines.append(f"{'total':<{width}}  {total:>8.1f}  {peak_mb():>8.0f}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """The rows and the total, for ``stages.json``."""
        return {
            "stages": self.rows,
            "total_seconds": round(time.perf_counter() - self._t0, 3),
            "total_cpu_seconds": round(time.process_time() - self._cpu0, 3),
            "peak_mb": peak_mb(),
        }


#: The current run's stages (set by :func:`harness.cli.run`); a quiet one outside a run.
stages = Stages(show=False)
