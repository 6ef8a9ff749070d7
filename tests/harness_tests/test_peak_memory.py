"""The stage table's peak memory is the run's own, not the peak of the process that started it.

Reference: the kernel's ``ru_maxrss`` of the same child, which carries the parent's peak across
fork and exec (the reason :func:`harness.progress.peak_mb` reads ``VmHWM`` on Linux)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

CHILD = (
    "import resource\n"
    "from harness.progress import peak_mb\n"
    "print(peak_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_small_run_started_by_a_large_process_reports_its_own_peak() -> None:
    ballast = np.ones(400 * 2**20 // 8)  # 400 MB, touched: resident in this process
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True
    ).stdout.split()
    del ballast
    own, inherited = float(out[0]), float(out[1])
    assert inherited > 400  # the kernel's figure carries this process's 400 MB
    assert own < 200, f"peak_mb() reported {own} MB for a child that imports one module"


def test_the_peak_never_decreases_and_grows_with_what_is_resident() -> None:
    from harness.progress import peak_mb

    before = peak_mb()
    block = np.ones(64 * 2**20 // 8)  # 64 MB
    after = peak_mb()
    del block
    assert after >= before and peak_mb() >= after
    assert after - before > 60 or before > 64  # grew by the block unless an earlier peak covers it
