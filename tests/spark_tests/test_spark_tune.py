"""``python -m harness.tune engine=spark``: each trial's validation metrics on Spark, the refit
run through the Spark pipeline, and the same study and test result as ``engine=numpy`` (the
reference: the same seeded sweep with the in-process metric step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
import pytest

pytestmark = pytest.mark.spark


def test_tuning_on_spark_matches_numpy(harness_cli: Any, tmp_path: Path) -> None:
    common = [
        "model=[popularity,item_knn]",
        "split.valid_cut=0.6",
        "tune.trials=1",
        "tracking=none",
        "compare=none",
        "progress=false",
    ]
    runs = harness_cli.run_engines(
        tmp_path, *common, master="local[1]", module="harness.tune", timeout=1200
    )
    found = {}
    for engine, done in runs.items():
        assert "FutureWarning" not in done.proc.stderr  # PySpark's pandas-3 notice is not shown
        (db,) = (done.cwd / "runs" / "tuning").glob("item_knn-*.db")
        study = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
        found[engine] = (study.trials, pd.read_csv(done.folder / "summary.csv", index_col=0))
    (trials_n, summary_n), (trials_s, summary_s) = found["numpy"], found["spark"]
    assert [t.state.name for t in trials_s] == ["COMPLETE"]
    assert [t.params for t in trials_s] == [t.params for t in trials_n]
    assert np.allclose([t.value for t in trials_s], [t.value for t in trials_n], atol=1e-9)
    assert list(summary_s.index) == ["popularity", "item_knn"] == list(summary_n.index)
    assert np.allclose(summary_s.to_numpy(), summary_n.to_numpy(), atol=1e-9, rtol=0)
