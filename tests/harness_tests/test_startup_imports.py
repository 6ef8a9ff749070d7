"""Startup cost: what ``python -m harness`` loads before it needs it.

Every CLI process (``--help``, ``--cfg job``, a gate check, each of the test suite's ~150 runs)
imports :mod:`harness.cli` first. scipy.stats, matplotlib, MLflow, PySpark and Optuna cost from
0.5 to several seconds each and are imported where they are used (a statistical test, a plot,
tracking on, ``engine=spark``, tuning). Each check runs in a fresh interpreter, so what an earlier
test imported does not hide a regression.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

LAZY = ("scipy.stats", "matplotlib", "mlflow", "pyspark", "optuna")


def _loaded_after(code: str) -> list[str]:
    """Which of :data:`LAZY` are in ``sys.modules`` after running ``code`` in a new interpreter."""
    probe = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["harness.cli", "harness.compare.__main__"])
def test_import_loads_no_heavy_library(module: str) -> None:
    """harness.cli imports the metric library too, so this covers ``import metrics``."""
    assert _loaded_after(f"import {module}") == []


def test_probe_sees_a_heavy_import() -> None:
    """The check itself can fail: a module that imports scipy.stats is reported."""
    assert _loaded_after("import scipy.stats") == ["scipy.stats"]


def test_plots_draw_without_pyplot() -> None:
    """A report plot is a plain Agg figure: no pyplot (its import and its global figure list)."""
    code = """
        import sys
        from harness.report.plots import tuning_plot
        png = tuning_plot({"m": {"trials": [{"number": 0, "value": 0.2}]}}, "ndcg@10", True)
        assert png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", png[:8]
        assert "matplotlib.pyplot" not in sys.modules
    """
    assert _loaded_after(code) == ["matplotlib"]


def test_stats_still_computes_with_scipy_imported_late() -> None:
    """metrics.stats and harness.promote import scipy.stats on first use, with the same numbers:
    the paired t-test equals scipy's ttest_rel, the CI half-width uses the normal quantile."""
    from scipy import stats as st

    from harness.promote import mean_ci
    from metrics.stats import paired_t_test

    a = [0.1, 0.4, 0.35, 0.8, 0.5, 0.2]
    b = [0.2, 0.5, 0.3, 0.9, 0.65, 0.2]
    ours = paired_t_test(a, b)
    ref = st.ttest_rel(b, a)
    assert ours.statistic == pytest.approx(float(ref.statistic), rel=1e-12)
    assert ours.pvalue == pytest.approx(float(ref.pvalue), rel=1e-12)

    n = len(a)
    m = sum(a) / n
    sd = (sum((x - m) ** 2 for x in a) / (n - 1)) ** 0.5
    half = 1.959963984540054 * sd / n**0.5
    assert mean_ci(m, sd, n, 0.95) == pytest.approx((m - half, m + half), rel=1e-12)
    assert np.isnan(mean_ci(m, float("nan"), n, 0.95)).all()  # a table without sd: no CI
    assert np.isnan(mean_ci(m, sd, 1, 0.95)).all()


def test_help_does_not_copy_the_config_store() -> None:
    """Hydra's store is shared by its deep copies (--help copied it ~120 times, ~3.5 s)."""
    import copy

    from hydra.core.config_store import ConfigStore

    import harness.cli  # noqa: F401  (installs the sharing)

    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store
    assert copy.deepcopy({"s": store})["s"] is store
