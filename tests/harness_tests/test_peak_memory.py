"""The stage table's peak memory is the run's own, not the peak of the process that started it.

Reference: the kernel's ``ru_maxrss`` of the same child, which carries the parent's peak across
fork and exec (the reason :func:`harness.progress.peak_mb` reads ``VmHWM`` on Linux). And memory a
run no longer needs goes back to the OS (Arrow's freed pool, the events once split), measured as
the resident memory of a fresh child."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

#: defines ``rss()``, a child's resident MB now
RSS = (
    "def rss():\n"
    "    with open('/proc/self/status') as f:\n"
    "        return next(int(x.split()[1]) for x in f if x.startswith('VmRSS:')) / 1024\n"
)


def _child(code: str) -> list[str]:
    """What a fresh Python process running ``code`` prints, split into words."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()


CHILD = (
    "import resource\n"
    "from harness.progress import peak_mb\n"
    "print(peak_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_small_run_started_by_a_large_process_reports_its_own_peak() -> None:
    ballast = np.ones(400 * 2**20 // 8)  # 400 MB, touched: resident in this process
    out = _child(CHILD)
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
    out = _child(GROWTH)
    before, after, freed = (float(x) for x in out)
    assert 63 <= after - before <= 80  # the 64 MB block (and little else) became resident
    assert freed == after  # a peak: freeing the block does not lower it


RELEASE = RSS + (
    "import numpy as np, pyarrow as pa, pyarrow.compute as pc\n"
    "from harness.progress import Stages\n"
    "base = pa.array(np.arange(20_000_000))\n"
    "before = rss()\n"
    "parts = [pc.add(base.slice(i, 10**6), 1) for i in range(0, 20_000_000, 10**6)]\n"
    "used = rss() - before\n"
    "del parts\n"
    "Stages(show=False).add('step', 0.0)\n"
    "print(used, rss() - before)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS is Linux's")
def test_memory_arrow_freed_in_a_step_is_handed_back_after_it() -> None:
    """Arrow's allocator keeps freed memory (a Parquet read's 800 MB of 10M events stayed
    resident into the split): after a step's row is recorded it is the OS's again."""
    out = _child(RELEASE)
    used, kept = float(out[0]), float(out[1])
    assert used > 100  # the 20 pieces of 8 MB were resident
    assert kept < 0.25 * used, f"{kept:.0f} of {used:.0f} MB still resident after the step"


FREED = RSS + (
    "import gc, numpy as np, pandas as pd, pyarrow as pa\n"
    "from harness.datasets import Dataset\n"
    "from harness.split import make_split\n"
    "n = 4_000_000\n"
    "rng = np.random.default_rng(0)\n"
    "frame = pd.DataFrame({'user': rng.integers(0, 1000, n), 'item': rng.integers(0, 500, n),\n"
    "                      'timestamp': rng.permutation(n).astype(np.int64)})\n"
    "frame['user'] = frame['user'].astype(str)  # text ids (Arrow-backed str) and ints\n"
    "data = Dataset('d', frame, 'memory')\n"
    "split = make_split(frame, 'global_time', cut=0.99)\n"
    "del frame\n"
    "gc.collect()\n"
    "before = rss()\n"
    "data = data.released(split.stats)\n"
    "gc.collect()\n"
    "pa.default_memory_pool().release_unused()  # as each stage's end does\n"
    "print(before - rss(), data.events)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS is Linux's")
def test_a_released_dataset_gives_its_events_memory_back() -> None:
    """4M events (int item and time, text user: about 108 MB of columns; 156 MB came back when
    measured): once released after the split, the memory is the OS's (a zero-row slice of the
    frame would keep every buffer alive: -24 MB)."""
    out = _child(FREED)
    freed, events = float(out[0]), int(out[1])
    assert events == 4_000_000
    assert freed > 80, f"only {freed:.0f} MB of the frame's ~108 MB given back"
