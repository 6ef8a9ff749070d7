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


GROWTH = (
    "import numpy as np\n"
    "from harness.progress import peak_mb\n"
    "before = peak_mb()\n"
    "block = np.ones(64 * 2**20 // 8)\n"
    "after = peak_mb()\n"
    "del block\n"
    "print(before, after, peak_mb())\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_the_peak_grows_with_what_is_resident_and_never_decreases() -> None:
    out = subprocess.run(
        [sys.executable, "-c", GROWTH], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after, freed = (float(x) for x in out)
    assert 63 <= after - before <= 80  # the 64 MB block (and little else) became resident
    assert freed == after  # a peak: freeing the block does not lower it
