"""Timing and peak-memory helpers shared by the benchmark scripts (Linux /proc)."""

from __future__ import annotations

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
