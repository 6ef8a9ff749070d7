"""engine=spark logs the in-process ``dataset.sha256`` for the same file: the content hash of
harness.hashing, its row hashes summed per Spark partition (harness.compare checks it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.datasets import load_dataset
from harness.synthetic import generate


@pytest.mark.parametrize("text", [False, True])
def test_spark_digest_is_the_in_process_digest(spark: Any, tmp_path: Path, text: bool) -> None:
    from harness.spark.pipeline import _dataset_of, load_spark

    df = generate(n_users=70, n_items=50, n_events=1_200, seed=2)
    if text:
        df = df.assign(user="u" + df["user"].astype(str), item="i" + df["item"].astype(str))
    path = tmp_path / "events.parquet"
    df.to_parquet(path)
    spec = {"kind": "file", "path": str(path)}
    want = load_dataset(spec).sha256
    events, big = load_spark(spark, spec, 10)  # above driver_rows: the digest from Spark
    assert len(big.frame) == 0 and big.sha256 == want
    assert load_spark(spark, spec, 10**6)[1].sha256 == want  # a driver copy
    # other partitions, other row order: the sums per partition add up to the same digest
    assert events.rdd.getNumPartitions() == 1
    for parts in (3, 7):
        again = _dataset_of(events.repartition(parts), "d", str(path), spec, 10)
        assert again.sha256 == want
    # and a changed file changes it
    changed = df.copy()
    changed.loc[3, "rating"] = changed.loc[3, "rating"] % 5 + 1
    changed.iloc[np.random.default_rng(0).permutation(len(df))].to_parquet(path)
    other = load_spark(spark, spec, 10)[1].sha256
    assert other != want and other == load_dataset(spec).sha256
